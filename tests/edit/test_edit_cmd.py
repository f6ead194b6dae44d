"""``ngramd edit`` positions: parsing, offsets, clear errors (no model needed)."""

from __future__ import annotations

import pytest

from ngramd.daemon.cli.main import main
from ngramd.daemon.cli.edit_cmd import PositionError, parse_position, position_to_offset, resolve_range

TEXT = "ab\ncdé\n\nx"


def test_parse_position():
    assert parse_position("12:4") == (12, 4)
    assert parse_position(" 0 : 0 ") == (0, 0)
    assert parse_position("-1:2") == (-1, 2)  # a position, outside any file: position_to_offset says so
    for bad in ("12", "a:b", "1:2:3", "", "--1:2"):
        with pytest.raises(PositionError, match="LINE:COL"):
            parse_position(bad)


def test_position_to_offset_counts_characters():
    assert position_to_offset(TEXT, 0, 0) == 0
    assert position_to_offset(TEXT, 1, 3) == TEXT.index("\n\n")  # after "é", end of line
    assert position_to_offset(TEXT, 3, 1) == len(TEXT)
    with pytest.raises(PositionError, match="line 4"):
        position_to_offset(TEXT, 4, 0)
    with pytest.raises(PositionError, match="column 4"):
        position_to_offset(TEXT, 1, 4)


def test_resolve_range_rejects_start_after_end():
    assert resolve_range(TEXT, "0:1", "1:2") == (1, 5)
    with pytest.raises(PositionError, match="after"):
        resolve_range(TEXT, "1:2", "0:1")


@pytest.mark.parametrize("start,end,message", [
    ("2:0", "1:0", "after"), ("0:0", "9:0", "--end: line 9 is outside the file"),
    ("0:x", "1:0", "--start: position '0:x' is not LINE:COL"), ("0:0", "0:7", "--end: column 7"),
    # negative: not taken for an option, and said to be outside the file
    ("-1:0", "1:0", "--start: line -1 is outside the file"), ("0:0", "0:-2", "--end: column -2 is outside"),
])
def test_cli_bad_ranges_exit_2_with_a_clear_message(tmp_path, capsys, start, end, message):
    f = tmp_path / "t.py"
    f.write_text(TEXT)
    rc = main(["edit", str(f), "--start", start, "--end", end, "--instruction", "x"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("ngramd edit: ") and message in err


def test_cli_missing_file_and_empty_instruction(tmp_path, capsys):
    assert main(["edit", str(tmp_path / "nope.py"), "--start", "0:0", "--end", "0:0",
                 "--instruction", "x"]) == 2
    assert "cannot read" in capsys.readouterr().err
    f = tmp_path / "t.py"
    f.write_text(TEXT)
    assert main(["edit", str(f), "--start", "0:0", "--end", "0:1", "--instruction", " "]) == 2
    assert "instruction is empty" in capsys.readouterr().err


def test_cli_json_reports_the_contract_keys(tmp_path, capsys):
    import json

    f = tmp_path / "t.py"
    f.write_text("def f(x):\n    y = x + 1\n    return y\n")
    rc = main(["edit", str(f), "--start", "0:0", "--end", "3:0", "--instruction", "rename y to z",
               "--model", "tiny", "--device", "cpu", "--json", "--max-tokens", "6"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("text", "forward_passes", "drafted", "accepted", "ms"):
        assert key in out
    assert out["start"] == 0 and out["end"] == len(f.read_text())
    assert out["forward_passes"] >= 1 and out["stats"]["generated"] <= 6
    assert f.read_text() == "def f(x):\n    y = x + 1\n    return y\n"  # the file is never written


def test_cli_binary_file_is_refused(tmp_path, capsys):
    f = tmp_path / "blob.bin"
    f.write_bytes(b"\x00\x01\x02 not text")
    assert main(["edit", str(f), "--start", "0:0", "--end", "0:1", "--instruction", "x"]) == 2
    assert "looks binary" in capsys.readouterr().err


def test_cli_selection_too_long_for_the_model_is_a_clear_error(tmp_path, capsys):
    f = tmp_path / "long.py"
    f.write_text("".join(f"value_{i} = compute({i}, {i * 7}, 'label {i}')\n" for i in range(1400)))
    rc = main(["edit", str(f), "--start", "0:0", "--end", "1400:0", "--instruction", "rename",
               "--model", "tiny", "--device", "cpu"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "ngramd edit: error: the edit is too long" in err and "Traceback" not in err


def test_cli_rewrite_cut_at_its_token_limit_warns_and_exits_3(tmp_path, capsys):
    """The text is still printed, but a rewrite that did not finish must not pass for one:
    it lacks the range's tail (a script that applies it on status 0 would delete it)."""
    from ngramd.daemon.cli.edit_cmd import EXIT_UNFINISHED

    f = tmp_path / "t.py"
    f.write_text("def f(x):\n    y = x + 1\n    return y\n")
    rc = main(["edit", str(f), "--start", "0:0", "--end", "3:0", "--instruction", "rename y to z",
               "--model", "tiny", "--device", "cpu", "--max-tokens", "2"])
    out, err = capsys.readouterr()
    assert rc == EXIT_UNFINISHED == 3
    assert "stop: max_tokens" in err and "warning: the rewrite did not finish" in err
    assert err.rstrip().endswith("select less or raise --max-tokens")  # the last line: seen
    assert out  # the cut text, for whoever wants to look at it


@pytest.mark.parametrize("loop_stop", [True, False])
def test_cli_rewrite_stopped_in_a_loop_warns_and_exits_3(tmp_path, capsys, monkeypatch, loop_stop):
    """The random tiny model loops on this range (as in test_edit_engine.py): the loop guard ends
    the answer, and raising --max-tokens would not help, so the advice says something else;
    with --no-loop-stop it runs to its token limit."""
    from ngramd.daemon.cli.edit_cmd import EXIT_UNFINISHED

    from test_edit_engine import SRC, short_loops

    short_loops(monkeypatch)
    f = tmp_path / "stats.py"
    f.write_text(SRC)
    line = SRC[:SRC.index("    lo =")].count("\n")
    rc = main(["edit", str(f), "--start", f"{line}:0", "--end", f"{SRC.count(chr(10))}:0",
               "--instruction", "rename variable x to total", "--model", "tiny", "--device", "cpu",
               "--max-tokens", "300", *([] if loop_stop else ["--no-loop-stop"])])
    out, err = capsys.readouterr()
    assert rc == EXIT_UNFINISHED
    if loop_stop:
        assert "stop: repetition" in err and err.rstrip().endswith("reword the instruction or select less")
    else:
        assert "stop: max_tokens" in err and err.rstrip().endswith("raise --max-tokens")
    assert f.read_text() == SRC  # never written

"""Bad command-line input: one clear line and a non-zero exit, before any model is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngramd.daemon.cli import main as cli
from ngramd.daemon.runtime import loading as model
from ngramd.daemon.runtime.loading import ModelLoadError


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading a model here would be a bug: the input is rejected first."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")
    monkeypatch.setattr(model, "load_runtime", refuse)


@pytest.fixture
def source(tmp_path):
    f = tmp_path / "a.py"
    f.write_text("def f(x):\n    return x\n")
    return str(f)


@pytest.mark.parametrize("flags,message", [
    (["--temperature", "-2"], "--temperature must be >= 0"),
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--max-tokens", "0"], "--max-tokens must be at least 1"),
    (["--temperature", "0.5", "--seed", "-1"], "--seed must be between 0 and"),
])
@pytest.mark.parametrize("command", ["complete", "edit"])
def test_sampling_flags_are_checked_before_the_model_loads(no_model_load, source, capsys, command, flags, message):
    where = ["--line", "1", "--col", "0"] if command == "complete" else ["--start", "0:0", "--end", "1:0",
                                                                        "--instruction", "x"]
    assert cli.main([command, source, *where, *flags]) == 2
    err = capsys.readouterr().err
    assert f"ngramd {command}: error: {message}" in err and "Traceback" not in err


def test_bad_index_limit_is_refused_before_the_model_loads(no_model_load, tmp_path, capsys):
    assert cli.main(["serve", "--socket", str(tmp_path / "s.sock"), "--max-indexed-tokens", "-5"]) == 2
    assert "--max-indexed-tokens must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "s.sock").exists()


def test_a_corrupt_gguf_is_a_load_error_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("NGRAMD_CACHE_DIR", str(tmp_path / "cache"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"garbage")
    with pytest.raises(ModelLoadError, match="cannot read the GGUF file"):
        model.load_runtime(str(bad), device="cpu")


def test_a_folder_without_a_model_says_so(tmp_path):
    with pytest.raises(ModelLoadError, match="holds no config.json"):
        model.load_runtime(str(tmp_path), device="cpu")


def test_an_unknown_name_says_nothing_is_downloaded(tmp_path, monkeypatch):
    with pytest.raises(ModelLoadError, match="never downloads"):
        model.load_runtime("gpt2", device="cpu")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # sure not to reach out, whatever the code does
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache.*never downloads") as err:
        model.load_runtime("no-such-org/no-such-model", device="cpu")
    assert "connect" not in str(err.value)
    with pytest.raises(ModelLoadError, match="not a Hugging Face model id"):
        model.load_runtime("foo/bar baz", device="cpu")


def test_ctrl_c_exits_130_without_a_traceback(monkeypatch, source, capsys):
    from ngramd.daemon.cli import complete_cmd

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(complete_cmd, "run", interrupted)
    assert cli.main(["complete", source, "--line", "0", "--col", "0"]) == cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip() == "ngramd complete: interrupted"


def test_version():
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0


@pytest.mark.parametrize("value", ["-1", "0", "100"])
def test_a_tiny_message_limit_is_refused_before_the_model_loads(no_model_load, tmp_path, capsys, value):
    assert cli.main(["serve", "--socket", str(tmp_path / "s.sock"), "--max-message-bytes", value]) == 2
    assert f"--max-message-bytes must be at least 4096, got {value}" in capsys.readouterr().err
    assert not (tmp_path / "s.sock").exists()


def test_serve_on_a_workspace_that_is_no_directory_is_bad_input(no_model_load, tmp_path, capsys):
    (tmp_path / "file.py").write_text("x = 1\n")
    assert cli.main(["serve", "--socket", str(tmp_path / "s.sock"), "--workspace", str(tmp_path / "file.py")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert not (tmp_path / "s.sock").exists()


def test_output_whose_reader_went_away_exits_141_without_a_traceback():
    """`ngramd bench --make-cases . | head -c 100`, the reader gone before the output is written."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "ngramd.daemon.cli", "bench", "--make-cases", "index", "--n", "20"],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command has written anything (it is still importing)
    err = proc.stderr.read().decode()
    assert proc.wait(120) == cli.EXIT_BROKEN_PIPE
    assert "Traceback" not in err and "BrokenPipe" not in err


def _subcommands_taking(option: str) -> list[str]:
    subparsers = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return sorted(name for name, sub in subparsers.choices.items() if option in sub._option_string_actions)


def test_the_socket_taking_subcommands_are_found():
    assert _subcommands_taking("--socket") == ["lsp", "serve", "status", "stop"]


@pytest.mark.parametrize("command", _subcommands_taking("--socket"))
@pytest.mark.parametrize("spelling", [["--socket", ""], ["--socket="]])
def test_an_empty_socket_is_a_usage_error(no_model_load, monkeypatch, tmp_path, capsys, command, spelling):
    """Not the default socket: a script whose path variable came out empty must not reach (or
    stop, or start) the default daemon."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # where the default socket would go
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, *spelling])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"ngramd {command}: error: argument --socket:" in err and "empty" in err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def unloadable_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise ModelLoadError("unknown model 'nope': not a .gguf file")
    monkeypatch.setattr(model, "load_runtime", refuse)


@pytest.mark.parametrize("command", ["serve", "complete", "edit"])
def test_a_model_that_cannot_load_is_bad_input_for_every_command(unloadable_model, source, tmp_path, capsys, command):
    """One rule (README, "Exit status"): a --model or --device that cannot be used exits 2."""
    where = {"serve": ["--socket", str(tmp_path / "s.sock")], "complete": [source, "--line", "1", "--col", "0"],
             "edit": [source, "--start", "0:0", "--end", "1:0", "--instruction", "x"]}[command]
    assert cli.main([command, *where, "--model", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'nope': not a .gguf file" in err and "Traceback" not in err
    assert not (tmp_path / "s.sock").exists()


def test_serve_whose_model_load_fails_unforeseen_is_an_error(monkeypatch, tmp_path, capsys):
    def fail(*args, **kwargs):
        raise MemoryError("out of memory")
    monkeypatch.setattr(model, "load_runtime", fail)
    assert cli.main(["serve", "--socket", str(tmp_path / "s.sock")]) == 1
    err = capsys.readouterr().err
    assert "cannot load the model: MemoryError: out of memory" in err and "Traceback" not in err


def test_the_daemon_reads_evicted_files_back_off_its_index_thread():
    """serve's index brings evicted files back on a thread of its own (index/background.py):
    on the index thread, every client's document sync waited on the disk meanwhile."""
    import argparse

    from ngramd.daemon.cli.serve_cmd import _index_config

    for limit in (None, 1000):
        cfg = _index_config(argparse.Namespace(max_indexed_tokens=limit))
        assert cfg.restore_in_background and cfg.max_indexed_tokens == (limit or 8_000_000)


def test_serve_lowers_the_priority_of_its_index_restore_thread(monkeypatch):
    """As the scans do: the restore thread reads and tokenizes at the lowest priority."""
    import argparse
    import types

    import ngramd.daemon.edit.session
    from ngramd.daemon.cli import serve_cmd
    from ngramd.daemon.workspace.priority import lower_this_thread

    monkeypatch.setattr(model, "load_runtime", lambda spec, device, runtime="auto", **_: types.SimpleNamespace(tokenize_batch=None))
    monkeypatch.setattr(ngramd.daemon.edit.session, "EditingCompleter", lambda rt, index, cfg: None)
    _, index, _ = serve_cmd._build_engine(argparse.Namespace(model=None, device="cpu", max_indexed_tokens=None))
    assert index._restorer is not None and index._restorer._setup is lower_this_thread


# each command that loads a model, with the rest of a valid command line
_LOADING = {"complete": ["x.py", "--line", "0", "--col", "0"],
            "edit": ["x.py", "--start", "0:0", "--end", "0:1", "--instruction", "rename"],
            "serve": [], "bench": ["--cases", "cases.jsonl"]}


@pytest.mark.parametrize("command", sorted(cli.LOADS_A_MODEL))
def test_exact_kernels_reaches_the_model_load(monkeypatch, tmp_path, command):
    """``--exact-kernels`` is asked of the loader by every command that loads a model; a load
    that fails (here on purpose, after the flag was seen) exits 2."""
    from ngramd.daemon.cli import bench_cmd

    seen = []

    def refuse(*args, **kwargs):
        seen.append(kwargs.get("exact_kernels"))
        raise ModelLoadError("stand-in: not loaded")

    monkeypatch.setattr(model, "load_runtime", refuse)
    monkeypatch.setattr(bench_cmd, "load_runtime", refuse)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("x = 1\n")
    stdlib = Path(__file__).resolve().parents[2] / "bench" / "cases" / "stdlib.jsonl"
    (tmp_path / "cases.jsonl").write_text(stdlib.read_text().splitlines()[0] + "\n")
    args = [command] + _LOADING[command] + ["--exact-kernels"]
    if command == "serve":
        args += ["--socket", str(tmp_path / "s.sock")]
    try:
        code = cli.main(args)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert seen == [True]


def test_exact_kernels_on_the_torch_runtime_is_refused():
    with pytest.raises(ModelLoadError, match="--exact-kernels is for the llama.cpp runtime"):
        model.load_runtime("tiny", "cpu", "auto", exact_kernels=True)

"""Pure pieces of the LSP: settings (lsp/config.py) and result conversion (lsp/items.py)."""

from __future__ import annotations

import pytest
from lsprotocol import types

from ngramd.lsp import items
from ngramd.lsp.config import Settings


def test_settings_defaults_and_updates():
    s = Settings()
    assert s.debounce_ms <= 75 and s.enabled and s.max_tokens == 64
    t = s.updated({"ngramd": {"maxTokens": 16, "multiline": False, "temperature": 1,
                              "debounceMs": 0, "model": "tiny", "socket": "/tmp/s", "other": [1]}})
    assert (t.max_tokens, t.multiline, t.temperature, t.debounce_ms, t.model, t.socket) == (
        16, False, 1.0, 0, "tiny", "/tmp/s")
    assert s.updated(None) is s
    assert t.updated({"model": None}).model is None
    assert t.to_options()["maxTokens"] == 16
    # editors' "not set" forms, and VS Code's section as pulled
    u = t.updated({"model": "", "socket": "", "enable": False, "serverPath": "ngramd"})
    assert (u.model, u.socket, u.enabled) == (None, None, False)


@pytest.mark.parametrize("bad, key", [
    ({"maxTokens": "10"}, "maxTokens"), ({"maxTokens": 0}, "maxTokens"),
    ({"multiline": 1}, "multiline"), ({"temperature": -1}, "temperature"),
    ({"debounceMs": True}, "debounceMs"), ({"device": "tpu"}, "device"),
    ({"model": 3}, "model"), ([1, 2], "object"),
    ({"temperature": 10**400}, "temperature"),  # past float's range: refused, not an OverflowError
    ({"socket": "~no-such-user-here/d.sock"}, "socket"),  # ~ that cannot be resolved
])
def test_settings_reject_bad_values_naming_the_key(bad, key):
    with pytest.raises(ValueError, match=key):
        Settings().updated(bad)


def test_settings_applied_keeps_a_refused_value_and_applies_the_rest():
    """One bad value (VS Code clamps temperature to [0, 100], so 5e-5 can arrive) must not
    cost the others: ``enable: false`` is applied, the temperature keeps its value."""
    new, refused = Settings().applied({"ngramd": {"temperature": 5e-5, "socket": "/tmp/mine.sock",
                                                  "maxTokens": 16, "enable": False, "device": "tpu"}})
    assert (new.temperature, new.socket, new.max_tokens, new.enabled, new.device) == (
        0.0, "/tmp/mine.sock", 16, False, "auto")
    assert len(refused) == 2 and "'temperature'" in refused[0] and "'device'" in refused[1]
    assert Settings().applied([1]) == (Settings(), ["settings must be an object, got list"])


@pytest.mark.parametrize("value", [5e-5, 1e-9, 101.0, float("nan"), float("inf")])
def test_settings_refuse_a_temperature_the_daemon_refuses(value):
    """The daemon's rule (0, or 1e-4..100), refused when set, with the other settings' wording."""
    with pytest.raises(ValueError, match=r"setting 'temperature' must be >= 0 \(0 is greedy"):
        Settings().updated({"temperature": value})


@pytest.mark.parametrize("value", [0, 1e-4, 0.7, 5, 100])
def test_settings_accept_every_temperature_the_daemon_accepts(value):
    from ngramd.daemon.protocol.requests import check_temperature

    assert Settings().updated({"temperature": value}).temperature == check_temperature(float(value))


def P(line, ch):
    return types.Position(line=line, character=ch)


def test_inline_items_variants():
    at = P(3, 4)
    auto = items.inline_items("foo()\nbar()", at, invoked=False, multiline=True)
    assert [i.insert_text for i in auto] == ["foo()\nbar()"]
    assert auto[0].range == types.Range(start=at, end=at)
    inv = items.inline_items("foo()\r\nbar()", at, invoked=True, multiline=True)
    assert [i.insert_text for i in inv] == ["foo()\r\nbar()", "foo()"]
    single = items.inline_items("foo()\nbar()", at, invoked=True, multiline=False)
    assert [i.insert_text for i in single] == ["foo()"]
    assert items.inline_items("  \n ", at, invoked=True, multiline=True) == []
    # a proposal that starts on the next line has no single-line variant
    assert [i.insert_text for i in items.inline_items("\n    x", at, invoked=True, multiline=True)] == ["\n    x"]


def test_selected_items_extend_the_selection():
    sel = types.SelectedCompletionInfo(range=types.Range(start=P(0, 3), end=P(0, 5)), text="path")
    out = items.selected_items(".join(a, b)", sel, invoked=False, multiline=True)
    assert [(i.insert_text, i.range) for i in out] == [("path.join(a, b)", sel.range)]


def test_completion_item_keeps_the_typed_word():
    r = types.Range(start=P(1, 0), end=P(1, 3))
    item = items.completion_item("urn x\n", "ret", r)
    assert item.label == item.filter_text == item.text_edit.new_text == "return x"
    assert item.text_edit.range == r and item.documentation.value == "return x\n"
    assert items.completion_item("\nfoo", "ret", r) is None
    assert items.word_before("    x = self.na") == "na"
    assert items.word_before("f(") == "" and items.word_before("漢字") == "漢字"


def test_workspace_edit_forms():
    r = types.Range(start=P(0, 0), end=P(0, 1))
    versioned = items.workspace_edit("file:///a", 3, r, "X", versioned=True)
    assert versioned.document_changes[0].text_document.version == 3
    assert versioned.document_changes[0].edits[0].new_text == "X"
    plain = items.workspace_edit("file:///a", 3, r, "X", versioned=False)
    assert plain.changes["file:///a"][0].range == r


def test_a_request_for_a_closed_document_is_not_logged_as_a_server_error(caplog):
    """An expected race (a request sent just before didClose, a rewrite of a document changed
    since it was offered) is logged at INFO, by
    report_server_error and not by pygls' own traceback; other errors stay ERROR."""
    import logging

    from pygls.exceptions import FeatureRequestError, JsonRpcContentModified, JsonRpcInvalidParams

    from ngramd.lsp.server import NgramdServer

    server = NgramdServer(Settings(), "/tmp/ngramd-test-unused.sock", spawn=False)
    caplog.set_level(logging.DEBUG)
    for expected in (JsonRpcInvalidParams("document not open: file:///tmp/gone.py"),
                     JsonRpcContentModified("file:///tmp/gone.py changed since the rewrite was offered")):
        server.report_server_error(expected, FeatureRequestError)
        try:
            raise expected
        except type(expected):  # as pygls logs a handler's exception
            logging.getLogger("pygls.protocol.json_rpc").exception('Exception occurred for message "1"')
        assert [r.levelno for r in caplog.records] == [logging.INFO]
        assert "gone.py" in caplog.records[0].getMessage()
        caplog.clear()
    server.report_server_error(JsonRpcInvalidParams("'position' is missing"), FeatureRequestError)
    assert [r.levelno for r in caplog.records] == [logging.ERROR]


@pytest.mark.parametrize("running", [True, False])
async def test_a_prepared_completion_never_starts_a_daemon(monkeypatch, running):
    """The editor sends it whenever the cursor rests: after `ngramd stop` that must not start the
    daemon again (a request does; a prepare only connects to one that runs)."""
    from pygls.workspace import TextDocument

    from ngramd.lsp.server import NgramdServer

    server = NgramdServer(Settings(), "/tmp/ngramd-test-unused.sock", spawn=True)
    doc = TextDocument("file:///a.py", "x = 1\ny = 2\n", version=3)
    monkeypatch.setattr(server, "open_document", lambda uri: doc)
    monkeypatch.setattr(server, "encoding", lambda: "utf-16")  # no editor initialized this one
    calls, probes = [], []

    async def probe(timeout):
        probes.append(timeout)
        return running

    async def call(method, params, timeout):
        calls.append((method, params))
        return {"tokens": 9, "prefilled": 8, "reused": 0}
    monkeypatch.setattr(server.link, "probe", probe)
    monkeypatch.setattr(server.link, "call", call)
    result = await server.prepare_completion(doc.uri, types.Position(line=1, character=2), 3)
    assert probes and (result is not None) == running
    assert calls == ([("prepareComplete", {"uri": doc.uri, "offset": 8, "version": 3})] if running else [])


def test_a_model_path_is_given_to_the_daemon_absolute(tmp_path, monkeypatch):
    """The daemon a language server starts runs in its socket's folder: a model path relative to
    the editor's working directory would name nothing there."""
    from ngramd.lsp.spawn import model_argument

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert model_argument("models/m.gguf") == str(tmp_path / "models" / "m.gguf")
    assert model_argument("~/models/m.gguf") == str(tmp_path / "models" / "m.gguf")
    assert model_argument("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"  # an id, no such path
    assert model_argument("/abs/m.gguf") == "/abs/m.gguf"
    assert model_argument(None) is None and model_argument("") == ""


async def test_a_failed_start_is_shown_once_per_reason_until_a_daemon_answers(monkeypatch):
    """The link reports a failed start every back-off period while the user types: the same
    reason pops up once, a new one shows, and after a daemon answered the old one is news again."""
    from ngramd.lsp.server import NgramdServer

    server = NgramdServer(Settings(), "/tmp/ngramd-test-unused.sock", spawn=False)
    shown: list[str] = []
    monkeypatch.setattr(server, "window_show_message", lambda params: shown.append(params.message))
    server._daemon_start_failed("exited with code 2 (cannot load the model)")
    server._daemon_start_failed("exited with code 2 (cannot load the model)")
    assert len(shown) == 1 and "cannot load the model" in shown[0]
    server._daemon_start_failed("cannot start a daemon: Permission denied")
    assert len(shown) == 2 and "Permission denied" in shown[1]

    class AnsweringConnection:
        max_message_bytes = 0
        daemon_pid = None

        async def request(self, method, params, timeout):
            return {"pid": 1}

        def send(self, method, params):
            raise AssertionError(f"nothing to send without open documents or folder changes: {method}")
    monkeypatch.setattr(server, "_prepare_resting", lambda conn: None)
    await server._on_connect(AnsweringConnection())
    server._daemon_start_failed("cannot start a daemon: Permission denied")
    assert len(shown) == 3

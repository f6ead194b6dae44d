"""Documents: change application, versions, ranges, holders (pure)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.daemon.service.documents import DocumentStore, apply_change, apply_changes, parse_changes
from ngramd.daemon.protocol.rpc import CONTENT_MODIFIED, INVALID_PARAMS, RpcError


def test_apply_change_range_and_full():
    text, edit = apply_change("hello world", 6, 11, "there")
    assert text == "hello there" and (edit.start, edit.end, edit.full) == (6, 11, False)
    text, edit = apply_change("abc", None, None, "xyz")
    assert text == "xyz" and edit.full and edit.end == 3


def test_characters_not_bytes_or_utf16():
    # "é" is 2 UTF-8 bytes, "😀" is 2 UTF-16 units; offsets count code points
    text, _ = apply_change("é😀x", 2, 3, "y")
    assert text == "é😀y"


@pytest.mark.parametrize("start,end", [(-1, 0), (0, 4), (2, 1), (5, 5)])
def test_range_out_of_bounds_is_invalid_params(start, end):
    with pytest.raises(RpcError) as err:
        apply_change("abc", start, end, "")
    assert err.value.code == INVALID_PARAMS


@pytest.mark.parametrize("changes", [None, [], "x", [1], [{"text": 1}], [{"text": "a", "start": 0}],
                                     [{"text": "a", "start": "0", "end": 1}],
                                     [{"text": "a", "start": True, "end": 1}]])
def test_parse_changes_rejects_bad_shapes(changes):
    with pytest.raises(RpcError) as err:
        parse_changes(changes)
    assert err.value.code == INVALID_PARAMS


def test_changes_apply_in_order_and_all_or_nothing():
    store = DocumentStore()
    store.open(1, "u", "abc", 1)
    edits = store.change("u", 2, parse_changes([{"text": "X", "start": 0, "end": 1},
                                                {"text": "YZ", "start": 3, "end": 3}]), conn=1)
    assert store.get("u").text == "XbcYZ" and len(edits) == 2
    # the last edit carries the resulting text itself, for the index to share
    assert edits[0].result is None and edits[1].result is store.get("u").text
    with pytest.raises(RpcError):  # the second change is out of range: nothing applies
        store.change("u", 3, parse_changes([{"text": "Q", "start": 0, "end": 0},
                                            {"text": "!", "start": 99, "end": 99}]), conn=1)
    assert store.get("u").text == "XbcYZ" and store.get("u").version == 2


@pytest.mark.parametrize("changes", [
    [(7, 9, "A"), (4, 4, "B"), (4, 4, "C"), (0, 2, "")],  # back to front: spliced in one pass
    [(0, 2, "AAAA"), (6, 6, "B"), (11, 13, "C")],  # front to back: spliced in one pass too
    [(0, 2, "AAAA"), (3, 3, "B")],  # starts inside the previous edit's new text: one by one
    [(5, 8, "A"), (6, 9, "B")],  # overlapping
    [(3, 3, "x"), (None, None, "whole"), (2, 4, "y")],  # a full replacement in between
])
def test_apply_changes_equals_applying_them_one_by_one(changes):
    text = "0123456789ab"
    expected_text, expected_edits = text, []
    for start, end, new in changes:
        expected_text, edit = apply_change(expected_text, start, end, new)
        expected_edits.append(edit)
    assert apply_changes(text, changes) == (expected_text, expected_edits)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.text("xy", max_size=3)), min_size=1, max_size=6),
       st.booleans())
def test_apply_changes_equals_applying_them_one_by_one_for_any_edits(edits, ascending):
    """Range edits front to back (each a gap after the previous one's new text) or anywhere:
    the one-pass paths give what one by one gives, or the same refusal."""
    text = "0123456789ab"
    changes, at = [], 0
    for a, b, new in edits:
        if new == "xyx":  # now and then a full replacement
            changes.append((None, None, "full text"))
            at = 0
            continue
        start, end = (at + a, at + a + b) if ascending else (min(a, b) * 3, max(a, b) * 3)
        changes.append((start, end, new))
        at = start + len(new)
    try:
        expected_text, expected_edits = text, []
        for start, end, new in changes:
            expected_text, edit = apply_change(expected_text, start, end, new)
            expected_edits.append(edit)
    except RpcError:
        with pytest.raises(RpcError):
            apply_changes(text, changes)
        return
    assert apply_changes(text, changes) == (expected_text, expected_edits)


def test_many_edits_out_of_order_are_refused_past_the_copy_bound(monkeypatch):
    from ngramd.daemon.service import documents

    monkeypatch.setattr(documents, "MAX_COPIED_CHARS", 1000)
    text = "x" * 100
    in_order = [(i, i + 1, "y") for i in range(0, 100, 2)]  # 50 edits front to back: one pass, no bound
    assert apply_changes(text, in_order)[0] == "yx" * 50
    shuffled = in_order[1::2] + in_order[::2]  # neither order: one by one, 100 characters a copy
    with pytest.raises(RpcError) as err:
        apply_changes(text, shuffled)
    assert err.value.code == INVALID_PARAMS and "send them in order or the whole text" in err.value.message
    assert "100-character document" in err.value.message
    # in order after a full replacement: the text before it is never copied
    assert apply_changes(text, [(None, None, "z" * 100)] + in_order)[0] == "yz" * 50


def test_stale_version_is_content_modified():
    store = DocumentStore()
    store.open(1, "u", "abc", 5)
    for version in (5, 4):
        with pytest.raises(RpcError) as err:
            store.change("u", version, [(None, None, "zzz")], conn=1)
        assert err.value.code == CONTENT_MODIFIED
    assert store.get("u").text == "abc"


def test_shared_document_lives_until_last_holder_leaves():
    store = DocumentStore()
    store.open(1, "u", "a", 1)
    store.open(2, "u", "a", 1)
    assert not store.close(1, "u") and "u" in store
    assert store.release_all(2) == ["u"] and "u" not in store
    with pytest.raises(RpcError):
        store.get("u")


def test_document_size_bound():
    store = DocumentStore(max_document_chars=10)
    with pytest.raises(RpcError):
        store.open(1, "u", "x" * 11, 1)
    store.open(1, "u", "x" * 10, 1)
    with pytest.raises(RpcError):
        store.change("u", 2, [(10, 10, "y")], conn=1)


def test_stale_reopen_by_the_same_holder_is_refused():
    """A client's versions only grow: its re-open below what it sent would put older text back."""
    store = DocumentStore()
    store.open(1, "u", "v5 text", 5)
    with pytest.raises(RpcError) as err:
        store.open(1, "u", "v1 text", 1)
    assert err.value.code == CONTENT_MODIFIED and "stale open" in str(err.value)
    assert (store.get("u").text, store.get("u").version) == ("v5 text", 5)
    store.change("u", 7, [(None, None, "v7 text")], conn=1)  # a change counts as sent too
    with pytest.raises(RpcError):
        store.open(1, "u", "v6 text", 6)
    assert store.get("u").text == "v7 text"
    store.open(1, "u", "v7 again", 7)  # its current version: a re-sync, accepted
    assert store.get("u").text == "v7 again"
    store.open(1, "u", "v7 again", 0)  # the same text at a lower version: a new numbering, no stale copy
    assert store.text_at("u", 0, 1) == "v7 again"
    store.change("u", 1, [(None, None, "v1 of the new numbering")], conn=1)
    assert store.get("u").text == "v1 of the new numbering"


def test_another_holders_open_resyncs_whatever_its_version():
    """Two editors number versions independently: the second one's open still re-syncs."""
    store = DocumentStore()
    store.open(1, "u", "from editor 1", 10)
    store.open(2, "u", "from editor 2", 1)
    assert (store.get("u").text, store.get("u").version) == ("from editor 2", 1)
    store.close(1, "u")  # editor 1 re-opens after closing: a new sequence
    store.open(1, "u", "editor 1 again", 0)
    assert store.get("u").text == "editor 1 again"


def refused(call, *args, **kwargs) -> bool:
    try:
        call(*args, **kwargs)
    except RpcError as exc:
        return exc.code == CONTENT_MODIFIED
    return False


def test_two_editors_with_different_texts_of_one_file_never_edit_each_others():
    """Editor 1 types on after editor 2 put its own text back (its completion was refused as
    stale, so it re-sent its buffer): editor 1's offsets are of its own text, not editor 2's."""
    store = DocumentStore()
    store.open(1, "u", "abc", 1)
    store.open(2, "u", "abc", 1)  # the same text: both in sync
    store.change("u", 2, parse_changes([{"start": 0, "end": 0, "text": "X"}]), conn=1)  # editor 1: "Xabc"
    assert refused(store.text_at, "u", 1, 2), "editor 2's version 1 is not this text"
    store.open(2, "u", "abc", 1)  # editor 2 re-sends its buffer
    assert refused(store.change, "u", 3, parse_changes([{"start": 1, "end": 1, "text": "Y"}]), conn=1)
    assert refused(store.text_at, "u", 2, 1)
    assert store.get("u").text == "abc" and store.text_at("u", 1, 2) == "abc"
    store.open(1, "u", "Xabc", 2)  # editor 1 re-sends its own
    store.change("u", 3, parse_changes([{"start": 1, "end": 1, "text": "Y"}]), conn=1)
    assert store.text_at("u", 3, 1) == "XYabc"
    assert refused(store.change, "u", 2, parse_changes([{"start": 0, "end": 0, "text": "Z"}]), conn=2)


def test_each_holder_in_sync_is_asked_by_its_own_version():
    store = DocumentStore()
    store.open(1, "u", "same", 40)
    store.open(2, "u", "same", 3)
    assert store.text_at("u", 40, 1) == store.text_at("u", 3, 2) == "same"
    store.change("u", 4, parse_changes([{"start": 4, "end": 4, "text": "!"}]), conn=2)
    assert store.text_at("u", 4, 2) == "same!" and refused(store.text_at, "u", 40, 1)
    store.close(2, "u")
    assert refused(store.text_at, "u", 40, 1), "the text is still editor 2's"


@pytest.mark.parametrize("method,params", [
    ("complete", {"offset": 0, "version": 1}),
    ("change", {"version": 2, "changes": [{"text": "x"}]}),
    ("edit", {"start": 0, "end": 0, "version": 1}),
])
def test_the_services_refusal_of_an_unknown_document_begins_with_the_shared_wording(method, params):
    """The LSP re-sends a document the daemon lost by recognising this refusal's
    wording (lsp/server.py ``_is_out_of_date``): the real service must use it."""
    import asyncio

    from ngramd.daemon.protocol import rpc
    from ngramd.daemon.service.methods import Service

    service = Service(None, None)
    try:
        with pytest.raises(RpcError) as err:
            asyncio.run(service.dispatch(1, method, {"uri": "file:///nowhere/x.py", **params}))
    finally:
        service.close()
    assert err.value.code == INVALID_PARAMS
    assert err.value.message == f"{rpc.DOCUMENT_NOT_OPEN}file:///nowhere/x.py"

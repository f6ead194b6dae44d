// The apply-once rule of a rewrite's edit (applied_edits.ts), without the extension.
import { test } from "node:test";
import * as assert from "node:assert/strict";

import { AppliedEdits, canonicalJson } from "../applied_edits";

const edit = { changes: { "file:///a": [{ range: { start: { line: 0, character: 0 }, end: { line: 0, character: 1 } }, newText: "x" }] } };
const other = { changes: { "file:///a": [{ range: { start: { line: 1, character: 0 }, end: { line: 1, character: 1 } }, newText: "y" }] } };

test("a returned rewrite edit is applied only if the server did not apply it itself", () => {
  const a = new AppliedEdits();
  a.begin();
  assert.equal(a.shouldApplyReturned(edit), true, "no applyEdit came: the extension applies it");
  a.record(edit);
  assert.equal(a.shouldApplyReturned(edit), false, "the server sent it: not applied again");
  assert.equal(a.shouldApplyReturned(null), false, "not a WorkspaceEdit");
  a.end();
});

test("each rewrite consumes one matching applyEdit; another rewrite's edit does not match", () => {
  const a = new AppliedEdits();
  a.begin();
  a.begin();
  a.record(edit);
  assert.equal(a.shouldApplyReturned(other), true, "another rewrite's applyEdit is not this one's");
  a.record(edit);
  assert.equal(a.shouldApplyReturned(edit), false);
  assert.equal(a.shouldApplyReturned(edit), false, "the same edit sent twice matches twice");
  assert.equal(a.shouldApplyReturned(edit), true, "and no more");
});

test("applyEdits are recorded only while a rewrite runs, and forgotten when none does", () => {
  const a = new AppliedEdits();
  a.record(edit); // no rewrite in flight (another client feature's applyEdit)
  a.begin();
  assert.equal(a.shouldApplyReturned(edit), true);
  a.record(edit);
  a.end(); // that rewrite failed without claiming it
  a.begin();
  assert.equal(a.shouldApplyReturned(edit), true);
  a.end();
});

test("edits are compared by content, whatever their key order", () => {
  assert.equal(canonicalJson({ b: 1, a: { d: [2, { f: 1, e: 0 }], c: null } }), canonicalJson({ a: { c: null, d: [2, { e: 0, f: 1 }] }, b: 1 }));
  assert.notEqual(canonicalJson({ a: [1, 2] }), canonicalJson({ a: [2, 1] }));
});

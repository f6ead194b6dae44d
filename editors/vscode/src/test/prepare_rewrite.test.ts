// Unit tests of the typed instruction's debounce (prepare_rewrite.ts), on mocked timers.
import { afterEach, beforeEach, mock, test } from "node:test";
import * as assert from "node:assert/strict";

import { PREPARE_DELAY_MS } from "../prepare_completion";
import { InstructionPreparer } from "../prepare_rewrite";

beforeEach(() => mock.timers.enable({ apis: ["setTimeout"] }));
afterEach(() => mock.timers.reset());

test("only the text the typing paused on is sent", () => {
  const sent: string[] = [];
  const preparer = new InstructionPreparer((t) => sent.push(t));
  for (const typed of ["r", "re", "ren", "rename"]) {
    preparer.changed(typed);
    mock.timers.tick(PREPARE_DELAY_MS - 1);
  }
  assert.deepEqual(sent, []);
  mock.timers.tick(1);
  assert.deepEqual(sent, ["rename"]);
  preparer.changed("rename x");
  mock.timers.tick(PREPARE_DELAY_MS);
  assert.deepEqual(sent, ["rename", "rename x"]);
});

test("blank text and the text last sent are not sent", () => {
  const sent: string[] = [];
  const preparer = new InstructionPreparer((t) => sent.push(t));
  preparer.changed("   ");
  mock.timers.tick(PREPARE_DELAY_MS * 2);
  preparer.changed("add types");
  mock.timers.tick(PREPARE_DELAY_MS);
  preparer.changed("add types");
  mock.timers.tick(PREPARE_DELAY_MS * 2);
  assert.deepEqual(sent, ["add types"]);
});

test("a closed input box sends nothing more", () => {
  const sent: string[] = [];
  const preparer = new InstructionPreparer((t) => sent.push(t));
  preparer.changed("add types");
  preparer.dispose();
  mock.timers.tick(PREPARE_DELAY_MS * 3);
  assert.deepEqual(sent, []);
});

// Unit tests of the prepare's debounce (prepare_completion.ts), on mocked timers.
import { afterEach, beforeEach, mock, test } from "node:test";
import * as assert from "node:assert/strict";

import { CompletionPreparer, PREPARE_DELAY_MS, Spot } from "../prepare_completion";

beforeEach(() => mock.timers.enable({ apis: ["setTimeout"] }));
afterEach(() => mock.timers.reset());

const spot = (line: number, version = 1, uri = "file:///a.py"): Spot => ({ uri, version, line, character: 0 });

test("a send refused (the server stopped meanwhile) leaves the spot to be sent later", () => {
  const preparer = new CompletionPreparer();
  const sent: Spot[] = [];
  let accept = false;
  const send = (s: Spot) => {
    if (accept) {
      sent.push(s);
    }
    return accept;
  };
  preparer.restart(spot(1), send);
  mock.timers.tick(PREPARE_DELAY_MS);
  accept = true;
  preparer.restart(spot(1), send);
  mock.timers.tick(PREPARE_DELAY_MS);
  assert.deepEqual(sent, [spot(1)]);
});

test("a new version of the document at the same position is sent again", () => {
  const preparer = new CompletionPreparer();
  const sent: Spot[] = [];
  const send = (s: Spot) => sent.push(s) > 0;
  preparer.restart(spot(1, 1), send);
  mock.timers.tick(PREPARE_DELAY_MS);
  preparer.restart(spot(1, 2), send);
  mock.timers.tick(PREPARE_DELAY_MS);
  assert.deepEqual(sent, [spot(1, 1), spot(1, 2)]);
});

test("closing another document leaves the pending prepare; restart() with no spot drops it", () => {
  const preparer = new CompletionPreparer();
  const sent: Spot[] = [];
  const send = (s: Spot) => sent.push(s) > 0;
  preparer.restart(spot(1), send);
  preparer.cancel("file:///other.py");
  mock.timers.tick(PREPARE_DELAY_MS);
  assert.deepEqual(sent, [spot(1)]);
  preparer.restart(spot(2), send);
  preparer.restart(); // a selection now, or ngramd disabled there
  mock.timers.tick(PREPARE_DELAY_MS * 3);
  assert.deepEqual(sent, [spot(1)]);
});

// Tests of out/extension.js driven through fake `vscode` and LanguageClient modules
// (fake_vscode.ts): what the extension sends to `ngramd lsp` and shows to the user.
import { afterEach, beforeEach, mock, test } from "node:test";
import * as assert from "node:assert/strict";

import { Harness, loadExtension, settle } from "./fake_vscode";
import { SERVER_COMMANDS } from "../commands";

const POLL_MS = 5000;
let h: Harness;

beforeEach(() => {
  mock.timers.enable({ apis: ["setInterval"] });
  h = loadExtension();
});

afterEach(async () => {
  await h.dispose();
  mock.timers.reset();
});

async function activate(): Promise<void> {
  await h.ext.activate(h.context);
  await settle();
}

async function pollOnce(): Promise<void> {
  mock.timers.tick(POLL_MS);
  await settle();
}

test("the status poll observes: it asks the server not to start a daemon, and pauses once the daemon is stopped", async () => {
  await activate();
  const client = h.clients[0];
  await pollOnce();
  const asked = client.commandRequests(SERVER_COMMANDS.status);
  assert.ok(asked.length >= 1);
  for (const r of asked) {
    assert.deepEqual(r.params.arguments, [{ spawn: false }], "every status request says: do not start a daemon");
  }
  // `ngramd stop`: the server now reports no connection
  h.answer = async () => ({ connected: false, daemon: { state: "stopped" } });
  await pollOnce();
  const afterStop = client.commandRequests(SERVER_COMMANDS.status).length;
  assert.match(h.statusItem.tooltip, /stopped/);
  await pollOnce();
  await pollOnce();
  assert.equal(client.commandRequests(SERVER_COMMANDS.status).length, afterStop, "no status request while stopped");
  // a completion goes to the server (it may start a daemon there): polling resumes
  h.answer = async () => ({ connected: true, daemon: {} });
  const middleware = client.clientOptions.middleware as Record<string, Function>;
  await middleware.provideInlineCompletionItems({}, {}, {}, {}, async () => ({ items: [] }));
  await pollOnce();
  assert.equal(client.commandRequests(SERVER_COMMANDS.status).length, afterStop + 1);
});

// Unit tests of the status bar logic and the command ids; `node --test out/test/`.
import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";

import {
  acceptanceRate,
  daemonState,
  daemonStopped,
  errorView,
  isWorkspaceEdit,
  modelName,
  statusView,
  validateInstruction,
} from "../status";
import { DEFAULTS } from "../config";
import { CLIENT_COMMANDS, rewriteCodeActionArgs, rewriteResolveNeedsInstruction, SERVER_COMMANDS } from "../commands";

test("acceptance rate: explicit rate, nested rate, or accepted / drafted", () => {
  assert.equal(acceptanceRate({ acceptance_rate: 0.25 }), 0.25);
  assert.equal(acceptanceRate({ stats: { acceptanceRate: 0.5 } }), 0.5);
  assert.equal(acceptanceRate({ acceptance: { drafted: 40, accepted: 30 } }), 0.75);
  assert.equal(acceptanceRate({ drafted_tokens: 10, accepted_tokens: 1 }), 0.1);
  assert.equal(acceptanceRate({ drafted: 0, accepted: 0 }), undefined, "nothing drafted yet");
  assert.equal(acceptanceRate({ acceptance_rate: 7 }), undefined, "out of range is ignored");
  assert.equal(acceptanceRate({ daemon: { generation: { drafted: 8, accepted: 2, acceptance: 0.25 } } }), 0.25);
  assert.equal(acceptanceRate(null), undefined);
  assert.equal(acceptanceRate("x"), undefined);
});

test("daemon state from a string, an object or a flag", () => {
  assert.equal(daemonState({ daemon: "Running" }), "running");
  assert.equal(daemonState({ daemon: { state: "starting" } }), "starting");
  assert.equal(daemonState({ daemon: { connected: false } }), "down");
  assert.equal(daemonState({ connected: false, daemon: { error: "no daemon" } }), "down");
  assert.equal(daemonState({ connected: true }), "running");
  assert.equal(daemonState({}), "unknown");
  assert.equal(daemonState(undefined), "unknown");
});

test("status view shows the acceptance rate when the daemon runs", () => {
  const v = statusView({ daemon: "running", acceptance_rate: 0.734, model: "tiny" });
  assert.equal(v.state, "ok");
  assert.equal(v.text, "$(sparkle) ngramd 73%");
  assert.match(v.tooltip, /73% of drafted tokens/);
  assert.match(v.tooltip, /model: tiny/);
});

test("status view: off, starting, error", () => {
  assert.equal(statusView({ enabled: false, daemon: "running" }).state, "off");
  assert.equal(statusView({ daemon: "loading" }).state, "starting");
  assert.equal(statusView({ daemon: "down" }).state, "error");
  assert.equal(statusView({ daemon: "running" }).text, "$(sparkle) ngramd", "no rate yet: no number");
  assert.equal(errorView("boom").state, "error");
  assert.match(errorView("boom").tooltip, /boom/);
});

test("instruction validation", () => {
  assert.ok(validateInstruction("   "));
  assert.ok(validateInstruction("x".repeat(2001)));
  assert.equal(validateInstruction("rename x to count"), undefined);
});

test("workspace edit detection", () => {
  assert.ok(isWorkspaceEdit({ changes: { "file:///a": [] } }));
  assert.ok(isWorkspaceEdit({ documentChanges: [] }));
  assert.ok(!isWorkspaceEdit(null));
  assert.ok(!isWorkspaceEdit({ applied: true }));
});

test("client command ids never collide with server command ids", () => {
  const server = new Set<string>(Object.values(SERVER_COMMANDS));
  for (const id of Object.values(CLIENT_COMMANDS)) {
    assert.ok(!server.has(id), `${id} is also a server command`);
  }
});

test("package.json contributes exactly the client commands, and the settings config.ts reads", () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"));
  const contributed = pkg.contributes.commands.map((c: { command: string }) => c.command).sort();
  assert.deepEqual(contributed, Object.values(CLIENT_COMMANDS).sort());
  const props = Object.keys(pkg.contributes.configuration.properties).sort();
  assert.deepEqual(props, Object.keys(DEFAULTS).map((k) => `ngramd.${k}`).sort());
  for (const [key, value] of Object.entries(DEFAULTS)) {
    assert.deepEqual(pkg.contributes.configuration.properties[`ngramd.${key}`].default, value, `default of ${key}`);
  }
});

test("rewrite code action: prompt unless the server's action already has an instruction", () => {
  assert.deepEqual(rewriteCodeActionArgs(["file:///a", { r: 1 }], "file:///a", "R", 7), ["file:///a", "R", 7]);
  assert.deepEqual(rewriteCodeActionArgs(undefined, "file:///a", "R", 7), ["file:///a", "R", 7]);
  assert.equal(rewriteCodeActionArgs(["file:///a", {}, "add types"], "file:///a", "R", 7), undefined);
  assert.equal(rewriteCodeActionArgs([{ uri: "u", instruction: "x" }], "file:///a", "R", 7), undefined);
  assert.deepEqual(rewriteCodeActionArgs([{ uri: "u" }], "file:///a", "R", 7), ["file:///a", "R", 7]);
  // what lsp/handlers.py sends: no instruction, the document version last; that version is kept,
  // so that an edit typed while the user writes the instruction makes the server refuse the range
  assert.deepEqual(rewriteCodeActionArgs(["file:///a", { r: 1 }, null, 3], "file:///a", "R", 7), ["file:///a", "R", 3]);
});

test("a lazily resolved rewrite action asks for an instruction when it has none", () => {
  const data = { uri: "file:///a", range: { start: {}, end: {} }, instruction: null, version: 3 };
  assert.equal(rewriteResolveNeedsInstruction("refactor.rewrite", data), true);
  assert.equal(rewriteResolveNeedsInstruction("refactor.rewrite", { ...data, instruction: "add types" }), false);
  assert.equal(rewriteResolveNeedsInstruction("quickfix", data), false, "another server's action");
  assert.equal(rewriteResolveNeedsInstruction("refactor.rewrite", undefined), false);
  assert.equal(rewriteResolveNeedsInstruction("refactor.rewrite", { instruction: null }), false, "not ours: no uri/range");
});

// The shape `ngramd lsp` returns (lsp/server.py status), daemon part from docs/rpc.md.
const LSP_STATUS = {
  enabled: true,
  settings: { maxTokens: 64 },
  socket: "/run/ngramd.sock",
  connected: true,
  connects: 1,
  daemonsStarted: 1,
  lastError: null,
  counters: { completions: 3 },
  daemon: {
    daemon: { server: "ngramd", ready: true, pid: 1 },
    model: { name: "SmolLM2-135M", device: "cpu" },
    generation: { drafted: 200, accepted: 150, acceptance: 0.75, forward_passes: 40 },
  },
};

test("status view of the real server's reply shape", () => {
  assert.equal(daemonState(LSP_STATUS), "running");
  assert.equal(acceptanceRate(LSP_STATUS), 0.75);
  assert.equal(modelName(LSP_STATUS), "SmolLM2-135M");
  const v = statusView(LSP_STATUS);
  assert.equal(v.text, "$(sparkle) ngramd 75%");
  assert.match(v.tooltip, /model: SmolLM2-135M/);
  const down = statusView({ ...LSP_STATUS, connected: false, daemon: { error: "connection refused" } });
  assert.equal(down.state, "error");
  const fresh = statusView({ ...LSP_STATUS, daemon: { ...LSP_STATUS.daemon, generation: { drafted: 0, accepted: 0 } } });
  assert.equal(fresh.text, "$(sparkle) ngramd", "nothing drafted yet: no rate");
});

test("a stopped daemon is shown as stopped (not an error); a lost one stays an error", () => {
  const stopped = statusView({ connected: false, daemon: { state: "stopped" } });
  assert.equal(stopped.state, "off");
  assert.equal(stopped.text, "$(debug-stop) ngramd");
  assert.match(stopped.tooltip, /next completion starts it/);
  assert.equal(daemonStopped({ connected: false, daemon: { state: "stopped" } }), true);
  assert.equal(daemonStopped({ connected: false, daemon: { error: "cannot connect" } }), true);
  assert.equal(daemonStopped({ connected: true, daemon: {} }), false);
  assert.equal(daemonStopped(undefined), false);
  assert.equal(statusView({ connected: false, daemon: { error: "cannot connect" } }).state, "error");
});

test("a daemon that is starting is not stopped: not connected yet, but the poll must watch it come up", () => {
  const starting = { connected: false, daemon: { state: "starting" } }; // lsp/server.py status while it loads one
  assert.equal(daemonStopped(starting), false);
  assert.equal(statusView(starting).state, "starting");
  assert.equal(daemonStopped({ connected: false, daemon: "loading" }), false);
});

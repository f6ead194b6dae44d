// Tests of out/extension.js driven through fake `vscode` and LanguageClient modules
// (fake_vscode.ts): what the extension sends to `ngramd lsp` and shows to the user.
import { afterEach, beforeEach, mock, test } from "node:test";
import * as assert from "node:assert/strict";
import * as path from "node:path";

import { Harness, loadExtension, settle, State } from "./fake_vscode";
import { SERVER_COMMANDS } from "../commands";
import { PREPARE_DELAY_MS } from "../prepare_completion";

const POLL_MS = 5000;
let h: Harness;

beforeEach(() => {
  mock.timers.enable({ apis: ["setInterval", "setTimeout"] });
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
  const { document, selection } = editorOn("/a.py");
  await middleware.provideInlineCompletionItems(document, selection.active, {}, {}, async () => ({ items: [] }));
  await pollOnce();
  assert.equal(client.commandRequests(SERVER_COMMANDS.status).length, afterStop + 1);
});

test("a rewrite resumes the status poll paused on a stopped daemon (the server may start one for it)", async () => {
  await activate();
  const client = h.clients[0];
  h.answer = async () => ({ connected: false, daemon: { state: "stopped" } });
  await pollOnce();
  await pollOnce();
  const paused = client.commandRequests(SERVER_COMMANDS.status).length;
  await pollOnce();
  assert.equal(client.commandRequests(SERVER_COMMANDS.status).length, paused, "paused");
  (h.vscode.window as Record<string, unknown>).withProgress = async (
    _opts: unknown,
    task: (p: unknown, token: unknown) => Promise<unknown>,
  ) => task({ report() {} }, { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) });
  h.answer = async () => ({ connected: true, daemon: {} });
  h.window.activeTextEditor = {
    document: { uri: { scheme: "file", toString: () => "file:///a.py" }, version: 1 },
    selection: { isEmpty: false, start: { line: 0, character: 0 }, end: { line: 0, character: 3 } },
  };
  h.inputBoxAnswers.push("add types");
  await h.commands.get("ngramd.rewrite")!();
  await pollOnce();
  assert.equal(client.commandRequests(SERVER_COMMANDS.status).length, paused + 1, "watched again");
});

test("a failed request pops up no notification of the client's own (the extension says what matters)", async () => {
  await activate();
  assert.equal(h.clients[0].clientOptions.revealOutputChannelOn, 4 /* RevealOutputChannelOn.Never */);
});

test("toggle flips the effective setting, also when the workspace sets ngramd.enable", async () => {
  h.config.workspace.enable = true;
  await activate();
  await h.commands.get("ngramd.toggleCompletions")!();
  const cfg = (h.vscode.workspace as { getConfiguration: (s: string) => { get: (k: string) => unknown } }).getConfiguration("ngramd");
  assert.equal(cfg.get("enable"), false, "a Global write under a workspace value changes nothing");
  await h.commands.get("ngramd.toggleCompletions")!();
  assert.equal(cfg.get("enable"), true);
  // no workspace value: the user's (global) setting is written
  delete h.config.workspace.enable;
  await h.commands.get("ngramd.toggleCompletions")!();
  assert.equal(h.config.global.enable, false);
});

/** An active editor on a file, as far as the toggle, the middleware and the prepares look at it. */
function editorOn(fsPath: string, version = 1, line = 0, character = 0) {
  const uri = { scheme: "file", fsPath, toString: () => `file://${fsPath}` };
  const active = { line, character };
  return { document: { uri, version }, selection: { isEmpty: true, active, start: active, end: active } };
}

test("toggle in a multi-root workspace overrides the active editor's folder value and says which scope it wrote", async () => {
  h.folders = [{ name: "api", path: "/ws/api" }, { name: "web", path: "/ws/web" }];
  h.config.workspace.enable = true;
  h.config.folder.api = { enable: true };
  await activate();
  const toggle = h.commands.get("ngramd.toggleCompletions")!;
  const middleware = h.clients[0].clientOptions.middleware as Record<string, Function>;
  const asked: string[] = [];
  const complete = (fsPath: string) =>
    middleware.provideInlineCompletionItems(editorOn(fsPath).document, {}, {}, {}, async () => {
      asked.push(fsPath);
      return { items: [] };
    });

  h.window.activeTextEditor = editorOn("/ws/api/main.py");
  await toggle();
  assert.equal(h.config.folder.api.enable, false, "the folder's value, which shadows the workspace's, is the one written");
  assert.equal(h.config.workspace.enable, true);
  assert.match(h.messages.at(-1)!.text, /disabled in the settings of folder "api"/);
  await complete("/ws/api/main.py");
  await complete("/ws/web/app.ts");
  assert.deepEqual(asked, ["/ws/web/app.ts"], "only the disabled folder's document is answered locally");
  const sent = h.clients[0].notifications.at(-1) as { settings: { ngramd: { enabled: boolean } } };
  assert.equal(sent.settings.ngramd.enabled, true, "the server stays on for the folder that still wants completions");

  await toggle();
  assert.equal(h.config.folder.api.enable, true);
  assert.match(h.messages.at(-1)!.text, /enabled in the settings of folder "api"/);

  // a folder without its own value: the workspace's decides, and is written
  h.window.activeTextEditor = editorOn("/ws/web/app.ts");
  await toggle();
  assert.equal(h.config.workspace.enable, false);
  assert.equal("enable" in h.config.folder.web, false, "no folder value is made up");
  assert.match(h.messages.at(-1)!.text, /disabled in the workspace settings/);
});

test("a folder that disables ngramd gets no completion-list item and no rewrite action either", async () => {
  h.folders = [{ name: "api", path: "/ws/api" }, { name: "web", path: "/ws/web" }];
  h.config.workspace.enable = true;
  h.config.folder.api = { enable: false };
  await activate();
  const middleware = h.clients[0].clientOptions.middleware as Record<string, Function>;
  const asked: string[] = [];
  const ask = (name: string) => async () => {
    asked.push(name);
    return [];
  };
  for (const fsPath of ["/ws/api/main.py", "/ws/web/app.ts"]) {
    const { document } = editorOn(fsPath);
    await middleware.provideCompletionItem(document, {}, {}, {}, ask(`complete ${fsPath}`));
    await middleware.provideCodeActions(document, {}, {}, {}, ask(`actions ${fsPath}`));
  }
  assert.deepEqual(asked, ["complete /ws/web/app.ts", "actions /ws/web/app.ts"]);
});

test("the status bar says on or off as the active editor's folder sets ngramd.enable", async () => {
  h.folders = [{ name: "api", path: "/ws/api" }, { name: "web", path: "/ws/web" }];
  h.config.workspace.enable = true;
  h.config.folder.api = { enable: false };
  h.answer = async () => ({ connected: true, enabled: true, daemon: { state: "running" } });
  const look = async (fsPath: string) => {
    const editor = editorOn(fsPath);
    h.window.activeTextEditor = editor;
    h.emit("activeEditor", editor);
    await settle();
    return h.statusItem.text;
  };
  await activate();
  await pollOnce();
  assert.match(await look("/ws/api/main.py"), /circle-slash/, "api disables it: off, whatever the server's flag");
  assert.doesNotMatch(await look("/ws/web/app.ts"), /circle-slash/);
  assert.match(h.statusItem.tooltip, /completions on/);
});

test("the server's enabled flag follows the workspace folders: added or removed, it is sent again", async () => {
  h.folders = [{ name: "api", path: "/ws/api" }];
  h.config.workspace.enable = false;
  h.config.folder.api = { enable: false };
  h.config.folder.web = { enable: true };
  await activate();
  const sent = () => (h.clients[0].notifications.at(-1) as { settings: { ngramd: { enabled: boolean } } } | undefined);
  h.folders.push({ name: "web", path: "/ws/web" }); // a folder that enables ngramd joins
  await Promise.all(h.folderListeners.map((l) => l({})));
  assert.equal(sent()?.settings.ngramd.enabled, true);
  h.folders.pop();
  await Promise.all(h.folderListeners.map((l) => l({})));
  assert.equal(sent()?.settings.ngramd.enabled, false);
});

test("settings changed while the server starts reach it once it runs", async () => {
  h.whileStarting = async () => {
    h.config.global.maxTokens = 99;
    await h.changeConfig(); // not sent yet: the server is not running
  };
  await activate();
  const client = h.clients[0];
  assert.equal((client.clientOptions.initializationOptions as { maxTokens: number }).maxTokens !== 99, true,
    "the start's options were taken before the change");
  const sent = client.notifications.at(-1) as { settings: { ngramd: { maxTokens: number } } } | undefined;
  assert.equal(sent?.settings.ngramd.maxTokens, 99);
});

test("toggle without a workspace value writes the user settings and says so", async () => {
  h.config.global.enable = false;
  await activate();
  await h.commands.get("ngramd.toggleCompletions")!();
  assert.equal(h.config.global.enable, true);
  assert.match(h.messages.at(-1)!.text, /enabled in the user settings/);
});

test("serverPath with ${workspaceFolder:name} starts the server of the folder named so", async () => {
  const dir = path.dirname(process.execPath);
  h.folders = [{ name: "first", path: "/nonexistent" }, { name: "runtime", path: dir }];
  h.config.global.serverPath = "${workspaceFolder:runtime}/" + path.basename(process.execPath);
  await activate();
  assert.equal(h.clients.length, 1, JSON.stringify(h.messages));
  assert.equal((h.clients[0].serverOptions as { command: string }).command, process.execPath);
});

test("serverPath with ${workspaceFolder:name} of no open folder tells the user, and starts nothing", async () => {
  h.folders = [{ name: "api", path: "/ws/api" }];
  h.config.global.serverPath = "${workspaceFolder:nope}/bin/ngramd";
  await activate();
  assert.equal(h.clients.length, 0);
  const errors = h.messages.filter((m) => m.kind === "error");
  assert.equal(errors.length, 1);
  assert.match(errors[0].text, /ngramd\.serverPath uses \$\{workspaceFolder:nope\} but no workspace folder is named "nope" \(open folders: "api"\)/);
});

test("a model path with ${workspaceFolder} reaches the server expanded, in its arguments and its options", async () => {
  h.folders = [{ name: "api", path: "/ws/api" }];
  h.config.global.model = "${workspaceFolder}/models/coder.gguf";
  await activate();
  const client = h.clients[0];
  const args = (client.serverOptions as { args: string[] }).args;
  assert.deepEqual(args, ["lsp", "--model", "/ws/api/models/coder.gguf"]);
  assert.equal((client.clientOptions.initializationOptions as { model: string }).model, "/ws/api/models/coder.gguf");
});

test("the server is started without a transport, so the client appends no --stdio of its own", async () => {
  // vscode-languageclient appends `--stdio` (or `--pipe=`, `--socket=`) to an Executable's args when
  // `transport` is named; the server speaks stdio either way, and older servers refused the flag.
  await activate();
  const options = h.clients[0].serverOptions as { transport?: unknown; args: string[] };
  assert.equal(options.transport, undefined);
  assert.deepEqual(options.args, ["lsp"]);
});

test("a status poll that fails stays shown when the active editor changes", async () => {
  h.answer = async () => ({ connected: true, enabled: true, daemon: { state: "running" } });
  await activate();
  await pollOnce();
  h.answer = async () => {
    throw new Error("the daemon's link broke");
  };
  await pollOnce();
  assert.match(h.statusItem.tooltip, /link broke/);
  const editor = editorOn("/a.py");
  h.window.activeTextEditor = editor;
  h.emit("activeEditor", editor);
  await settle();
  assert.match(h.statusItem.tooltip, /link broke/, "not the older good status");
});

test("a server that cannot start is not retried, nor its error shown again, for folders that change nothing", async () => {
  h.folders = [{ name: "api", path: "/ws/api" }];
  h.config.global.serverPath = "${workspaceFolder:nope}/bin/ngramd";
  await activate();
  for (const name of ["web", "docs", "ops"]) {
    h.folders.push({ name, path: `/ws/${name}` }); // the error names the open folders: the key must not
    await Promise.all(h.folderListeners.map((l) => l({})));
    await settle();
  }
  assert.equal(h.messages.filter((m) => m.kind === "error").length, 1);
  assert.equal(h.clients.length, 0);
});

test("a folder added that holds the server starts it, where none was found before", async () => {
  const dir = path.dirname(process.execPath);
  h.config.global.serverPath = "${workspaceFolder:runtime}/" + path.basename(process.execPath);
  await activate();
  assert.equal(h.clients.length, 0, "no folder named runtime yet");
  h.folders.push({ name: "runtime", path: dir });
  await Promise.all(h.folderListeners.map((l) => l({})));
  await settle();
  assert.equal(h.clients.length, 1);
  assert.equal((h.clients[0].serverOptions as { command: string }).command, process.execPath);
  h.folders.push({ name: "docs", path: "/ws/docs" }); // the same server: kept, told the settings
  await Promise.all(h.folderListeners.map((l) => l({})));
  await settle();
  assert.equal(h.clients.length, 1);
});

test("restarts that overlap leave exactly one language server running", async () => {
  await activate();
  const restart = h.commands.get("ngramd.restart")!;
  await Promise.all([restart(), restart(), restart()]);
  await settle();
  const running = h.clients.filter((c) => c.state === 2);
  assert.equal(running.length, 1, `${running.length} clients running (each one a server process)`);
  for (const c of h.clients.slice(0, -1)) {
    assert.equal(c.state, 1, "every older client is stopped");
    assert.equal(c.stateListenerCount, 0, "and its state listener disposed");
  }
});

/** Runs the restart command; `done()` tells whether it has finished. */
function restartInBackground(): { done: () => boolean } {
  let finished = false;
  void h.commands.get("ngramd.restart")!().then(() => (finished = true));
  return { done: () => finished };
}

test("a restart ends a server that never answers initialize, and starts a new one", async () => {
  let answerInitialize = () => {};
  h.whileStarting = (c) => c === h.clients[0] ? new Promise((r) => (answerInitialize = r)) : Promise.resolve();
  try {
    void h.ext.activate(h.context);
    await settle();
    const hung = h.clients[0];
    const server = hung.lastServer!;
    assert.equal(hung.state, State.Starting);
    const restart = restartInBackground();
    await settle();
    mock.timers.tick(h.ext.STOP_WAIT_MS);
    await settle();
    assert.ok(restart.done(), "the restart does not wait for ever");
    assert.equal(server.signalCode, "SIGKILL", "the server that gave no answer is killed");
    assert.equal(hung.restartsAfterClose, 0, "and its client, whose connection closed, does not start it again");
    assert.equal(h.clients.length, 2);
    assert.equal(h.clients[1].state, State.Running);
    h.clients[1].lastServer!.kill(); // a crash of the current server: the client's default still restarts it
    await settle();
    assert.equal(h.clients[1].restartsAfterClose, 1);
  } finally {
    answerInitialize(); // without the fix the lifecycle waits on it: let deactivate run
  }
});

test("a restart that kills a server still starting pops up no message of its failed initialize", async () => {
  let answerInitialize = () => {};
  h.whileStarting = (c) => c === h.clients[0] ? new Promise((r) => (answerInitialize = r)) : Promise.resolve();
  try {
    void h.ext.activate(h.context);
    await settle();
    const restart = restartInBackground();
    await settle();
    mock.timers.tick(h.ext.STOP_WAIT_MS);
    await settle();
    assert.ok(restart.done());
    assert.equal(h.clients[0].lastServer!.signalCode, "SIGKILL");
    const errors = h.messages.filter((m) => m.kind === "error").map((m) => m.text);
    // vscode-languageclient's own "couldn't create connection" (start() forces it) is left
    assert.deepEqual(errors, ["ngramd client: couldn't create connection to server."], "error messages");
  } finally {
    answerInitialize();
  }
});

test("a server whose initialize fails, not stopped by the extension, still says why", async () => {
  h.whileStarting = async (c) => {
    if (c === h.clients[0]) {
      throw new Error("initialize refused: unknown option");
    }
  };
  await activate();
  const errors = h.messages.filter((m) => m.kind === "error").map((m) => m.text);
  assert.ok(errors.includes("initialize refused: unknown option"), `the client's default message: ${errors}`);
  assert.equal(h.clients[0].clientOptions.initializationFailedHandler, undefined, "no handler");
});

test("a restart ends a running server that never answers shutdown, and starts a new one", async () => {
  await activate();
  const hung = h.clients[0];
  const server = hung.lastServer!;
  h.whileStopping = (c) => (c === hung ? new Promise(() => {}) : undefined);
  const restart = restartInBackground();
  await settle();
  assert.equal(restart.done(), false, "the server gets its time to answer");
  mock.timers.tick(h.ext.STOP_WAIT_MS);
  await settle();
  assert.ok(restart.done());
  assert.equal(server.signalCode, "SIGKILL");
  assert.equal(h.clients.length, 2);
  assert.equal(h.clients[1].state, State.Running);
});

test("a restart asks a server that answers to shut down, and kills nothing", async () => {
  await activate();
  const server = h.clients[0].lastServer!;
  await h.commands.get("ngramd.restart")!();
  await settle();
  assert.equal(server.exitCode, 0);
  assert.equal(server.signalCode, null);
  assert.equal(h.clients[1].state, State.Running);
});

test("rewrite without a running server says so before asking for an instruction", async () => {
  h.config.global.serverPath = "/nonexistent/ngramd";
  await activate();
  assert.equal(h.clients.length, 0);
  h.window.activeTextEditor = {
    document: { uri: { scheme: "file", toString: () => "file:///a.py" }, version: 1 },
    selection: { isEmpty: false, start: {}, end: {} },
  };
  h.inputBoxAnswers.push("add types");
  await h.commands.get("ngramd.rewrite")!();
  assert.equal(h.inputBoxes, 0, "the user is not asked for an instruction that cannot be used");
  assert.equal(h.messages.length >= 1, true);
  assert.match(h.messages.at(-1)!.text, /not running/);
});

test("a rewrite can be cancelled from its progress notification", async () => {
  await activate();
  const client = h.clients[0];
  let progressOptions: { cancellable?: boolean } | undefined;
  const cancelled = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) };
  (h.vscode.window as Record<string, unknown>).withProgress = async (
    opts: { cancellable?: boolean },
    task: (p: unknown, token: unknown) => Promise<unknown>,
  ) => {
    progressOptions = opts;
    return task({ report() {} }, cancelled);
  };
  h.answer = async () => null;
  h.window.activeTextEditor = {
    document: { uri: { scheme: "file", toString: () => "file:///a.py" }, version: 4 },
    selection: { isEmpty: false, start: { line: 0, character: 0 }, end: { line: 0, character: 3 } },
  };
  h.inputBoxAnswers.push("add types");
  await h.commands.get("ngramd.rewrite")!();
  assert.equal(progressOptions?.cancellable, true);
  const [req] = client.commandRequests(SERVER_COMMANDS.rewriteSelection);
  assert.equal(req.params.arguments![3], 4, "the version taken before the prompt");
  assert.equal(req.token, cancelled, "the progress' token reaches the request ($/cancelRequest)");
});

test("a rewrite asks the server to prepare it before the instruction is asked, and ignores how that ends", async () => {
  await activate();
  const client = h.clients[0];
  let asked = -1;
  const window = h.vscode.window as Record<string, unknown>;
  const createInputBox = window.createInputBox as () => { show: () => void };
  window.createInputBox = () => {
    const box = createInputBox();
    const show = box.show;
    box.show = () => {
      asked = client.requests.length;
      show();
    };
    return box;
  };
  h.answer = async (req) => {
    if (req.params.command === SERVER_COMMANDS.prepareRewrite) {
      throw Object.assign(new Error("unknown command"), { code: -32602 }); // an older server
    }
    return null;
  };
  h.window.activeTextEditor = {
    document: { uri: { scheme: "file", toString: () => "file:///a.py" }, version: 4 },
    selection: { isEmpty: false, start: { line: 0, character: 0 }, end: { line: 0, character: 3 } },
  };
  h.inputBoxAnswers.push("add types");
  await h.commands.get("ngramd.rewrite")!();
  const [prepare] = client.commandRequests(SERVER_COMMANDS.prepareRewrite);
  assert.ok(prepare, "no prepare request");
  assert.ok(client.requests.indexOf(prepare) < asked, "sent before the input box opened");
  const [uri, range, version] = prepare.params.arguments!;
  assert.equal(uri, "file:///a.py");
  assert.deepEqual(range, (h.window.activeTextEditor as { selection: unknown }).selection, "the selection, as a protocol range");
  assert.equal(version, 4);
  assert.equal(client.commandRequests(SERVER_COMMANDS.rewriteSelection).length, 1, "the rewrite still runs");
  assert.deepEqual(h.messages, [], "a failed prepare is not shown");
});

test("a light-bulb rewrite asks the server to prepare it before the instruction is asked", async () => {
  await activate();
  const client = h.clients[0];
  const middleware = client.clientOptions.middleware as Record<string, Function>;
  const range = { start: { line: 2, character: 0 }, end: { line: 3, character: 1 } };
  const item = { kind: { value: "refactor.rewrite" }, data: { uri: "file:///a.py", range, instruction: null, version: 3 } };
  h.answer = async () => null;
  h.inputBoxAnswers.push(undefined); // dismissed: the prepare was still sent
  await middleware.resolveCodeAction(item, idleToken(), async () => item);
  const [prepare] = client.commandRequests(SERVER_COMMANDS.prepareRewrite);
  assert.deepEqual(prepare.params.arguments, ["file:///a.py", range, 3]);
});

/** An active editor on file:///a.py at `version`, its first three characters selected. */
function selectInAnEditor(version: number): void {
  h.window.activeTextEditor = {
    document: { uri: { scheme: "file", toString: () => "file:///a.py" }, version },
    selection: { isEmpty: false, start: { line: 0, character: 0 }, end: { line: 0, character: 3 } },
  };
}

test("a pause in the typing prepares the rewrite through the instruction typed so far", async () => {
  await activate();
  const client = h.clients[0];
  h.answer = async () => null;
  selectInAnEditor(4);
  // typed quickly, then a pause longer than the debounce before Enter
  h.inputBoxAnswers.push({ typed: ["a", "ad", "add", "add types"], pauseMs: PREPARE_DELAY_MS + 100 });
  await h.commands.get("ngramd.rewrite")!();
  const prepares = client.commandRequests(SERVER_COMMANDS.prepareRewrite).map((r) => r.params.arguments);
  const range = (h.window.activeTextEditor as { selection: unknown }).selection;
  assert.deepEqual(prepares, [["file:///a.py", range, 4], ["file:///a.py", range, 4, "add types"]]);
  const [rewrite] = client.commandRequests(SERVER_COMMANDS.rewriteSelection);
  assert.equal(rewrite.params.arguments![2], "add types");
});

test("a pause on an instruction too long to use prepares nothing", async () => {
  await activate();
  const client = h.clients[0];
  h.answer = async () => null;
  selectInAnEditor(4);
  h.inputBoxAnswers.push({ typed: ["x".repeat(2001)], pauseMs: PREPARE_DELAY_MS + 100 }); // refused, then dismissed
  await h.commands.get("ngramd.rewrite")!();
  const prepares = client.commandRequests(SERVER_COMMANDS.prepareRewrite).map((r) => r.params.arguments);
  assert.deepEqual(prepares.map((args) => args!.length), [3], "only the one as the box opened");
  assert.equal(client.commandRequests(SERVER_COMMANDS.rewriteSelection).length, 0);
});

test("an instruction accepted before the typing paused sends no typed prepare; an erased one is refused", async () => {
  await activate();
  const client = h.clients[0];
  h.answer = async () => null;
  selectInAnEditor(4);
  // the second: typed, then erased (the box says what to type, as showInputBox did)
  h.inputBoxAnswers.push({ typed: ["add types"], pauseMs: 0 }, { typed: ["add", ""], pauseMs: 0 });
  await h.commands.get("ngramd.rewrite")!();
  await h.commands.get("ngramd.rewrite")!();
  mock.timers.tick(PREPARE_DELAY_MS + 100); // no prepare left pending
  const prepares = client.commandRequests(SERVER_COMMANDS.prepareRewrite).map((r) => r.params.arguments);
  assert.equal(prepares.length, 2, "one per input box, up to the instruction");
  assert.ok(prepares.every((args) => args!.length === 3));
  assert.equal(client.commandRequests(SERVER_COMMANDS.rewriteSelection).length, 1, "the blank one never runs");
  assert.deepEqual(h.inputBoxesShown[0].messagesWhileTyping, [undefined]);
  const [typing, erased] = h.inputBoxesShown[1].messagesWhileTyping;
  assert.equal(typing, undefined);
  assert.match(erased ?? "", /Type what the selection should become/);
});

test("a rewrite the user cancelled shows no error", async () => {
  await activate();
  const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) };
  (h.vscode.window as Record<string, unknown>).withProgress = async (_o: unknown, task: (p: unknown, t: unknown) => Promise<unknown>) =>
    task({ report() {} }, token);
  h.answer = async () => {
    token.isCancellationRequested = true; // the user pressed Cancel meanwhile
    throw Object.assign(new Error("Request got cancelled"), { code: -32800 });
  };
  h.window.activeTextEditor = {
    document: { uri: { scheme: "file", toString: () => "file:///a.py" }, version: 1 },
    selection: { isEmpty: false, start: { line: 0, character: 0 }, end: { line: 0, character: 3 } },
  };
  h.inputBoxAnswers.push("add types");
  await h.commands.get("ngramd.rewrite")!();
  assert.deepEqual(h.messages, []);
});

test("a light-bulb rewrite refused because the document changed tells the user", async () => {
  await activate();
  const middleware = h.clients[0].clientOptions.middleware as Record<string, Function>;
  const item = {
    kind: { value: "refactor.rewrite" },
    data: { uri: "file:///a.py", range: { start: {}, end: {} }, instruction: null, version: 3 },
  };
  h.inputBoxAnswers.push("add types");
  // vscode-languageclient turns the server's ContentModified on codeAction/resolve into a CancellationError
  const CancellationError = h.vscode.CancellationError as new () => Error;
  const result = await middleware.resolveCodeAction(item, idleToken(), async () => {
    throw new CancellationError();
  });
  assert.equal(result, item, "the action is left without an edit");
  assert.equal(h.messages.length, 1, "VS Code drops a cancelled resolve silently: the extension must say why");
  assert.match(h.messages[0].text, /changed/);
});

/** A cancellation token nobody cancels. */
function idleToken() {
  return { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) };
}

function lightBulbItem() {
  return {
    kind: { value: "refactor.rewrite" },
    data: { uri: "file:///a.py", range: { start: {}, end: {} }, instruction: null, version: 3 },
  };
}

test("a light-bulb rewrite shows its progress and the server's reason when it fails", async () => {
  await activate();
  const middleware = h.clients[0].clientOptions.middleware as Record<string, Function>;
  const titles: string[] = [];
  const window = h.vscode.window as Record<string, unknown>;
  const withProgress = window.withProgress as Function;
  window.withProgress = (opts: { title: string }, task: unknown) => {
    titles.push(opts.title);
    return withProgress(opts, task);
  };
  const item = lightBulbItem();
  h.inputBoxAnswers.push("add types");
  const result = await middleware.resolveCodeAction(item, idleToken(), async () => {
    throw new Error("the rewrite did not finish (it reached its token limit), so nothing was changed");
  });
  assert.equal(result, item, "the action is left without an edit");
  assert.deepEqual(titles, ["ngramd: rewriting…"]);
  assert.equal(h.messages.length, 1, `messages: ${JSON.stringify(h.messages)}`);
  assert.match(h.messages[0].text, /^ngramd: the rewrite did not finish/);
});

test("a light-bulb rewrite cancelled from its progress stops the request and says nothing", async () => {
  await activate();
  const middleware = h.clients[0].clientOptions.middleware as Record<string, Function>;
  const progressCancel = new (h.vscode.CancellationTokenSource as new () => { token: unknown; cancel(): void })();
  (h.vscode.window as Record<string, unknown>).withProgress = (_o: unknown, task: (p: unknown, t: unknown) => unknown) =>
    task({ report() {} }, progressCancel.token);
  h.inputBoxAnswers.push("add types");
  let sentToken: { isCancellationRequested: boolean } | undefined;
  const CancellationError = h.vscode.CancellationError as new () => Error;
  const item = lightBulbItem();
  const result = await middleware.resolveCodeAction(item, idleToken(), async (_i: unknown, t: typeof sentToken) => {
    sentToken = t;
    progressCancel.cancel(); // the user presses Cancel on the notification
    throw new CancellationError();
  });
  assert.equal(result, item);
  assert.equal(sentToken?.isCancellationRequested, true, "the request's token is cancelled");
  assert.deepEqual(h.messages, []);
});

test("a rewrite with several selections rewrites the primary one and says so", async () => {
  await activate();
  h.answer = async () => null;
  const primary = { isEmpty: false, start: { line: 0, character: 0 }, end: { line: 0, character: 3 } };
  h.window.activeTextEditor = {
    document: { uri: { scheme: "file", toString: () => "file:///a.py" }, version: 1 },
    selection: primary,
    selections: [primary, { isEmpty: false, start: { line: 2, character: 0 }, end: { line: 2, character: 4 } }],
  };
  h.inputBoxAnswers.push("add types");
  await h.commands.get("ngramd.rewrite")!();
  const [req] = h.clients[0].commandRequests(SERVER_COMMANDS.rewriteSelection);
  assert.deepEqual(req.params.arguments![1], primary);
  assert.match(h.messages[0].text, /the primary one is rewritten/);
});

test("a rewrite asked in a document the server never gets is refused before the instruction", async () => {
  await activate();
  h.window.activeTextEditor = {
    document: { uri: { scheme: "git", toString: () => "git:/a.py?ref" }, version: 1 },
    selection: { isEmpty: false, start: { line: 0, character: 0 }, end: { line: 0, character: 3 } },
  };
  await h.commands.get("ngramd.rewrite")!();
  assert.equal(h.inputBoxesShown.length, 0, "no instruction asked");
  assert.equal(h.clients[0].commandRequests(SERVER_COMMANDS.rewriteSelection).length, 0);
  assert.match(h.messages[0].text, /files and untitled documents, not in git: documents/);
});

test("rewrite from the editor's context menu (a Uri argument) rewrites the selection", async () => {
  await activate();
  h.answer = async () => null;
  h.window.activeTextEditor = {
    document: { uri: { scheme: "file", toString: () => "file:///a.py" }, version: 2 },
    selection: { isEmpty: false, start: { line: 1, character: 0 }, end: { line: 1, character: 5 } },
  };
  h.inputBoxAnswers.push("add types");
  // VS Code passes a menu command the document's Uri (and, in some menus, more context)
  const documentUri = { scheme: "file", path: "/a.py", toString: () => "file:///a.py" };
  await h.commands.get("ngramd.rewrite")!(documentUri, { groupId: 0 });
  const [req] = h.clients[0].commandRequests(SERVER_COMMANDS.rewriteSelection);
  assert.ok(req, `no rewrite request; messages: ${JSON.stringify(h.messages)}`);
  const [uri, range, instruction, version] = req.params.arguments!;
  assert.equal(uri, "file:///a.py", "the uri is sent as a string");
  assert.deepEqual(range, h.window.activeTextEditor && (h.window.activeTextEditor as { selection: unknown }).selection);
  assert.equal(instruction, "add types");
  assert.equal(version, 2);
});

/**
 * Rewrites driven through the code action's command path (uri, range, version): the
 * fake server's `serve(index, req, sendApplyEdit)` answers the index-th rewrite request.
 * Returns the edits applied, in order, by who applied them: "server" (the client's own
 * workspace/applyEdit handler) or "extension" (the rewrite applying its returned edit).
 * The errors shown are left in h.messages.
 */
async function overlappingRewrites(
  serve: (i: number, applyEdit: (edit: unknown) => Promise<unknown>) => Promise<unknown>,
  instructions: string[],
): Promise<{ by: string; edit: unknown }[]> {
  await activate();
  const client = h.clients[0];
  const middleware = client.clientOptions.middleware as { workspace: Record<string, Function> };
  const applied: { by: string; edit: unknown }[] = [];
  // what vscode-languageclient does on workspace/applyEdit: the middleware, then its handler
  const applyEdit = (edit: unknown) =>
    middleware.workspace.handleApplyEdit({ edit, label: "Rewrite" }, async (params: { edit: unknown }) => {
      applied.push({ by: "server", edit: params.edit });
      return { applied: true };
    });
  (h.vscode.workspace as Record<string, unknown>).applyEdit = async (edit: unknown) => {
    applied.push({ by: "extension", edit });
    return true;
  };
  let sent = 0;
  h.answer = async (req) => {
    if (req.params.command !== SERVER_COMMANDS.rewriteSelection) {
      return { connected: true, daemon: {} };
    }
    return serve(sent++, applyEdit);
  };
  h.inputBoxAnswers.push(...instructions);
  const rewrite = h.commands.get("ngramd.rewrite")!;
  const range = (line: number) => ({ start: { line, character: 0 }, end: { line, character: 4 } });
  await Promise.all(instructions.map((_, i) => rewrite("file:///a.py", range(i), 1)));
  assert.equal(client.commandRequests(SERVER_COMMANDS.rewriteSelection).length, instructions.length);
  return applied;
}

function lineEdit(line: number, newText: string) {
  return { changes: { "file:///a.py": [{ range: { start: { line, character: 0 }, end: { line, character: 4 } }, newText }] } };
}

/** A promise and its resolve function. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { opened, open };
}

test("two overlapping rewrites whose server applies both edits: each edit is applied exactly once", async () => {
  const edits = [lineEdit(0, "ALPHA"), lineEdit(1, "BETA")];
  const bothSent = gate();
  const secondApplied = gate();
  const applied = await overlappingRewrites(async (i, applyEdit) => {
    if (i === 0) {
      await bothSent.opened; // the second rewrite starts while the first is in flight
      await applyEdit(edits[0]);
      await secondApplied.opened; // the second's applyEdit arrives before the first's reply
    } else {
      bothSent.open();
      await applyEdit(edits[1]);
      secondApplied.open();
    }
    // the returned edit as pygls sends it may order its keys otherwise: matched by content
    return JSON.parse(JSON.stringify(edits[i]));
  }, ["loud", "louder"]);
  assert.deepEqual(h.messages, []);
  assert.deepEqual(applied, [{ by: "server", edit: edits[1] }, { by: "server", edit: edits[0] }]);
});

test("a rewrite overlapping another that the server applied still applies its own returned edit", async () => {
  // The first rewrite's server sends workspace/applyEdit; the second's only returns its edit.
  const edits = [lineEdit(0, "ALPHA"), lineEdit(1, "BETA")];
  const bothSent = gate();
  const firstApplied = gate();
  const applied = await overlappingRewrites(async (i, applyEdit) => {
    if (i === 0) {
      await bothSent.opened;
      await applyEdit(edits[0]);
      firstApplied.open();
    } else {
      bothSent.open();
      await firstApplied.opened; // the first's applyEdit arrives while this one is in flight
    }
    return edits[i];
  }, ["loud", "return-only loud"]);
  assert.deepEqual(h.messages, []);
  assert.deepEqual(applied, [{ by: "server", edit: edits[0] }, { by: "extension", edit: edits[1] }]);
});

test("two overlapping rewrites with the same edit, both applied by the server: neither is applied again", async () => {
  const edit = lineEdit(0, "ALPHA");
  const bothSent = gate();
  const applied = await overlappingRewrites(async (i, applyEdit) => {
    if (i === 0) {
      await bothSent.opened;
    } else {
      bothSent.open();
    }
    await applyEdit(edit);
    return edit;
  }, ["loud", "loud"]);
  assert.deepEqual(h.messages, []);
  assert.deepEqual(applied, [{ by: "server", edit }, { by: "server", edit }]);
});

test("a rewrite whose server does not send workspace/applyEdit: the returned edit is applied by the extension", async () => {
  const edit = lineEdit(0, "ALPHA");
  const applied = await overlappingRewrites(async () => edit, ["loud"]);
  assert.deepEqual(h.messages, []);
  assert.deepEqual(applied, [{ by: "extension", edit }]);
});

test("an applyEdit left unclaimed by a failed rewrite does not stand in for a later rewrite's edit", async () => {
  const edit = lineEdit(0, "ALPHA");
  const applied = await overlappingRewrites(async (i, applyEdit) => {
    if (i === 0) {
      await applyEdit(edit); // applied, but the request then fails: nothing claims it
      throw new Error("internal error");
    }
    return edit; // the same edit, returned only
  }, ["loud"]);
  assert.deepEqual(applied, [{ by: "server", edit }]);
  assert.equal(h.messages.length, 1);
  assert.match(h.messages[0].text, /internal error/);
  h.messages.length = 0;
  h.inputBoxAnswers.push("loud");
  await h.commands.get("ngramd.rewrite")!("file:///a.py", { start: { line: 0, character: 0 }, end: { line: 0, character: 4 } }, 1);
  assert.deepEqual(h.messages, []);
  assert.deepEqual(applied, [{ by: "server", edit }, { by: "extension", edit }]);
});

test("a slow status reply does not overwrite a newer one", async () => {
  await activate();
  let releaseSlow: (v: unknown) => void = () => {};
  let calls = 0;
  h.answer = async () => {
    calls += 1;
    if (calls === 1) {  // the first request (a poll) answers last, with an old state
      return new Promise((resolve) => { releaseSlow = resolve; });
    }
    return { connected: true, daemon: {} };
  };
  mock.timers.tick(POLL_MS); // the poll's request, left pending
  await settle();
  await h.commands.get("ngramd.showStatus")!(); // the user's request, answered at once
  const newer = h.statusItem.tooltip;
  releaseSlow({ connected: false, daemon: { state: "stopped" } });
  await settle();
  assert.equal(calls, 2);
  assert.equal(h.statusItem.tooltip, newer, "the older reply is not shown");
  assert.doesNotMatch(h.statusItem.tooltip, /stopped/);
});

test("a daemon that is starting keeps being polled until it runs", async () => {
  // what `ngramd lsp` answers an observing status while it loads a daemon (at start, or after a crash)
  h.answer = async () => ({ connected: false, daemon: { state: "starting" } });
  await activate();
  const client = h.clients[0];
  await pollOnce();
  assert.equal(h.statusItem.text, "$(loading~spin) ngramd");
  const whileStarting = client.commandRequests(SERVER_COMMANDS.status).length;
  h.answer = async () => ({ connected: true, daemon: {} }); // the model loaded
  await pollOnce();
  assert.equal(client.commandRequests(SERVER_COMMANDS.status).length, whileStarting + 1, "the poll went on");
  assert.match(h.statusItem.text, /sparkle/);
});

test("a restart watches the new server even when the old one's daemon was stopped", async () => {
  h.answer = async () => ({ connected: false, daemon: { state: "stopped" } });
  await activate();
  await pollOnce(); // paused now
  let calls = 0;
  h.answer = async () => {
    calls += 1;
    if (calls === 1) { // the new server's first status (when it runs) fails: the poll must still ask again
      throw new Error("busy");
    }
    return { connected: true, daemon: {} };
  };
  await h.commands.get("ngramd.restart")!();
  await settle();
  const client = h.clients[h.clients.length - 1];
  const asked = client.commandRequests(SERVER_COMMANDS.status).length;
  await pollOnce();
  assert.equal(client.commandRequests(SERVER_COMMANDS.status).length, asked + 1);
  assert.match(h.statusItem.text, /sparkle/);
});

const PREPARE_MS = 300;

/** The editor's cursor moves to where `editor` says: it becomes the active editor, and the selection event fires. */
function moveTo(editor: ReturnType<typeof editorOn>): void {
  h.window.activeTextEditor = editor;
  h.emit("selection", { textEditor: editor, selections: [editor.selection] });
}

async function tick(ms: number): Promise<void> {
  mock.timers.tick(ms);
  await settle();
}

function prepares(): unknown[][] {
  return h.clients.at(-1)!.commandRequests(SERVER_COMMANDS.prepareCompletion).map((r) => r.params.arguments!);
}

test("a cursor that rests asks the server once to prepare the completion there, and ignores how that ends", async () => {
  await activate();
  h.answer = async (req) => {
    if (req.params.command === SERVER_COMMANDS.prepareCompletion) {
      throw Object.assign(new Error("unknown command"), { code: -32601 }); // an older server
    }
    return { connected: true, daemon: {} };
  };
  moveTo(editorOn("/ws/a.py", 3, 4, 2));
  await tick(PREPARE_MS - 1);
  assert.deepEqual(prepares(), [], "not before the cursor has rested");
  await tick(1);
  assert.deepEqual(prepares(), [["file:///ws/a.py", { line: 4, character: 2 }, 3]]);
  moveTo(editorOn("/ws/a.py", 3, 4, 2)); // the same spot again (e.g. focus came back)
  await tick(PREPARE_MS);
  assert.equal(prepares().length, 1, "the same (uri, version, position) is not sent twice");
  assert.deepEqual(h.messages, [], "a failed prepare is not shown");
});

test("a move or an edit before the delay restarts it: only where the cursor rests is prepared", async () => {
  await activate();
  moveTo(editorOn("/ws/a.py", 1, 0, 0));
  await tick(PREPARE_MS - 100);
  moveTo(editorOn("/ws/a.py", 1, 9, 0));
  await tick(PREPARE_MS - 100);
  const edited = editorOn("/ws/a.py", 2, 9, 0);
  h.window.activeTextEditor = edited; // typed, in the same editor: the document changed
  h.emit("documentChange", { document: edited.document, contentChanges: [{ text: "x" }] });
  await tick(PREPARE_MS - 1);
  assert.deepEqual(prepares(), []);
  await tick(1);
  assert.deepEqual(prepares(), [["file:///ws/a.py", { line: 9, character: 0 }, 2]]);
});

test("a daemon that comes (started after launch, or again) gets no prepare from the extension: the server sends the last rest itself", async () => {
  let connected = false;
  h.answer = async () => ({ connected, daemon: connected ? {} : { state: "starting" } });
  await activate();
  moveTo(editorOn("/ws/a.py", 2, 4, 1));
  await tick(PREPARE_MS);
  assert.deepEqual(prepares(), [["file:///ws/a.py", { line: 4, character: 1 }, 2]],
    "sent while the daemon starts (the server keeps it for the daemon's connection)");
  connected = true;
  await pollOnce();
  await tick(PREPARE_MS);
  assert.equal(prepares().length, 1, "the same place sent again when the daemon comes");
});

test("another editor in front prepares nothing until its cursor moves, and drops the pending prepare", async () => {
  await activate();
  moveTo(editorOn("/ws/a.py", 1, 4, 0));
  await tick(PREPARE_MS - 100);
  const other = editorOn("/ws/b.py", 1, 7, 0);
  h.window.activeTextEditor = other; // e.g. a preview tab opened from the explorer
  h.emit("activeEditor", other);
  await tick(PREPARE_MS * 3);
  assert.deepEqual(prepares(), []);
  moveTo(editorOn("/ws/b.py", 1, 8, 0)); // a click in it
  await tick(PREPARE_MS);
  assert.deepEqual(prepares(), [["file:///ws/b.py", { line: 8, character: 0 }, 1]]);
});

test("no prepare in a document the server never gets (settings.json, a git: view)", async () => {
  await activate();
  const editor = editorOn("/home/u/.config/Code/User/settings.json", 3, 2, 0);
  (editor.document.uri as { scheme: string }).scheme = "vscode-userdata";
  moveTo(editor);
  await tick(PREPARE_MS * 3);
  assert.deepEqual(prepares(), []);
});

test("no prepare with a selection (a rewrite's prepare is what a selection gets)", async () => {
  await activate();
  const editor = editorOn("/ws/a.py");
  editor.selection = { ...editor.selection, isEmpty: false, end: { line: 3, character: 0 } };
  moveTo(editor);
  await tick(PREPARE_MS * 3);
  assert.deepEqual(prepares(), []);
});

test("ngramd.prepareCompletions turns the prepares off and on while running", async () => {
  h.config.global.prepareCompletions = false;
  await activate();
  moveTo(editorOn("/ws/a.py", 1, 1, 0));
  await tick(PREPARE_MS * 3);
  assert.deepEqual(prepares(), []);
  h.config.global.prepareCompletions = true;
  await h.changeConfig();
  await tick(PREPARE_MS);
  assert.deepEqual(prepares(), [["file:///ws/a.py", { line: 1, character: 0 }, 1]], "where the cursor rests now");
  moveTo(editorOn("/ws/a.py", 1, 2, 0));
  await tick(PREPARE_MS - 100);
  h.config.global.prepareCompletions = false; // turned off while one is pending
  await h.changeConfig();
  await tick(PREPARE_MS * 3);
  assert.equal(prepares().length, 1);
});

test("a folder that disables ngramd gets no prepare", async () => {
  h.folders = [{ name: "api", path: "/ws/api" }, { name: "web", path: "/ws/web" }];
  h.config.folder.api = { enable: false };
  await activate();
  moveTo(editorOn("/ws/api/main.py"));
  await tick(PREPARE_MS * 3);
  assert.deepEqual(prepares(), []);
  moveTo(editorOn("/ws/web/app.ts"));
  await tick(PREPARE_MS);
  assert.deepEqual(prepares(), [["file:///ws/web/app.ts", { line: 0, character: 0 }, 1]]);
});

test("closing the document cancels its pending prepare; reopened, it is prepared again", async () => {
  await activate();
  const editor = editorOn("/ws/a.py");
  moveTo(editor);
  await tick(PREPARE_MS);
  assert.equal(prepares().length, 1);
  moveTo(editorOn("/ws/a.py", 1, 5, 0));
  h.emit("documentClose", editor.document);
  await tick(PREPARE_MS * 3);
  assert.equal(prepares().length, 1, "the closed document's pending prepare was cancelled");
  moveTo(editorOn("/ws/a.py")); // reopened: version 1 again, the server has nothing prepared
  await tick(PREPARE_MS);
  assert.equal(prepares().length, 2);
});

test("no prepare where an inline completion was just asked for: that request warms the cache", async () => {
  await activate();
  const middleware = h.clients[0].clientOptions.middleware as Record<string, Function>;
  const editor = editorOn("/ws/a.py", 2, 7, 3);
  moveTo(editor);
  await middleware.provideInlineCompletionItems(editor.document, editor.selection.active, {}, {}, async () => ({ items: [] }));
  await tick(PREPARE_MS * 3);
  assert.deepEqual(prepares(), []);
});

test("the cursor resting when the server starts is prepared", async () => {
  h.window.activeTextEditor = editorOn("/ws/a.py", 1, 3, 0);
  await activate();
  await tick(PREPARE_MS);
  assert.deepEqual(prepares(), [["file:///ws/a.py", { line: 3, character: 0 }, 1]]);
});

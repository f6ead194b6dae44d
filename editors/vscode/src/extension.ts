/**
 * VS Code glue: starts `ngramd lsp` with vscode-languageclient, whose built-in
 * InlineCompletionItemFeature (LSP 3.18 `textDocument/inlineCompletion`, built in since
 * vscode-languageclient 10; `registerProposedFeatures()` is still called for older
 * protocol features) turns the server's inline completions into ghost text.
 *
 * The command ids of this extension differ from the server's (`ngramd.status`,
 * `ngramd.toggle`, `ngramd.rewriteSelection`): vscode-languageclient registers every
 * command the server lists in `executeCommandProvider` as a VS Code command of the same
 * id, and a second registration of one id fails the client's start.
 */

import * as fs from "fs";
import * as vscode from "vscode";
import {
  CancellationToken,
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorHandler,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
} from "vscode-languageclient/node";

import {
  describeScope,
  initializationOptions,
  InitializationOptions,
  NamedFolder,
  expandPathSetting,
  needsRestart,
  NgramdSettings,
  readSettings,
  resolveServerPath,
  serverArgs,
  settingScope,
} from "./config";
import { CLIENT_COMMANDS, rewriteCodeActionArgs, rewriteResolveNeedsInstruction, SERVER_COMMANDS } from "./commands";
import {
  daemonStopped,
  errorView,
  OBSERVE_STATUS_ARGS,
  statusView,
  StatusView,
  validateInstruction,
} from "./status";
import { AppliedEdits } from "./applied_edits";
import { CompletionPreparer, Spot } from "./prepare_completion";
import { InstructionPreparer } from "./prepare_rewrite";

const STATUS_POLL_MS = 5000;
/**
 * How long a stop waits for the server: for its answer to `initialize` when it is still
 * starting, then for its answer to `shutdown`. A server that gives neither is killed.
 */
export const STOP_WAIT_MS = 2000;
/** The URI schemes whose documents the client sends the server (its document selector). */
const SERVED_SCHEMES = ["file", "untitled"];

let client: LanguageClient | undefined;
// The current client's start(): the lifecycle does not wait on it (a server that never
// answers `initialize` would hold every restart for ever); a stop waits on it, for a while.
let clientStart: Promise<void> = Promise.resolve();
// Clients this extension stopped: their error handler no longer restarts them.
const retired = new WeakSet<LanguageClient>();
// Disposes the current client's state listener with the client (one per client).
let clientStateListener: vscode.Disposable | undefined;
// Starts, stops and restarts run one after another: two overlapping restarts (a
// settings change while the restart command runs) would otherwise both start a client,
// one of them orphaned: a second server process, a second inline completion provider.
let lifecycle: Promise<void> = Promise.resolve();
let deactivated = false;
let settings: NgramdSettings;
let statusItem: vscode.StatusBarItem;
let pollTimer: NodeJS.Timeout | undefined;
let statusSeq = 0; // the newest status request; older replies are not shown
// The poll pauses while the daemon is stopped (see daemonStopped) and never overlaps itself.
let pollPaused = false;
let pollInFlight = false;
let output: vscode.LogOutputChannel;
// The edits the server sent with workspace/applyEdit while rewrites ran (apply-once rule).
const appliedEdits = new AppliedEdits();
// Prepares the completion where the cursor rests (ngramd.prepareCompletions).
const preparer = new CompletionPreparer();

function currentSettings(): NgramdSettings {
  const cfg = vscode.workspace.getConfiguration("ngramd");
  return readSettings((key) => cfg.get(key));
}

function isExecutable(p: string): boolean {
  try {
    const st = fs.statSync(p);
    if (!st.isFile()) {
      return false;
    }
    if (process.platform === "win32") {
      return true;
    }
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function fileWorkspaceFolders(): NamedFolder[] {
  return (vscode.workspace.workspaceFolders ?? [])
    .filter((f) => f.uri.scheme === "file")
    .map((f) => ({ name: f.name, path: f.uri.fsPath }));
}

/**
 * `ngramd.enable` for a document: a folder of a multi-root workspace may set its own
 * value (the setting is resource-scoped), which wins over the workspace's and the user's.
 */
function enabledFor(resource: vscode.Uri | undefined): boolean {
  if (!resource) {
    return settings.enable;
  }
  const cfg = vscode.workspace.getConfiguration("ngramd", resource);
  return readSettings((key) => cfg.get(key)).enable;
}

/** What a server started now would be: its executable, and the settings with paths expanded. */
type LaunchPlan =
  | { ok: true; command: string; source: string; settings: NgramdSettings }
  | { ok: false; error: string };

function launchPlan(): LaunchPlan {
  const folders = fileWorkspaceFolders();
  const resolved = resolveServerPath(settings.serverPath, folders, process.env, {
    platform: process.platform,
    isExecutable,
  });
  if (!resolved.ok) {
    return resolved;
  }
  const model = expandPathSetting(settings.model, folders, process.env, fs.existsSync, "ngramd.model");
  if (!model.ok) {
    return model;
  }
  // a socket need not exist yet (the server starts the daemon that makes it): relative is the folder's
  const socket = expandPathSetting(settings.socket, folders, process.env, () => true, "ngramd.socket");
  if (!socket.ok) {
    return socket;
  }
  return {
    ok: true,
    command: resolved.path,
    source: resolved.source,
    settings: { ...settings, model: model.value, socket: socket.value },
  };
}

/**
 * What tells two plans' servers apart: the command line; for no server, the settings that
 * failed (not the message, which names the open folders: a folder change would pop it up again).
 */
function planKey(plan: LaunchPlan): string {
  return JSON.stringify(plan.ok ? [plan.command, serverArgs(plan.settings)] : [settings.serverPath, settings.model, settings.socket]);
}

/** The key of the plan the server was last started with, or failed to start with. */
let startedPlan = "";

/**
 * The options for the server, whose `enabled` is one flag for all documents: on when any
 * folder (or the workspace) enables completions. The client then answers locally for
 * documents whose folder disables them (see the middleware).
 */
function serverInitializationOptions(): InitializationOptions {
  const folders = vscode.workspace.workspaceFolders ?? [];
  const enable = settings.enable || folders.some((f) => enabledFor(f.uri));
  const plan = launchPlan();
  return initializationOptions({ ...(plan.ok ? plan.settings : settings), enable });
}

/** The settings as the server takes them (serverInitializationOptions), sent to a running server. */
async function sendServerSettings(): Promise<void> {
  if (client && client.state === State.Running) {
    await client.sendNotification(DidChangeConfigurationNotification.type, {
      settings: { ngramd: serverInitializationOptions() },
    });
    void refreshStatus();
  }
}

function showStatus(view: StatusView): void {
  statusItem.text = view.text;
  statusItem.tooltip = view.tooltip;
  statusItem.backgroundColor =
    view.state === "error" ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
  statusItem.show();
}

function serialized(step: () => Promise<void>): Promise<void> {
  const next = lifecycle.then(step, step);
  lifecycle = next.catch(() => undefined);
  return next;
}

async function startClient(): Promise<void> {
  if (deactivated) {
    return;
  }
  const plan = launchPlan();
  startedPlan = planKey(plan);
  if (!plan.ok) {
    showStatus(errorView(plan.error));
    void vscode.window.showErrorMessage(plan.error);
    return;
  }
  const args = serverArgs(plan.settings);
  output.appendLine(`starting ${plan.command} ${args.join(" ")} (found via ${plan.source})`);
  // No `transport`: an Executable without one speaks stdio already. Naming it makes
  // vscode-languageclient append `--stdio` to the arguments (which `ngramd lsp` accepts too).
  const serverOptions: ServerOptions = {
    command: plan.command,
    args,
  };
  const startOptions = serverInitializationOptions();
  const clientOptions: LanguageClientOptions = {
    documentSelector: SERVED_SCHEMES.map((scheme) => ({ scheme })),
    initializationOptions: startOptions,
    outputChannel: output,
    // A failed request is said where it matters (a rewrite's own message, the status bar), once:
    // the client's notification would pop up a second one, or one for a suggestion asked in passing.
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    errorHandler: errorHandlerOf(() => c),
    middleware: {
      workspace: {
        handleApplyEdit: (params, next) => {
          appliedEdits.record(params.edit);
          // The client's own handler ignores the token (client.js handleApplyWorkspaceEdit).
          return next(params, CancellationToken.None);
        },
      },
      // Disabled (for this document's folder): answer locally, so that no request reaches the
      // server, which is on while any folder enables ngramd. The same for the completion list's
      // fallback item and the rewrite action, which the server offers only while enabled.
      provideInlineCompletionItems: (document, position, ctx, token, next) => {
        if (!enabledFor(document.uri)) {
          return undefined;
        }
        pollPaused = false; // the server may start a daemon for this request: watch it again
        if (client) {
          preparer.warmed(spotOf(client, document, position));
        }
        return next(document, position, ctx, token);
      },
      provideCompletionItem: (document, position, ctx, token, next) => {
        if (!enabledFor(document.uri)) {
          return undefined;
        }
        return next(document, position, ctx, token);
      },
      // The server's rewrite code action carries no instruction. Resolved lazily (the
      // light bulb with vscode-languageclient's resolve support): ask for one first; a
      // dismissed prompt leaves the action without an edit, so nothing changes.
      resolveCodeAction: async (item, token, next) => {
        const data = (item as { data?: unknown }).data;
        if (rewriteResolveNeedsInstruction(item.kind?.value, data)) {
          const instruction = await askInstruction(data["uri"], data["range"], data["version"]);
          if (instruction === undefined) {
            return item;
          }
          data["instruction"] = instruction;
          pollPaused = false; // the server may start a daemon for the rewrite: watch it again
          // VS Code waits on the resolve without a word: the rewrite shows its progress, with
          // a Cancel that stops it in the daemon, as the palette's does
          return vscode.window.withProgress(
            { location: vscode.ProgressLocation.Notification, title: "ngramd: rewriting…", cancellable: true },
            async (_progress, progressToken) => {
              const cancel = new vscode.CancellationTokenSource();
              const links = [token, progressToken].map((t) => t.onCancellationRequested(() => cancel.cancel()));
              try {
                return await next(item, cancel.token);
              } catch (err) {
                if (cancel.token.isCancellationRequested) {
                  return item; // the user cancelled: no edit, nothing to say
                }
                // vscode-languageclient turns the server's ContentModified (the document was
                // edited while the daemon rewrote it) into a CancellationError, which VS Code
                // drops without a word: the user's instruction would vanish unexplained.
                if (err instanceof vscode.CancellationError) {
                  void vscode.window.showWarningMessage(
                    "ngramd: the document changed while it was rewritten; nothing was replaced. Ask again.");
                  return item;
                }
                // the client's own notification is off (revealOutputChannelOn): say the server's reason
                void vscode.window.showErrorMessage(`ngramd: ${err instanceof Error ? err.message : String(err)}`);
                return item;
              } finally {
                links.forEach((link) => link.dispose());
                cancel.dispose();
              }
            },
          );
        }
        return next(item, token);
      },
      // As a command (clients without resolve support): route it through this
      // extension's own rewrite command, which asks.
      provideCodeActions: async (document, range, ctx, token, next) => {
        if (!enabledFor(document.uri)) {
          return undefined;
        }
        const actions = await next(document, range, ctx, token);
        for (const action of actions ?? []) {
          const cmd = action instanceof vscode.CodeAction ? action.command : action;
          if (cmd && cmd.command === SERVER_COMMANDS.rewriteSelection) {
            const args = rewriteCodeActionArgs(cmd.arguments, document.uri.toString(), range, document.version);
            if (args) {
              cmd.command = CLIENT_COMMANDS.rewriteSelection;
              cmd.arguments = args;
            }
          }
        }
        return actions;
      },
    },
  };
  const c = new LanguageClient("ngramd", "ngramd", serverOptions, clientOptions);
  client = c;
  c.registerProposedFeatures();
  clientStateListener = c.onDidChangeState((e) => {
    if (e.newState === State.Running) {
      // settings changed while it started (or before a restart after a crash, which sends the
      // first options again) did not reach it: sendServerSettings sends only to a running server
      if (JSON.stringify(serverInitializationOptions()) !== JSON.stringify(startOptions)) {
        void sendServerSettings();
      }
      void refreshStatus();
      // a file just opened: its first completion is the slowest. The server keeps this place
      // for its daemon if none is connected yet, and prepares it again for every daemon that
      // comes (one started again), so nothing here watches the daemon for that.
      cursorMoved(vscode.window.activeTextEditor);
    } else if (e.newState === State.Stopped) {
      showStatus(errorView("language server stopped"));
    }
  });
  showStatus({ text: "$(loading~spin) ngramd", tooltip: "ngramd: starting", state: "starting" });
  pollPaused = false; // a new server: watch it until it says its daemon is stopped
  clientStart = c.start().catch((err) => {
    if (client === c) {
      showStatus(errorView(`could not start: ${String(err)}`));
    }
  });
}

/**
 * The client's default error handler (a server that crashes is started again, a few times),
 * except for a client this extension stopped: killed while it started, its connection closes,
 * and the default would start a server again, one no one stops.
 */
function errorHandlerOf(owner: () => LanguageClient): ErrorHandler {
  let defaults: ErrorHandler | undefined;
  const byDefault = () => (defaults ??= owner().createDefaultErrorHandler());
  return {
    error: (error, message, count) => byDefault().error(error, message, count),
    closed: () => (retired.has(owner()) ? { action: CloseAction.DoNotRestart, handled: true } : byDefault().closed()),
  };
}

function settledWithin(p: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Ends a client in bounded time, whatever its server does: a server still starting is waited
 * on for its answer to `initialize`, then asked to shut down; one that answers neither is killed.
 */
async function endClient(c: LanguageClient, started: Promise<void>): Promise<void> {
  retired.add(c);
  // Killed before it answered `initialize`, its failure is ours: without a handler the client
  // pops the error's message up (start() then says it could not connect, whatever we do). The
  // client reads the handler when initialize fails, so a client not retired keeps its default.
  c.clientOptions.initializationFailedHandler = () => false;
  if (c.state === State.Starting) {
    await settledWithin(started, STOP_WAIT_MS);
  }
  const server = c.serverProcess; // before stop(), which forgets it even when it fails
  if (c.state === State.Running) {
    try {
      await c.stop(STOP_WAIT_MS);
      return;
    } catch (err) {
      output.appendLine(`stop: ${String(err)}`);
    }
  }
  if (server && server.exitCode === null && server.signalCode === null) {
    output.appendLine(`the language server (pid ${server.pid}) does not answer: killed`);
    server.kill("SIGKILL");
  }
}

async function stopClient(): Promise<void> {
  const c = client;
  client = undefined;
  lastStatus = undefined;
  preparer.cancel(); // a new server has nothing prepared
  clientStateListener?.dispose();
  clientStateListener = undefined;
  if (c) {
    await endClient(c, clientStart);
  }
}

function restartClient(): Promise<void> {
  return serialized(async () => {
    await stopClient();
    await startClient();
  });
}

function runningClient(): LanguageClient {
  if (!client || client.state !== State.Running) {
    throw new Error("the ngramd language server is not running (see the ngramd output; ngramd: Restart Language Server)");
  }
  return client;
}

async function serverCommand(command: string, args: unknown[] = [], token?: vscode.CancellationToken): Promise<unknown> {
  return runningClient().sendRequest(ExecuteCommandRequest.type, { command, arguments: args }, token);
}

/** The server's last status reply (ngramd.status), shown for the active editor by showServerStatus. */
let lastStatus: unknown;

/** The last status, "on" or "off" as ngramd.enable is for the active editor's folder. */
function showServerStatus(): void {
  if (lastStatus !== undefined && client?.state === State.Running) {
    const enabled = enabledFor(vscode.window.activeTextEditor?.document.uri);
    showStatus(statusView({ ...(lastStatus as object), enabled }));
  }
}

async function refreshStatus(): Promise<unknown> {
  if (!client || client.state !== State.Running) {
    return undefined;
  }
  // Replies can come back out of order (a poll and the user's status command): only the
  // newest request's reply is shown, so an older one never overwrites a newer state.
  const seq = ++statusSeq;
  try {
    const result = await serverCommand(SERVER_COMMANDS.status, [...OBSERVE_STATUS_ARGS]);
    if (seq === statusSeq) {
      pollPaused = daemonStopped(result);
      lastStatus = result;
      showServerStatus();
    }
    return result;
  } catch (err) {
    if (seq === statusSeq) {
      lastStatus = undefined; // an editor switch must not show an older good status over the error
      showStatus(errorView(String(err)));
    }
    return undefined;
  }
}

async function showStatusCommand(): Promise<void> {
  const result = await refreshStatus();
  if (result === undefined) {
    void vscode.window.showWarningMessage("ngramd: no status (is the language server running?)");
    return;
  }
  output.appendLine(JSON.stringify(result, null, 2));
  output.show(true);
}

async function toggleCommand(): Promise<void> {
  // The active editor's folder decides: in a multi-root workspace a folder may set
  // ngramd.enable itself, and that value shadows the workspace's and the user's.
  const resource = vscode.window.activeTextEditor?.document.uri;
  const folder = resource ? vscode.workspace.getWorkspaceFolder(resource) : undefined;
  const cfg = vscode.workspace.getConfiguration("ngramd", folder?.uri ?? resource);
  const enable = !readSettings((key) => cfg.get(key)).enable;
  // The setting is the single source of truth; its change reaches the server through
  // workspace/didChangeConfiguration (see onDidChangeConfiguration below). It is written
  // to the scope its effective value comes from: a write under a more specific value is void.
  const scope = settingScope(cfg.inspect("enable"));
  const target = {
    workspaceFolder: vscode.ConfigurationTarget.WorkspaceFolder,
    workspace: vscode.ConfigurationTarget.Workspace,
    global: vscode.ConfigurationTarget.Global,
  }[scope];
  await cfg.update("enable", enable, target);
  void vscode.window.showInformationMessage(
    `ngramd: inline completions ${enable ? "enabled" : "disabled"} in ${describeScope(scope, folder?.name)}.`);
}

/**
 * Ask the server to prepare a rewrite of `lspRange` (a protocol range): the daemon prefills
 * the rewrite's prompt up to the instruction while the user types it, or with `typed` through
 * the instruction typed so far, so the rewrite itself starts sooner. A head start only: nothing
 * waits on it, and its outcome (a busy daemon drops it, an older server lacks the command or
 * the typed instruction) is ignored.
 */
function prepareRewrite(uri: unknown, lspRange: unknown, version: unknown, typed?: string): void {
  const args = [uri, lspRange, version ?? null, ...(typed === undefined ? [] : [typed])];
  void serverCommand(SERVER_COMMANDS.prepareRewrite, args).then(
    undefined,
    () => undefined,
  );
}

/**
 * Whether a completion may be prepared in a document: the setting is on, the server runs, gets
 * the document (settings.json, git: views and the like it never does) and ngramd is enabled
 * for the document's folder.
 */
function mayPrepareCompletion(resource: vscode.Uri): boolean {
  return settings.prepareCompletions && client?.state === State.Running && SERVED_SCHEMES.includes(resource.scheme) &&
    enabledFor(resource);
}

/** A document position as the server takes it (its protocol position, in the client's encoding). */
function spotOf(c: LanguageClient, document: vscode.TextDocument, position: vscode.Position): Spot {
  const { line, character } = c.code2ProtocolConverter.asPosition(position);
  return { uri: document.uri.toString(), version: document.version, line, character };
}

/**
 * The editor's cursor moved, or its document changed: once the cursor has rested, the
 * server prepares the completion there (a selection is what a rewrite prepares: none then).
 * A head start only, like prepareRewrite: its outcome is ignored.
 */
function cursorMoved(editor: vscode.TextEditor | undefined): void {
  if (!editor || !editor.selection.isEmpty || !mayPrepareCompletion(editor.document.uri)) {
    preparer.restart();
    return;
  }
  const resource = editor.document.uri;
  preparer.restart(spotOf(runningClient(), editor.document, editor.selection.active), (spot) => {
    if (!mayPrepareCompletion(resource)) {
      return false;
    }
    const position = { line: spot.line, character: spot.character };
    void serverCommand(SERVER_COMMANDS.prepareCompletion, [spot.uri, position, spot.version]).then(
      undefined,
      () => undefined,
    );
    return true;
  });
}

/**
 * The user's instruction for a rewrite of `lspRange`; undefined when the input box is
 * dismissed. Opening it prepares the rewrite up to the instruction; each pause in the typing
 * prepares it through the text typed so far (prepare_rewrite.ts).
 */
function askInstruction(uri: unknown, lspRange: unknown, version: unknown): Promise<string | undefined> {
  prepareRewrite(uri, lspRange, version);
  const box = vscode.window.createInputBox();
  box.prompt = "Rewrite the selection: what should change?";
  box.placeholder = "e.g. rename x to count";
  const typing = new InstructionPreparer((typed) => prepareRewrite(uri, lspRange, version, typed));
  return new Promise((resolve) => {
    let answered = false;
    const answer = (instruction: string | undefined): void => {
      if (!answered) {
        answered = true;
        typing.dispose();
        resolve(instruction);
        box.dispose();
      }
    };
    box.onDidChangeValue((value) => {
      const problem = validateInstruction(value);
      box.validationMessage = problem; // as showInputBox's validateInput
      typing.changed(problem === undefined ? value : ""); // an unusable instruction prepares nothing
    });
    box.onDidAccept(() => {
      const problem = validateInstruction(box.value);
      if (problem !== undefined) {
        box.validationMessage = problem; // the box stays open, as showInputBox's validateInput keeps it
        return;
      }
      answer(box.value);
    });
    box.onDidHide(() => answer(undefined));
    box.show();
  });
}

/**
 * Arguments: `(uri, range, version)` from the rewrite code action (rewriteCodeActionArgs);
 * from the palette none, from the editor's context menu the document's Uri (and maybe
 * more context): both rewrite the active editor's selection.
 */
async function rewriteCommand(uriArg?: unknown, rangeArg?: vscode.Range, versionArg?: number): Promise<void> {
  runningClient(); // before the prompt: an instruction typed for nothing is lost
  const editor = vscode.window.activeTextEditor;
  const fromCodeAction = typeof uriArg === "string" && rangeArg !== undefined;
  let uri = fromCodeAction ? (uriArg as string) : undefined;
  let range = fromCodeAction ? rangeArg : undefined;
  let version = fromCodeAction ? versionArg : undefined;
  if (!uri || !range) {
    if (!editor || editor.selection.isEmpty) {
      void vscode.window.showInformationMessage("ngramd: select the code to rewrite first.");
      return;
    }
    const scheme = editor.document.uri.scheme;
    if (!SERVED_SCHEMES.includes(scheme)) { // the server never gets the document: asking would be for nothing
      void vscode.window.showInformationMessage(
        `ngramd: rewrites work in files and untitled documents, not in ${scheme}: documents.`);
      return;
    }
    if ((editor.selections?.length ?? 1) > 1) { // one rewrite, one range: say which, rather than drop the others silently
      void vscode.window.showInformationMessage(
        "ngramd: several selections: the primary one is rewritten, the others are left as they are.");
    }
    uri = editor.document.uri.toString();
    range = editor.selection;
    version = editor.document.version; // before the prompt: typing meanwhile moves the range
  }
  const instruction = await askInstruction(uri, runningClient().code2ProtocolConverter.asRange(range), version);
  if (instruction === undefined) {
    return;
  }
  const c = runningClient();
  const lspRange = c.code2ProtocolConverter.asRange(range);
  await vscode.window.withProgress(
    // cancelling sends $/cancelRequest, which the server passes on to the daemon
    { location: vscode.ProgressLocation.Notification, title: "ngramd: rewriting…", cancellable: true },
    async (_progress, token) => {
      // the server refuses (ContentModified) a range of another version than the document's
      const args = [uri, lspRange, instruction, version ?? null];
      let result: unknown;
      let applyReturned: boolean;
      appliedEdits.begin();
      pollPaused = false; // the server may start a daemon for the rewrite: watch it again
      try {
        result = await serverCommand(SERVER_COMMANDS.rewriteSelection, args, token);
        // The server may apply the edit itself (workspace/applyEdit) or only return it.
        applyReturned = appliedEdits.shouldApplyReturned(result);
      } catch (err) {
        if (token.isCancellationRequested) {
          return; // the user cancelled: the refusal that follows is expected, not an error
        }
        throw err;
      } finally {
        appliedEdits.end();
      }
      if (token.isCancellationRequested) {
        return;
      }
      if (applyReturned) {
        const edit = await c.protocol2CodeConverter.asWorkspaceEdit(result as never);
        if (edit && !(await vscode.workspace.applyEdit(edit))) {
          throw new Error("the rewrite could not be applied (the document changed meanwhile?)");
        }
      }
    },
  );
}

function guarded(fn: (...args: never[]) => Promise<void>) {
  return async (...args: never[]) => {
    try {
      await fn(...args);
    } catch (err) {
      void vscode.window.showErrorMessage(`ngramd: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("ngramd", { log: true });
  statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  statusItem.command = CLIENT_COMMANDS.status;
  context.subscriptions.push(output, statusItem);
  settings = currentSettings();

  context.subscriptions.push(
    vscode.commands.registerCommand(CLIENT_COMMANDS.status, guarded(showStatusCommand)),
    vscode.commands.registerCommand(CLIENT_COMMANDS.toggle, guarded(toggleCommand)),
    vscode.commands.registerCommand(CLIENT_COMMANDS.rewriteSelection, guarded(rewriteCommand)),
    vscode.commands.registerCommand(CLIENT_COMMANDS.restart, guarded(restartClient)),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration("ngramd")) {
        return;
      }
      const before = settings;
      settings = currentSettings();
      cursorMoved(vscode.window.activeTextEditor); // the prepare follows the settings
      if (needsRestart(before, settings)) {
        await restartClient();
      } else {
        await sendServerSettings();
      }
    }),
    // A folder added or removed may be the one that enables ngramd: the server's flag follows.
    // It may also hold the server (.venv) or be what `${workspaceFolder}` names: a server that
    // would now start otherwise, or that could not start before, is started again.
    vscode.workspace.onDidChangeWorkspaceFolders(() =>
      serialized(async () => {
        if (planKey(launchPlan()) === startedPlan) {
          await sendServerSettings();
        } else {
          await stopClient();
          await startClient();
        }
      }),
    ),
    // only the active editor's cursor rests where the user looks (a split view's moves too on an edit)
    vscode.window.onDidChangeTextEditorSelection((e) => {
      if (e.textEditor === vscode.window.activeTextEditor) {
        cursorMoved(e.textEditor);
      }
    }),
    // Another editor in front: its cursor has not moved, so nothing is prepared until it does
    // (a click or a key): flicking through files, preview tabs included, would otherwise evict
    // the caches of the files being edited from the daemon's few. The pending prepare is dropped.
    vscode.window.onDidChangeActiveTextEditor(() => {
      preparer.restart();
      showServerStatus(); // a folder of a multi-root workspace may set ngramd.enable its own way
    }),
    vscode.workspace.onDidChangeTextDocument((e) => {
      const editor = vscode.window.activeTextEditor;
      if (e.contentChanges.length > 0 && editor?.document === e.document) {
        cursorMoved(editor);
      }
    }),
    vscode.workspace.onDidCloseTextDocument((document) => preparer.cancel(document.uri.toString())),
  );

  // Poll the status while the window is focused; nothing is polled in the background,
  // nor while the daemon is stopped (a status request of a server that ignores
  // OBSERVE_STATUS_ARGS would start one again).
  const poll = async () => {
    if (!vscode.window.state.focused || pollPaused || pollInFlight) {
      return;
    }
    pollInFlight = true;
    try {
      await refreshStatus();
    } finally {
      pollInFlight = false;
    }
  };
  pollTimer = setInterval(() => void poll(), STATUS_POLL_MS);
  context.subscriptions.push({ dispose: () => pollTimer && clearInterval(pollTimer) });

  deactivated = false;
  await serialized(startClient);
}

export async function deactivate(): Promise<void> {
  if (pollTimer) {
    clearInterval(pollTimer);
  }
  preparer.cancel();
  deactivated = true; // a restart queued meanwhile starts nothing
  await serialized(stopClient);
}

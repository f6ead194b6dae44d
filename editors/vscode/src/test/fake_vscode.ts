// A stand-in for the `vscode` module and for vscode-languageclient's LanguageClient,
// enough to run out/extension.js's activate() under `node --test`: commands, settings,
// the status bar item, input boxes and the requests the client sends are recorded, and
// the server's answers come from a test-supplied function. Not a test file itself.
import Module = require("node:module");
import * as path from "node:path";
import { mock } from "node:test";

export const State = { Stopped: 1, Running: 2, Starting: 3 } as const;

type Listener = (e: unknown) => unknown;

/** One recorded `workspace/executeCommand` (or other) request. */
export interface SentRequest {
  method: string;
  params: { command?: string; arguments?: unknown[] } & Record<string, unknown>;
  token: unknown;
}

/** vscode-languageclient's CloseAction: what a client does once its server's connection closed. */
export const CloseAction = { DoNotRestart: 1, Restart: 2 } as const;

type CloseHandler = { closed: () => { action: number } | Promise<{ action: number }> };

/** The server process as the client's `serverProcess` shows it; its exit closes the connection. */
export class FakeServerProcess {
  private static pids = 1000;
  readonly pid = FakeServerProcess.pids++;
  exitCode: number | null = null;
  signalCode: string | null = null;
  private exitListeners: (() => void)[] = [];

  onExit(l: () => void): void {
    this.exitListeners.push(l);
  }

  kill(signal = "SIGTERM"): boolean {
    return this.exit(null, signal);
  }

  exit(code: number | null, signal: string | null = null): boolean {
    if (this.exitCode !== null || this.signalCode !== null) {
      return false;
    }
    this.exitCode = code;
    this.signalCode = signal;
    this.exitListeners.forEach((l) => l());
    return true;
  }
}

export class FakeClient {
  state: number = State.Stopped;
  readonly requests: SentRequest[] = [];
  readonly notifications: unknown[] = [];
  stopped = 0;
  /** The server process of the last start; the client forgets it once stopped (`serverProcess`). */
  lastServer: FakeServerProcess | undefined;
  serverProcess: FakeServerProcess | undefined;
  /** Starts the client made itself, after its server's connection closed (its error handler said Restart). */
  restartsAfterClose = 0;
  private stateListeners: Listener[] = [];
  code2ProtocolConverter = { asRange: (r: unknown) => r, asPosition: (p: unknown) => p };
  protocol2CodeConverter = { asWorkspaceEdit: async (e: unknown) => e };

  constructor(
    readonly id: string,
    readonly name: string,
    readonly serverOptions: unknown,
    readonly clientOptions: Record<string, unknown>,
    private readonly harness: Harness,
  ) {}

  registerProposedFeatures(): void {}

  onDidChangeState(l: Listener) {
    this.stateListeners.push(l);
    return { dispose: () => (this.stateListeners = this.stateListeners.filter((x) => x !== l)) };
  }

  get stateListenerCount(): number {
    return this.stateListeners.length;
  }

  private setState(newState: number): void {
    const oldState = this.state;
    this.state = newState;
    for (const l of [...this.stateListeners]) {
      l({ oldState, newState });
    }
  }

  /** As vscode-languageclient's: restarts a crashed server, up to a limit this fake leaves out. */
  createDefaultErrorHandler(): CloseHandler & { error: () => { action: number } } {
    return { error: () => ({ action: 1 /* Continue */ }), closed: () => ({ action: CloseAction.Restart }) };
  }

  /**
   * A start that ends (rejects) when its server exits before it answered `initialize`, or
   * `initialize` fails (whileStarting rejects). As vscode-languageclient 11's doInitialize and
   * start(): without an initializationFailedHandler (read when initialize fails) the error's
   * message pops up; start() then says it could not connect, always (a "force" notification).
   */
  async start(): Promise<void> {
    this.setState(State.Starting);
    const server = new FakeServerProcess();
    this.serverProcess = this.lastServer = server;
    const closed = new Promise<never>((_, reject) => server.onExit(() => {
      reject(new Error("Pending response rejected since connection got disposed"));
      void this.connectionClosed();
    }));
    await new Promise((r) => setImmediate(r));
    try {
      await Promise.race([this.harness.whileStarting?.(this), closed]);
    } catch (err) {
      const window = this.harness.vscode.window as { showErrorMessage: (text: string) => Promise<unknown> };
      const handler = this.clientOptions.initializationFailedHandler as ((e: unknown) => boolean) | undefined;
      if (handler) {
        handler(err); // true would initialize again: not modelled
      } else {
        void window.showErrorMessage((err as Error).message);
      }
      void window.showErrorMessage(`${this.name} client: couldn't create connection to server.`);
      throw err;
    }
    this.setState(State.Running);
  }

  /** As vscode-languageclient's handleConnectionClosed: the error handler says whether to start again. */
  private async connectionClosed(): Promise<void> {
    if (this.state === State.Stopped) {
      return; // stopped on purpose
    }
    const handler = (this.clientOptions.errorHandler as CloseHandler | undefined) ?? this.createDefaultErrorHandler();
    const { action } = await handler.closed();
    this.serverProcess = undefined;
    this.setState(State.Stopped);
    if (action === CloseAction.Restart) {
      this.restartsAfterClose += 1;
      void this.start().catch(() => undefined);
    }
  }

  /**
   * As vscode-languageclient 11's: refuses a client that is not running (still starting), and
   * gives the server `timeout` ms (2000 by default) to answer `shutdown` (see whileStopping).
   */
  async stop(timeout = 2000): Promise<void> {
    if (this.state === State.Stopped) {
      return;
    }
    const server = this.serverProcess;
    this.serverProcess = undefined;
    if (this.state !== State.Running) {
      throw new Error("Client is not running and can't be stopped. It's current state is: starting");
    }
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((r) => (timer = setTimeout(() => r(true), timeout)));
    const answered = (this.harness.whileStopping?.(this) ?? new Promise((r) => setImmediate(r))).then(() => false);
    try {
      if (await Promise.race([answered, timedOut])) {
        throw new Error("Stopping the server timed out");
      }
    } finally {
      clearTimeout(timer);
      this.stopped += 1;
      this.setState(State.Stopped);
    }
    server?.exit(0); // it answered `shutdown` and exits on `exit`
  }

  async sendRequest(type: { method: string }, params: SentRequest["params"], token?: unknown): Promise<unknown> {
    const req = { method: type.method, params, token };
    this.requests.push(req);
    return this.harness.answer(req, this);
  }

  async sendNotification(_type: unknown, params: unknown): Promise<void> {
    this.notifications.push(params);
  }

  /** The executeCommand requests for one server command. */
  commandRequests(command: string): SentRequest[] {
    return this.requests.filter((r) => r.params.command === command);
  }
}

export type EditorEvent = "selection" | "activeEditor" | "documentChange" | "documentClose";

export interface Harness {
  vscode: Record<string, unknown>;
  ext: { activate: (ctx: unknown) => Promise<void>; deactivate: () => Promise<void>; STOP_WAIT_MS: number };
  context: { subscriptions: { dispose: () => unknown }[] };
  clients: FakeClient[];
  /** Registered VS Code commands by id. */
  commands: Map<string, (...args: unknown[]) => Promise<unknown>>;
  /**
   * Settings under `ngramd.` per scope, folders' by folder name; `get` returns the effective
   * value (a folder's applies to a configuration scoped to a resource inside that folder).
   */
  config: {
    global: Record<string, unknown>;
    workspace: Record<string, unknown>;
    folder: Record<string, Record<string, unknown>>;
  };
  /** The open workspace folders (none: undefined, as VS Code gives with no folder open). */
  folders: { name: string; path: string }[];
  configListeners: Listener[];
  folderListeners: Listener[];
  /**
   * Fires an editor or document event to the extension's listeners: "selection"
   * (onDidChangeTextEditorSelection), "activeEditor", "documentChange", "documentClose".
   */
  emit: (event: EditorEvent, e: unknown) => void;
  statusItem: { text: string; tooltip: string };
  messages: { kind: string; text: string }[];
  /**
   * Answers of the next input boxes, in order: a string is typed at once and accepted;
   * undefined dismisses the box; a script types each string in turn, waits `pauseMs` (on the
   * mocked timers), then accepts the last (a box a validation message keeps open is dismissed).
   */
  inputBoxAnswers: (string | undefined | InputScript)[];
  inputBoxes: number;
  /** Every input box the extension created, as the user left it. */
  inputBoxesShown: { value: string; messagesWhileTyping: (string | undefined)[] }[];
  window: { focused: boolean; activeTextEditor: unknown };
  /** The server's answer to a request; replace it in a test. */
  answer: (req: SentRequest, client: FakeClient) => Promise<unknown>;
  /** Fires onDidChangeConfiguration for `ngramd` (after a test changed `config`). */
  changeConfig: () => Promise<void>;
  /** Run by a client's start() between Starting and Running, when set (the server answering `initialize`). */
  whileStarting?: (client: FakeClient) => Promise<void>;
  /** Run by a client's stop(), when set: the server answering `shutdown`. */
  whileStopping?: (client: FakeClient) => Promise<void> | undefined;
  dispose: () => Promise<void>;
}

/** What the user does in an input box: types `typed` one after the other, pauses, presses Enter. */
export interface InputScript {
  typed: string[];
  pauseMs: number;
}

/** Loads a fresh copy of out/extension.js against the fakes. Call `dispose` at the end. */
export function loadExtension(): Harness {
  const h = {
    clients: [] as FakeClient[],
    commands: new Map(),
    config: { global: { serverPath: process.execPath }, workspace: {}, folder: {} },
    folders: [],
    configListeners: [] as Listener[],
    folderListeners: [] as Listener[],
    messages: [] as { kind: string; text: string }[],
    inputBoxAnswers: [] as (string | undefined | InputScript)[],
    inputBoxes: 0,
    inputBoxesShown: [],
    window: { focused: true, activeTextEditor: undefined as unknown },
    answer: async () => ({ connected: true, daemon: { generation: { drafted: 0, accepted: 0 } } }),
  } as unknown as Harness;

  const uri = (fsPath: string) => ({ scheme: "file", fsPath, toString: () => `file://${fsPath}` });
  const workspaceFolders = () => h.folders.map((f, index) => ({ name: f.name, index, uri: uri(f.path) }));
  // The folder holding a resource (a Uri-like { fsPath }), as vscode.workspace.getWorkspaceFolder.
  const folderOf = (resource: unknown) => {
    const p = (resource as { fsPath?: string } | undefined)?.fsPath;
    return p === undefined ? undefined
      : workspaceFolders().find((f) => p === f.uri.fsPath || p.startsWith(f.uri.fsPath + path.sep));
  };
  const folderValues = (resource: unknown): Record<string, unknown> | undefined => {
    const folder = folderOf(resource);
    return folder && (h.config.folder[folder.name] ??= {});
  };
  const disposable = { dispose: () => undefined };
  const editorListeners = new Map<EditorEvent, Listener[]>();
  const onEditorEvent = (event: EditorEvent) => (l: Listener) => {
    editorListeners.set(event, [...(editorListeners.get(event) ?? []), l]);
    return { dispose: () => editorListeners.set(event, (editorListeners.get(event) ?? []).filter((x) => x !== l)) };
  };
  h.emit = (event, e) => {
    for (const l of editorListeners.get(event) ?? []) {
      l(e);
    }
  };
  const statusItem = { text: "", tooltip: "", command: "", backgroundColor: undefined, show() {}, hide() {}, dispose() {} };
  h.statusItem = statusItem;
  const message = (kind: string) => async (text: string) => {
    h.messages.push({ kind, text });
    return undefined;
  };

  class CodeAction {
    command: unknown;
    constructor(readonly title: string) {}
  }
  const vscode: Record<string, unknown> = {
    StatusBarAlignment: { Left: 1, Right: 2 },
    ConfigurationTarget: { Global: 1, Workspace: 2, WorkspaceFolder: 3 },
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    ThemeColor: class {
      constructor(readonly id: string) {}
    },
    CodeAction,
    CancellationTokenSource: class {
      private listeners: Array<() => void> = [];
      readonly token = {
        isCancellationRequested: false,
        onCancellationRequested: (listener: () => void) => {
          this.listeners.push(listener);
          return { dispose: () => {} };
        },
      };
      cancel(): void {
        if (!this.token.isCancellationRequested) {
          this.token.isCancellationRequested = true;
          this.listeners.forEach((l) => l());
        }
      }
      dispose(): void {}
    },
    CancellationError: class extends Error {
      constructor() {
        super("Canceled");
        this.name = "Canceled";
      }
    },
    window: {
      createOutputChannel: () => ({ appendLine() {}, show() {}, dispose() {} }),
      createStatusBarItem: () => statusItem,
      showErrorMessage: message("error"),
      showWarningMessage: message("warning"),
      showInformationMessage: message("info"),
      createInputBox: () => {
        const on = {
          change: [] as ((value: string) => void)[],
          accept: [] as (() => void)[],
          hide: [] as (() => void)[],
        };
        let open = false;
        const hide = () => {
          if (open) {
            open = false;
            on.hide.forEach((f) => f());
          }
        };
        const box = {
          value: "",
          prompt: "",
          placeholder: "",
          validationMessage: undefined as string | undefined,
          messagesWhileTyping: [] as (string | undefined)[], // the message after each keystroke
          onDidChangeValue: (f: (value: string) => void) => (on.change.push(f), disposable),
          onDidAccept: (f: () => void) => (on.accept.push(f), disposable),
          onDidHide: (f: () => void) => (on.hide.push(f), disposable),
          show() {
            h.inputBoxes += 1;
            open = true;
            const answer = h.inputBoxAnswers.shift();
            setImmediate(async () => {
              if (answer === undefined) {
                hide();
                return;
              }
              const script = typeof answer === "string" ? { typed: [answer], pauseMs: 0 } : answer;
              for (const typed of script.typed) {
                box.value = typed;
                on.change.forEach((f) => f(typed));
                box.messagesWhileTyping.push(box.validationMessage);
              }
              if (script.pauseMs > 0) {
                mock.timers.tick(script.pauseMs); // the extension's tests run on mocked timers
              }
              on.accept.forEach((f) => f());
              hide(); // still open: a validation message kept it; the user gives up
            });
          },
          hide,
          dispose: hide,
        };
        h.inputBoxesShown.push(box);
        return box;
      },
      withProgress: async (_opts: unknown, task: (p: unknown, token: unknown) => Promise<unknown>) =>
        task({ report() {} }, { isCancellationRequested: false, onCancellationRequested: () => disposable }),
      get activeTextEditor() {
        return h.window.activeTextEditor;
      },
      onDidChangeTextEditorSelection: onEditorEvent("selection"),
      onDidChangeActiveTextEditor: onEditorEvent("activeEditor"),
      get state() {
        return { focused: h.window.focused };
      },
    },
    workspace: {
      get workspaceFolders() {
        return h.folders.length ? workspaceFolders() : undefined;
      },
      getWorkspaceFolder: folderOf,
      getConfiguration: (section: string, resource?: unknown) => {
        if (section !== "ngramd") {
          throw new Error(`unexpected section ${section}`);
        }
        const scopes = () => [folderValues(resource) ?? {}, h.config.workspace, h.config.global];
        return {
          get: (key: string) => scopes().find((scope) => key in scope)?.[key],
          inspect: (key: string) => ({
            key: `ngramd.${key}`,
            globalValue: h.config.global[key],
            workspaceValue: h.config.workspace[key],
            workspaceFolderValue: folderValues(resource)?.[key],
          }),
          update: async (key: string, value: unknown, target: number | boolean | undefined) => {
            const folder = folderValues(resource);
            if (target === 3 && !folder) {
              // VS Code refuses a folder write without a resource inside a folder
              throw new Error("Unable to write to Folder Settings because no resource is provided.");
            }
            const scope = target === 3 ? folder! : target === 2 || target === false ? h.config.workspace : h.config.global;
            if (value === undefined) {
              delete scope[key];
            } else {
              scope[key] = value;
            }
            await h.changeConfig();
          },
        };
      },
      onDidChangeConfiguration: (l: Listener) => {
        h.configListeners.push(l);
        return disposable;
      },
      onDidChangeWorkspaceFolders: (l: Listener) => {
        h.folderListeners.push(l);
        return disposable;
      },
      applyEdit: async () => true,
      onDidChangeTextDocument: onEditorEvent("documentChange"),
      onDidCloseTextDocument: onEditorEvent("documentClose"),
    },
    commands: {
      registerCommand: (id: string, fn: (...args: unknown[]) => Promise<unknown>) => {
        h.commands.set(id, fn);
        return disposable;
      },
    },
  };
  h.vscode = vscode;
  h.changeConfig = async () => {
    for (const l of h.configListeners) {
      await l({ affectsConfiguration: (s: string) => s === "ngramd" || s.startsWith("ngramd.") });
    }
  };

  // the protocol's real types (they need no vscode), a fake client
  const lc = {
    ...require("vscode-languageserver-protocol"),
    TransportKind: { stdio: 0, ipc: 1, pipe: 2, socket: 3 },
    RevealOutputChannelOn: { Debug: 0, Info: 1, Warn: 2, Error: 3, Never: 4 },
    CloseAction,
    State,
    LanguageClient: function (id: string, name: string, serverOptions: unknown, clientOptions: Record<string, unknown>) {
      const c = new FakeClient(id, name, serverOptions, clientOptions, h);
      h.clients.push(c);
      return c;
    },
  };
  const mod = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
  const original = mod._load;
  mod._load = function (request: string, ...rest: unknown[]) {
    if (request === "vscode") {
      return vscode;
    }
    if (request === "vscode-languageclient/node") {
      return lc;
    }
    return original.call(this, request, ...rest);
  };
  const extPath = require.resolve(path.join(__dirname, "..", "extension"));
  delete require.cache[extPath];
  try {
    h.ext = require(extPath);
  } finally {
    mod._load = original;
  }
  h.context = { subscriptions: [] };
  h.dispose = async () => {
    await h.ext.deactivate();
    for (const s of h.context.subscriptions) {
      s.dispose();
    }
  };
  return h;
}

/** Lets pending promise callbacks and immediates run. */
export async function settle(rounds = 5): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    await new Promise((r) => setImmediate(r));
  }
}

/**
 * Pure logic of the extension: no `vscode` import, so that `node --test` can run it
 * without VS Code.
 *
 * Vocabulary:
 * - settings: what the user wrote under `ngramd.*` in VS Code, read once and normalised
 *   (out-of-range numbers clamped, wrong types replaced by the default);
 * - initialization options: the object sent to `ngramd lsp` in `initialize` and again
 *   in `workspace/didChangeConfiguration`; its keys are the server's contract
 *   (maxTokens, multiline, temperature, debounceMs, timeoutMs, device, exactKernels, model,
 *   socket, enabled, prepareCompletions);
 * - server command: the executable and the arguments that start `ngramd lsp`.
 */

import * as path from "path";

export interface NgramdSettings {
  enable: boolean;
  serverPath: string;
  model: string;
  maxTokens: number;
  multiline: boolean;
  debounceMs: number;
  temperature: number;
  timeoutMs: number;
  device: Device;
  /** A daemon started by the server loads a GGUF with ggml's exact kernels (K-quant models need them to draft). */
  exactKernels: boolean;
  socket: string;
  /** Prefill the completion prompt where the cursor rests (sent to the server too: it prepares for a daemon that comes). */
  prepareCompletions: boolean;
}

/** Where a daemon started by the server runs (the server's `device`). */
export type Device = "auto" | "cpu" | "cuda";
const DEVICES: readonly Device[] = ["auto", "cpu", "cuda"];

export const DEFAULTS: Readonly<NgramdSettings> = Object.freeze({
  enable: true,
  serverPath: "",
  model: "",
  maxTokens: 64,
  multiline: true,
  debounceMs: 75,
  temperature: 0,
  timeoutMs: 8000,
  device: "auto",
  exactKernels: false,
  socket: "",
  prepareCompletions: true,
});

/** Bounds for the numeric settings; values outside are clamped (package.json states the same). */
const BOUNDS: Record<"maxTokens" | "debounceMs" | "temperature" | "timeoutMs", [number, number]> = {
  maxTokens: [1, 1024],
  debounceMs: [0, 2000],
  temperature: [0, 100], // the daemon's range; 0 < t < 1e-4 is refused by the server, with a message
  timeoutMs: [100, 600000],
};

/** Reads one setting; `undefined` means "not set". VS Code's `WorkspaceConfiguration.get` fits. */
export type SettingGetter = (key: string) => unknown;

function clamp(x: number, [lo, hi]: [number, number]): number {
  return Math.min(hi, Math.max(lo, x));
}

function num(v: unknown, fallback: number, bounds: [number, number], integer: boolean): number {
  if (typeof v !== "number" || !Number.isFinite(v)) {
    return fallback;
  }
  return clamp(integer ? Math.round(v) : v, bounds);
}

function str(v: unknown, fallback: string): string {
  return typeof v === "string" ? v.trim() : fallback;
}

function bool(v: unknown, fallback: boolean): boolean {
  return typeof v === "boolean" ? v : fallback;
}

/** Normalised settings from a getter over the `ngramd` section. Never throws. */
export function readSettings(get: SettingGetter): NgramdSettings {
  return {
    enable: bool(get("enable"), DEFAULTS.enable),
    serverPath: str(get("serverPath"), DEFAULTS.serverPath),
    model: str(get("model"), DEFAULTS.model),
    maxTokens: num(get("maxTokens"), DEFAULTS.maxTokens, BOUNDS.maxTokens, true),
    multiline: bool(get("multiline"), DEFAULTS.multiline),
    debounceMs: num(get("debounceMs"), DEFAULTS.debounceMs, BOUNDS.debounceMs, true),
    temperature: num(get("temperature"), DEFAULTS.temperature, BOUNDS.temperature, false),
    timeoutMs: num(get("timeoutMs"), DEFAULTS.timeoutMs, BOUNDS.timeoutMs, true),
    device: DEVICES.find((d) => d === str(get("device"), "")) ?? DEFAULTS.device,
    exactKernels: bool(get("exactKernels"), DEFAULTS.exactKernels),
    socket: str(get("socket"), DEFAULTS.socket),
    prepareCompletions: bool(get("prepareCompletions"), DEFAULTS.prepareCompletions),
  };
}

/** The server's options. Empty model/socket are left out: the server then uses its defaults. */
export interface InitializationOptions {
  maxTokens: number;
  multiline: boolean;
  temperature: number;
  debounceMs: number;
  timeoutMs: number;
  device: Device;
  exactKernels: boolean;
  enabled: boolean;
  prepareCompletions: boolean;
  model?: string;
  socket?: string;
}

export function initializationOptions(s: NgramdSettings): InitializationOptions {
  const opts: InitializationOptions = {
    maxTokens: s.maxTokens,
    multiline: s.multiline,
    temperature: s.temperature,
    debounceMs: s.debounceMs,
    timeoutMs: s.timeoutMs,
    device: s.device,
    exactKernels: s.exactKernels,
    enabled: s.enable,
    prepareCompletions: s.prepareCompletions,
  };
  if (s.model) {
    opts.model = s.model;
  }
  if (s.socket) {
    opts.socket = s.socket;
  }
  return opts;
}

/** Arguments after the executable: `lsp [--model M] [--socket P]`. */
export function serverArgs(s: NgramdSettings): string[] {
  const args = ["lsp"];
  if (s.model) {
    args.push("--model", s.model);
  }
  if (s.socket) {
    args.push("--socket", s.socket);
  }
  return args;
}

/**
 * Settings whose change needs a new server process (the command line changes);
 * the others reach the running server through `workspace/didChangeConfiguration`.
 */
export function needsRestart(before: NgramdSettings, after: NgramdSettings): boolean {
  return (
    before.serverPath !== after.serverPath ||
    before.model !== after.model ||
    before.socket !== after.socket
  );
}

export interface Environment {
  /** The PATH variable, split with `delimiter`. */
  PATH?: string;
  HOME?: string;
}

export interface PlatformInfo {
  /** `process.platform`; "win32" switches to Scripts\\ngramd.exe and `;` as PATH delimiter. */
  platform: string;
  /** Tells whether a regular, executable file lies at an absolute path. */
  isExecutable: (p: string) => boolean;
}

export type ServerPathSource = "setting" | "workspace" | "path";

export type ResolvedServer =
  | { ok: true; path: string; source: ServerPathSource }
  | { ok: false; error: string };

function expandHome(p: string, env: Environment): string {
  if ((p === "~" || p.startsWith("~/")) && env.HOME) {
    return path.join(env.HOME, p.slice(1));
  }
  return p;
}

/** A workspace folder: its name (VS Code's `WorkspaceFolder.name`) and its file system path. */
export interface NamedFolder {
  name: string;
  path: string;
}

/** A folder given as a bare path is named after its last component, as VS Code names it by default. */
function named(folder: string | NamedFolder, p: typeof path.posix): NamedFolder {
  return typeof folder === "string" ? { name: p.basename(folder), path: folder } : folder;
}

// `${workspaceFolder}` (the first folder) and `${workspaceFolder:name}` (the folder of that name)
const WORKSPACE_FOLDER_VARIABLE = /\$\{workspaceFolder(?::([^}]*))?\}/g;

/**
 * `setting` with `${workspaceFolder}` and `${workspaceFolder:name}` replaced as VS Code's own
 * variables are: the first folder, and the first folder named `name`. A variable that names
 * no open folder is an error (never a path that silently points elsewhere).
 */
export function expandWorkspaceFolders(
  setting: string,
  folders: readonly NamedFolder[],
  settingName: string,
): { ok: true; value: string } | { ok: false; error: string } {
  let error: string | undefined;
  const value = setting.replace(WORKSPACE_FOLDER_VARIABLE, (variable: string, name: string | undefined) => {
    const folder = name === undefined ? folders[0] : folders.find((f) => f.name === name);
    if (folder) {
      return folder.path;
    }
    if (error === undefined) {
      const open = folders.length ? `open folders: ${folders.map((f) => JSON.stringify(f.name)).join(", ")}` : "no folder is open";
      error = name === undefined
        ? `${settingName} uses ${variable} but no folder is open: ${setting}`
        : `${settingName} uses ${variable} but no workspace folder is named ${JSON.stringify(name)} (${open}): ${setting}`;
    }
    return variable;
  });
  return error === undefined ? { ok: true, value } : { ok: false, error };
}

/**
 * `ngramd.model` or `ngramd.socket` as the server is to be given it: `~`, `${workspaceFolder}` and
 * `${workspaceFolder:name}` expanded, and a relative path that names a file or folder in the
 * first workspace folder given absolute (the server does not run there). Anything else, a
 * Hugging Face id (`org/name`) or `tiny`, is given as written.
 */
export function expandPathSetting(
  setting: string,
  folders: readonly (string | NamedFolder)[],
  env: Environment,
  exists: (p: string) => boolean,
  settingName: string,
): { ok: true; value: string } | { ok: false; error: string } {
  if (!setting) {
    return { ok: true, value: setting };
  }
  const namedFolders = folders.map((f) => named(f, path.posix));
  const expanded = expandWorkspaceFolders(expandHome(setting, env), namedFolders, settingName);
  if (!expanded.ok || path.isAbsolute(expanded.value) || namedFolders.length === 0) {
    return expanded;
  }
  const inFolder = path.join(namedFolders[0].path, expanded.value);
  return { ok: true, value: exists(inFolder) ? inFolder : expanded.value };
}

/**
 * Where `ngramd` is, in this order:
 * 1. the `ngramd.serverPath` setting (`~`, `${workspaceFolder}` and `${workspaceFolder:name}`
 *    expanded; a relative path is taken from the first workspace folder) — if set, it must
 *    exist: a wrong explicit path is an error, never silently replaced by another binary;
 * 2. `<folder>/.venv/bin/ngramd` in each workspace folder, in order;
 * 3. `ngramd` on PATH.
 * A folder given as a plain path is named after its last component.
 */
export function resolveServerPath(
  setting: string,
  folders: readonly (string | NamedFolder)[],
  env: Environment,
  plat: PlatformInfo,
): ResolvedServer {
  const win = plat.platform === "win32";
  const p = win ? path.win32 : path.posix;
  const exe = win ? "ngramd.exe" : "ngramd";
  const namedFolders = folders.map((f) => named(f, p));
  const workspaceFolders = namedFolders.map((f) => f.path);
  if (setting) {
    const expanded = expandWorkspaceFolders(expandHome(setting, env), namedFolders, "ngramd.serverPath");
    if (!expanded.ok) {
      return expanded;
    }
    let candidate = expanded.value;
    if (!p.isAbsolute(candidate)) {
      if (workspaceFolders.length === 0) {
        return { ok: false, error: `ngramd.serverPath is relative but no folder is open: ${setting}` };
      }
      candidate = p.join(workspaceFolders[0], candidate);
    }
    if (plat.isExecutable(candidate)) {
      return { ok: true, path: candidate, source: "setting" };
    }
    return { ok: false, error: `ngramd.serverPath is not an executable file: ${candidate}` };
  }
  for (const folder of workspaceFolders) {
    const candidate = win ? p.join(folder, ".venv", "Scripts", exe) : p.join(folder, ".venv", "bin", exe);
    if (plat.isExecutable(candidate)) {
      return { ok: true, path: candidate, source: "workspace" };
    }
  }
  const dirs = (env.PATH ?? "").split(win ? ";" : ":").filter((d) => d.length > 0);
  for (const dir of dirs) {
    const candidate = p.join(expandHome(dir, env), exe);
    if (p.isAbsolute(candidate) && plat.isExecutable(candidate)) {
      return { ok: true, path: candidate, source: "path" };
    }
  }
  return {
    ok: false,
    error:
      "ngramd was not found: set ngramd.serverPath, or install it into the workspace's .venv " +
      "(pip install -e .), or put `ngramd` on PATH.",
  };
}

/** What `WorkspaceConfiguration.inspect` tells about one setting (the parts used here). */
export interface InspectedSetting {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/** The settings scopes a command can write, most specific last. */
export type SettingScope = "global" | "workspace" | "workspaceFolder";

/**
 * The scope a command must write a setting to for the write to take effect: the most
 * specific scope that sets it (a folder's value wins over the workspace's, which wins over
 * the user's), since that is the one deciding the effective value; else the user's
 * (global) settings. `inspected` must come from a configuration scoped to the resource
 * (the active editor's document) for a folder's value to show.
 */
export function settingScope(inspected: InspectedSetting | undefined): SettingScope {
  if (inspected?.workspaceFolderValue !== undefined) {
    return "workspaceFolder";
  }
  if (inspected?.workspaceValue !== undefined) {
    return "workspace";
  }
  return "global";
}

/** How a message names a scope: "the user settings", "the workspace settings", "the settings of folder "api"". */
export function describeScope(scope: SettingScope, folderName?: string): string {
  if (scope === "workspaceFolder") {
    return folderName === undefined ? "the folder settings" : `the settings of folder ${JSON.stringify(folderName)}`;
  }
  return scope === "workspace" ? "the workspace settings" : "the user settings";
}

/**
 * Pure logic of the extension: no `vscode` import, so that `node --test` can run it
 * without VS Code.
 *
 * Vocabulary:
 * - settings: what the user wrote under `ngramd.*` in VS Code, read once and normalised
 *   (out-of-range numbers clamped, wrong types replaced by the default);
 * - initialization options: the object sent to `ngramd lsp` in `initialize` and again
 *   in `workspace/didChangeConfiguration`; its keys are the server's contract
 *   (maxTokens, multiline, temperature, debounceMs, timeoutMs, device, model, socket, enabled);
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
  socket: string;
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
  socket: "",
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
    socket: str(get("socket"), DEFAULTS.socket),
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
  enabled: boolean;
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
    enabled: s.enable,
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

/**
 * Where `ngramd` is, in this order:
 * 1. the `ngramd.serverPath` setting (`~` and `${workspaceFolder}` expanded; a relative
 *    path is taken from the first workspace folder) — if set, it must exist: a wrong
 *    explicit path is an error, never silently replaced by another binary;
 * 2. `<folder>/.venv/bin/ngramd` in each workspace folder, in order;
 * 3. `ngramd` on PATH.
 */
export function resolveServerPath(
  setting: string,
  workspaceFolders: readonly string[],
  env: Environment,
  plat: PlatformInfo,
): ResolvedServer {
  const win = plat.platform === "win32";
  const p = win ? path.win32 : path.posix;
  const exe = win ? "ngramd.exe" : "ngramd";
  if (setting) {
    let candidate = expandHome(setting, env);
    if (candidate.includes("${workspaceFolder}")) {
      if (workspaceFolders.length === 0) {
        return { ok: false, error: `ngramd.serverPath uses \${workspaceFolder} but no folder is open: ${setting}` };
      }
      candidate = candidate.split("${workspaceFolder}").join(workspaceFolders[0]);
    }
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

/**
 * The scope a command must write a setting to for the write to take effect: the
 * workspace's when the workspace (or a folder of it) sets it, since that value wins
 * over the user's; else the user's (global) settings.
 */
export function settingScope(inspected: InspectedSetting | undefined): "workspace" | "global" {
  if (inspected && (inspected.workspaceValue !== undefined || inspected.workspaceFolderValue !== undefined)) {
    return "workspace";
  }
  return "global";
}

/**
 * Status bar text from the result of the server's `ngramd.status` command. Pure: no
 * `vscode` import.
 *
 * The result is the JSON object `ngramd lsp` returns (lsp/server.py `status`):
 *   { enabled, settings, socket, connected, connects, daemonsStarted, lastError, counters,
 *     daemon: <the daemon's `status` reply (docs/rpc.md)> | { error } }
 * where the daemon's reply holds `daemon` (server, pid, ready...), `model` ({ name }),
 * and `generation` ({ drafted, accepted, acceptance, ... }, totals since it started).
 * It is read leniently, so that a missing part gives "unknown", never an exception:
 * - enabled: `enabled`, default true;
 * - daemon state: "down" when `connected` is false or `daemon.error` is set, "running"
 *   when connected; a `state`/`status` string wins where a server sends one ("stopped":
 *   no daemon, and none is started to answer an observing status request);
 * - acceptance rate, the share of drafted tokens that the model accepted:
 *   `accepted / drafted` (or an `acceptance_rate` in [0, 1]) found at the top level or
 *   under `generation`, `daemon`, `daemon.generation`, `stats`, `acceptance`.
 */

export interface StatusView {
  /** Short text for the status bar item; `$(...)` are VS Code codicons. */
  text: string;
  /** Multi-line tooltip. */
  tooltip: string;
  /** "ok" | "off" | "error" | "starting": the item's colour follows it. */
  state: "ok" | "off" | "error" | "starting";
}

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function finite(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

/** The objects that may hold the acceptance figures, in the order they are looked at. */
function scopesOf(result: Obj): Obj[] {
  const scopes: Obj[] = [result];
  const push = (v: unknown) => {
    if (isObj(v)) {
      scopes.push(v);
    }
  };
  push(result["generation"]);
  push(result["acceptance"]);
  push(result["stats"]);
  const daemon = result["daemon"];
  if (isObj(daemon)) {
    push(daemon["generation"]);
    push(daemon);
    push(daemon["stats"]);
  }
  return scopes;
}

/** Share of drafted tokens accepted, in [0, 1], or undefined when nothing was drafted yet. */
export function acceptanceRate(result: unknown): number | undefined {
  if (!isObj(result)) {
    return undefined;
  }
  for (const scope of scopesOf(result)) {
    const drafted = finite(scope["drafted"]) ?? finite(scope["drafted_tokens"]);
    const accepted = finite(scope["accepted"]) ?? finite(scope["accepted_tokens"]);
    if (drafted !== undefined && accepted !== undefined) {
      return drafted > 0 ? Math.min(1, Math.max(0, accepted / drafted)) : undefined;
    }
    const rate = finite(scope["acceptance_rate"]) ?? finite(scope["acceptanceRate"]);
    if (rate !== undefined && rate >= 0 && rate <= 1) {
      return rate;
    }
  }
  return undefined;
}

/** The daemon's state as one lower-case word. */
export function daemonState(result: unknown): string {
  if (!isObj(result)) {
    return "unknown";
  }
  for (const key of ["state", "status"]) {
    const v = result[key];
    if (typeof v === "string" && v) {
      return v.toLowerCase();
    }
  }
  const daemon = result["daemon"];
  if (typeof daemon === "string" && daemon) {
    return daemon.toLowerCase();
  }
  if (isObj(daemon)) {
    if (typeof daemon["error"] === "string" && daemon["error"]) {
      return "down";
    }
    const inner = daemon["state"] ?? daemon["status"];
    if (typeof inner === "string" && inner) {
      return inner.toLowerCase();
    }
    if (typeof daemon["connected"] === "boolean") {
      return daemon["connected"] ? "running" : "down";
    }
  }
  if (typeof result["connected"] === "boolean") {
    return result["connected"] ? "running" : "down";
  }
  return "unknown";
}

const STARTING_STATES = new Set(["starting", "loading", "indexing", "connecting"]);

/**
 * Arguments of every status request this extension sends: observe, never start a
 * daemon (a `ngramd stop` must not be undone by looking at the status bar). The server
 * then answers `connected: false` (daemon state "stopped") where no daemon runs.
 */
export const OBSERVE_STATUS_ARGS: readonly unknown[] = Object.freeze([Object.freeze({ spawn: false })]);

/**
 * Whether a status reply says the server has no daemon now (stopped, or gone): the
 * periodic poll then pauses until something else (a completion, the user) reaches the
 * server, so that a server which ignores `spawn: false` is not made to start one either.
 * A daemon that is starting (`connected: false` while the server loads one) is not
 * stopped: the poll goes on, so that the spinner turns into the running state.
 */
export function daemonStopped(result: unknown): boolean {
  if (!isObj(result)) {
    return false;
  }
  const state = daemonState(result);
  return !STARTING_STATES.has(state) && (result["connected"] === false || state === "stopped");
}

/** The model's name: `model` (string or { name }) at the top level or under `daemon`. */
export function modelName(result: unknown): string | undefined {
  if (!isObj(result)) {
    return undefined;
  }
  const daemon = result["daemon"];
  for (const m of [result["model"], isObj(daemon) ? daemon["model"] : undefined]) {
    if (typeof m === "string" && m) {
      return m;
    }
    if (isObj(m) && typeof m["name"] === "string" && m["name"]) {
      return m["name"];
    }
  }
  return undefined;
}

const OK_STATES = new Set(["running", "ok", "ready", "connected", "up", "idle", "busy"]);

export function formatPercent(rate: number): string {
  return `${Math.round(rate * 100)}%`;
}

/** View of a successful `ngramd.status` reply. */
export function statusView(result: unknown): StatusView {
  const enabled = !(isObj(result) && result["enabled"] === false);
  const state = daemonState(result);
  const rate = acceptanceRate(result);
  const lines = [`ngramd: daemon ${state}`, enabled ? "completions on" : "completions off"];
  if (rate !== undefined) {
    lines.push(`draft acceptance: ${formatPercent(rate)} of drafted tokens`);
  }
  if (isObj(result)) {
    const model = modelName(result);
    if (model) {
      lines.push(`model: ${model}`);
    }
    const error = result["lastError"];
    if (typeof error === "string" && error) {
      lines.push(`last error: ${error}`);
    }
    const shown = finite(result["completions_shown"]);
    const taken = finite(result["completions_accepted"]);
    if (shown !== undefined && taken !== undefined && shown > 0) {
      lines.push(`completions accepted: ${taken} of ${shown}`);
    }
  }
  if (state === "stopped") {
    lines.push("The next completion starts it.");
  }
  lines.push("Click for details.");
  const tooltip = lines.join("\n");
  if (!enabled) {
    return { text: "$(circle-slash) ngramd", tooltip, state: "off" };
  }
  if (state === "stopped") {
    return { text: "$(debug-stop) ngramd", tooltip, state: "off" };
  }
  if (STARTING_STATES.has(state)) {
    return { text: "$(loading~spin) ngramd", tooltip, state: "starting" };
  }
  if (!OK_STATES.has(state) && state !== "unknown") {
    return { text: "$(warning) ngramd", tooltip, state: "error" };
  }
  const suffix = rate === undefined ? "" : ` ${formatPercent(rate)}`;
  return { text: `$(sparkle) ngramd${suffix}`, tooltip, state: "ok" };
}

/** View when the status request itself failed (server not running, timed out...). */
export function errorView(message: string): StatusView {
  return { text: "$(warning) ngramd", tooltip: `ngramd: ${message}`, state: "error" };
}

/** Validates the instruction typed by the user; returns an error message or undefined. */
export function validateInstruction(text: string): string | undefined {
  if (text.trim().length === 0) {
    return "Type what the selection should become, e.g. 'rename x to count'.";
  }
  if (text.length > 2000) {
    return "The instruction is longer than 2000 characters.";
  }
  return undefined;
}

/** True when a command result looks like an LSP WorkspaceEdit the client must apply itself. */
export function isWorkspaceEdit(v: unknown): boolean {
  return isObj(v) && (isObj(v["changes"]) || Array.isArray(v["documentChanges"]));
}


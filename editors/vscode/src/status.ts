/**
 * Status bar text from the result of the server's `ngramd.status` command. Pure: no
 * `vscode` import.
 *
 * The result is a JSON object; its exact shape belongs to the server, so this reads it
 * leniently:
 * - enabled: `enabled` (boolean), default true;
 * - daemon state: `daemon` or `state` — a string ("running", "starting", "down"...)
 *   or an object with a `state`/`status` string, or `connected` (boolean);
 * - acceptance rate, the share of drafted tokens that the model accepted: the first of
 *   `acceptance_rate`, `acceptanceRate`, `acceptance.rate`, `stats.acceptance_rate`, or
 *   `accepted / drafted` found at the top level or under `acceptance`, `stats`, `daemon`;
 * - accepted completions: `completions_accepted` / `completions_shown` when present.
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

/** Share of drafted tokens accepted, in [0, 1], or undefined when nothing was drafted yet. */
export function acceptanceRate(result: unknown): number | undefined {
  if (!isObj(result)) {
    return undefined;
  }
  const scopes: Obj[] = [result];
  for (const key of ["acceptance", "stats", "daemon", "speculation"]) {
    const v = result[key];
    if (isObj(v)) {
      scopes.push(v);
    }
  }
  for (const scope of scopes) {
    const rate = finite(scope["acceptance_rate"]) ?? finite(scope["acceptanceRate"]) ?? finite(scope["rate"]);
    if (rate !== undefined && rate >= 0 && rate <= 1) {
      return rate;
    }
    const drafted = finite(scope["drafted"]) ?? finite(scope["drafted_tokens"]);
    const accepted = finite(scope["accepted"]) ?? finite(scope["accepted_tokens"]);
    if (drafted !== undefined && accepted !== undefined && drafted > 0) {
      return Math.min(1, Math.max(0, accepted / drafted));
    }
  }
  return undefined;
}

/** The daemon's state as one lower-case word. */
export function daemonState(result: unknown): string {
  if (!isObj(result)) {
    return "unknown";
  }
  for (const key of ["daemon", "state", "status"]) {
    const v = result[key];
    if (typeof v === "string" && v) {
      return v.toLowerCase();
    }
    if (isObj(v)) {
      const inner = v["state"] ?? v["status"];
      if (typeof inner === "string" && inner) {
        return inner.toLowerCase();
      }
      if (typeof v["connected"] === "boolean") {
        return v["connected"] ? "running" : "down";
      }
    }
  }
  if (typeof result["connected"] === "boolean") {
    return result["connected"] ? "running" : "down";
  }
  return "unknown";
}

const OK_STATES = new Set(["running", "ok", "ready", "connected", "up", "idle", "busy"]);
const STARTING_STATES = new Set(["starting", "loading", "indexing", "connecting"]);

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
    const model = result["model"];
    if (typeof model === "string" && model) {
      lines.push(`model: ${model}`);
    }
    const shown = finite(result["completions_shown"]);
    const taken = finite(result["completions_accepted"]);
    if (shown !== undefined && taken !== undefined && shown > 0) {
      lines.push(`completions accepted: ${taken} of ${shown}`);
    }
  }
  lines.push("Click for details.");
  const tooltip = lines.join("\n");
  if (!enabled) {
    return { text: "$(circle-slash) ngramd", tooltip, state: "off" };
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

/** Arguments of `ngramd.rewriteSelection`: the document, the LSP range, the instruction. */
export interface RewriteArgs {
  uri: string;
  range: { start: { line: number; character: number }; end: { line: number; character: number } };
  instruction: string;
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

/**
 * Command ids. Pure: no `vscode` import.
 *
 * Server commands are run with `workspace/executeCommand` on `ngramd lsp`. Client
 * commands are this extension's own (palette, status bar, keybindings); they must not
 * reuse a server id, because vscode-languageclient registers each server command as a
 * VS Code command of the same id, and registering one id twice fails.
 */

export const SERVER_COMMANDS = Object.freeze({
  status: "ngramd.status",
  toggle: "ngramd.toggle",
  rewriteSelection: "ngramd.rewriteSelection",
  prepareRewrite: "ngramd.prepareRewrite",
  prepareCompletion: "ngramd.prepareCompletion",
});

export const CLIENT_COMMANDS = Object.freeze({
  status: "ngramd.showStatus",
  toggle: "ngramd.toggleCompletions",
  rewriteSelection: "ngramd.rewrite",
  restart: "ngramd.restart",
});

/**
 * Arguments for this extension's rewrite command, replacing those of the server's rewrite
 * code action when that action carries no instruction (`[uri, range, null, version]` as the
 * server sends it, `[uri, range]`, or none): the user is then asked for one. The document
 * version the range belongs to travels along (the server's, else `version`), so that a
 * document edited while the user types the instruction is refused, not rewritten at the
 * wrong place. Returns undefined when the server's arguments already hold an instruction
 * (a third, string argument): that action runs as the server sent it.
 */
export function rewriteCodeActionArgs<R>(serverArgs: unknown[] | undefined, uri: string, range: R,
  version: number): [string, R, number] | undefined {
  const args = serverArgs ?? [];
  if (args.length >= 3 && typeof args[2] === "string" && args[2].trim().length > 0) {
    return undefined;
  }
  if (args.length === 1 && typeof args[0] === "object" && args[0] !== null) {
    const instruction = (args[0] as Record<string, unknown>)["instruction"];
    if (typeof instruction === "string" && instruction.trim().length > 0) {
      return undefined;
    }
  }
  // the version the range belongs to: the server's (4th argument) when it sent one
  const sent = args.length >= 4 && Number.isInteger(args[3]) ? (args[3] as number) : version;
  return [uri, range, sent];
}

/**
 * Whether a code action about to be resolved is the server's rewrite without an
 * instruction (its resolve `data` is `{uri, range, instruction: null, version}`): the user
 * is asked for one first, written into `data.instruction`. Where the client resolves
 * edits lazily (vscode-languageclient does), this is the light bulb's only path.
 */
export function rewriteResolveNeedsInstruction(kind: string | undefined, data: unknown): data is Record<string, unknown> {
  if (kind !== REWRITE_KIND || typeof data !== "object" || data === null) {
    return false;
  }
  const d = data as Record<string, unknown>;
  return typeof d["uri"] === "string" && d["range"] !== undefined &&
    (d["instruction"] === null || d["instruction"] === undefined);
}

/** The code action kind of the server's rewrite. */
export const REWRITE_KIND = "refactor.rewrite";

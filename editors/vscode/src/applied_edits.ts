/**
 * The apply-once rule of a rewrite. `ngramd lsp` applies a rewrite's WorkspaceEdit with
 * `workspace/applyEdit` and also returns it; another server may only return it. The
 * extension applies a returned edit only when the server did not already send that edit.
 *
 * While rewrites are in flight, the edits received through `workspace/applyEdit` are
 * counted by content, so each rewrite checks for its own edit: overlapping rewrites
 * cannot mistake one another's applyEdit for theirs (a global applyEdit count made a
 * rewrite skip its returned edit when another's applyEdit arrived meanwhile). Each
 * rewrite consumes one match, so two rewrites with the same edit apply it twice in all.
 * The server sends applyEdit before its reply, so a rewrite's own applyEdit is always
 * recorded before the rewrite checks for it.
 */

import { isWorkspaceEdit } from "./status";

/** JSON with object keys sorted: equal for equal content, whatever the key order. */
export function canonicalJson(v: unknown): string {
  return JSON.stringify(v, (_key, value: unknown) => {
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      return value;
    }
    const sorted: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) {
      sorted[k] = (value as Record<string, unknown>)[k];
    }
    return sorted;
  });
}

export class AppliedEdits {
  private inFlight = 0;
  // canonicalJson(edit) -> applyEdit requests not yet matched by a rewrite
  private unmatched = new Map<string, number>();

  /** A rewrite request is about to be sent; call `end` once it is answered or failed. */
  begin(): void {
    this.inFlight += 1;
  }

  end(): void {
    this.inFlight = Math.max(0, this.inFlight - 1);
    if (this.inFlight === 0) {
      // an applyEdit no rewrite claimed (a failed or cancelled one's) must not match a later one
      this.unmatched.clear();
    }
  }

  /** The server sent `edit` with workspace/applyEdit (ignored while no rewrite runs). */
  record(edit: unknown): void {
    if (this.inFlight === 0 || edit === undefined || edit === null) {
      return;
    }
    const key = canonicalJson(edit);
    this.unmatched.set(key, (this.unmatched.get(key) ?? 0) + 1);
  }

  /**
   * Whether the extension must apply the edit a rewrite returned: it is a WorkspaceEdit
   * and no unmatched applyEdit of the same content came (one such is consumed).
   */
  shouldApplyReturned(result: unknown): boolean {
    if (!isWorkspaceEdit(result)) {
      return false;
    }
    const key = canonicalJson(result);
    const n = this.unmatched.get(key) ?? 0;
    if (n === 0) {
      return true;
    }
    if (n === 1) {
      this.unmatched.delete(key);
    } else {
      this.unmatched.set(key, n - 1);
    }
    return false;
  }
}

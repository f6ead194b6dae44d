/**
 * When to ask the server to prepare a completion (`ngramd.prepareCompletion`). Pure: no
 * `vscode` import.
 *
 * A completion's cost is mostly its cold prefill the first time a place in a file is asked
 * about; so once the cursor has RESTED at a new spot for PREPARE_DELAY_MS (every move or
 * edit restarts the wait), the daemon prefills the prompt there in idle time, and the first
 * completion at that spot prefills only what was typed since. A head start only: nothing
 * waits on it.
 *
 * Vocabulary: a spot is (uri, version, line, character), the position a protocol position
 * of the document at that version; the same spot is never sent twice in a row, nor one
 * that an inline completion request has just warmed.
 */

export const PREPARE_DELAY_MS = 300;

/** Where the cursor rests: a document (its URI as a string, and its version) and a protocol position. */
export interface Spot {
  uri: string;
  version: number | null;
  line: number;
  character: number;
}

function sameSpot(a: Spot | undefined, b: Spot): boolean {
  return a !== undefined && a.uri === b.uri && a.version === b.version && a.line === b.line && a.character === b.character;
}

/**
 * Sends `spot` to the server; false when it did not (the server stopped or the setting
 * changed meanwhile), so that the spot may be sent later.
 */
export type SendPrepare = (spot: Spot) => boolean;

/** Debounces the prepares of one window: at most one is pending. */
export class CompletionPreparer {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private pending: Spot | undefined;
  // the spot last sent or warmed by a completion request; never sent again in a row
  private warm: Spot | undefined;

  constructor(private readonly delayMs: number = PREPARE_DELAY_MS) {}

  /**
   * The cursor moved or its document changed: the pending prepare is dropped, and `spot`
   * (none: nothing to prepare there) is sent with `send` once it has rested delayMs.
   */
  restart(): void;
  restart(spot: Spot, send: SendPrepare): void;
  restart(spot?: Spot, send?: SendPrepare): void {
    this.clearTimer();
    if (spot === undefined || send === undefined || sameSpot(this.warm, spot)) {
      return;
    }
    this.pending = spot;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.pending = undefined;
      if (!sameSpot(this.warm, spot) && send(spot)) {
        this.warm = spot;
      }
    }, this.delayMs);
  }

  /** An inline completion was just asked for at `spot`: that request warms its cache already. */
  warmed(spot: Spot): void {
    this.warm = spot;
  }

  /**
   * Drops the pending prepare and forgets the last spot sent (a reopened document, a new
   * server, has nothing prepared); with `uri`, only if they belong to that document.
   */
  cancel(uri?: string): void {
    if (uri === undefined || this.pending?.uri === uri) {
      this.clearTimer();
    }
    if (uri === undefined || this.warm?.uri === uri) {
      this.warm = undefined;
    }
  }

  private clearTimer(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
    }
    this.timer = undefined;
    this.pending = undefined;
  }
}

/**
 * When to ask the server to prepare a rewrite again with the instruction typed so far
 * (`ngramd.prepareRewrite(uri, range, version, instruction)`). Pure: no `vscode` import.
 *
 * The rewrite's prompt is the file around the selection, the selection, then the
 * instruction and a few tokens after it. The prompt up to the instruction is prepared
 * when the input box opens; once the typing has PAUSED for PREPARE_DELAY_MS (every
 * keystroke restarts the wait), the daemon prefills the prompt through what was typed,
 * so that the rewrite, asked with that instruction, starts on a fully cached prompt (or
 * prefills only the words typed after the pause). A head start only: nothing waits on it.
 */

import { PREPARE_DELAY_MS } from "./prepare_completion";

/** Sends the instruction typed so far to the server. */
export type SendTyped = (typed: string) => void;

/** Debounces the prepares of one input box: at most one is pending. */
export class InstructionPreparer {
  private timer: ReturnType<typeof setTimeout> | undefined;
  // the instruction last sent: a pause on the same text (the cursor moved) sends nothing
  private sent: string | undefined;

  constructor(
    private readonly send: SendTyped,
    private readonly delayMs: number = PREPARE_DELAY_MS,
  ) {}

  /** The input box's text changed to `text`: sent once the typing has paused delayMs. */
  changed(text: string): void {
    this.clearTimer();
    if (text.trim().length === 0 || text === this.sent) {
      return; // nothing typed yet: the prompt up to the instruction is prepared already
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.sent = text;
      this.send(text);
    }, this.delayMs);
  }

  /** The input box closed: the pending prepare is dropped. */
  dispose(): void {
    this.clearTimer();
  }

  private clearTimer(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
    }
    this.timer = undefined;
  }
}

// Text deltas arrive from the model a few characters at a time. Each one sent on its own is a
// JSON-RPC message Emacs must parse, log and insert; joining those that arrive within a few
// milliseconds keeps the chat live while cutting that work by orders of magnitude (make bench, 3).

export const TEXT_FLUSH_MS = 30;

export class TextBatcher {
  private pending = "";
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly send: (text: string) => void,
    private readonly intervalMs = TEXT_FLUSH_MS,
  ) {}

  push(text: string): void {
    this.pending += text;
    this.timer ??= setTimeout(() => this.flush(), this.intervalMs);
  }

  /** Sends what is pending now: before any other notification of the turn, so order is kept. */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending === "") return;
    const text = this.pending;
    this.pending = "";
    this.send(text);
  }
}

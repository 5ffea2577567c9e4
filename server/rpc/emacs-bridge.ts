// Calls from the server to Emacs that may wait: `emacs/call` out, `emacs/reply` back (see protocol.ts).
// Each call gets exactly one outcome: Emacs's reply, a timeout, a cancellation, or the connection
// closing. A late or unknown reply is dropped.

import type { NotificationType } from "vscode-jsonrpc";
import type { EmacsCallKind, EmacsCallParams, EmacsCallParamsByKind, EmacsCancelParams, EmacsReplyParams } from "../protocol.js";
import { ServerNotifications } from "../protocol.js";
import { ToolError, type EmacsPort } from "../tools/tool.js";

interface Pending {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  cleanup: () => void;
}

export type Notify = <P>(type: NotificationType<P>, params: P) => void;

export class EmacsBridge implements EmacsPort {
  private readonly pending = new Map<string, Pending>();
  private nextId = 1;
  private closedReason: string | undefined;

  constructor(private readonly notify: Notify) {}

  get inFlight(): number {
    return this.pending.size;
  }

  call<K extends EmacsCallKind>(kind: K, params: EmacsCallParamsByKind[K], opts: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<unknown> {
    if (this.closedReason) return Promise.reject(new ToolError(this.closedReason));
    if (opts.signal?.aborted) return Promise.reject(abortError(opts.signal));
    const id = `e${this.nextId++}`;
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => {
        this.settle(id, undefined, abortError(opts.signal!));
        this.sendCancel(id, "cancelled");
      };
      const cleanup = () => {
        clearTimeout(timer);
        opts.signal?.removeEventListener("abort", onAbort);
      };
      this.pending.set(id, { resolve, reject, cleanup });
      opts.signal?.addEventListener("abort", onAbort, { once: true });
      if (opts.timeoutMs && opts.timeoutMs > 0) {
        timer = setTimeout(() => {
          this.settle(id, undefined, new ToolError(`Emacs did not answer the ${kind} call within ${opts.timeoutMs} ms.`));
          this.sendCancel(id, "timeout");
        }, opts.timeoutMs);
      }
      const message = { id, kind, params } as EmacsCallParams;
      try {
        this.notify(ServerNotifications.emacsCall, message);
      } catch (err) {
        this.settle(id, undefined, new ToolError(`Could not reach Emacs: ${(err as Error).message}`));
      }
    });
  }

  /** An `emacs/reply` arrived. Returns false when no call was waiting for it. */
  handleReply(reply: EmacsReplyParams): boolean {
    if (!reply || typeof reply.id !== "string" || !this.pending.has(reply.id)) return false;
    if (reply.error) {
      const message = typeof reply.error.message === "string" && reply.error.message ? reply.error.message : "Emacs reported an error without a message.";
      this.settle(reply.id, undefined, new ToolError(message));
    } else {
      this.settle(reply.id, reply.result, undefined);
    }
    return true;
  }

  /** The connection is gone: every waiting call fails with REASON, and so does every later one. */
  close(reason: string): void {
    this.closedReason = reason;
    for (const id of [...this.pending.keys()]) this.settle(id, undefined, new ToolError(reason));
  }

  private settle(id: string, value: unknown, err: Error | undefined): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    p.cleanup();
    if (err) p.reject(err);
    else p.resolve(value);
  }

  private sendCancel(id: string, reason: string): void {
    const params: EmacsCancelParams = { id, reason };
    try {
      this.notify(ServerNotifications.emacsCancel, params);
    } catch {
      // Emacs is gone; nothing to cancel.
    }
  }
}

function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new ToolError("The call was cancelled.");
}

// vscode-jsonrpc drops what it cannot use (unparsable bodies, batches, objects that are neither a
// request, a notification nor a response) with a log line and no answer. JSON-RPC 2.0 wants a
// Parse error or an Invalid Request error back, so that a client knows its message was bad.
// This reader answers those itself and passes every well-formed message on.

import type { Disposable, Event, Message, MessageReader, MessageWriter, PartialMessageInfo } from "vscode-jsonrpc/node";

export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;

export class GuardedMessageReader implements MessageReader {
  readonly onError: Event<Error>;
  readonly onClose: Event<void>;
  readonly onPartialMessage: Event<PartialMessageInfo>;

  constructor(
    private readonly inner: MessageReader,
    private readonly writer: MessageWriter,
  ) {
    this.onError = inner.onError;
    this.onClose = inner.onClose;
    this.onPartialMessage = inner.onPartialMessage;
  }

  listen(callback: (message: Message) => void): Disposable {
    const errors = this.inner.onError((err) => this.answer(null, PARSE_ERROR, `Parse error: ${err.message}`));
    const listening = this.inner.listen((message) => {
      const problem = invalidity(message);
      if (problem === undefined) callback(message);
      else if (problem !== "ignore") this.answer(idOf(message), INVALID_REQUEST, `Invalid Request: ${problem}`);
    });
    return {
      dispose: () => {
        errors.dispose();
        listening.dispose();
      },
    };
  }

  dispose(): void {
    this.inner.dispose();
  }

  private answer(id: string | number | null, code: number, message: string): void {
    const response = { jsonrpc: "2.0", id, error: { code, message } };
    void this.writer.write(response as unknown as Message).catch(() => undefined);
  }
}

/** Why MESSAGE is no JSON-RPC message, "ignore" for stray responses, or undefined when it is fine. */
function invalidity(message: unknown): string | "ignore" | undefined {
  if (Array.isArray(message)) return "batches are not supported; send one message at a time.";
  if (message === null || typeof message !== "object") return "a message must be a JSON object.";
  const m = message as Record<string, unknown>;
  if ("method" in m) {
    if (typeof m.method !== "string" || m.method === "") return "method must be a non-empty string.";
    if ("id" in m && !(typeof m.id === "string" || typeof m.id === "number" || m.id === null)) return "id must be a string or a number.";
    return undefined;
  }
  // A response: the server sends no requests, so it answers nobody; JSON-RPC forbids replying to it.
  if ("result" in m || "error" in m) return "ignore";
  return "the message has neither a method nor a result.";
}

function idOf(message: unknown): string | number | null {
  const id = (message as { id?: unknown } | null)?.id;
  return typeof id === "string" || typeof id === "number" ? id : null;
}

// The writer of the server's messages: each one goes out as one write, its Content-Length header and
// its body together. vscode-jsonrpc's StreamMessageWriter writes the header and then, a promise later,
// the body: two writes, so Emacs, waiting on the pipe, woke up for a header it could do nothing with
// and again for the body, twice per message (bench figure 1).

import { AbstractMessageWriter, type Message, type MessageWriter } from "vscode-jsonrpc/node";

/** What a NUL becomes on the wire: Emacs 28's parser refuses \u0000, and the mark shows where one was. */
export const NUL_MARK = "\u2400";

// JSON.stringify writes a NUL as \u0000 and a lone surrogate as \udXXX (well-formed JSON.stringify);
// both make Emacs's parser refuse the whole message, which is then lost.
const REFUSED_ESCAPE = /\\u(?:0000|d[89a-f][0-9a-f]{2})/i;

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** S with every NUL marked and every lone surrogate replaced by U+FFFD, as Emacs can read it. */
export function wireString(s: string): string {
  return s.replace(/\0/g, NUL_MARK).replace(LONE_SURROGATE, "\ufffd");
}

/** VALUE with every string (keys too) passed through wireString. */
function wireValue(value: unknown): unknown {
  if (typeof value === "string") return wireString(value);
  if (Array.isArray(value)) return value.map(wireValue);
  if (value !== null && typeof value === "object") {
    const plain = "toJSON" in value && typeof value.toJSON === "function" ? (value.toJSON as () => unknown)() : value;
    if (plain !== value) return wireValue(plain);
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [wireString(k), wireValue(v)]));
  }
  return value;
}

/** MSG as JSON that Emacs 28 and 30 both read: the characters their parsers refuse are replaced. */
export function wireJson(msg: unknown): string {
  const json = JSON.stringify(msg);
  // Only a message that holds such a character is walked again: the common case costs one search.
  return REFUSED_ESCAPE.test(json) ? JSON.stringify(wireValue(msg)) : json;
}

export class FramedMessageWriter extends AbstractMessageWriter implements MessageWriter {
  private errorCount = 0;

  constructor(private readonly out: NodeJS.WritableStream) {
    super();
    out.on("error", (error: Error) => this.fireError(error));
    out.on("close", () => this.fireClose());
  }

  /** Frame MSG and write it at once; writes reach the stream in the order they were made. */
  write(msg: Message): Promise<void> {
    const json = wireJson(msg);
    const frame = `Content-Length: ${Buffer.byteLength(json, "utf8")}\r\n\r\n${json}`;
    return new Promise((resolve, reject) => {
      this.out.write(frame, "utf8", (error?: Error | null) => {
        if (!error) return resolve();
        this.errorCount++;
        this.fireError(error, msg, this.errorCount);
        reject(error);
      });
    });
  }

  end(): void {
    this.out.end();
  }
}

// The writer of the server's messages: each one goes out as one write, its Content-Length header and
// its body together. vscode-jsonrpc's StreamMessageWriter writes the header and then, a promise later,
// the body: two writes, so Emacs, waiting on the pipe, woke up for a header it could do nothing with
// and again for the body, twice per message (bench figure 1).

import { AbstractMessageWriter, type Message, type MessageWriter } from "vscode-jsonrpc/node";

export class FramedMessageWriter extends AbstractMessageWriter implements MessageWriter {
  private errorCount = 0;

  constructor(private readonly out: NodeJS.WritableStream) {
    super();
    out.on("error", (error: Error) => this.fireError(error));
    out.on("close", () => this.fireClose());
  }

  /** Frame MSG and write it at once; writes reach the stream in the order they were made. */
  write(msg: Message): Promise<void> {
    const json = JSON.stringify(msg);
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

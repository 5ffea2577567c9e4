// Shared test helpers: node-runtime test tools and an in-memory JSON-RPC pair.

import { PassThrough } from "node:stream";
import { checkMessage, describeProtocol } from "../../server/protocol-description.js";
import { createMessageConnection, StreamMessageReader, StreamMessageWriter, type MessageConnection } from "vscode-jsonrpc/node";
import { FramedMessageWriter } from "../../server/rpc/framed-writer.js";
import { defineTool, ToolError, type SafetyLevel, type Tool, type ToolHandler } from "../../server/tools/tool.js";

export function testTool(name: string, handler: ToolHandler, safety: SafetyLevel = "safe", extra: Partial<Parameters<typeof defineTool>[0]> = {}): Tool {
  return defineTool({
    name,
    description: `Test tool ${name}.`,
    parameters: {
      text: { type: "string", description: "Some text." },
      n: { type: "integer", description: "A number." },
    },
    safety,
    categories: ["test"],
    runtime: "node",
    handler,
    ...extra,
  });
}

export const echo: ToolHandler = async (args) => `echo:${String(args.text ?? "")}`;
export const boom: ToolHandler = async () => {
  throw new ToolError("boom happened");
};

/**
 * Two connected JSON-RPC endpoints over in-memory streams; the server's end writes as the bundled server
 * does. Every message either end sends is held against the protocol's shapes (tapProtocol): dispose()
 * throws when one was out of shape, unless CHECKED is false (a suite that sends malformed messages on
 * purpose), or the test forgave them (problems.splice(0)) right after sending them.
 */
export function connectionPair({ checked = true }: { checked?: boolean } = {}): { client: MessageConnection; serverSide: MessageConnection; problems: string[]; dispose(): void } {
  const up = new PassThrough();
  const down = new PassThrough();
  const client = createMessageConnection(new StreamMessageReader(down), new StreamMessageWriter(up));
  const serverSide = createMessageConnection(new StreamMessageReader(up), new FramedMessageWriter(down));
  const problems = tapProtocol(up, down);
  return {
    client,
    serverSide,
    problems,
    dispose() {
      client.dispose();
      serverSide.dispose();
      up.destroy();
      down.destroy();
      if (checked && problems.length > 0) throw new Error(`Messages out of the protocol's shape: ${[...new Set(problems)].join("; ")}`);
    },
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Reads every message on UP (client to server) and DOWN (server to client) and records in the
 * returned list what is out of the shape server/protocol.ts declares (the description --protocol
 * prints): requests' and notifications' params, responses' results, emacs/reply results by the kind
 * of their call. Suites assert the list empty (expectWellFormed) where the client plays Emacs.
 */
export function tapProtocol(up: PassThrough, down: PassThrough, shapes = describeProtocol().shapes): string[] {
  const problems: string[] = [];
  const pending = new Map<string, string>();
  const callKinds = new Map<string, string>();
  const onMessage = (m: { id?: number | string; method?: string; params?: unknown; result?: unknown; error?: unknown }) => {
    if (m.method) {
      if (m.id !== undefined) pending.set(String(m.id), m.method);
      problems.push(...checkMessage(shapes, m.method, "params", m.params));
      const p = m.params as { id?: string; kind?: string; result?: unknown } | undefined;
      if (m.method === "emacs/call" && p?.id) callKinds.set(p.id, String(p.kind));
      if (m.method === "emacs/reply" && p?.id && "result" in p && callKinds.has(p.id)) {
        problems.push(...checkMessage(shapes, `emacs/call:${callKinds.get(p.id)}`, "result", p.result));
      }
    } else if (m.id !== undefined && "result" in m) {
      const method = pending.get(String(m.id));
      if (method) problems.push(...checkMessage(shapes, method, "result", m.result));
    }
  };
  for (const stream of [up, down]) {
    let buffer = Buffer.alloc(0);
    // What is written is read here too, without taking it from the connection's reader.
    const write = stream.write.bind(stream) as (chunk: unknown, ...rest: unknown[]) => boolean;
    stream.write = ((chunk: unknown, ...rest: unknown[]) => {
      take(typeof chunk === "string" ? Buffer.from(chunk, "utf8") : Buffer.from(chunk as Uint8Array));
      return write(chunk, ...rest);
    }) as typeof stream.write;
    function take(chunk: Buffer): void {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        const end = buffer.indexOf("\r\n\r\n");
        if (end < 0) return;
        const length = Number(/Content-Length: *(\d+)/i.exec(buffer.subarray(0, end).toString("ascii"))?.[1]);
        if (!(buffer.length >= end + 4 + length)) return;
        const body = buffer.subarray(end + 4, end + 4 + length).toString("utf8");
        buffer = buffer.subarray(end + 4 + length);
        try {
          onMessage(JSON.parse(body));
        } catch {
          problems.push(`not JSON: ${body.slice(0, 80)}`);
        }
      }
    }
  }
  return problems;
}

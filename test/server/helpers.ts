// Shared test helpers: node-runtime test tools and an in-memory JSON-RPC pair.

import { PassThrough } from "node:stream";
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

/** Two connected JSON-RPC endpoints over in-memory streams; the server's end writes as the bundled server does. */
export function connectionPair(): { client: MessageConnection; serverSide: MessageConnection; dispose(): void } {
  const up = new PassThrough();
  const down = new PassThrough();
  const client = createMessageConnection(new StreamMessageReader(down), new StreamMessageWriter(up));
  const serverSide = createMessageConnection(new StreamMessageReader(up), new FramedMessageWriter(down));
  return {
    client,
    serverSide,
    dispose() {
      client.dispose();
      serverSide.dispose();
      up.destroy();
      down.destroy();
    },
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

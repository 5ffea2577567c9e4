// `sly-agent-q-server --mcp-stdio`: for MCP clients that only speak stdio. Reads the URL and token of
// the running server from its state file and forwards tools/list and tools/call to it, so every call
// is still decided (and approved) in Emacs.

import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { startDone } from "../start-done.js";
import { SERVER_NAME, SERVER_VERSION } from "../version.js";
import type { McpState } from "./serve.js";

/** Where Emacs writes the state file unless told otherwise (sly-agent-q-mcp-state-file's default). */
export function defaultStateFile(env: NodeJS.ProcessEnv = process.env): string {
  const state = env.XDG_STATE_HOME && env.XDG_STATE_HOME.startsWith("/") ? env.XDG_STATE_HOME : join(homedir(), ".local", "state");
  return join(state, "sly-agent-q", "mcp.json");
}

function readState(file: string): McpState {
  let state: Partial<McpState>;
  try {
    state = JSON.parse(readFileSync(file, "utf8")) as Partial<McpState>;
  } catch (err) {
    throw new Error(`cannot read ${file} (is the MCP server started? M-x sly-agent-q-mcp-start): ${(err as Error).message}`);
  }
  if (typeof state.url !== "string" || typeof state.token !== "string") throw new Error(`${file} has no url and token.`);
  return state as McpState;
}

export async function runStdioShim(stateFile: string = process.env.SLY_AGENT_Q_MCP_STATE || defaultStateFile()): Promise<void> {
  const state = readState(stateFile);
  const shim = new Server({ name: SERVER_NAME, version: SERVER_VERSION }, { capabilities: { tools: {} } });
  let upstream: Promise<Client> | undefined;
  let http: StreamableHTTPClientTransport | undefined;
  let ending = false;
  // Connected once the client said who it is, so that Emacs's approvals name it.
  const remote = (): Promise<Client> =>
    (upstream ??= (async () => {
      const client = new Client({ name: shim.getClientVersion()?.name ?? "stdio MCP client", version: shim.getClientVersion()?.version ?? "" });
      http = new StreamableHTTPClientTransport(new URL(state.url), { requestInit: { headers: { Authorization: `Bearer ${state.token}` } } });
      await client.connect(http);
      client.onclose = () => {
        if (!ending) process.exit(0);
      };
      return client;
    })());
  // When its client goes (stdin ends, a signal), the shim ends its HTTP session: the server frees it
  // now instead of holding it until its idle expiry (a session per shim a client killed piled up to
  // the cap). Best effort, bounded: the shim exits within a couple of seconds whatever the server does.
  const end = async (code: number): Promise<void> => {
    if (ending) return;
    ending = true;
    setTimeout(() => process.exit(code), 2000).unref();
    try {
      const client = await upstream?.catch(() => undefined);
      await http?.terminateSession().catch(() => undefined);
      await client?.close().catch(() => undefined);
    } finally {
      process.exit(code);
    }
  };
  process.stdin.once("end", () => void end(0));
  for (const [signal, code] of [["SIGTERM", 143], ["SIGINT", 130], ["SIGHUP", 129]] as const) process.once(signal, () => void end(code));
  shim.setRequestHandler(ListToolsRequestSchema, async () => {
    const tools = await (await remote()).listTools();
    // The code cache written before the answer: an MCP client may kill the shim as soon as it has it.
    startDone(true);
    return tools;
  });
  shim.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    // Approvals may take the user a while: no request timeout of the SDK's own.
    return (await (await remote()).callTool(req.params, undefined, { signal: extra.signal, timeout: 24 * 3600_000 })) as CallToolResult;
  });
  const transport = new StdioServerTransport();
  transport.onclose = () => void end(0);
  await shim.connect(transport);
}

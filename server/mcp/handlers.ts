// The MCP requests Emacs sends (mcp/start, mcp/stop, mcp/clientConfigure): added to the agent server
// the way the chat's are. The MCP SDK is loaded by the first of them, not at start: most sessions
// never use MCP, and evaluating the SDK (its zod schemas, its HTTP server) was a large part of a start.

import { Requests, type McpClientConfigureParams, type McpClientConfigureResult, type McpStartParams, type McpStartResult } from "../protocol.js";
import type { AgentServer } from "../rpc/server.js";
import type { McpClientManager } from "./client.js";
import type { McpHttpService } from "./serve.js";

export interface McpHandlers {
  /** At process exit: removes the state file of a server that was started. */
  stopSync(): void;
}

export function registerMcpHandlers(server: AgentServer): McpHandlers {
  let started: McpHttpService | undefined;
  let service: Promise<McpHttpService> | undefined;
  let clients: Promise<McpClientManager> | undefined;
  const theService = () => (service ??= import("./serve.js").then((m) => (started = new m.McpHttpService(server))));
  const theClients = () => (clients ??= import("./client.js").then((m) => new m.McpClientManager(server)));
  server.addRequest(Requests.mcpStart, async (params: McpStartParams): Promise<McpStartResult> => (await theService()).start(params));
  // Nothing to stop when no mcp/start ever came.
  server.addRequest(Requests.mcpStop, async () => ({ stopped: service ? await (await service).stop() : false }));
  server.addRequest(Requests.mcpClientConfigure, async (params: McpClientConfigureParams): Promise<McpClientConfigureResult> => (await theClients()).configure(params));
  return { stopSync: () => started?.stopSync() };
}

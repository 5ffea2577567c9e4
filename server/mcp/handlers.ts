// The MCP requests Emacs sends (mcp/start, mcp/stop, mcp/clientConfigure): added to the agent server
// the way the chat's are.

import { Requests, type McpClientConfigureParams, type McpClientConfigureResult, type McpStartParams, type McpStartResult } from "../protocol.js";
import type { AgentServer } from "../rpc/server.js";
import { McpClientManager } from "./client.js";
import { McpHttpService } from "./serve.js";

export function registerMcpHandlers(server: AgentServer): { service: McpHttpService; clients: McpClientManager } {
  const service = new McpHttpService(server);
  const clients = new McpClientManager(server);
  server.addRequest(Requests.mcpStart, (params: McpStartParams): Promise<McpStartResult> => service.start(params));
  server.addRequest(Requests.mcpStop, async () => ({ stopped: await service.stop() }));
  server.addRequest(Requests.mcpClientConfigure, (params: McpClientConfigureParams): Promise<McpClientConfigureResult> => clients.configure(params));
  return { service, clients };
}

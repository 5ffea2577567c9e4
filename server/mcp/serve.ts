// The registry served over MCP: Streamable HTTP on 127.0.0.1 with a random bearer token.
// Every call goes through the agent's own executor and policy (safe runs, cautious is audited,
// dangerous asks in Emacs naming the MCP client and is denied when nobody answers in time). What may
// connect: only a request to the loopback interface, with a loopback Host (and Origin, when sent:
// DNS rebinding), and the token. The URL and token go to a file only the user can read.

import { randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import { chmod, mkdir, rename, rm, writeFile } from "node:fs/promises";
import { rmSync } from "node:fs";
import { dirname } from "node:path";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult, type Tool as McpTool } from "@modelcontextprotocol/sdk/types.js";
import { registerSecret } from "../log.js";
import { askApproval } from "../tools/approval.js";
import { ServerNotifications, type McpCallParams, type McpStartParams, type McpStartResult } from "../protocol.js";
import type { AgentServer } from "../rpc/server.js";
import type { ApprovalDecision, ApprovalFn, ToolResult } from "../tools/executor.js";
import { describeForModel, schemaForModel } from "../tools/registry.js";
import { printableName } from "../text.js";
import { SERVER_NAME, SERVER_VERSION } from "../version.js";

const DEFAULT_APPROVAL_TIMEOUT_MS = 60_000;
/** Sessions open at once, and how long one may sit unused: each holds an MCP server and its
 *  transport (about 100 KB), so a client that opens them and never closes them is bounded. */
export const DEFAULT_MAX_SESSIONS = 16;
export const DEFAULT_SESSION_IDLE_TIMEOUT_MS = 30 * 60_000;
const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);

/** The contents of the state file. */
export interface McpState {
  url: string;
  token: string;
  pid: number;
}

export class McpHttpService {
  private http: HttpServer | undefined;
  private token = "";
  private port = 0;
  private stateFile = "";
  private approvalTimeoutMs = DEFAULT_APPROVAL_TIMEOUT_MS;
  private maxSessions = DEFAULT_MAX_SESSIONS;
  private idleTimeoutMs = DEFAULT_SESSION_IDLE_TIMEOUT_MS;
  /** Open sessions: LASTUSED, when a request last ended; ACTIVE, requests still being answered
   *  (a call waiting for approval, a client's open event stream), during which it never expires. */
  private readonly sessions = new Map<string, { transport: StreamableHTTPServerTransport; mcp: Server; lastUsed: number; active: number }>();
  /** New sessions being set up (their initialize not answered yet): counted against the cap. */
  private opening = 0;
  private sweeper: NodeJS.Timeout | undefined;
  /** "Always allow" answers, per MCP client: never shared with the chat's or another client's. */
  private readonly allowed = new Map<string, Set<string>>();
  private nextCall = 1;

  constructor(private readonly agent: AgentServer) {}

  get running(): boolean {
    return this.http !== undefined;
  }

  async start(params: McpStartParams): Promise<McpStartResult> {
    if (typeof params.stateFile !== "string" || params.stateFile === "") throw new Error("mcp/start needs a stateFile.");
    if (this.http) await this.stop();
    this.approvalTimeoutMs = params.approvalTimeoutMs && params.approvalTimeoutMs > 0 ? params.approvalTimeoutMs : DEFAULT_APPROVAL_TIMEOUT_MS;
    this.maxSessions = Number.isInteger(params.maxSessions) && params.maxSessions! > 0 ? params.maxSessions! : DEFAULT_MAX_SESSIONS;
    this.idleTimeoutMs = params.sessionIdleTimeoutMs && params.sessionIdleTimeoutMs > 0 ? params.sessionIdleTimeoutMs : DEFAULT_SESSION_IDLE_TIMEOUT_MS;
    this.token = randomBytes(32).toString("base64url");
    registerSecret(this.token, "mcpToken");
    const http = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      http.once("error", reject);
      // Loopback only: another interface never sees the port.
      http.listen(params.port ?? 0, "127.0.0.1", () => resolve());
    });
    this.http = http;
    this.port = (http.address() as { port: number }).port;
    // Not keeping the process alive: it only closes what is idle.
    this.sweeper = setInterval(() => this.expireIdle(), Math.max(50, Math.min(this.idleTimeoutMs / 2, 60_000)));
    this.sweeper.unref();
    this.stateFile = params.stateFile;
    const url = `http://127.0.0.1:${this.port}/mcp`;
    await writePrivate(this.stateFile, JSON.stringify({ url, token: this.token, pid: process.pid } satisfies McpState, null, 2) + "\n");
    this.agent.logger.info(`MCP: serving on ${url}`);
    return { url, port: this.port, stateFile: this.stateFile };
  }

  async stop(): Promise<boolean> {
    const http = this.http;
    if (!http) return false;
    this.http = undefined;
    clearInterval(this.sweeper);
    this.sweeper = undefined;
    const open = [...this.sessions.values()];
    this.sessions.clear();
    for (const { transport } of open) await transport.close().catch(() => undefined);
    http.closeAllConnections();
    await new Promise<void>((resolve) => http.close(() => resolve()));
    await rm(this.stateFile, { force: true }).catch(() => undefined);
    return true;
  }

  /** At process exit: the state file must not point at a server that is gone. */
  stopSync(): void {
    if (this.stateFile) rmSync(this.stateFile, { force: true });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const refusal = this.refusal(req);
    if (refusal) {
      this.agent.logger.warn(`MCP: refused a request: ${refusal.message}`);
      res.writeHead(refusal.status, { "content-type": "application/json", ...(refusal.status === 401 ? { "www-authenticate": "Bearer" } : {}) });
      res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: refusal.message }, id: null }));
      return;
    }
    try {
      const sid = req.headers["mcp-session-id"];
      const existing = typeof sid === "string" ? this.sessions.get(sid) : undefined;
      if (existing) {
        existing.active++;
        try {
          await existing.transport.handleRequest(req, res);
        } finally {
          existing.active--;
          existing.lastUsed = Date.now();
        }
        return;
      }
      if (typeof sid === "string") {
        res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Unknown MCP session." }, id: null }));
        return;
      }
      // A new session (the SDK answers anything but initialize here with an error), within the cap:
      // the longest unused session is closed for it (a client that went without closing its own, as
      // every killed stdio shim does; a client told 404 for it starts a new session, as MCP says);
      // refused only while every session answers a request.
      this.expireIdle();
      if (this.sessions.size + this.opening >= this.maxSessions) this.closeLongestUnused();
      if (this.sessions.size + this.opening >= this.maxSessions) {
        const message = `This MCP server already has ${this.maxSessions} open sessions, its maximum (sly-agent-q-mcp-max-sessions), each answering a request. Try again when one is done.`;
        this.agent.logger.warn(`MCP: refused a new session: ${this.maxSessions} are open.`);
        res.writeHead(503, { "content-type": "application/json", "retry-after": "60" }).end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message }, id: null }));
        return;
      }
      const mcp = this.makeServer();
      const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => void this.sessions.set(id, { transport, mcp, lastUsed: Date.now(), active: 0 }),
      });
      transport.onclose = () => {
        // Still listed: not closed here (closeSession, stop) but by its client's DELETE.
        const id = transport.sessionId;
        if (id && this.sessions.delete(id)) this.agent.logger.info(`MCP: session ${id.slice(0, 8)}… ended by its client.`);
      };
      this.opening++;
      try {
        await mcp.connect(transport);
        await transport.handleRequest(req, res);
      } finally {
        this.opening--;
      }
      // An initialize that made no session (refused by the SDK) leaves nothing open.
      if (!transport.sessionId || !this.sessions.has(transport.sessionId)) await mcp.close().catch(() => undefined);
    } catch (err) {
      this.agent.logger.error(`MCP: request failed: ${(err as Error)?.stack ?? String(err)}`);
      if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32603, message: "Internal error" }, id: null }));
    }
  }

  /** Closes the session unused for the longest time with no request being answered, if there is one. */
  private closeLongestUnused(): void {
    let oldest: [string, { transport: StreamableHTTPServerTransport; lastUsed: number }] | undefined;
    for (const entry of this.sessions) if (entry[1].active === 0 && (!oldest || entry[1].lastUsed < oldest[1].lastUsed)) oldest = entry;
    if (oldest) this.closeSession(oldest[0], oldest[1].transport, `the longest unused, for a new one (${this.maxSessions} at most)`);
  }

  /** Closes the sessions no request has used for the idle timeout (none with a request still being answered). */
  private expireIdle(): void {
    const before = Date.now() - this.idleTimeoutMs;
    for (const [id, s] of this.sessions) {
      if (s.active > 0 || s.lastUsed > before) continue;
      this.closeSession(id, s.transport, `unused for ${Math.round(this.idleTimeoutMs / 1000)} s`);
    }
  }

  /** Forgets session ID and closes its TRANSPORT (a later request naming it is told 404), logging WHY. */
  private closeSession(id: string, transport: StreamableHTTPServerTransport, why: string): void {
    this.sessions.delete(id);
    this.agent.logger.info(`MCP: closed session ${id.slice(0, 8)}…, ${why}.`);
    void transport.close().catch(() => undefined);
  }

  /** Why REQ is refused, or undefined. */
  private refusal(req: IncomingMessage): { status: number; message: string } | undefined {
    const local = req.socket.localAddress ?? "";
    if (local !== "127.0.0.1" && local !== "::ffff:127.0.0.1") return { status: 403, message: "Only loopback connections are served." };
    const host = req.headers.host ?? "";
    if (!isLoopbackAuthority(host, this.port)) return { status: 403, message: `Host ${JSON.stringify(host.slice(0, 100))} is not this loopback server.` };
    const origin = req.headers.origin;
    if (origin !== undefined && !isLoopbackOrigin(origin)) return { status: 403, message: `Origin ${JSON.stringify(origin.slice(0, 100))} is not loopback.` };
    const auth = req.headers.authorization ?? "";
    const m = /^Bearer\s+(\S+)$/i.exec(auth);
    if (!m) return { status: 401, message: "A bearer token is required." };
    const given = Buffer.from(m[1]!);
    const want = Buffer.from(this.token);
    if (given.length !== want.length || !timingSafeEqual(given, want)) return { status: 401, message: "The bearer token is wrong." };
    return undefined;
  }

  private makeServer(): Server {
    const mcp = new Server({ name: SERVER_NAME, version: SERVER_VERSION }, { capabilities: { tools: {} } });
    mcp.setRequestHandler(ListToolsRequestSchema, () => ({ tools: this.listTools() }));
    mcp.setRequestHandler(CallToolRequestSchema, async (request, extra): Promise<CallToolResult> => {
      // The name is the client's own word: printable and bounded before anyone shows it or keys on it.
      const client = printableName(mcp.getClientVersion()?.name);
      const result = await this.call(client, request.params.name, request.params.arguments ?? {}, extra.signal);
      return { content: [{ type: "text", text: result.success ? result.content : result.error ?? result.content }], isError: !result.success };
    });
    return mcp;
  }

  /** The offered tools (the policy in force), minus tools of MCP servers we use ourselves. */
  private listTools(): McpTool[] {
    const policy = this.agent.executor.policy;
    return policy
      .offered()
      .filter((t) => !t.categories.includes("mcp"))
      .map((t) => {
        const schema = schemaForModel(t);
        return {
          name: t.name,
          description: describeForModel(t, policy.effectiveSafety(t)),
          inputSchema: { ...schema, properties: schema.properties as unknown as Record<string, object> },
          annotations: { readOnlyHint: policy.effectiveSafety(t) === "safe", destructiveHint: policy.effectiveSafety(t) === "dangerous" },
        };
      });
  }

  /** Runs one MCP call through the agent's executor, under its policy, with MCP's own approval. */
  async call(client: string, name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<ToolResult> {
    const id = `mcp-${this.nextCall++}`;
    const tool = this.agent.registry.get(name);
    const notify = (p: McpCallParams) => this.agent.notify(ServerNotifications.mcpCall, p);
    notify({ phase: "start", id, client, tool: name, arguments: args });
    let result: ToolResult;
    if (tool?.categories.includes("mcp")) {
      // Not re-exported: a client of ours would otherwise run another server's tools under our name.
      result = { id, name, success: false, content: `Error: ${name} is not served over MCP.`, error: `${name} is not served over MCP.`, metadata: { executionTimeMs: 0, safetyLevel: "unknown", approved: false } };
    } else {
      const executor = this.agent.executor.withPolicy(() => this.agent.executor.policy, this.approve(client));
      let allowed = this.allowed.get(client);
      if (!allowed) this.allowed.set(client, (allowed = new Set()));
      executor.sessionAllowed = allowed;
      result = await executor.execute({ id, name, arguments: args }, { signal, tags: { mcpClient: client } });
    }
    notify({ phase: "done", id, client, tool: name, success: result.success, safetyLevel: result.metadata.safetyLevel, summary: result.content.slice(0, 300) });
    return result;
  }

  private approve(client: string): ApprovalFn {
    return async (request, signal): Promise<ApprovalDecision> => {
      if (!this.agent.capabilities.approvals) return { decision: "denied", reason: "no approval interface is connected" };
      const timeout = AbortSignal.timeout(this.approvalTimeoutMs);
      try {
        return await askApproval(request, { client }, (params) => this.agent.bridge.call("approval", params, { signal: AbortSignal.any([signal, timeout]) }));
      } catch (err) {
        if (timeout.aborted && !signal.aborted) {
          return { decision: "denied", reason: `nobody answered in Emacs within ${Math.round(this.approvalTimeoutMs / 1000)} s` };
        }
        throw err;
      }
    };
  }
}

function isLoopbackAuthority(host: string, port: number): boolean {
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(host.trim().toLowerCase());
  if (!m) return false;
  if (!LOOPBACK_HOSTS.has(m[1]!)) return false;
  return m[2] === undefined || Number(m[2]) === port;
}

function isLoopbackOrigin(origin: string): boolean {
  try {
    const u = new URL(origin);
    return (u.protocol === "http:" || u.protocol === "https:") && LOOPBACK_HOSTS.has(u.hostname.toLowerCase());
  } catch {
    return false;
  }
}

/** Writes FILE readable by the user alone, whole or not at all. */
async function writePrivate(file: string, text: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, text, { mode: 0o600 });
  await chmod(tmp, 0o600);
  await rename(tmp, file);
}

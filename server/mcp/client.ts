// MCP servers our agent uses: each configured server (the .mcp.json format, stdio or HTTP)
// is connected, and its tools are registered beside ours as mcp__SERVER__TOOL, at the trust level the
// user gave that server (default dangerous: every call asks). They run through the same executor and
// policy as every other tool. A server that fails to start or dies is reported, never fatal; a call
// cut by a crash fails with a message and the next call starts the server again.

import { readConfinedFile } from "../agent/project-files.js";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { Tool as McpTool } from "@modelcontextprotocol/sdk/types.js";
import { ServerNotifications, type McpClientConfigureParams, type McpClientConfigureResult, type McpServerConfig, type McpServerStatusParams } from "../protocol.js";
import { registerEnvSecrets, registerSecret } from "../log.js";
import type { AgentServer } from "../rpc/server.js";
import { defineTool, SAFETY_LEVELS, ToolError, type ParamSpec, type ParamType, type SafetyLevel, type Tool } from "../tools/tool.js";
import { cutText, escapeUnsafe, printableName } from "../text.js";
import { SERVER_NAME, SERVER_VERSION } from "../version.js";

const MAX_NAME = 64; // the providers' limit on a tool name
const MAX_SERVERS_FILE_BYTES = 1_000_000;
// What a server says about its tools goes to the model with every request: a description of a megabyte
// would cost that much each time, and its control characters would reach whoever shows it.
const MAX_DESCRIPTION = 2_000;
const MAX_PARAM_DESCRIPTION = 500;
// What a dying server said on stderr, as reported: its last lines, bounded.
const MAX_STDERR_REPORT = 400;
// The SDK's stdio transport reads at most this much in one message (its buffer grows by copying: a larger
// limit would cost time quadratic in the answer's size) and closes the connection on a larger one.
const MAX_MESSAGE_MB = 10;
const PARAM_TYPES: readonly ParamType[] = ["string", "boolean", "number", "integer", "object", "array"];

/** NAME lowered to the tool-name pattern's alphabet. */
export function sanitize(name: string): string {
  const s = name.toLowerCase().replace(/[^a-z0-9_]+/g, "_").replace(/^_+|_+$/g, "");
  return s === "" ? "x" : s;
}

export function mcpToolName(server: string, tool: string): string {
  return `mcp__${sanitize(server)}__${sanitize(tool)}`.slice(0, MAX_NAME);
}

class Connection {
  client: Client | undefined;
  tools: Tool[] = [];
  /** Set when the server sent a message over the transport's size limit (which then closes the connection). */
  oversized = false;

  private connecting: Promise<Client> | undefined;

  constructor(
    readonly name: string,
    readonly config: McpServerConfig,
    private readonly onDeath: (message: string) => void,
    private readonly timeoutMs: number,
  ) {}

  /** The connected client, starting the server when it is not running. */
  ensure(): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    this.connecting ??= this.connect().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  private async connect(): Promise<Client> {
    const client = new Client({ name: SERVER_NAME, version: SERVER_VERSION });
    const transport = makeTransport(this.name, this.config);
    // Only the tail is kept, however much the server writes.
    let stderr = "";
    this.oversized = false;
    client.onerror = (err) => {
      if (/exceeded maximum size/.test(err?.message ?? "")) this.oversized = true;
    };

    if (transport instanceof StdioClientTransport) transport.stderr?.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    try {
      // A server that never answers initialize must not hold the configuration up.
      await client.connect(transport, { timeout: this.timeoutMs });
    } catch (err) {
      await client.close().catch(() => undefined);
      throw err;
    }
    client.onclose = () => {
      if (this.client !== client) return;
      this.client = undefined;
      const said = escapeUnsafe(stderr.trim().split("\n").slice(-3).join(" | "));
      const tail = said.length > MAX_STDERR_REPORT ? `…${said.slice(-MAX_STDERR_REPORT)}` : said;
      this.onDeath(`MCP server ${printableName(this.name, 64, "?")} exited${tail ? `: ${tail}` : "."}`);
    };
    this.client = client;
    return client;
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    await c?.close().catch(() => undefined);
  }
}

function makeTransport(name: string, config: McpServerConfig): Transport {
  if (config.url !== undefined || config.type === "http" || config.type === "streamable-http") {
    if (typeof config.url !== "string") throw new Error(`MCP server ${name}: an HTTP server needs a url.`);
    return new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers: config.headers ?? {} } });
  }
  if (typeof config.command !== "string" || config.command === "") throw new Error(`MCP server ${name}: needs a command (stdio) or a url (HTTP).`);
  return new StdioClientTransport({
    command: config.command,
    args: config.args ?? [],
    env: { ...getDefaultEnvironment(), ...(config.env ?? {}) },
    cwd: config.cwd,
    stderr: "pipe",
  });
}

export class McpClientManager {
  private readonly connections = new Map<string, Connection>();

  constructor(private readonly agent: AgentServer) {}

  /** Replaces the configured servers: the old ones stop and their tools go; the new ones connect. */
  async configure(params: McpClientConfigureParams): Promise<McpClientConfigureResult> {
    await this.closeAll();
    const out: McpClientConfigureResult["servers"] = [];
    const servers: Record<string, McpServerConfig> = {};
    for (const file of params.files ?? []) {
      try {
        // Confined like the project's files (no /proc, device or FIFO), and its text never quoted in
        // an error: a file linked to the environment would show the start of it.
        const read = readConfinedFile(file, MAX_SERVERS_FILE_BYTES);
        if (read.kind !== "read") throw new Error(read.kind === "absent" ? "it does not exist" : `${read.reason}`);
        if (read.truncated) throw new Error(`it is larger than ${MAX_SERVERS_FILE_BYTES} bytes`);
        let parsed: { mcpServers?: Record<string, McpServerConfig> };
        try {
          parsed = JSON.parse(read.text) as typeof parsed;
        } catch {
          throw new Error("it is not valid JSON");
        }
        Object.assign(servers, parsed?.mcpServers ?? {});
      } catch (err) {
        const error = `cannot read MCP servers from ${file}: ${(err as Error)?.message ?? String(err)}`;
        this.status({ name: file, status: "failed", message: error });
        out.push({ name: file, ok: false, tools: [], error });
      }
    }
    Object.assign(servers, params.servers ?? {});
    const levels = params.levels ?? {};
    for (const [name, level] of Object.entries(levels)) {
      if (!SAFETY_LEVELS.includes(level)) throw new Error(`MCP server ${name}: level must be safe, cautious or dangerous, not ${String(level)}.`);
    }
    for (const [name, config] of Object.entries(servers)) {
      registerConfigSecrets(config ?? {});
      const timeout = this.agent.executor.defaultTimeoutMs;
      const conn = new Connection(name, config ?? {}, (message) => this.status({ name, status: "exited", message }), timeout);
      this.connections.set(name, conn);
      try {
        const client = await conn.ensure();
        const listed = await client.listTools(undefined, { timeout });
        const notes: string[] = [];
        conn.tools = this.register(conn, listed.tools, levels[name] ?? "dangerous", notes);
        const names = conn.tools.map((t) => t.name);
        // Renamed and refused tools are said where the user sees the server's status.
        this.status({ name, status: "connected", tools: names, ...(notes.length ? { message: notes.join("; ") } : {}) });
        out.push({ name, ok: true, tools: names, ...(notes.length ? { notes } : {}) });
      } catch (err) {
        const error = `MCP server ${name} could not start: ${(err as Error)?.message ?? String(err)}`;
        this.agent.logger.warn(error);
        await conn.close();
        this.status({ name, status: "failed", message: error });
        out.push({ name, ok: false, tools: [], error });
      }
    }
    return { servers: out };
  }

  async closeAll(): Promise<void> {
    for (const conn of this.connections.values()) {
      for (const t of conn.tools) this.agent.registry.unregister(t.name);
      await conn.close();
    }
    this.connections.clear();
  }

  private status(p: McpServerStatusParams): void {
    this.agent.notify(ServerNotifications.mcpServerStatus, p);
  }

  /** Registers the server's TOOLS; what is renamed or refused is pushed to NOTES, as data. */
  private register(conn: Connection, tools: McpTool[], level: SafetyLevel, notes: string[]): Tool[] {
    const registered: Tool[] = [];
    for (const t of tools) {
      const shown = `"${printableName(String(t.name), 80, "")}"`;
      const name = mcpToolName(conn.name, t.name);
      if (this.agent.registry.get(name)) {
        const note = `tool ${shown} is refused: its name ${name} is taken`;
        this.agent.logger.warn(`MCP server ${conn.name}: ${note}.`);
        notes.push(note);
        continue;
      }
      const remote = t.name;
      let tool: Tool;
      try {
        tool = defineTool({
          name,
          description: `${cut(escapeUnsafe((t.description ?? "").trim()), MAX_DESCRIPTION) || `Tool ${name}`} (from the MCP server ${printableName(conn.name, 64, "?")})`,
          parameters: toParams(t.inputSchema),
          required: (t.inputSchema.required ?? []).filter((r) => Object.prototype.hasOwnProperty.call(t.inputSchema.properties ?? {}, r) && /^[a-z][a-z0-9_]*$/.test(r)),
          safety: level,
          // Whatever level the user gave the server, nothing says its tools only read.
          effect: "a tool of an MCP server, whose effects are not known",
          categories: ["mcp"],
          runtime: "node",
          handler: async (args, ctx) => {
            let client: Client;
            try {
              client = await conn.ensure();
            } catch (err) {
              throw new ToolError(`MCP server ${conn.name} could not start: ${(err as Error)?.message ?? String(err)}`);
            }
            try {
              const r = await client.callTool({ name: remote, arguments: args }, undefined, { signal: ctx.signal, timeout: ctx.timeoutMs });
              const text = textOf(r.content);
              if (r.isError) throw new ToolError(`${remote} on MCP server ${conn.name} failed: ${text || "no message"}`);
              return text;
            } catch (err) {
              if (err instanceof ToolError) throw err;
              if (conn.oversized) {
                throw new ToolError(`${remote} on MCP server ${conn.name} failed: its answer was larger than ${MAX_MESSAGE_MB} MB, the most an MCP message may be here; the server starts again at the next call.`);
              }
              throw new ToolError(`${remote} on MCP server ${conn.name} failed: ${(err as Error)?.message ?? String(err)}`);
            }
          },
        });
      } catch (err) {
        const note = `tool ${shown} is refused: ${escapeUnsafe((err as Error).message)}`;
        this.agent.logger.warn(`MCP server ${conn.name}: ${note}`);
        notes.push(note);
        continue;
      }
      if (`mcp__${sanitize(conn.name)}__${remote}` !== name) notes.push(`tool ${shown} is offered as ${name}`);
      registered.push(this.agent.registry.register(tool));
    }
    return registered;
  }
}

/** A server's secret-looking env values and its header values are redacted like the API key. */
function registerConfigSecrets(config: McpServerConfig): void {
  if (config.env && typeof config.env === "object") registerEnvSecrets(config.env);
  for (const [name, value] of Object.entries(config.headers ?? {})) {
    if (typeof value === "string") registerSecret(value.replace(/^(Bearer|Basic)\s+/i, ""), name);
  }
}

/** The parameters we can describe to the model; a name outside the pattern is left out. */
function toParams(schema: McpTool["inputSchema"]): Record<string, ParamSpec> {
  const out: Record<string, ParamSpec> = {};
  for (const [k, v] of Object.entries(schema.properties ?? {})) {
    if (!/^[a-z][a-z0-9_]*$/.test(k)) continue;
    const p = (v ?? {}) as { type?: unknown; description?: unknown; items?: { type?: unknown }; enum?: unknown };
    const raw = Array.isArray(p.type) ? p.type.find((x) => x !== "null") : p.type;
    const type: ParamType = PARAM_TYPES.includes(raw as ParamType) ? (raw as ParamType) : "string";
    const spec: ParamSpec = { type, description: typeof p.description === "string" && p.description.trim() ? cut(escapeUnsafe(p.description), MAX_PARAM_DESCRIPTION) : k };
    if (type === "array") spec.items = { type: PARAM_TYPES.includes(p.items?.type as ParamType) ? (p.items!.type as ParamType) : "string" };
    if (Array.isArray(p.enum) && p.enum.every((e) => typeof e === "string" || typeof e === "number")) spec.enum = p.enum as (string | number)[];
    out[k] = spec;
  }
  return out;
}

function textOf(content: unknown): string {
  if (!Array.isArray(content)) return "";
  return content
    .map((c: { type?: string; text?: string }) => (c?.type === "text" && typeof c.text === "string" ? c.text : c?.type ? `[${c.type} content]` : ""))
    .filter(Boolean)
    .join("\n");
}

/** TEXT cut to MAX characters, saying how many more there were. */
function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  const kept = cutText(text, max);
  return `${kept}… [cut: ${text.length - kept.length} more characters]`;
}

// The JSON-RPC server: one per connection. It owns the configuration, the registry, the executor and
// the bridge to Emacs, and answers the protocol's requests (protocol.ts). Chat methods are added by
// server/agent/ through addRequest/addNotification.

// node:fs's promises, read where used: node:fs/promises (with readline and the watchers) loaded at the
// first use, not at every server start.
import { promises as fsp } from "node:fs";
import {
  ResponseError,
  ErrorCodes as RpcErrorCodes,
  type MessageConnection,
  type NotificationType,
  type RequestType,
  type RequestType0,
} from "vscode-jsonrpc/node";
import { Logger, redact, registerEnvSecrets, registerSecret } from "../log.js";
import {
  ClientNotifications,
  ErrorCodes,
  PROTOCOL_VERSION,
  Requests,
  ServerNotifications,
  type ApprovalNeededParams,
  type ClientCapabilities,
  type Configuration,
  type EditorContext,
  type EmacsReplyParams,
  type InitializeParams,
  type InitializeResult,
  type ModelThinking,
  type ToolInfo,
  type ToolsCallParams,
  type ToolsListParams,
  type ToolsListResult,
  type Change,
  type DiffHunksParams,
  type DiffHunksResult,
} from "../protocol.js";
import { askApproval } from "../tools/approval.js";
import { createDefaultRegistry } from "../tools/catalog/index.js";
import { Executor, type ApprovalDecision, type ApprovalFn, type AuditEntry } from "../tools/executor.js";
import type { ToolRegistry } from "../tools/registry.js";
import { PolicyError, ToolPolicy } from "../tools/policy.js";
import { checkShape, SHAPE_TYPES } from "../protocol-description.js";
import { lispParameters, type Tool } from "../tools/tool.js";
import { EmacsBridge } from "./emacs-bridge.js";
import { SERVER_NAME, SERVER_VERSION } from "../version.js";
import { stripUndefined } from "../text.js";
import { diffHunks, diffTexts } from "../diff.js";
import { modelThinking, thinkingProblems } from "../llm/thinking.js";
import { DEFAULT_MODELS } from "../llm/models.js";
import { PrivateFiles } from "../tools/project/private-files.js";
import { startDone } from "../start-done.js";

export interface ServerOptions {
  registry?: ToolRegistry;
  logger?: Logger;
  /** Called once the client said exit (or the connection closed): the process entry point exits. */
  onExit?: (code: number) => void;
  /** Whose secret-looking variables are redacted from tool results and logs (default process.env). */
  env?: NodeJS.ProcessEnv;
}

export class AgentServer {
  readonly registry: ToolRegistry;
  readonly logger: Logger;
  readonly bridge: EmacsBridge;
  readonly executor: Executor;
  configuration: Configuration = {};
  context: EditorContext = {};
  /** The user's rule for files of credentials, from the configuration. */
  private privateFiles = new PrivateFiles();
  capabilities: ClientCapabilities = {};
  initialized = false;
  private shutdownRequested = false;
  private readonly disposers: { dispose(): void }[] = [];

  constructor(
    readonly connection: MessageConnection,
    private readonly options: ServerOptions = {},
  ) {
    this.registry = options.registry ?? createDefaultRegistry();
    this.logger = options.logger ?? new Logger();
    registerEnvSecrets(options.env ?? process.env);
    // Through notify, so that what goes to Emacs is well-formed there too.
    this.bridge = new EmacsBridge((type, params) => this.notify(type, params));
    this.executor = new Executor({
      registry: this.registry,
      approve: this.approveThroughEmacs,
      audit: (entry) => this.audit(entry),
      context: () => ({
        emacs: this.capabilities.tools || this.capabilities.image ? this.bridge : undefined,
        currentPackage: this.context.currentPackage,
        projectRoot: this.context.projectRoot ?? this.configuration.projectRoot,
        commands: { allowShell: this.configuration.allowShellCommands === true, ...(this.configuration.commandTimeoutMs !== undefined ? { timeoutMs: this.configuration.commandTimeoutMs } : {}) },
        privateFiles: this.privateFiles,
        reportChanges: (callId: string, changes: Change[]) => this.keepChanges(callId, changes),
      }),
    });
    this.registerHandlers();
  }

  /** What tool calls changed, by call id, until the chat that made the call takes it (takeChanges). */
  private readonly changes = new Map<string, Change[]>();

  private keepChanges(callId: string, changes: Change[]): void {
    this.changes.set(callId, changes);
    // Calls that no chat takes (tools/call, MCP) must not pile up.
    for (const old of this.changes.keys()) {
      if (this.changes.size <= MAX_UNTAKEN_CHANGES) break;
      this.changes.delete(old);
    }
  }

  /** What call CALLID changed in files and buffers, if anything; forgotten here once taken. */
  takeChanges(callId: string): Change[] | undefined {
    const changes = this.changes.get(callId);
    this.changes.delete(callId);
    return changes;
  }

  /** Starts reading messages. */
  listen(): void {
    this.connection.listen();
  }

  /** Adds a request handler that requires initialize first and turns any exception into a JSON-RPC error. */
  addRequest<P, R>(type: RequestType<P, R, void> | RequestType0<R, void>, handler: (params: P) => R | Promise<R>): void {
    const method = type.method;
    this.disposers.push(
      this.connection.onRequest(method, async (params: unknown): Promise<unknown> => {
        if (!this.initialized) throw new ResponseError(ErrorCodes.notInitialized, `Call initialize before ${method}.`);
        try {
          return await handler((params ?? {}) as P);
        } catch (err) {
          if (err instanceof ResponseError) throw err;
          this.logger.error(`${method} failed: ${(err as Error)?.stack ?? String(err)}`);
          throw new ResponseError(RpcErrorCodes.InternalError, `${method} failed: ${redact((err as Error)?.message ?? String(err))}`);
        }
      }),
    );
  }

  addNotification<P>(type: NotificationType<P>, handler: (params: P) => void): void {
    const method = type.method;
    this.disposers.push(
      this.connection.onNotification(method, (params: unknown) => {
        try {
          handler((params ?? {}) as P);
        } catch (err) {
          this.logger.error(`${method} handler failed: ${(err as Error)?.stack ?? String(err)}`);
        }
      }),
    );
  }

  /** Sends a notification to Emacs (the framed writer makes every string one Emacs can read). */
  notify<P>(type: NotificationType<P>, params: P): void {
    void this.connection.sendNotification(type.method, params).catch((err: unknown) => {
      this.logger.warn(`could not send ${type.method}: ${String(err)}`);
    });
  }

  /** The tools offered to the model under the current configuration. */
  offeredTools(config: Configuration = this.configuration): Tool[] {
    return this.policyFor(config).offered();
  }

  /**
   * The trust policy of CONFIG: what is offered and what runs, asks or is denied. A turn gets its
   * offered tools and its executor from the same policy. Throws a JSON-RPC invalidConfiguration error.
   */
  policyFor(config: Configuration = this.configuration): ToolPolicy {
    // In the protocol's shape first: a key misspelt or of another type is named, not ignored or thrown on.
    const problems = [...checkShape(SHAPE_TYPES.Configuration, config, "configuration"), ...thinkingProblems(config.thinking)];
    if (problems.length > 0) throw new ResponseError(ErrorCodes.invalidConfiguration, `The configuration was not applied: ${problems.join("; ")}.`);
    try {
      return new ToolPolicy(this.registry, config, (t) => this.runtimeAvailable(t));
    } catch (err) {
      if (err instanceof PolicyError) throw new ResponseError(ErrorCodes.invalidConfiguration, err.message);
      throw err;
    }
  }

  private runtimeAvailable(tool: Tool): boolean {
    // Before a client says what it can do, list everything; afterwards offer only what can run.
    if (!this.initialized) return true;
    if (tool.runtime === "image") return this.capabilities.image !== false;
    if (tool.runtime === "emacs") return this.capabilities.tools !== false;
    return true;
  }

  /** Every tool's parameters that hold Lisp source, by the names the model calls them (aliases too): the
   *  chat shows their values as Lisp, whether the tool is offered now or was in a saved conversation. */
  private lispArguments(): Record<string, string[]> {
    const out: Record<string, string[]> = {};
    for (const tool of this.registry.list({ includeAliases: true })) {
      const names = lispParameters(tool);
      if (names.length) out[tool.name] = names;
    }
    return out;
  }

  /** Whether the configured model can think (the menu says so before its setting is changed). */
  private modelThinking(): ModelThinking {
    const provider = this.configuration.provider === "openai" ? "openai" : "anthropic";
    return modelThinking(provider, this.configuration.model || DEFAULT_MODELS[provider]);
  }

  private registerHandlers(): void {
    const c = this.connection;
    c.onRequest(Requests.initialize, (params: InitializeParams | undefined): InitializeResult => {
      const p = params ?? {};
      this.capabilities = p.capabilities ?? {};
      this.applyConfiguration(p.configuration ?? {});
      this.context = { ...p.context };
      this.initialized = true;
      startDone();
      this.logger.info(`initialized by ${p.clientInfo?.name ?? "an unnamed client"} ${p.clientInfo?.version ?? ""}`.trim());
      return {
        serverInfo: { name: SERVER_NAME, version: SERVER_VERSION },
        protocolVersion: PROTOCOL_VERSION,
        tools: this.offeredTools().map((t) => t.name),
        lispArguments: this.lispArguments(),
        thinking: this.modelThinking(),
      };
    });
    c.onRequest(Requests.shutdown, () => {
      this.shutdownRequested = true;
      this.bridge.close("The server is shutting down.");
      return null;
    });
    c.onNotification(ClientNotifications.exit, () => {
      this.options.onExit?.(this.shutdownRequested ? 0 : 1);
    });
    c.onNotification(ClientNotifications.emacsReply, (params: EmacsReplyParams) => {
      if (!this.bridge.handleReply(params)) this.logger.debug(`dropped a reply nobody waits for: ${JSON.stringify(params?.id)}`);
    });
    c.onNotification(ClientNotifications.contextChange, (params: EditorContext | undefined) => {
      this.context = { ...this.context, ...stripUndefined(params ?? {}) };
    });
    c.onClose(() => {
      this.bridge.close("The connection to Emacs is closed.");
      this.options.onExit?.(this.shutdownRequested ? 0 : 1);
    });
    c.onError(([err]) => {
      this.logger.warn(`protocol error: ${err?.message ?? String(err)}`);
    });

    this.addRequest(Requests.configurationChange, (params) => {
      // The client sends its whole configuration: what it leaves out is no longer in force.
      this.applyConfiguration(params.configuration ?? {});
      return { tools: this.offeredTools().map((t) => t.name), thinking: this.modelThinking() };
    });
    this.addRequest(Requests.toolsList, (params: ToolsListParams): ToolsListResult => {
      const offered = new Set(this.offeredTools().map((t) => t.name));
      const tools = params.all ? this.registry.list({ includeAliases: true }) : this.registry.list({ names: [...offered] });
      return { tools: tools.map((t) => this.toolInfo(t, offered.has(t.name))) };
    });
    this.addRequest(Requests.diffHunks, async (params: DiffHunksParams): Promise<DiffHunksResult> => {
      let texts;
      try {
        texts = await diffTexts(params, params.callId === undefined ? undefined : this.waitingApprovals.get(params.callId));
      } catch (err) {
        throw new ResponseError(RpcErrorCodes.InvalidParams, `diff/hunks: ${(err as Error).message}`);
      }
      return { hunks: diffHunks(texts.old, texts.neu, typeof params.context === "number" ? params.context : 3) };
    });
    this.addRequest(Requests.toolsCall, async (params: ToolsCallParams) => {
      if (typeof params.name !== "string") throw new ResponseError(RpcErrorCodes.InvalidParams, "tools/call needs a tool name.");
      return this.executor.execute({ id: params.id ?? `rpc-${Date.now()}`, name: params.name, arguments: params.arguments ?? {} });
    });
  }

  private toolInfo(t: Tool, offered: boolean): ToolInfo {
    return {
      name: t.name,
      description: t.description,
      safetyLevel: t.safety,
      effectiveSafetyLevel: this.executor.effectiveSafety(t),
      categories: [...t.categories],
      runtime: t.runtime,
      ...(t.implementation ? { implementation: t.implementation } : {}),
      parameters: t.schema.properties,
      required: [...t.required],
      ...(t.aliasOf ? { aliasOf: t.aliasOf } : {}),
      ...(t.argumentNames ? { argumentNames: { ...t.argumentNames } } : {}),
      offered,
    };
  }

  private applyConfiguration(config: Configuration): void {
    // Checked whole before anything changes: a rejected configuration leaves the previous one in force.
    const policy = this.policyFor(config);
    const privateFiles = new PrivateFiles(config.privateFilePatterns, config.privateFilePatternsUntranslated);
    registerSecret(config.apiKey, "apiKey");
    this.configuration = config;
    this.privateFiles = privateFiles;
    if (config.logLevel) this.logger.level = config.logLevel;
    this.executor.configure({
      policy,
      defaultTimeoutMs: config.toolTimeoutMs,
      imageTimeoutMs: config.imageTimeoutMs,
      imageLoadTimeoutMs: config.imageLoadTimeoutMs,
      maxResultChars: config.maxResultChars,
    });
  }

  private readonly approveThroughEmacs: ApprovalFn = async (request, signal): Promise<ApprovalDecision> => {
    if (!this.capabilities.approvals) {
      return { decision: "denied", reason: "no approval interface is connected, so dangerous tools cannot run" };
    }
    const { conversationId, turnId } = request.tags ?? {};
    // The chat shows which call of which turn waits for the user, before the question itself.
    if (conversationId && turnId) {
      this.notify(ServerNotifications.approvalNeeded, { conversationId, turnId, callId: request.callId, name: request.tool.name } satisfies ApprovalNeededParams);
    }
    // No timeout: a user may take their time. The turn's own limits and cancellation apply.
    // While it waits, its arguments give Emacs's diff/hunks the new text of an edit without sending it back.
    this.waitingApprovals.set(request.callId, request.arguments);
    try {
      return await askApproval(request, { conversationId, turnId }, (params) => this.bridge.call("approval", params, { signal }));
    } finally {
      this.waitingApprovals.delete(request.callId);
    }
  };

  /** The arguments of the calls whose approval waits, by call id. */
  private readonly waitingApprovals = new Map<string, Record<string, unknown>>();

  private audit(entry: AuditEntry): void {
    this.logger.info(`audit ${entry.safetyLevel} ${entry.tool} (${entry.decision}) ${redact(JSON.stringify(entry.arguments)).slice(0, 500)}`);
    const file = this.configuration.auditLogFile;
    if (file) {
      fsp.appendFile(file, redact(JSON.stringify(entry)) + "\n").catch((err: unknown) => this.logger.warn(`audit log ${file}: ${String(err)}`));
    }
  }

  dispose(): void {
    this.disposers.forEach((d) => d.dispose());
  }
}

/** Untaken changes kept at most (see keepChanges). */
const MAX_UNTAKEN_CHANGES = 64;

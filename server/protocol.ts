// The JSON-RPC protocol between Emacs (lisp-elisp/) and this server: every method name and message
// shape, in one place. Both ends of the server code (the server itself and its tests' clients) use it.
//
// Framing: Content-Length headers over stdio (what jsonrpc.el's jsonrpc-process-connection speaks).
//
// Emacs 28's jsonrpc.el runs a request handler inside the process filter and replies when it returns,
// so Emacs must never be asked a request it has to wait on. Everything the server needs from Emacs
// that may wait (a buffer tool, an evaluation in the image, a user's approval) is a pair of
// notifications instead: the server sends `emacs/call` with an id, Emacs starts the work
// asynchronously and later sends `emacs/reply` with the same id. `emacs/cancel` tells Emacs the
// server no longer wants an answer (timeout, cancelled turn).

import { NotificationType, NotificationType0, RequestType, RequestType0 } from "vscode-jsonrpc";

export const PROTOCOL_VERSION = 1;

// ---------------------------------------------------------------------------------------------------
// The methods: one typed object per method (the vscode-languageserver-node shape), so that a handler
// or a send with the wrong parameter or result type does not compile; each with its note, what it is
// for. `describeProtocol()` (server/protocol-description.ts, which also holds every message's shape,
// checked against these types) describes them as data, printed by the bundle's --protocol, from which
// `make generate` writes doc/architecture.md's protocol table (scripts/protocol-doc.mjs) and the Elisp
// side's table (lisp-elisp/sly-agent-q-protocol-table.el).

/** TYPE with NOTE, what the method is for: the protocol's description (--protocol) carries it, and the
 *  architecture doc's table shows it, so that it is written here once. */
function documented<T extends object>(type: T, note: string): T & { readonly note: string } {
  return Object.assign(type, { note });
}

/** Emacs -> server requests. */
export const Requests = {
  initialize: documented(new RequestType<InitializeParams, InitializeResult, void>("initialize"), "The client's capabilities, configuration and context; answers the server's version and offered tools."),
  shutdown: documented(new RequestType0<null, void>("shutdown"), "Stop: pending emacs/calls fail; `exit` follows."),
  toolsList: documented(new RequestType<ToolsListParams, ToolsListResult, void>("tools/list"), "The tools offered under the configuration (all of them with `all`), with their effective levels."),
  toolsCall: documented(new RequestType<ToolsCallParams, ToolsCallResult, void>("tools/call"), "Run one tool as the model would, under the same policy (scripting, benchmarks)."),
  configurationChange: documented(new RequestType<ConfigurationChangeParams, ConfigurationChangeResult, void>("configuration/change"), "Replace the whole configuration; a rejected one leaves the previous in force."),
  chatSend: documented(new RequestType<ChatSendParams, ChatSendResult, void>("chat/send"), "Start a turn; answered at once, the turn reports through chat/* notifications."),
  chatCancel: documented(new RequestType<ChatCancelParams, ChatCancelResult, void>("chat/cancel"), "Cancel a running turn (by turn or conversation)."),
  chatTurnStatus: documented(new RequestType<ChatTurnStatusParams, ChatTurnStatusResult, void>("chat/turnStatus"), "Whether a turn still runs: Emacs asks while it waits, so that a turn whose end it never read ends."),
  conversationNew: documented(new RequestType<ConversationNewParams, ConversationNewResult, void>("conversation/new"), "A new conversation, with its own configuration overrides."),
  conversationList: documented(new RequestType0<ConversationListResult, void>("conversation/list"), "The conversations the server holds, their usage and cost."),
  conversationDelete: documented(new RequestType<ConversationDeleteParams, ConversationDeleteResult, void>("conversation/delete"), "Free a conversation (a running turn is cancelled first)."),
  conversationSaved: documented(new RequestType<ConversationSavedParams, ConversationSavedResult, void>("conversation/saved"), "The saved conversations (conversationDirectory) of a project, newest first."),
  conversationResume: documented(new RequestType<ConversationResumeParams, ConversationResumeResult, void>("conversation/resume"), "Open a saved conversation: the server holds it again and returns its whole history to draw."),
  conversationRename: documented(new RequestType<ConversationRenameParams, ConversationRenameResult, void>("conversation/rename"), "Give a saved conversation another title."),
  conversationCompact: documented(new RequestType<ConversationCompactParams, ConversationCompactResult, void>("conversation/compact"), "Replace the older turns, for the model, by a summary it writes (the file and the chat keep them)."),
  conversationTurns: documented(new RequestType<ConversationTurnsParams, ConversationTurnsResult, void>("conversation/turns"), "The turns of a saved conversation, with the files and buffers each changed."),
  conversationRewind: documented(new RequestType<ConversationRewindParams, ConversationRewindResult, void>("conversation/rewind"), "What restores the files and buffers changed since a turn; optionally drops that turn and the later ones."),
  conversationExport: documented(new RequestType<ConversationExportParams, ConversationExportResult, void>("conversation/export"), "The conversation as Org or Markdown text, tool calls as collapsible blocks."),
  diffHunks: documented(new RequestType<DiffHunksParams, DiffHunksResult, void>("diff/hunks"), "The hunks of a file edit (a line diff with context), for Emacs's review and apply."),
  promptShow: documented(new RequestType<PromptShowParams, PromptShowResult, void>("prompt/show"), "What the model is told: the system prompt, the project instructions it includes and the tool definitions."),
  mcpStart: documented(new RequestType<McpStartParams, McpStartResult, void>("mcp/start"), "Serve the tools over MCP (Streamable HTTP on 127.0.0.1)."),
  mcpStop: documented(new RequestType0<McpStopResult, void>("mcp/stop"), "Stop serving MCP and remove the state file."),
  mcpClientConfigure: documented(new RequestType<McpClientConfigureParams, McpClientConfigureResult, void>("mcp/clientConfigure"), "The MCP servers our agent uses as a client."),
} as const;

/** Emacs -> server notifications. */
export const ClientNotifications = {
  exit: documented(new NotificationType0("exit"), "End the process (status 0 after shutdown)."),
  emacsReply: documented(new NotificationType<EmacsReplyParams>("emacs/reply"), "The answer to an emacs/call, by its id: a result or an error message."),
  contextChange: documented(new NotificationType<EditorContext>("context/change"), "Emacs's view changed: the REPL's current package, the project root."),
} as const;

/** Server -> Emacs notifications. The server sends Emacs no requests (see emacs/call above). */
export const ServerNotifications = {
  emacsCall: documented(new NotificationType<EmacsCallParams>("emacs/call"), "Ask Emacs for something that may wait (a tool, an image call, an approval); answered by emacs/reply."),
  emacsCancel: documented(new NotificationType<EmacsCancelParams>("emacs/cancel"), "The server no longer wants the answer to an emacs/call (timeout, cancelled turn)."),
  textDelta: documented(new NotificationType<TextDeltaParams>("chat/textDelta"), "Streamed text of the answer."),
  thinkingDelta: documented(new NotificationType<ThinkingDeltaParams>("chat/thinkingDelta"), "Streamed reasoning of the model before its answer or between its calls (redacted: encrypted, no text)."),
  toolCall: documented(new NotificationType<ToolCallParams>("chat/toolCall"), "A tool call of the model, before it runs or asks (running: it started while the answer streamed)."),
  toolStarted: documented(new NotificationType<ToolStartedParams>("chat/toolStarted"), "A tool call starts to run (until then it waits its turn or the user's approval)."),
  toolOutput: documented(new NotificationType<ToolOutputParams>("chat/toolOutput"), "A running call's output so far (a command's last lines, redacted), a few times a second at most; each replaces the last."),
  toolResult: documented(new NotificationType<ToolResultParams>("chat/toolResult"), "A tool call's result, once per call."),
  approvalNeeded: documented(new NotificationType<ApprovalNeededParams>("chat/approvalNeeded"), "A call waits for the user's approval (the emacs/call of kind approval follows)."),
  turnState: documented(new NotificationType<TurnStateParams>("chat/turnState"), "The turn moved to another state (doc/turn-states.md); the chat shows it."),
  compacted: documented(new NotificationType<CompactedParams>("chat/compacted"), "The history neared the context window: older turns were summarized before the turn went on."),
  notice: documented(new NotificationType<NoticeParams>("chat/notice"), "Something the user should know before the turn goes on (a project file that was not read), or at its end (definitions in the image that differ from their files: details, shown on request)."),
  turnFinished: documented(new NotificationType<TurnFinishedParams>("chat/turnFinished"), "The turn ended with an answer: stop reason, usage, cost."),
  turnFailed: documented(new NotificationType<TurnFailedParams>("chat/turnFailed"), "The turn ended without one: cancelled, timeout, provider, auth... with a message for the user."),
  mcpCall: documented(new NotificationType<McpCallParams>("mcp/call"), "An MCP client's tool call, started or finished, for Emacs's MCP log."),
  mcpServerStatus: documented(new NotificationType<McpServerStatusParams>("mcp/serverStatus"), "An MCP server our agent uses connected, failed or died."),
} as const;

/** The kinds of emacs/call, each answered by an Elisp handler, and what each carries. */
export interface EmacsCallParamsByKind {
  tool: EmacsToolParams;
  image: EmacsImageParams;
  approval: EmacsApprovalParams;
}

/** What Emacs's emacs/reply carries as the result of each kind of emacs/call. */
export interface EmacsCallResultByKind {
  tool: EmacsToolResult;
  image: EmacsImageResult;
  approval: ApprovalDecision;
}
export type EmacsCallKind = keyof EmacsCallParamsByKind;
export const EMACS_CALL_KINDS: readonly EmacsCallKind[] = Object.keys({
  tool: true,
  image: true,
  approval: true,
} satisfies Record<EmacsCallKind, true>) as EmacsCallKind[];

export type Direction = "emacs->server" | "server->emacs";
export interface MethodDescription {
  method: string;
  direction: Direction;
  kind: "request" | "notification";
  /** What the method is for, one line. */
  note: string;
}
// ---------------------------------------------------------------------------------------------------
// Data shared with the implementation (which imports these from here, never the other way round)

export type SafetyLevel = "safe" | "cautious" | "dangerous";

export type ParamType = "string" | "boolean" | "number" | "integer" | "object" | "array";

/** One tool parameter, as JSON Schema. Every parameter carries a description for the model. */
export interface ParamSpec {
  type: ParamType;
  description: string;
  /** Element schema, required for arrays so that OpenAI-style endpoints accept the schema. */
  items?: { type: ParamType; description?: string };
  enum?: readonly (string | number)[];
  minimum?: number;
  maximum?: number;
  /** Accepted but not in the schema the model sees: set by the user's review, or another name of a
   *  parameter kept for old callers. */
  notOffered?: true;  /** Lisp source text: an approval shows it as Lisp and the user edits it in lisp-mode. Not in the
   *  schema the model sees. */
  lisp?: true;
}

/** Where a tool's handler runs. */
export type ToolRuntime = "node" | "emacs" | "image";

export type RuleAction = "allow" | "ask" | "deny";

/** A permission rule, as in Configuration.permissionRules. */
export interface PermissionRule {
  action: RuleAction;
  tool?: string;
  category?: string;
  argument?: string;
  pattern?: string;
  /** A command by its words, for tools that run commands (run_command): `make test*` (a final `*`:
   *  any further arguments), matched as server/tools/command-rules.ts says. */
  command?: string;
}

/** What made a call ask the user: the tool's level, or a permission rule with action ask. */
/**
 * What made a call ask: its tool's level ("always allow" answers it for the session), a permission
 * rule with action ask (asks each time), or a call that, as it runs, would read PATH outside the
 * project root under readOutsideProject "ask" (asks each time; its arguments are not edited), or a
 * write to a protected file (asks each time).
 */
export type ApprovalReason =
  | { kind: "level"; level: SafetyLevel }
  | { kind: "rule"; rule: PermissionRule }
  | { kind: "outside"; path: string }
  /** A write to a protected file (.git/, .dir-locals.el, an init file...): asks each time, saying WHY,
   *  whatever rule or "always allow" covers the tool; only a rule naming PATH itself allows it. */
  | { kind: "protected"; path: string; why: string };

/** The user's answer to an approval. */
/**
 * TARGET, on an approval that Emacs prepared: the identity of what the approved call acts on (resolved
 * path and the text there and to be written, the debugger's thread, level and restart...), which
 * Emacs checks again at the moment the call runs (EmacsToolParams.target).
 */
export type ApprovalDecision =
  | { decision: "approved"; /** allow this tool for the rest of the session */ always?: boolean; target?: string }
  | { decision: "denied"; reason?: string }
  | { decision: "modified"; arguments: Record<string, unknown>; target?: string };

/** What an approval was given for, checked where the call runs: the tool and arguments it was computed from. */
export interface ApprovedTarget {
  tool: string;
  arguments: Record<string, unknown>;
  target: string;
}

export interface ToolResultMetadata {
  /** The call's own run time: from when it started running, after any approval, to its answer. */
  executionTimeMs: number;
  /** How long the call waited for the user's approval, when the user was asked. */
  approvalWaitMs?: number;
  /** The arguments the call ran with, when the user edited them (the model's are in its tool_use). */
  arguments?: Record<string, unknown>;
  safetyLevel: SafetyLevel | "unknown";
  /** True when the call was allowed to run (automatically, by the user, or by a session rule). */
  approved: boolean;
}

/** One tool call's outcome, as the model and tools/call get it. */
export interface ToolResult {
  id: string;
  name: string;
  success: boolean;
  /** Always a string: the result for the model, or the error message on failure. */
  content: string;
  /** Set exactly when success is false. */
  error?: string;
  metadata: ToolResultMetadata;
}

// ---------------------------------------------------------------------------------------------------
// Configuration (sent with initialize and configuration/change; every field optional)
//
// configuration/change REPLACES the configuration: the client always sends all of it, and a field
// it leaves out (an override, a rule) is no longer in force, from the next tool call on (a running
// turn's included). A configuration that is rejected
// (ErrorCodes.invalidConfiguration, with a message naming the field) leaves the previous one in force.
//
// Trust (enforced in one place, the executor, through server/tools/policy.ts):
// - Offered: tools whose effective level is at most maxSafetyLevel, in `categories` (if given),
//   aliases only with offerAliases, whose runtime the client supports, and not denied by a rule
//   without an argument. Only offered tools run; any other name (tools/call included) gets an error
//   result saying it is not available, and is never put to the user.
// - Effective level: the most cautious of safetyOverrides[name] and safetyOverrides[primary name]
//   (an override on read_file covers its alias file_read); if neither, the most cautious of
//   categoryLevels[c] over the tool's categories; if none, the tool's declared level.
// - A call: permission rules that match it decide, deny over ask over allow (deny: error result,
//   not asked, not run; ask: the user is asked; allow: runs without asking). No matching rule: a
//   dangerous level asks, safe and cautious run. "Always allow for this session" is kept per
//   capability (primary name; for a tool that runs commands, per exact command) and answers only a
//   level's question, never a rule's ask or deny.
// - Tools that evaluate code in the image carry the category "evaluation" (eval_form,
//   eval_in_package, compile_form): categoryLevels {evaluation: "dangerous"} makes all of them ask.

export type ProviderName = "anthropic" | "openai";

export interface Configuration {
  provider?: ProviderName;
  model?: string;
  /** Never logged. Falls back to ANTHROPIC_API_KEY / OPENAI_API_KEY in the server's environment. */
  apiKey?: string;
  /** Falls back to ANTHROPIC_BASE_URL / OPENAI_BASE_URL. */
  baseUrl?: string;
  maxTokens?: number;
  temperature?: number;
  /** Tool steps per turn before the loop stops. */
  maxSteps?: number;
  /** Wall-clock limit of one turn, in ms. */
  turnTimeoutMs?: number;
  /** A model stream that sends nothing for this long (ms) is retried once, or fails the turn (default 90 s). */
  streamIdleTimeoutMs?: number;
  /** The user's trust levels per tool name; an override on a primary tool covers its aliases. */
  safetyOverrides?: Record<string, SafetyLevel>;
  /** Trust levels per category (execution, evaluation, filesystem, buffer...); see above for precedence. */
  categoryLevels?: Record<string, SafetyLevel>;
  /**
   * Permission rules, checked on every call after its arguments are validated (and again on the
   * arguments a user edited). A rule matches a call when its tool (an alias name means its primary;
   * the primary covers its aliases) and its category (one of the tool's) match, where given, and,
   * when argument is given, the value of that argument (a parameter name of the primary tool; an
   * alias's parameters are mapped onto the primary's) matches pattern: JavaScript regular
   * expression source, tested with new RegExp(pattern, "u") against the value (a string as it is,
   * anything else as JSON). argument and pattern go together. command names a command of a tool that
   * runs one by its words (server/tools/command-rules.ts); an allow rule never allows a command by a
   * pattern over its arguments. Unknown actions, tools, categories or parameters and invalid patterns
   * or commands are rejected with invalidConfiguration.
   */
  permissionRules?: PermissionRule[];
  /**
   * Whether read_definition may read the source of a loaded definition whose file is outside the
   * project root (a library's): allow (read-only), ask (an approval each time, the default) or deny.
   */
  readOutsideProject?: RuleAction;
  /** The most dangerous level offered to the model (default dangerous: all, with approval). */
  maxSafetyLevel?: SafetyLevel;
  /** Only tools with one of these categories (default: all). */
  categories?: string[];
  /** Offer alias names too (file_read next to read_file). */
  offerAliases?: boolean;
  /** Default per-tool timeout in ms (a tool's own timeout wins). */
  toolTimeoutMs?: number;
  /** How long one evaluation in the Lisp image may run (Emacs's sly-agent-q-image-timeout); image tools' deadlines derive from it. */
  imageTimeoutMs?: number;
  /** How long loading the helpers into the image may take (sly-agent-q-helpers-load-timeout); part of an image tool's deadline. */
  imageLoadTimeoutMs?: number;
  /** Results longer than this are cut with a marker. */
  maxResultChars?: number;
  /** Whether run_command may run a shell line (pipes, redirections) besides an argv (default false). */
  allowShellCommands?: boolean;
  /** How long one run_command may take before its process group is stopped, in ms (default 120 s). */
  commandTimeoutMs?: number;
  /** The model's context window in tokens, overriding the models table (a local model's own). */
  contextWindow?: number;
  /**
   * Whether a call that only reads (a safe tool no rule covers, with only such calls before it in the
   * answer) starts as soon as the model has written it, while the rest of the answer streams (default
   * true). Off: every call waits for the whole answer, as a comparison in the benchmarks.
   */
  startToolsEarly?: boolean;
  /**
   * How each model thinks, by model name or prefix ("*": any model; the longest key that matches
   * wins): "off", "auto" (the default: the mode the model's documentation recommends), an effort
   * level (low, medium, high, xhigh, max) or a budget in tokens (older Claude models). Taken when a
   * turn starts: a change applies from the next turn.
   */
  thinking?: Record<string, ThinkingSetting>;
  projectRoot?: string;
  /**
   * The user's files of credentials (Emacs's sly-agent-q-private-file-regexps, translated by Emacs):
   * JavaScript regular expression sources, tested case-insensitively against a file's true name. The
   * project tools (search_project, find_files, the git tools) leave out or refuse a file one matches,
   * as Emacs's file tools do, besides the built-in names (.ssh, .netrc...).
   */
  privateFilePatterns?: string[];
  /** Emacs regexps of that setting that Emacs could not translate: while any is set, the project tools refuse to run. */
  privateFilePatternsUntranslated?: string[];
  /** Where cautious and dangerous calls are appended as JSON lines (optional). */
  auditLogFile?: string;
  /** Where conversations are saved as they happen, one JSON Lines file each; unset: not saved. */
  conversationDirectory?: string;
  logLevel?: LogLevel;
}

export type LogLevel = "debug" | "info" | "warn" | "error";

/** Whether the model in use can think, and how, said for the user (the menu's thinking setting):
 *  "no", a setting is never sent; "if-set", an effort is sent only when set, and the server may refuse it. */
export interface ModelThinking {
  model: string;
  thinks: "yes" | "no" | "if-set";
  how: string;
}

/** One model's thinking setting (Configuration.thinking). */
export type ThinkingSetting = "off" | "auto" | "low" | "medium" | "high" | "xhigh" | "max" | number;

// ---------------------------------------------------------------------------------------------------
// initialize / shutdown

export interface InitializeParams {
  clientInfo?: { name: string; version?: string };
  capabilities?: ClientCapabilities;
  configuration?: Configuration;
  /** The REPL's current package and the project root at start. */
  context?: EditorContext;
}

export interface ClientCapabilities {
  /** Emacs answers emacs/call of kind "tool" (buffer and file tools). */
  tools?: boolean;
  /** Emacs answers emacs/call of kind "image" (a Lisp is reachable through SLY/SLIME). */
  image?: boolean;
  /** Emacs answers emacs/call of kind "approval". Without it dangerous tools are denied. */
  approvals?: boolean;
}

export interface EditorContext {
  currentPackage?: string;
  projectRoot?: string;
}

export interface InitializeResult {
  serverInfo: { name: string; version: string };
  protocolVersion: number;
  /** Names of the tools offered to the model under this configuration. */
  tools: string[];
  /** For each tool with parameters that hold Lisp source, their names, as the model calls them. */
  lispArguments?: Record<string, string[]>;
  /** Whether the configured model (the default one when none is set) can think. */
  thinking?: ModelThinking;
}

// ---------------------------------------------------------------------------------------------------
// tools/list and tools/call

export interface ToolsListParams {
  /** Every registered tool (aliases included), not just those offered under the configuration. */
  all?: boolean;
}

export interface ToolInfo {
  name: string;
  description: string;
  safetyLevel: SafetyLevel;
  /** The level in force after the user's overrides and category levels (see Configuration). */
  effectiveSafetyLevel: SafetyLevel;
  categories: string[];
  runtime: ToolRuntime;
  /** The handler's name in Emacs (a capability) or in the image (an image tool); absent for Node tools. */
  implementation?: string;
  parameters: Record<string, ParamSpec>;
  required: string[];
  aliasOf?: string;
  /** Parameters sent to the handler under another name (Tool.argumentNames): an alias's, or a
   *  primary's hidden second names of its own parameters. */
  argumentNames?: Record<string, string>;
  offered: boolean;
}

export interface ToolsListResult {
  tools: ToolInfo[];
}

/**
 * Runs one tool through the executor, as if the model had called it (scripting, benchmarks): under
 * the same policy, so a tool not offered under the configuration is not run.
 */
export interface ToolsCallParams {
  name: string;
  arguments?: Record<string, unknown> | string;
  id?: string;
}
export type ToolsCallResult = ToolResult;

export interface ConfigurationChangeParams {
  configuration?: Configuration;
}
export interface ConfigurationChangeResult {
  /** Names of the tools offered under the new configuration. */
  tools: string[];
  /** Whether the configured model (the default one when none is set) can think. */
  thinking?: ModelThinking;
}

// ---------------------------------------------------------------------------------------------------
// emacs/call, emacs/reply, emacs/cancel

/** Emacs starts the work of KIND and answers later with emacs/reply carrying the same id. */
export type EmacsCallParams = {
  [K in EmacsCallKind]: { id: string; kind: K; params: EmacsCallParamsByKind[K] };
}[EmacsCallKind];

/** kind "tool": run Emacs capability TOOL with ARGUMENTS. Reply result: {content: string, changes?: Change[]}. */
export interface EmacsToolParams {
  tool: string;
  arguments: Record<string, unknown>;
  /** Set when the user approved the call: Emacs runs it only if its target is still the approved one. */
  approved?: ApprovedTarget;
  /** The project root the server judged the call against (protected files, its approval): Emacs
   *  resolves and confines the call's paths against this root, so the two never disagree. */
  projectRoot?: string;
  /** For a call that changes a buffer's text: the buffer and the file it visited (none: absent) when
   *  the server judged the write (protected files). Emacs runs it only if that buffer still visits
   *  that file: one made to visit another while an approval waited is not changed. */
  visits?: BufferVisit;
  /** The conversation whose turn made the call (none for tools/call and MCP): Emacs runs it for
   *  that conversation's chat. */
  conversationId?: string;
}

/** A buffer and the file it visits (none: absent). */
export interface BufferVisit {
  buffer: string;
  file?: string;
}

/** The reply to kind "tool": the text for the model, and what the call changed (for rewinding). */
export interface EmacsToolResult {
  content: string;
  changes?: Change[];
}

/** A file or buffer a tool changed, with its text before and after (null: it did not exist), for rewinding. */
export interface Change {
  kind: "file" | "buffer";
  /** The absolute file name, or the buffer name. */
  name: string;
  before?: string | null;
  after?: string | null;
  /** Too large to keep: this change cannot be rewound. */
  tooLarge?: boolean;
}

/** kind "image": (sly-agent-q:call-tool TOOL ARGUMENTS :package PACKAGE). Reply result: {content: string}. */
export interface EmacsImageParams {
  tool: string;
  arguments: Record<string, unknown>;
  package?: string;
  /** The conversation whose turn made the call (none for tools/call and MCP): Emacs runs it in the
   *  Lisp of that conversation's chat, never in whichever connection is current. */
  conversationId?: string;
  /** The chat's id of the tool call: its entry says when the call waits for the helpers' load. */
  callId?: string;
}

/**
 * How the user reviews a call (declared per tool in server/tools/catalog/):
 * - "arguments": the arguments alone;
 * - "target": Emacs prepares what the call acts on (the resolved path or buffer, and for what writes
 *   the text before and after) by the tool's Elisp declaration, and refuses there what the tool would;
 * - "diff": the arguments are a file edit, reviewed hunk by hunk;
 * - "form": the server's edit (`edit`) of one Lisp form (`form`), reviewed hunk by hunk.
 */
export type ReviewKind = "arguments" | "target" | "diff" | "form";
export const REVIEW_KINDS: readonly ReviewKind[] = ["arguments", "target", "diff", "form"];

/**
 * kind "approval": ask the user. Reply result: an ApprovalDecision. An error reply (Emacs refused the
 * call before asking, e.g. a path outside the project) fails the call with Emacs's message as it is.
 */
/** The reply to kind "image": the image's text for the model. */
export interface EmacsImageResult {
  content: string;
}

export interface EmacsApprovalParams {
  callId: string;
  /** The name the model used (may be an alias). */
  tool: string;
  /** Every argument under the primary tool's parameter names (an alias's are renamed), the declared
   *  parameters first in declaration order (not the model's). An edited reply uses the same names. */
  arguments: Record<string, unknown>;
  /** How the call is reviewed. */
  review: ReviewKind;
  /** The effective level. */
  safetyLevel: SafetyLevel;
  description: string;
  /** The primary tool name: what an approval or "always" is about. */
  capability: string;
  categories: string[];
  /** What made it ask: the tool's level, or a permission rule with action ask. */
  reason: ApprovalReason;
  conversationId?: string;
  turnId?: string;
  /** The MCP client asking (e.g. "claude-code"), when the call came over MCP, not from our model. */
  client?: string;
  /** The arguments that are Lisp source (ParamSpec.lisp), shown and edited as Lisp. */
  lispArguments?: string[];
  /** True for a tool that runs commands: "always" allows this exact command again, not the tool. */
  alwaysCommand?: boolean;
  /** The arguments the approval only shows (a preview's command_line, program): not parameters, so
   *  not edited; an edited reply that changes one is refused. */
  shownOnly?: string[];
  /** The project root the call was judged against: Emacs prepares the approval's target against it. */
  projectRoot?: string;
}

export interface EmacsReplyParams {
  id: string;
  /** Present on success. */
  result?: unknown;
  /** Present on failure: a message written for the model. */
  error?: { message: string };
}

export interface EmacsCancelParams {
  id: string;
  reason: string;
}

// ---------------------------------------------------------------------------------------------------
// Conversations and turns

export interface ConversationNewParams {
  /** Per-conversation overrides of the configuration (model, provider...). */
  configuration?: Configuration;
}
export interface ConversationNewResult {
  conversationId: string;
  /** Why it cannot be saved (conversationDirectory): it goes on unsaved. */
  saveError?: string;
}

export interface ConversationSummary {
  conversationId: string;
  turns: number;
  usage: Usage;
  costUsd: number;
  running: boolean;
}
export interface ConversationListResult {
  conversations: ConversationSummary[];
}

/** Frees a conversation's history on the server; a turn running in it is cancelled first. */
export interface ConversationDeleteParams {
  conversationId: string;
  /** Also delete its saved file. */
  saved?: boolean;
}
export interface ConversationDeleteResult {
  /** False when there was no such conversation (already freed, or from a previous server). */
  deleted: boolean;
}

/** A message of a conversation's history, as the model sees it (provider-neutral). */
export type HistoryMessage =
  | { role: "user"; content: (HistoryText | HistoryToolResult)[] }
  | { role: "assistant"; content: (HistoryThinking | HistoryText | HistoryToolUse)[] };
/** The model's reasoning before its answer, to be shown (its signature stays on the server); redacted: no text. */
export type HistoryThinking = { type: "thinking"; thinking: string } | { type: "redacted_thinking" };
export interface HistoryText {
  type: "text";
  text: string;
}
export interface HistoryToolUse {
  type: "tool_use";
  id: string;
  name: string;
  input: unknown;
}
export interface HistoryToolResult {
  type: "tool_result";
  toolUseId: string;
  content: string;
  isError: boolean;
}

export interface ConversationSavedParams {
  /** Only this project's conversations (and those saved without a project). */
  projectRoot?: string;
}
export interface SavedConversationSummary {
  conversationId: string;
  title: string;
  /** ISO 8601 times. */
  created: string;
  updated: string;
  turns: number;
  messages: number;
  costUsd: number;
  projectRoot?: string;
  model?: string;
  /** The server holds it now (a chat shows it). */
  open: boolean;
  /**
   * A fault interrupted it (a tool call whose result was never saved...): when (its last record),
   * the tools of the calls cut off, and what resuming it repairs.
   */
  interrupted?: { at: string; calls: string[]; what: string[] };
  /** It was repaired when it was resumed after a fault: when, and what was done. */
  repaired?: { at: string; what: string[] };
}
export interface ConversationSavedResult {
  conversations: SavedConversationSummary[];
  /** Files that could not be read, each message naming its file. */
  errors: string[];
}

export interface ConversationResumeParams {
  conversationId: string;
}
/** How a tool call ran, as the chat showed it live: kept with the conversation for resuming. */
export interface ToolCallRun {
  executionTimeMs: number;
  approvalWaitMs?: number;
  /** The arguments that ran, when the user edited the model's. */
  arguments?: Record<string, unknown>;
  /** The trust level its entry showed, and whether it was allowed to run. */
  safetyLevel?: string;
  approved?: boolean;
}

/** How a turn ended, as the chat said it live: a finished turn's footer, a failed one's message. */
export interface TurnEnd {
  /** A finished turn's tool steps and why the model stopped. */
  steps?: number;
  stopReason?: string;
  /** A failed or cancelled turn's kind and message. */
  failed?: { kind: string; message: string };
}

/** A saved turn's end: where in the history it came (after that many messages), its usage and cost. */
export interface SavedTurnEnd extends TurnEnd {
  afterMessage: number;
  /** Set when the user's next text joined that message: the end came after this many of its blocks. */
  afterBlocks?: number;
  usage: Usage;
  costUsd: number;
}

export interface ConversationResumeResult {
  conversationId: string;
  title: string;
  messages: HistoryMessage[];
  /** Per tool call id, how it ran (calls saved before this was kept have none). */
  calls?: Record<string, ToolCallRun>;
  /** Each turn's end, in order (turns saved before this was kept have none). */
  turnEnds?: SavedTurnEnd[];
  usage: Usage;
  costUsd: number;
  model?: string;
  /** Set when the file's last record was cut off (a crash): it was left out. */
  truncated?: boolean;
  /** Set when a fault had interrupted it and its history was repaired now: what was done. */
  repaired?: string[];
}

export interface ConversationRenameParams {
  conversationId: string;
  title: string;
}
export interface ConversationRenameResult {
  title: string;
}

export interface ConversationCompactParams {
  conversationId: string;
}
export interface ConversationCompactResult {
  /** False when there is too little history to compact (fewer turns than are kept whole). */
  compacted: boolean;
  /** Messages the summary stands for. */
  replacedMessages: number;
  /** Estimated tokens of the history before and after. */
  tokensBefore: number;
  tokensAfter: number;
  usage: Usage;
  costUsd: number;
}

export interface ConversationTurnsParams {
  conversationId: string;
}
export interface TurnSummary {
  turnId: string;
  /** The start of the user's text. */
  text: string;
  /** ISO 8601. */
  at: string;
  /** Files and buffers the turn's tools changed. */
  changed: string[];
}
export interface ConversationTurnsResult {
  turns: TurnSummary[];
}

export interface ConversationRewindParams {
  conversationId: string;
  /** The first turn undone. */
  turnId: string;
  /** Also drop that turn and the later ones from the conversation. */
  truncate?: boolean;
}
export interface Restore {
  kind: "file" | "buffer";
  name: string;
  /** The text to put back (null: it did not exist: remove it). */
  before: string | null;
  /** The text the agent left (null: it removed it); anything else there means the user changed it since. */
  expected: string | null;
  /** Not kept (too large): cannot be restored. */
  tooLarge?: boolean;
}
export interface ConversationRewindResult {
  /** Oldest change first per file or buffer, in the order they were first changed. */
  restore: Restore[];
  /** The whole history left, when truncate was asked, with how its calls ran and its turns ended. */
  messages?: HistoryMessage[];
  calls?: Record<string, ToolCallRun>;
  turnEnds?: SavedTurnEnd[];
}

export interface ConversationExportParams {
  conversationId: string;
  format: "org" | "markdown";
}
export interface ConversationExportResult {
  text: string;
}

export interface DiffHunksParams {
  /** The texts; or, for an edit whose approval waits (callId), where the server finds them. */
  old?: string;
  new?: string;
  /** The call whose approval waits: its arguments (propose_file_edit's, or a form edit's `edit`) give the new text. */
  callId?: string;
  /** The file holding the old text, read by the server; the digests (SHA-256 of the UTF-8 texts) must match. */
  oldFile?: string;
  oldDigest?: string;
  newDigest?: string;
  /** Lines of unchanged context around each change (3 when absent). */
  context?: number;
}
/** One hunk: 0-based line indexes, ends excluded, context included. */
export interface DiffHunk {
  /** From 1. */
  index: number;
  oldStart: number;
  oldEnd: number;
  newStart: number;
  newEnd: number;
  /** The changed regions inside, [oldStart, oldEnd, newStart, newEnd]: what applying the hunk replaces. */
  changes: number[][];
  /** The @@ line. */
  header: string;
  /** The hunk's diff lines, each ended by a newline. */
  text: string;
}
export interface DiffHunksResult {
  hunks: DiffHunk[];
}

export interface ChatSendParams {
  /** Omitted: a new conversation is created. */
  conversationId?: string;
  text: string;
  /** Editor context for this turn (the REPL's current package, project root). */
  context?: EditorContext;
  /** Overrides for this turn only. */
  model?: string;
  toolChoice?: ToolChoice;
}
export type ToolChoice = "auto" | "any" | "none" | { name: string };

/** Answered at once; the turn runs and reports through notifications carrying turnId. */
export interface ChatSendResult {
  conversationId: string;
  turnId: string;
  /** Why a new conversation cannot be saved (conversationDirectory): it goes on unsaved. */
  saveError?: string;
  /** Set when the conversation came back from its file after a fault, its history repaired: what was done. */
  repaired?: string[];
}

export interface ChatCancelParams {
  turnId?: string;
  conversationId?: string;
}
export interface ChatCancelResult {
  cancelled: boolean;
}

export interface ChatTurnStatusParams {
  conversationId: string;
  turnId: string;
}
export interface ChatTurnStatusResult {
  /** False once the turn has ended and its last notification (turnFinished or turnFailed) was sent. */
  running: boolean;
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
}

interface TurnRef {
  conversationId: string;
  turnId: string;
}

/** The states of a turn; server/agent/turn-states.ts has the transitions between them. */
export type TurnState =
  | "requesting"
  | "streaming"
  | "running-tools"
  | "awaiting-approval"
  | "finished"
  | "failed"
  | "cancelled";

export interface TurnStateParams extends TurnRef {
  state: TurnState;
  /** The state the turn left; null for the first. */
  previous: TurnState | null;
}

export interface CompactedParams extends TurnRef {
  replacedMessages: number;
  tokensBefore: number;
  tokensAfter: number;
}

/** The project instruction file a system prompt includes, as the user is told of it. */
export interface ProjectInstructions {
  file: string;
  /** The file's size, in bytes. */
  bytes: number;
  /** How many invisible and direction-changing characters were removed from what the model is sent. */
  removed: number;
  /** Each removed character's code point ("U+200B") and count. */
  removedCharacters: { codePoint: string; count: number }[];
  /** What removed Unicode tag characters spelled (as ASCII): an instruction hidden in them. */
  tagText?: string;
  /** Only its first part is sent: the file is longer than the bound. */
  truncated?: boolean;
}

export interface PromptShowParams {
  /** A conversation this server holds: the prompt its requests last carried. Else the one a new one would get. */
  conversationId?: string;
  /** Emacs's view now (the project root whose instructions are read, the REPL's package). */
  context?: EditorContext;
}

/** A tool as the model is sent it. */
export interface PromptShowTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

export interface PromptShowResult {
  system: string;
  tools: PromptShowTool[];
  instructions?: ProjectInstructions;
  /** Whether SYSTEM is the prompt the conversation's last request carried (else it is the next one's). */
  sent: boolean;
}

export interface NoticeParams extends TurnRef {
  text: string;
  /** Text the chat shows under the notice when the user asks for it (image_changes' listing). */
  details?: string;
}

export interface TextDeltaParams extends TurnRef {
  text: string;
}

/** A piece of the model's reasoning, shown apart from the answer; REDACTED: reasoning the API encrypted (no text). */
export interface ThinkingDeltaParams extends TurnRef {
  text: string;
  redacted?: boolean;
}

export interface ToolCallParams extends TurnRef {
  callId: string;
  name: string;
  arguments: unknown;
  safetyLevel: SafetyLevel | "unknown";
  /** Present (true) when the call started while the answer streamed: it runs already, and no chat/toolStarted follows. */
  running?: boolean;
}

export interface ToolStartedParams extends TurnRef {
  callId: string;
  name: string;
}

export interface ToolOutputParams extends TurnRef {
  callId: string;
  /** The output's last few kilobytes (replacing what the entry showed), secrets redacted. */
  tail: string;
  /** Bytes of output so far. */
  totalBytes: number;
}

export interface ToolResultParams extends TurnRef {
  callId: string;
  name: string;
  success: boolean;
  content: string;
  error?: string;
  /** The call's run time, the approval's wait apart (approvalWaitMs). */
  executionTimeMs: number;
  approvalWaitMs?: number;
  /** The arguments that ran, when the user edited them. */
  arguments?: Record<string, unknown>;
  approved: boolean;
}

export interface ApprovalNeededParams extends TurnRef {
  callId: string;
  name: string;
}

export type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use" | "step_limit" | "refusal" | "other";

export interface TurnFinishedParams extends TurnRef {
  stopReason: StopReason;
  /** The assistant's final text of this turn. */
  text: string;
  steps: number;
  usage: Usage;
  costUsd: number;
  conversationUsage: Usage;
  conversationCostUsd: number;
  model: string;
  /** Set when the model's price is unknown and its cost was counted as 0. */
  costNote?: string;
  /** Set when saving the conversation stopped during this turn (a full disk, its file deleted): why. */
  saveError?: string;
}

export type TurnFailureKind = "cancelled" | "timeout" | "provider" | "auth" | "rate_limit" | "config" | "internal";

export interface TurnFailedParams extends TurnRef {
  kind: TurnFailureKind;
  /** What happened and what the user should do. */
  message: string;
  usage: Usage;
  costUsd: number;
  /** As in TurnFinishedParams. */
  saveError?: string;
}

/** Error codes of JSON-RPC errors this server answers with, besides the standard ones. */
export const ErrorCodes = {
  notInitialized: -32002,
  unknownConversation: -32010,
  turnRunning: -32011,
  invalidConfiguration: -32012,
  /** A saved conversation's file cannot be read, trusted or written; the message names it. */
  savedConversation: -32013,
} as const;

// ---------------------------------------------------------------------------------------------------
// MCP: the registry served over MCP, and MCP servers used as a client.

export interface McpStartParams {
  /** Where the URL and token are written (mode 0600); Emacs decides. */
  stateFile: string;
  /** 0 or absent: a free port. */
  port?: number;
  /** How long a dangerous MCP call waits for the user before it is denied. */
  approvalTimeoutMs?: number;
  /** Most sessions open at once (default 16): an initialize past it is refused, saying so. */
  maxSessions?: number;
  /** A session with no request for this long is closed (default 30 minutes). */
  sessionIdleTimeoutMs?: number;
}
export interface McpStopResult {
  /** False when nothing was being served. */
  stopped: boolean;
}

export interface McpStartResult {
  url: string;
  port: number;
  stateFile: string;
}

export interface McpCallParams {
  phase: "start" | "done";
  id: string;
  client: string;
  tool: string;
  arguments?: Record<string, unknown>;
  success?: boolean;
  /** The result or error, shortened. */
  summary?: string;
  safetyLevel?: SafetyLevel | "unknown";
}

/** One MCP server, as in .mcp.json's mcpServers: stdio (command) or HTTP (url). */
export interface McpServerConfig {
  type?: "stdio" | "http" | "streamable-http";
  command?: string;
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
  url?: string;
  headers?: Record<string, string>;
}
export interface McpClientConfigureParams {
  /** Files in the .mcp.json format, read here (their secrets never cross to Emacs); earlier first. */
  files?: string[];
  /** Servers given inline: they win over a file's of the same name. */
  servers?: Record<string, McpServerConfig>;
  /** Trust level per server name (default dangerous: every call asks). */
  levels?: Record<string, SafetyLevel>;
}
export interface McpClientConfigureResult {
  /** NOTES: the server's tools renamed or refused (their names drawn as data). */
  servers: { name: string; ok: boolean; tools: string[]; error?: string; notes?: string[] }[];
}
export interface McpServerStatusParams {
  name: string;
  status: "connected" | "failed" | "exited";
  message?: string;
  tools?: string[];
}

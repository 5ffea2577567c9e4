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

import type { ApprovalDecision, ToolResult } from "./tools/executor.js";
import type { EmacsCallKind, ParamSpec, SafetyLevel, ToolRuntime } from "./tools/tool.js";

export const PROTOCOL_VERSION = 1;

/** Client -> server requests. */
export const Requests = {
  initialize: "initialize",
  shutdown: "shutdown",
  toolsList: "tools/list",
  toolsCall: "tools/call",
  configurationChange: "configuration/change",
  chatSend: "chat/send",
  chatCancel: "chat/cancel",
  conversationNew: "conversation/new",
  conversationList: "conversation/list",
  conversationDelete: "conversation/delete",
} as const;

/** Client -> server notifications. */
export const ClientNotifications = {
  exit: "exit",
  emacsReply: "emacs/reply",
  /** Emacs's view changed: the REPL's current package, the project root. */
  contextChange: "context/change",
} as const;

/** Server -> client notifications. */
export const ServerNotifications = {
  emacsCall: "emacs/call",
  emacsCancel: "emacs/cancel",
  textDelta: "chat/textDelta",
  toolCall: "chat/toolCall",
  toolResult: "chat/toolResult",
  approvalNeeded: "chat/approvalNeeded",
  turnFinished: "chat/turnFinished",
  turnFailed: "chat/turnFailed",
} as const;

// ---------------------------------------------------------------------------------------------------
// Configuration (sent with initialize and configuration/change; every field optional)

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
  /** The user's trust levels per tool name. */
  safetyOverrides?: Record<string, SafetyLevel>;
  /** The most dangerous level offered to the model (default dangerous: all, with approval). */
  maxSafetyLevel?: SafetyLevel;
  /** Only tools with one of these categories (default: all). */
  categories?: string[];
  /** Offer alias names too (file_read next to read_file). */
  offerAliases?: boolean;
  /** Default per-tool timeout in ms (a tool's own timeout wins). */
  toolTimeoutMs?: number;
  /** Results longer than this are cut with a marker. */
  maxResultChars?: number;
  projectRoot?: string;
  /** Where cautious and dangerous calls are appended as JSON lines (optional). */
  auditLogFile?: string;
  logLevel?: LogLevel;
}

export type LogLevel = "debug" | "info" | "warn" | "error";

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
  /** The level in force after the user's overrides. */
  effectiveSafetyLevel: SafetyLevel;
  categories: string[];
  runtime: ToolRuntime;
  parameters: Record<string, ParamSpec>;
  required: string[];
  aliasOf?: string;
  offered: boolean;
}

export interface ToolsListResult {
  tools: ToolInfo[];
}

/** Runs one tool through the executor, as if the model had called it (scripting, benchmarks). */
export interface ToolsCallParams {
  name: string;
  arguments?: Record<string, unknown> | string;
  id?: string;
}
export type ToolsCallResult = ToolResult;

// ---------------------------------------------------------------------------------------------------
// emacs/call, emacs/reply, emacs/cancel

export interface EmacsCallParams {
  id: string;
  kind: EmacsCallKind;
  params: EmacsToolParams | EmacsImageParams | EmacsApprovalParams;
}

/** kind "tool": run Elisp capability TOOL with ARGUMENTS. Reply result: {content: string}. */
export interface EmacsToolParams {
  tool: string;
  arguments: Record<string, unknown>;
}

/** kind "image": (sly-agent-q:call-tool TOOL ARGUMENTS :package PACKAGE). Reply result: {content: string}. */
export interface EmacsImageParams {
  tool: string;
  arguments: Record<string, unknown>;
  package?: string;
}

/** kind "approval": ask the user. Reply result: an ApprovalDecision. */
export interface EmacsApprovalParams {
  callId: string;
  tool: string;
  arguments: Record<string, unknown>;
  safetyLevel: SafetyLevel;
  description: string;
  conversationId?: string;
  turnId?: string;
}
export type EmacsApprovalResult = ApprovalDecision;

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
}
export interface ConversationDeleteResult {
  /** False when there was no such conversation (already freed, or from a previous server). */
  deleted: boolean;
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
}

export interface ChatCancelParams {
  turnId?: string;
  conversationId?: string;
}
export interface ChatCancelResult {
  cancelled: boolean;
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

export interface TextDeltaParams extends TurnRef {
  text: string;
}

export interface ToolCallParams extends TurnRef {
  callId: string;
  name: string;
  arguments: unknown;
  safetyLevel: SafetyLevel | "unknown";
}

export interface ToolResultParams extends TurnRef {
  callId: string;
  name: string;
  success: boolean;
  content: string;
  error?: string;
  executionTimeMs: number;
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
}

export type TurnFailureKind = "cancelled" | "timeout" | "provider" | "auth" | "rate_limit" | "config" | "internal";

export interface TurnFailedParams extends TurnRef {
  kind: TurnFailureKind;
  /** What happened and what the user should do. */
  message: string;
  usage: Usage;
  costUsd: number;
}

/** Error codes of JSON-RPC errors this server answers with, besides the standard ones. */
export const ErrorCodes = {
  notInitialized: -32002,
  unknownConversation: -32010,
  turnRunning: -32011,
  invalidConfiguration: -32012,
} as const;

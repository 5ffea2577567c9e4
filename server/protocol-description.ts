// The protocol described as data (what --protocol prints): its methods, the emacs/call kinds, the error
// codes, and the messages in shape: every method's params and result keys and their types, and each
// kind of emacs/call's params and reply result, as data. Each shape is checked by the compiler against
// the type server/protocol.ts declares (a key renamed, added or dropped there fails to compile here),
// so that this description, which `--protocol` prints and `make generate` turns into Emacs's table,
// is protocol.ts's own. checkMessage holds a message against it: the suites check what both ends send.

import * as P from "./protocol.js";

/** A key's type: "string", "number", "boolean", "object", "array" or "any", with "?" when optional;
 *  or, for an object whose keys are checked too, the name of its shape in SHAPE_TYPES ("Configuration"). */
export type FieldShape = string;
export type MessageShape = { readonly [key: string]: FieldShape };
export interface MethodShape {
  params: MessageShape | null;
  result: MessageShape | null;
}

type Base<V> = V extends string ? "string" : V extends number ? "number" : V extends boolean ? "boolean" : V extends readonly unknown[] ? "array" : V extends object ? "object" : "any";
type Tag<V> = undefined extends V ? `${Base<Exclude<V, undefined>>}?` : Base<V>;
type Nested<V> = NonNullable<V> extends readonly unknown[] ? never : NonNullable<V> extends object ? (undefined extends V ? `${ShapeType}?` : ShapeType) : never;
/** The shape of T: every key of T (none other), each with its type's tag or nested shape. */
type Shape<T> = { [K in keyof T]-?: Tag<T[K]> | Nested<T[K]> };

/** A union's keys, each optional where some member lacks it (the approval's decisions). */
type KeysOf<U> = U extends unknown ? keyof U : never;
type Flat<U> = { [K in KeysOf<U>]: U extends unknown ? (K extends keyof U ? U[K] : undefined) : never };

/** SHAPE, checked against T. */
const shape = <T>(s: Shape<T>): MessageShape => s as MessageShape;

/** The configuration, whose keys Emacs writes out: checked key by key wherever it is sent. */
const configuration = shape<P.Configuration>({
  provider: "string?", model: "string?", apiKey: "string?", baseUrl: "string?", maxTokens: "number?", temperature: "number?",
  maxSteps: "number?", turnTimeoutMs: "number?", streamIdleTimeoutMs: "number?", safetyOverrides: "object?",
  categoryLevels: "object?", permissionRules: "array?", readOutsideProject: "string?", maxSafetyLevel: "string?",
  categories: "array?", offerAliases: "boolean?", toolTimeoutMs: "number?", imageTimeoutMs: "number?",
  imageLoadTimeoutMs: "number?", maxResultChars: "number?", allowShellCommands: "boolean?", commandTimeoutMs: "number?", contextWindow: "number?", startToolsEarly: "boolean?", thinking: "object?", projectRoot: "string?",
  privateFilePatterns: "array?", privateFilePatternsUntranslated: "array?",
  auditLogFile: "string?", conversationDirectory: "string?", logLevel: "string?",
});

/** The shapes that fields name ("Configuration?"), by name. */
type ShapeType = "Configuration";
export const SHAPE_TYPES: Readonly<Record<ShapeType, MessageShape>> = { Configuration: configuration };

/** Every method's shapes, by method name. */
export const METHOD_SHAPES: Readonly<Record<string, MethodShape>> = {
  "initialize": { params: shape<P.InitializeParams>({ clientInfo: "object?", capabilities: "object?", configuration: "Configuration?", context: "object?" }), result: shape<P.InitializeResult>({ serverInfo: "object", protocolVersion: "number", tools: "array", lispArguments: "object?", thinking: "object?" }) },
  "shutdown": { params: null, result: null },
  "tools/list": { params: shape<P.ToolsListParams>({ all: "boolean?" }), result: shape<P.ToolsListResult>({ tools: "array" }) },
  "tools/call": { params: shape<P.ToolsCallParams>({ name: "string", arguments: "object?", id: "string?" }), result: shape<P.ToolsCallResult>({ id: "string", name: "string", success: "boolean", content: "string", error: "string?", metadata: "object" }) },
  "configuration/change": { params: shape<P.ConfigurationChangeParams>({ configuration: "Configuration?" }), result: shape<P.ConfigurationChangeResult>({ tools: "array", thinking: "object?" }) },
  "chat/send": { params: shape<P.ChatSendParams>({ conversationId: "string?", text: "string", context: "object?", model: "string?", toolChoice: "object?" }), result: shape<P.ChatSendResult>({ conversationId: "string", turnId: "string", saveError: "string?", repaired: "array?" }) },
  "chat/cancel": { params: shape<P.ChatCancelParams>({ turnId: "string?", conversationId: "string?" }), result: shape<P.ChatCancelResult>({ cancelled: "boolean" }) },
  "chat/turnStatus": { params: shape<P.ChatTurnStatusParams>({ conversationId: "string", turnId: "string" }), result: shape<P.ChatTurnStatusResult>({ running: "boolean" }) },
  "conversation/new": { params: shape<P.ConversationNewParams>({ configuration: "Configuration?" }), result: shape<P.ConversationNewResult>({ conversationId: "string", saveError: "string?" }) },
  "conversation/list": { params: null, result: shape<P.ConversationListResult>({ conversations: "array" }) },
  "conversation/delete": { params: shape<P.ConversationDeleteParams>({ conversationId: "string", saved: "boolean?" }), result: shape<P.ConversationDeleteResult>({ deleted: "boolean" }) },
  "conversation/saved": { params: shape<P.ConversationSavedParams>({ projectRoot: "string?" }), result: shape<P.ConversationSavedResult>({ conversations: "array", errors: "array" }) },
  "conversation/resume": { params: shape<P.ConversationResumeParams>({ conversationId: "string" }), result: shape<P.ConversationResumeResult>({ conversationId: "string", title: "string", messages: "array", usage: "object", costUsd: "number", model: "string?", truncated: "boolean?", repaired: "array?", calls: "object?", turnEnds: "array?" }) },
  "conversation/rename": { params: shape<P.ConversationRenameParams>({ conversationId: "string", title: "string" }), result: shape<P.ConversationRenameResult>({ title: "string" }) },
  "conversation/compact": { params: shape<P.ConversationCompactParams>({ conversationId: "string" }), result: shape<P.ConversationCompactResult>({ compacted: "boolean", replacedMessages: "number", tokensBefore: "number", tokensAfter: "number", usage: "object", costUsd: "number" }) },
  "conversation/turns": { params: shape<P.ConversationTurnsParams>({ conversationId: "string" }), result: shape<P.ConversationTurnsResult>({ turns: "array" }) },
  "conversation/rewind": { params: shape<P.ConversationRewindParams>({ conversationId: "string", turnId: "string", truncate: "boolean?" }), result: shape<P.ConversationRewindResult>({ restore: "array", messages: "array?", calls: "object?", turnEnds: "array?" }) },
  "conversation/export": { params: shape<P.ConversationExportParams>({ conversationId: "string", format: "string" }), result: shape<P.ConversationExportResult>({ text: "string" }) },
  "diff/hunks": { params: shape<P.DiffHunksParams>({ old: "string?", new: "string?", callId: "string?", oldFile: "string?", oldDigest: "string?", newDigest: "string?", context: "number?" }), result: shape<P.DiffHunksResult>({ hunks: "array" }) },
  "prompt/show": { params: shape<P.PromptShowParams>({ conversationId: "string?", context: "object?" }), result: shape<P.PromptShowResult>({ system: "string", tools: "array", instructions: "object?", sent: "boolean" }) },
  "mcp/start": { params: shape<P.McpStartParams>({ stateFile: "string", port: "number?", approvalTimeoutMs: "number?", maxSessions: "number?", sessionIdleTimeoutMs: "number?" }), result: shape<P.McpStartResult>({ url: "string", port: "number", stateFile: "string" }) },
  "mcp/stop": { params: null, result: shape<P.McpStopResult>({ stopped: "boolean" }) },
  "mcp/clientConfigure": { params: shape<P.McpClientConfigureParams>({ files: "array?", servers: "object?", levels: "object?" }), result: shape<P.McpClientConfigureResult>({ servers: "array" }) },
  "exit": { params: null, result: null },
  "emacs/reply": { params: shape<P.EmacsReplyParams>({ id: "string", result: "any?", error: "object?" }), result: null },
  "context/change": { params: shape<P.EditorContext>({ currentPackage: "string?", projectRoot: "string?" }), result: null },
  "emacs/call": { params: shape<P.EmacsCallParams>({ id: "string", kind: "string", params: "object" }), result: null },
  "emacs/cancel": { params: shape<P.EmacsCancelParams>({ id: "string", reason: "string" }), result: null },
  "chat/textDelta": { params: shape<P.TextDeltaParams>({ conversationId: "string", turnId: "string", text: "string" }), result: null },
  "chat/thinkingDelta": { params: shape<P.ThinkingDeltaParams>({ conversationId: "string", turnId: "string", text: "string", redacted: "boolean?" }), result: null },
  "chat/toolCall": { params: shape<P.ToolCallParams>({ conversationId: "string", turnId: "string", callId: "string", name: "string", arguments: "any?", safetyLevel: "string", running: "boolean?" }), result: null },
  "chat/toolStarted": { params: shape<P.ToolStartedParams>({ conversationId: "string", turnId: "string", callId: "string", name: "string" }), result: null },
  "chat/toolOutput": { params: shape<P.ToolOutputParams>({ conversationId: "string", turnId: "string", callId: "string", tail: "string", totalBytes: "number" }), result: null },
  "chat/toolResult": { params: shape<P.ToolResultParams>({ conversationId: "string", turnId: "string", callId: "string", name: "string", success: "boolean", content: "string", error: "string?", executionTimeMs: "number", approvalWaitMs: "number?", arguments: "object?", approved: "boolean" }), result: null },
  "chat/approvalNeeded": { params: shape<P.ApprovalNeededParams>({ conversationId: "string", turnId: "string", callId: "string", name: "string" }), result: null },
  "chat/turnState": { params: shape<P.TurnStateParams>({ conversationId: "string", turnId: "string", state: "string", previous: "any" }), result: null },
  "chat/compacted": { params: shape<P.CompactedParams>({ conversationId: "string", turnId: "string", replacedMessages: "number", tokensBefore: "number", tokensAfter: "number" }), result: null },
  "chat/notice": { params: shape<P.NoticeParams>({ conversationId: "string", turnId: "string", text: "string", details: "string?" }), result: null },
  "chat/turnFinished": { params: shape<P.TurnFinishedParams>({ conversationId: "string", turnId: "string", stopReason: "string", text: "string", steps: "number", usage: "object", costUsd: "number", conversationUsage: "object", conversationCostUsd: "number", model: "string", costNote: "string?", saveError: "string?" }), result: null },
  "chat/turnFailed": { params: shape<P.TurnFailedParams>({ conversationId: "string", turnId: "string", kind: "string", message: "string", usage: "object", costUsd: "number", saveError: "string?" }), result: null },
  "mcp/call": { params: shape<P.McpCallParams>({ phase: "string", id: "string", client: "string", tool: "string", arguments: "object?", success: "boolean?", summary: "string?", safetyLevel: "string?" }), result: null },
  "mcp/serverStatus": { params: shape<P.McpServerStatusParams>({ name: "string", status: "string", message: "string?", tools: "array?" }), result: null },

};

/** Each kind of emacs/call: its params and the result of Emacs's emacs/reply. */
export const EMACS_CALL_SHAPES: { readonly [K in P.EmacsCallKind]: MethodShape } = {
  tool: {
    params: shape<P.EmacsToolParams>({ tool: "string", arguments: "object", approved: "object?", projectRoot: "string?", visits: "object?", conversationId: "string?" }),
    result: shape<P.EmacsToolResult>({ content: "string", changes: "array?" }),
  },
  image: {
    params: shape<P.EmacsImageParams>({ tool: "string", arguments: "object", package: "string?", conversationId: "string?", callId: "string?" }),
    result: shape<P.EmacsImageResult>({ content: "string" }),
  },
  approval: {
    params: shape<P.EmacsApprovalParams>({
      callId: "string", tool: "string", arguments: "object", review: "string", safetyLevel: "string", description: "string",
      capability: "string", categories: "array", reason: "object", lispArguments: "array?", conversationId: "string?", turnId: "string?", client: "string?", alwaysCommand: "boolean?", shownOnly: "array?", projectRoot: "string?",
    }),
    result: shape<Flat<P.ApprovalDecision>>({ decision: "string", always: "boolean?", target: "string?", reason: "string?", arguments: "object?" }),
  },
};

/** Every shape by name: the methods', and "emacs/call:KIND" for each kind of emacs/call. */
export function protocolShapes(): Record<string, MethodShape> {
  const out: Record<string, MethodShape> = { ...METHOD_SHAPES };
  for (const [kind, s] of Object.entries(EMACS_CALL_SHAPES)) out[`emacs/call:${kind}`] = s;
  return out;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function typeProblem(tag: string, value: unknown): boolean {
  switch (tag) {
    case "string":
      return typeof value !== "string";
    case "number":
      return typeof value !== "number";
    case "boolean":
      return typeof value !== "boolean";
    case "array":
      return !Array.isArray(value);
    case "object":
      return !isObject(value);
    default:
      return false;
  }
}

/** What is wrong with VALUE as SHAPE (nothing: []): keys it lacks or does not know, values of another type. */
export function checkShape(shape: MessageShape | null, value: unknown, where: string, types: Record<string, MessageShape> = SHAPE_TYPES): string[] {
  // No params: absent, null, or an empty object (as clients send for a request without params).
  const empty = value === null || value === undefined || (isObject(value) && Object.keys(value).length === 0);
  if (shape === null) return empty ? [] : [`${where}: carries ${JSON.stringify(value)?.slice(0, 80)}, expected nothing`];
  if (!isObject(value)) return [`${where}: expected an object, got ${JSON.stringify(value)?.slice(0, 80)}`];
  const problems: string[] = [];
  for (const key of Object.keys(value)) if (!Object.prototype.hasOwnProperty.call(shape, key)) problems.push(`${where}: unknown key ${key}`);
  for (const [key, field] of Object.entries(shape)) {
    const optional = field.endsWith("?");
    const type = field.replace(/\?$/, "");
    const present = Object.prototype.hasOwnProperty.call(value, key) && value[key] !== undefined;
    // An optional key may come as null: Emacs's nil.
    if (!present || (optional && value[key] === null)) {
      if (!optional) problems.push(`${where}: missing key ${key}`);
      continue;
    }
    const named = types[type];
    if (named) problems.push(...checkShape(named, value[key], `${where}.${key}`, types));
    else if (typeProblem(type, value[key])) problems.push(`${where}: ${key} should be ${type}, is ${JSON.stringify(value[key])?.slice(0, 80)}`);
  }
  return problems;
}

/** What is wrong with a message of METHOD: its PART ("params" or "result") against SHAPES (from the
 *  protocol's description); an emacs/call's params are checked by its kind too. */
export function checkMessage(shapes: Record<string, MethodShape>, method: string, part: "params" | "result", value: unknown, types: Record<string, MessageShape> = SHAPE_TYPES): string[] {
  const s = shapes[method];
  if (!s) return [`${method}: not a method of the protocol`];
  const problems = checkShape(s[part], value, `${method} ${part}`, types);
  if (method === "emacs/call" && part === "params" && isObject(value)) {
    const kind = shapes[`emacs/call:${String(value.kind)}`];
    if (!kind) problems.push(`emacs/call: unknown kind ${String(value.kind)}`);
    else problems.push(...checkShape(kind.params, value.params, `emacs/call:${String(value.kind)} params`, types));
  }
  return problems;
}

export interface ProtocolDescription {
  version: number;
  methods: P.MethodDescription[];
  emacsCallKinds: string[];
  errorCodes: Record<string, number>;
  /** Each method's params and result keys and their types, and each emacs/call kind's . */
  shapes: Record<string, MethodShape>;
  /** The shapes that fields name (a key of type "Configuration?" has the keys of types.Configuration). */
  shapeTypes: Record<string, MessageShape>;
}

/** Every method, direction and kind, the emacs/call kinds, the error codes and the messages' shapes
 *  (printed by --protocol). */
export function describeProtocol(): ProtocolDescription {
  const list = (types: Record<string, { method: string; note: string }>, direction: P.Direction, kind: P.MethodDescription["kind"]) =>
    Object.values(types).map((t) => ({ method: t.method, direction, kind, note: t.note }));
  return {
    version: P.PROTOCOL_VERSION,
    methods: [
      ...list(P.Requests, "emacs->server", "request"),
      ...list(P.ClientNotifications, "emacs->server", "notification"),
      ...list(P.ServerNotifications, "server->emacs", "notification"),
    ],
    emacsCallKinds: [...P.EMACS_CALL_KINDS],
    errorCodes: { ...P.ErrorCodes },
    shapes: protocolShapes(),
    shapeTypes: { ...SHAPE_TYPES },
  };
}


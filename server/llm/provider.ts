// The one interface every LLM provider implements, and the provider-neutral message format the
// conversation is kept in. Each provider translates this format to its wire format and back, so a
// conversation can be sent to either and the agent loop never sees a provider's types.

import type { ProviderName, StopReason, ToolChoice, Usage } from "../protocol.js";
import type { ModelSchema } from "../tools/tool.js";

export interface TextBlock {
  type: "text";
  text: string;
  /** Said to the model by the server (the package note), not typed by the user: never shown as theirs. */
  note?: true;
}

export interface ToolUseBlock {
  type: "tool_use";
  id: string;
  name: string;
  /** Always an object: arguments that did not parse are kept as {} (the error result says why). */
  input: Record<string, unknown>;
}

export interface ToolResultBlock {
  type: "tool_result";
  toolUseId: string;
  content: string;
  isError: boolean;
}

/**
 * The model's reasoning before its answer or between its calls (Anthropic). Kept whole and sent back
 * exactly as received: the API checks SIGNATURE against the text, and refuses a tool loop whose
 * thinking was changed, dropped or moved. THINKING may be empty (a model that omits its display).
 */
export interface ThinkingBlock {
  type: "thinking";
  thinking: string;
  signature: string;
}

/** Reasoning the API encrypted (safety-redacted): DATA is opaque, sent back unchanged, shown as "(redacted)". */
export interface RedactedThinkingBlock {
  type: "redacted_thinking";
  data: string;
}

export type AnyThinkingBlock = ThinkingBlock | RedactedThinkingBlock;

/** Whether BLOCK is a thinking or redacted_thinking block. */
export function isThinking(block: { type?: unknown } | null | undefined): block is AnyThinkingBlock {
  return block?.type === "thinking" || block?.type === "redacted_thinking";
}

export interface UserMessage {
  role: "user";
  /** Tool results first (the order both APIs expect), then any text. */
  content: (TextBlock | ToolResultBlock)[];
}

export interface AssistantMessage {
  role: "assistant";
  /** Thinking blocks, when any, come first, in the order the model wrote them (history-rules.ts). */
  content: (AnyThinkingBlock | TextBlock | ToolUseBlock)[];
}

/**
 * An answer's text as the user is shown it, piece by piece: text written after a call is a paragraph of
 * its own (a blank line before it). Anthropic's stream and answerText both go through it.
 */
export class AnswerText {
  private shown = false;
  private paragraph = false;
  /** True once a call came: what is shown from then on was written after one. */
  afterCall = false;

  /** A call's block begins. */
  call(): void {
    this.paragraph ||= this.shown;
    this.afterCall = true;
  }

  /** What to show of TEXT, the next piece of a text block: "" for none. */
  text(text: string): string {
    if (text === "") return "";
    const piece = this.paragraph ? `\n\n${text}` : text;
    this.paragraph = false;
    this.shown = true;
    return piece;
  }
}

/** The text of an answer's CONTENT as the user is shown it (AnswerText). */
export function answerText(content: AssistantMessage["content"]): string {
  const joined = new AnswerText();
  return content.map((b) => (b.type === "text" ? joined.text(b.text) : b.type === "tool_use" ? (joined.call(), "") : "")).join("");
}

export type Message = UserMessage | AssistantMessage;

export interface ToolDefinition {
  name: string;
  description: string;
  inputSchema: ModelSchema;
}

/**
 * How the model is asked to think in one request (thinking.ts decides it per turn): adaptive (the
 * model decides, EFFORT steers it; DISPLAY "summarized" where the model would omit the text), a
 * fixed budget of tokens (older models; INTERLEAVED: the beta header that lets it think between
 * calls), or a reasoning effort (OpenAI-compatible servers).
 */
export type ThinkingRequest =
  | { mode: "adaptive"; effort?: "low" | "medium" | "high" | "xhigh" | "max"; display?: "summarized" }
  | { mode: "budget"; budgetTokens: number; interleaved: boolean }
  | { mode: "reasoning-effort"; effort: string };

export interface ChatRequest {
  model: string;
  system: string;
  messages: readonly Message[];
  tools: readonly ToolDefinition[];
  toolChoice: ToolChoice;
  maxTokens: number;
  temperature?: number;
  /** Undefined: the model is not asked to think. */
  thinking?: ThinkingRequest;
}

/** A tool call as the stream delivered it. */
export interface StreamedToolCall {
  id: string;
  name: string;
  /** The arguments' JSON text as streamed. */
  rawArguments: string;
  /** The parsed arguments; undefined when rawArguments is not a JSON object. */
  input: Record<string, unknown> | undefined;
}

export interface ChatResponse {
  /** Thinking, text and tool calls in the order the model produced them. */
  content: AssistantMessage["content"];
  toolCalls: StreamedToolCall[];
  stopReason: StopReason;
  usage: Usage;
  model: string;
  /**
   * Some of the answer's thinking could not be kept (unsigned, or after the answer had begun): the
   * rest of the turn must go without thinking, since its thinking cannot come back as the API wants.
   */
  thinkingDropped?: boolean;
}

export interface StreamHandlers {
  /**
   * Called for every text delta as it arrives. AFTER_CALL: the answer wrote it after one of its calls
   * (Anthropic's answers can), so it is shown after the calls are.
   */
  onText(delta: string, afterCall?: boolean): void;
  /**
   * Called once per tool call as soon as its arguments are final (its block ended), in the model's
   * order, before the rest of the message streams; the same object is in the final toolCalls.
   */
  onToolCall?(call: StreamedToolCall): void;
  /**
   * Called for every piece of the model's reasoning as it arrives, for display only (Anthropic's
   * thinking, an OpenAI-compatible server's reasoning text); REDACTED: a block of reasoning the API
   * encrypted, whose text is not shown.
   */
  onThinking?(delta: string, redacted?: boolean): void;
  /** Something the user should know about the answer, said in the chat (not in the folded thinking). */
  onNotice?(text: string): void;
}

export interface LLMProvider {
  readonly name: ProviderName;
  /** One streamed request. Rejects with a ProviderError (errors.ts); aborting SIGNAL aborts the HTTP stream. */
  stream(request: ChatRequest, handlers: StreamHandlers, signal: AbortSignal): Promise<ChatResponse>;
}

export function emptyUsage(): Usage {
  return { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0 };
}

export function addUsage(a: Usage, b: Usage): Usage {
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
    cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
  };
}

/** The tool call ids MESSAGES use: a new call's id must be none of them (usedCallIds, uniqueCallId). */
export function usedCallIds(messages: readonly Message[]): Set<string> {
  return new Set(messages.flatMap((m) => (m.role === "assistant" ? m.content.flatMap((b) => (b.type === "tool_use" ? [b.id] : [])) : [])));
}

/**
 * ID, or ID with a suffix when USED has it already (a confused server repeating an id within a message,
 * or one of the history's: both APIs then refuse every later request); the id returned is added to USED.
 */
export function uniqueCallId(id: string, used: Set<string>): string {
  let out = id;
  for (let n = 2; used.has(out); n++) out = `${id}_${n}`;
  used.add(out);
  return out;
}

/** Parses streamed tool arguments; "" means no arguments. */
export function parseToolArguments(raw: string): Record<string, unknown> | undefined {
  if (raw.trim() === "") return {};
  try {
    const v: unknown = JSON.parse(raw);
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The default of Configuration.streamIdleTimeoutMs. */
export const DEFAULT_STREAM_IDLE_TIMEOUT_MS = 90_000;

/**
 * Aborts one request whose stream sends nothing for IDLEMS: the clock starts before the request
 * (waiting for the headers counts) and restarts at every chunk of bytes received (keep-alive pings
 * included), seen through the fetch it gives the SDK. SIGNAL aborts whenever PARENT does.
 */
export class IdleWatch {
  private readonly controller = new AbortController();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly onParentAbort = () => this.controller.abort(this.parent.reason);
  /** True when the request was aborted because its stream went quiet. */
  fired = false;
  readonly signal = this.controller.signal;

  constructor(
    readonly idleMs: number,
    private readonly parent: AbortSignal,
  ) {
    if (parent.aborted) this.onParentAbort();
    else parent.addEventListener("abort", this.onParentAbort, { once: true });
    this.touch();
  }

  touch(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.fired = true;
      this.controller.abort("stream idle");
    }, this.idleMs);
  }

  /** A fetch for the SDK whose response body restarts the clock at every chunk. */
  readonly fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const response = await fetch(input, init);
    this.touch();
    if (!response.body) return response;
    const touch = () => this.touch();
    const body = response.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          touch();
          controller.enqueue(chunk);
        },
      }),
    );
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };

  dispose(): void {
    clearTimeout(this.timer);
    this.parent.removeEventListener("abort", this.onParentAbort);
  }
}

// The Anthropic Messages API through @anthropic-ai/sdk, streamed. Text deltas are passed on as they
// arrive; tool_use inputs are assembled from their input_json_delta pieces and parsed once the block
// stops (a piece on its own is not JSON). The SDK's own retries are off: the loop retries, so that
// nothing already shown to the user is sent twice.

import type Anthropic from "@anthropic-ai/sdk";
import type { StopReason, Usage } from "../protocol.js";
import { MalformedStreamError, StreamIdleError, toProviderError, type ErrorContext } from "./errors.js";
import { loadAnthropicSdk } from "./sdks.js";
import {
  AnswerText,
  DEFAULT_STREAM_IDLE_TIMEOUT_MS,
  emptyUsage,
  IdleWatch,
  parseToolArguments,
  uniqueCallId,
  usedCallIds,
  type ChatRequest,
  type ChatResponse,
  type LLMProvider,
  type Message,
  type StreamHandlers,
  type StreamedToolCall,
  isThinking,
} from "./provider.js";
import { INTERLEAVED_THINKING_BETA, thinkingForRequest, thinkingSupport } from "./thinking.js";

export interface AnthropicOptions {
  apiKey: string;
  baseUrl?: string;
  /** Per-request HTTP timeout in ms. */
  timeoutMs?: number;
  /** A stream that sends nothing for this long (ms) is aborted (StreamIdleError). */
  streamIdleTimeoutMs?: number;
}

const DEFAULT_BASE_URL = "https://api.anthropic.com";

export class AnthropicProvider implements LLMProvider {
  readonly name = "anthropic" as const;
  /** Made at the first request, when the SDK is loaded (sdks.ts). */
  private client: Promise<Anthropic> | undefined;
  private readonly baseUrl: string;
  private readonly streamIdleTimeoutMs: number;

  constructor(private readonly options: AnthropicOptions) {
    this.baseUrl = options.baseUrl || DEFAULT_BASE_URL;
    this.streamIdleTimeoutMs = options.streamIdleTimeoutMs ?? DEFAULT_STREAM_IDLE_TIMEOUT_MS;
  }

  private sdkClient(): Promise<Anthropic> {
    // Key and base URL are always passed, so the SDK reads no environment or credential files of its own.
    return (this.client ??= loadAnthropicSdk().then(
      (Sdk) => new Sdk({ apiKey: this.options.apiKey, baseURL: this.baseUrl, maxRetries: 0, timeout: this.options.timeoutMs ?? 600_000, logLevel: "off" }),
      (err: unknown) => {
        this.client = undefined; // the next request tries again
        throw err;
      },
    ));
  }

  async stream(request: ChatRequest, handlers: StreamHandlers, signal: AbortSignal): Promise<ChatResponse> {
    const ctx: ErrorContext = { provider: "anthropic", baseUrl: this.baseUrl, model: request.model, keyHint: "the apiKey setting or ANTHROPIC_API_KEY" };
    // Loading the SDK (the first request) is not the stream's silence: the idle watch starts after it.
    let client: Anthropic;
    try {
      client = await this.sdkClient();
    } catch (err) {
      throw toProviderError(err, ctx);
    }
    const idle = new IdleWatch(this.streamIdleTimeoutMs, signal);
    try {
      const { params, headers } = toParams(request);
      const stream = await client.withOptions({ fetch: idle.fetch }).messages.create(params, { signal: idle.signal, ...(headers ? { headers } : {}) });
      ctx.streaming = true;
      return await readStream(stream, handlers, request.model, usedCallIds(request.messages));
    } catch (err) {
      if (signal.aborted) throw err;
      if (idle.fired) throw new StreamIdleError(this.streamIdleTimeoutMs);
      throw toProviderError(err, ctx);
    } finally {
      idle.dispose();
    }
  }
}

/** REQUEST as the API's parameters, and the headers it needs (the interleaved-thinking beta). */
export function toParams(request: ChatRequest): { params: Anthropic.MessageCreateParamsStreaming; headers?: Record<string, string> } {
  const tools: Anthropic.Tool[] = request.tools.map((t) => ({
    name: t.name,
    description: t.description,
    input_schema: t.inputSchema as unknown as Anthropic.Tool.InputSchema,
  }));
  // Cache the stable prefix (tools, system prompt): later steps of a turn re-read it at a tenth of the price.
  const lastTool = tools[tools.length - 1];
  if (lastTool) lastTool.cache_control = { type: "ephemeral" };
  // A model that never thinks is not sent the thinking of another (a switch mid-conversation): it
  // knows no such block. Every model that thinks gets them all back, unchanged, as the API asks.
  const thinks = thinkingSupport(request.model).kind !== "none";
  const params: Anthropic.MessageCreateParamsStreaming = {
    model: request.model,
    max_tokens: request.maxTokens,
    messages: request.messages.map((m) => toMessageParam(m, thinks)),
    stream: true,
  };
  let headers: Record<string, string> | undefined;
  const thinking = thinkingForRequest(request.messages, request.thinking);
  if (thinking?.mode === "adaptive") {
    params.thinking = { type: "adaptive", ...(thinking.display ? { display: thinking.display } : {}) };
    if (thinking.effort) params.output_config = { effort: thinking.effort };
  } else if (thinking?.mode === "budget") {
    params.thinking = { type: "enabled", budget_tokens: thinking.budgetTokens };
    if (thinking.interleaved) headers = { "anthropic-beta": INTERLEAVED_THINKING_BETA };
  }
  // ...and the conversation so far: the next step of the loop re-sends all of it plus one exchange.
  const lastBlock = params.messages[params.messages.length - 1]?.content;
  if (Array.isArray(lastBlock) && lastBlock.length > 0) {
    const block = lastBlock[lastBlock.length - 1]!;
    if (block.type === "text" || block.type === "tool_result") block.cache_control = { type: "ephemeral" };
  }
  if (request.system) params.system = [{ type: "text", text: request.system, cache_control: { type: "ephemeral" } }];
  if (tools.length > 0) {
    params.tools = tools;
    const tc = request.toolChoice;
    params.tool_choice = tc === "auto" ? { type: "auto" } : tc === "any" ? { type: "any" } : tc === "none" ? { type: "none" } : { type: "tool", name: tc.name };
  }
  // The SDK's types no longer list temperature (deprecated for newer models); it is sent only when the
  // user configured one, and a model that refuses it answers 400 with the API's own explanation.
  if (request.temperature !== undefined) (params as unknown as Record<string, unknown>).temperature = request.temperature;
  return headers ? { params, headers } : { params };
}

/** One message of the neutral format as Anthropic's wire has it; without THINKING, with no thinking blocks. */
export function toMessageParam(m: Message, thinking = true): Anthropic.MessageParam {
  if (m.role === "assistant") {
    return {
      role: "assistant",
      content: m.content.flatMap((b): Anthropic.ContentBlockParam[] => {
        switch (b.type) {
          case "text":
            return [{ type: "text", text: b.text }];
          case "tool_use":
            return [{ type: "tool_use", id: b.id, name: b.name, input: b.input }];
          // Exactly as received: the signature is checked against the text.
          case "thinking":
            return thinking ? [{ type: "thinking", thinking: b.thinking, signature: b.signature }] : [];
          case "redacted_thinking":
            return thinking ? [{ type: "redacted_thinking", data: b.data }] : [];
        }
      }),
    };
  }
  return {
    role: "user",
    content: m.content.map((b): Anthropic.ContentBlockParam =>
      b.type === "text" ? { type: "text", text: b.text } : { type: "tool_result", tool_use_id: b.toolUseId, content: b.content || "(empty)", is_error: b.isError },
    ),
  };
}

type Block =
  | { kind: "text"; text: string }
  | { kind: "tool"; id: string; name: string; json: string; stopped?: boolean; call?: StreamedToolCall }
  | { kind: "thinking"; thinking: string; signature: string; stopped?: boolean }
  | { kind: "redacted"; data: string }
  | { kind: "other" };

/** The call a finished tool block holds (made once, so that what ran early is what the message says). */
function finalCall(b: Extract<Block, { kind: "tool" }>, usedIds: Set<string>): StreamedToolCall {
  return (b.call ??= { id: uniqueCallId(b.id, usedIds), name: b.name, rawArguments: b.json, input: parseToolArguments(b.json) });
}

async function readStream(stream: AsyncIterable<Anthropic.RawMessageStreamEvent>, handlers: StreamHandlers, requestedModel: string, usedIds: Set<string>): Promise<ChatResponse> {
  const blocks: Block[] = [];
  const usage: Usage = emptyUsage();
  let model = requestedModel;
  let stopReason: StopReason = "other";
  let started = false;
  let stopped = false;
  // Calls are given (onToolCall) in the message's order: a block ended out of order waits for those before it.
  let given = 0;
  const giveInOrder = () => {
    for (let b = blocks[given]; b && (b.kind !== "tool" || b.stopped); b = blocks[++given]) {
      if (b.kind === "tool" && !b.call) handlers.onToolCall?.(finalCall(b, usedIds));
    }
  };
  // Text after a call is a paragraph of its own, and is shown after the calls (onText's afterCall).
  const joined = new AnswerText();
  const show = (text: string) => {
    const piece = joined.text(text);
    if (piece !== "") handlers.onText(piece, joined.afterCall);
  };
  for await (const event of stream) {
    switch (event.type) {
      case "message_start": {
        started = true;
        model = event.message.model || model;
        const u = event.message.usage;
        usage.inputTokens = u.input_tokens ?? 0;
        usage.outputTokens = u.output_tokens ?? 0;
        usage.cacheWriteTokens = u.cache_creation_input_tokens ?? 0;
        usage.cacheReadTokens = u.cache_read_input_tokens ?? 0;
        break;
      }
      case "content_block_start": {
        const b = event.content_block;
        if (b.type === "text") {
          blocks[event.index] = { kind: "text", text: b.text ?? "" };
          show(b.text ?? "");
        } else if (b.type === "tool_use") {
          blocks[event.index] = { kind: "tool", id: b.id, name: b.name, json: "" };
          joined.call();
        } else if (b.type === "thinking") {
          blocks[event.index] = { kind: "thinking", thinking: b.thinking ?? "", signature: b.signature ?? "" };
          if (b.thinking) handlers.onThinking?.(b.thinking);
        } else if (b.type === "redacted_thinking") {
          blocks[event.index] = { kind: "redacted", data: typeof b.data === "string" ? b.data : "" };
          handlers.onThinking?.("", true);
        } else {
          // Server-tool blocks are not requested; whatever comes is not replayed.
          blocks[event.index] = { kind: "other" };
        }
        break;
      }
      case "content_block_delta": {
        const b = blocks[event.index];
        const d = event.delta;
        if (!b) throw new MalformedStreamError(`a delta for content block ${event.index}, which was never started`);
        if (d.type === "text_delta" && b.kind === "text") {
          b.text += d.text;
          show(d.text);
        } else if (d.type === "input_json_delta" && b.kind === "tool") {
          if (b.stopped) throw new MalformedStreamError(`arguments for tool block ${event.index} after it ended`);
          b.json += d.partial_json;
        } else if (d.type === "thinking_delta" && b.kind === "thinking" && !b.stopped) {
          b.thinking += d.thinking;
          handlers.onThinking?.(d.thinking);
        } else if (d.type === "signature_delta" && b.kind === "thinking" && !b.stopped) {
          b.signature += d.signature;
        }
        break;
      }
      case "content_block_stop": {
        const b = blocks[event.index];
        if (b?.kind === "tool" || b?.kind === "thinking") b.stopped = true;
        giveInOrder();
        break;
      }
      case "message_delta": {
        stopReason = mapStopReason(event.delta.stop_reason);
        const u = event.usage;
        // message_delta's counts are cumulative: they replace those of message_start.
        if (u.output_tokens != null) usage.outputTokens = u.output_tokens;
        if (u.input_tokens != null) usage.inputTokens = u.input_tokens;
        if (u.cache_creation_input_tokens != null) usage.cacheWriteTokens = u.cache_creation_input_tokens;
        if (u.cache_read_input_tokens != null) usage.cacheReadTokens = u.cache_read_input_tokens;
        break;
      }
      case "message_stop":
        stopped = true;
        break;
    }
  }
  if (!started || !stopped) throw new MalformedStreamError(started ? "the stream ended before message_stop" : "the stream ended before message_start");

  const content: ChatResponse["content"] = [];
  const toolCalls: StreamedToolCall[] = [];
  for (const b of blocks) {
    if (!b || b.kind === "other") continue;
    if (b.kind === "text") {
      if (b.text !== "") content.push({ type: "text", text: b.text });
    } else if (b.kind === "thinking") {
      content.push({ type: "thinking", thinking: b.thinking, signature: b.signature });
    } else if (b.kind === "redacted") {
      content.push({ type: "redacted_thinking", data: b.data });
    } else {
      const call = finalCall(b, usedIds);
      toolCalls.push(call);
      content.push({ type: "tool_use", id: call.id, name: call.name, input: call.input ?? {} });
    }
  }
  const kept = keptThinking(content, handlers);
  return { content: kept, toolCalls, stopReason, usage, model, ...(kept.length < content.length ? { thinkingDropped: true } : {}) };
}

/**
 * CONTENT with the thinking blocks that can be sent back as the API wants them: ended with a
 * signature (a proxy may drop or cut it) or redacted with its data, before the answer's text and
 * calls. When any is left out, the answer's thinking is no longer whole, which the API refuses in a
 * loop with thinking on: the response says so (thinkingDropped) and the loop sends the rest of the
 * turn without thinking; the valid blocks stay (a history without thinking may hold them, and later
 * turns' thinking is not checked). The user is told in the chat.
 */
function keptThinking(content: ChatResponse["content"], handlers: StreamHandlers): ChatResponse["content"] {
  const first = content.findIndex((b) => !isThinking(b));
  const valid = (b: ChatResponse["content"][number], i: number) =>
    !isThinking(b) || ((first === -1 || i < first) && (b.type === "thinking" ? b.signature !== "" : b.data !== ""));
  const kept = content.filter(valid);
  if (kept.length === content.length) return content;
  const unsigned = content.some((b, i) => isThinking(b) && (first === -1 || i < first) && !valid(b, i));
  handlers.onNotice?.(`Thinking of this answer came ${unsigned ? "without its signature" : "after the answer had begun"} and was not kept; the rest of this turn goes without thinking.`);
  return kept;
}

function mapStopReason(r: string | null | undefined): StopReason {
  switch (r) {
    case "end_turn":
    case "max_tokens":
    case "stop_sequence":
    case "tool_use":
    case "refusal":
      return r;
    default:
      return "other";
  }
}

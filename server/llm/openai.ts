// OpenAI-compatible chat completions (OpenAI, Ollama, OpenRouter, llama.cpp's server) through the
// openai SDK, streamed, in the function-calling format. Tool calls arrive as fragments keyed by
// index (the id and name in the first, argument text in the rest) and are joined here.

import type OpenAI from "openai";
import type { StopReason } from "../protocol.js";
import { MalformedStreamError, StreamIdleError, toProviderError, type ErrorContext } from "./errors.js";
import { loadOpenAISdk } from "./sdks.js";
import {
  DEFAULT_STREAM_IDLE_TIMEOUT_MS,
  answerText,
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
} from "./provider.js";

export interface OpenAIOptions {
  /** Local servers (Ollama, llama.cpp) need none; a placeholder is sent then. */
  apiKey?: string;
  baseUrl?: string;
  timeoutMs?: number;
  /** A stream that sends nothing for this long (ms) is aborted (StreamIdleError). */
  streamIdleTimeoutMs?: number;
}

const DEFAULT_BASE_URL = "https://api.openai.com/v1";

export class OpenAIProvider implements LLMProvider {
  readonly name = "openai" as const;
  /** Made at the first request, when the SDK is loaded (sdks.ts). */
  private client: Promise<OpenAI> | undefined;
  private readonly baseUrl: string;
  private readonly streamIdleTimeoutMs: number;
  /** OpenAI's own endpoint wants max_completion_tokens; compatible servers know max_tokens. */
  private readonly isOpenAI: boolean;

  constructor(private readonly options: OpenAIOptions) {
    this.baseUrl = options.baseUrl || DEFAULT_BASE_URL;
    this.streamIdleTimeoutMs = options.streamIdleTimeoutMs ?? DEFAULT_STREAM_IDLE_TIMEOUT_MS;
    this.isOpenAI = /^https:\/\/api\.openai\.com\b/.test(this.baseUrl);
  }

  private sdkClient(): Promise<OpenAI> {
    return (this.client ??= loadOpenAISdk().then(
      (Sdk) => new Sdk({ apiKey: this.options.apiKey || "none", baseURL: this.baseUrl, maxRetries: 0, timeout: this.options.timeoutMs ?? 600_000, logLevel: "off" }),
      (err: unknown) => {
        this.client = undefined; // the next request tries again
        throw err;
      },
    ));
  }

  async stream(request: ChatRequest, handlers: StreamHandlers, signal: AbortSignal): Promise<ChatResponse> {
    const ctx: ErrorContext = { provider: "openai", baseUrl: this.baseUrl, model: request.model, keyHint: "the apiKey setting or OPENAI_API_KEY" };
    // Loading the SDK (the first request) is not the stream's silence: the idle watch starts after it.
    let client: OpenAI;
    try {
      client = await this.sdkClient();
    } catch (err) {
      throw toProviderError(err, ctx);
    }
    const idle = new IdleWatch(this.streamIdleTimeoutMs, signal);
    try {
      const stream = await client.withOptions({ fetch: idle.fetch }).chat.completions.create(this.toParams(request), { signal: idle.signal });
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

  private toParams(request: ChatRequest): OpenAI.ChatCompletionCreateParamsStreaming {
    const params: OpenAI.ChatCompletionCreateParamsStreaming = {
      model: request.model,
      messages: toMessages(request.system, request.messages),
      stream: true,
      stream_options: { include_usage: true },
    };
    if (this.isOpenAI) params.max_completion_tokens = request.maxTokens;
    else params.max_tokens = request.maxTokens;
    if (request.tools.length > 0) {
      params.tools = request.tools.map((t) => ({
        type: "function" as const,
        function: { name: t.name, description: t.description, parameters: t.inputSchema as unknown as Record<string, unknown> },
      }));
      const tc = request.toolChoice;
      params.tool_choice = tc === "auto" ? "auto" : tc === "any" ? "required" : tc === "none" ? "none" : { type: "function", function: { name: tc.name } };
    }
    if (request.temperature !== undefined) params.temperature = request.temperature;
    // The effort the user set for this model (thinking.ts): OpenAI's reasoning models and compatible servers take it.
    if (request.thinking?.mode === "reasoning-effort") (params as unknown as Record<string, unknown>).reasoning_effort = request.thinking.effort;
    return params;
  }
}

export function toMessages(system: string, messages: readonly Message[]): OpenAI.ChatCompletionMessageParam[] {
  const out: OpenAI.ChatCompletionMessageParam[] = [];
  if (system) out.push({ role: "system", content: system });
  for (const m of messages) {
    if (m.role === "assistant") {
      // Thinking is Anthropic's: an OpenAI-compatible server is sent the answer's text and calls only.
      const text = answerText(m.content);
      const calls = m.content.flatMap((b) =>
        b.type === "tool_use" ? [{ id: b.id, type: "function" as const, function: { name: b.name, arguments: JSON.stringify(b.input) } }] : [],
      );
      out.push({ role: "assistant", content: text || null, ...(calls.length > 0 ? { tool_calls: calls } : {}) });
    } else {
      // Tool results become tool messages right after the assistant's calls; text follows as a user message.
      for (const b of m.content) {
        if (b.type === "tool_result") out.push({ role: "tool", tool_call_id: b.toolUseId, content: b.content || "(empty)" });
      }
      const text = m.content.filter((b) => b.type === "text").map((b) => b.text).join("\n\n");
      if (text) out.push({ role: "user", content: text });
    }
  }
  return out;
}

interface PendingCall {
  id: string;
  name: string;
  json: string;
  /** Set once the call is complete: what may start early and what the message holds are one object. */
  final?: StreamedToolCall;
}

/** The complete call of fragments C (the I-th call of the message). */
function finalCall(c: PendingCall, i: number, usedIds: Set<string>): StreamedToolCall {
  // Some local servers send no id; one is made so that the result can be matched.
  // Ids go back to the API in history, where Anthropic (after a provider switch) allows only [a-zA-Z0-9_-].
  const id = c.id ? c.id.replace(/[^a-zA-Z0-9_-]/g, "_") : `call_${Date.now().toString(36)}_${i}`;
  return (c.final ??= { id: uniqueCallId(id, usedIds), name: c.name, rawArguments: c.json, input: parseToolArguments(c.json) });
}

async function readStream(stream: AsyncIterable<OpenAI.ChatCompletionChunk>, handlers: StreamHandlers, requestedModel: string, usedIds: Set<string>): Promise<ChatResponse> {
  let text = "";
  const calls: PendingCall[] = [];
  const usage = emptyUsage();
  let model = requestedModel;
  let finish: string | null = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.model) model = chunk.model;
    if (chunk.usage) {
      const cached = chunk.usage.prompt_tokens_details?.cached_tokens ?? 0;
      // prompt_tokens counts the cached ones too; they are priced apart.
      usage.inputTokens = Math.max(0, (chunk.usage.prompt_tokens ?? 0) - cached);
      usage.cacheReadTokens = cached;
      usage.outputTokens = chunk.usage.completion_tokens ?? 0;
    }
    const choice = chunk.choices?.[0];
    if (!choice) continue;
    const delta = choice.delta ?? {};
    // Reasoning text, as DeepSeek and vLLM (reasoning_content) or Ollama and OpenRouter (reasoning)
    // stream it: shown, never kept or sent back (none of these formats asks for it again).
    const reasoning = (delta as { reasoning_content?: unknown; reasoning?: unknown }).reasoning_content ?? (delta as { reasoning?: unknown }).reasoning;
    if (typeof reasoning === "string" && reasoning !== "") handlers.onThinking?.(reasoning);
    if (typeof delta.content === "string" && delta.content !== "") {
      text += delta.content;
      handlers.onText(delta.content);
    }
    for (const tc of delta.tool_calls ?? []) {
      const i = tc.index ?? calls.length;
      // A fragment of a later call means the earlier ones are complete: they may start now, in the
      // message's order (a call whose index has not come yet holds back those after it).
      for (let k = 0; k < i && calls[k]; k++) if (!calls[k]!.final) handlers.onToolCall?.(finalCall(calls[k]!, k, usedIds));
      const call = (calls[i] ??= { id: "", name: "", json: "" });
      if (call.final) throw new MalformedStreamError(`a fragment of tool call ${i} after a later call began`);
      if (tc.id) call.id = tc.id;
      if (tc.function?.name) call.name += tc.function.name;
      if (tc.function?.arguments) call.json += tc.function.arguments;
    }
    if (choice.finish_reason) {
      finish = choice.finish_reason;
      calls.forEach((c, k) => c && !c.final && handlers.onToolCall?.(finalCall(c, k, usedIds)));
    }
  }
  if (chunks === 0) throw new MalformedStreamError("the stream ended without any chunk");
  if (finish === null) throw new MalformedStreamError("the stream ended without a finish_reason");

  const content: ChatResponse["content"] = [];
  if (text !== "") content.push({ type: "text", text });
  const toolCalls: StreamedToolCall[] = [];
  calls.forEach((c, i) => {
    if (!c) return;
    const call = finalCall(c, i, usedIds);
    toolCalls.push(call);
    content.push({ type: "tool_use", id: call.id, name: call.name, input: call.input ?? {} });
  });
  const stopReason: StopReason =
    finish === "tool_calls" || finish === "function_call" ? "tool_use" : finish === "length" ? "max_tokens" : finish === "content_filter" ? "refusal" : finish === "stop" ? "end_turn" : "other";
  return { content, toolCalls, stopReason: toolCalls.length > 0 && stopReason === "end_turn" ? "tool_use" : stopReason, usage, model };
}

// The agent loop (seed 000, "Enhanced Agent Loop"): one streamed LLM request per step; the tool calls
// that stream carried are all executed and answered in one message of results; repeat until the
// model answers without tools, the step limit, the turn's time limit, a cancellation or an error.
// Whatever ends the turn, the conversation's history is left in a state both APIs accept.

import type { StopReason, ToolChoice, TurnFailureKind, Usage } from "../protocol.js";
import { ProviderError, StreamIdleError, isAbortError } from "../llm/errors.js";
import { redact } from "../log.js";
import { costOf, modelInfo } from "../llm/models.js";
import { addUsage, emptyUsage, type ChatResponse, type LLMProvider, type StreamedToolCall, type ToolDefinition } from "../llm/provider.js";
import { describeForModel } from "../tools/registry.js";
import type { Executor, ToolCall, ToolResult } from "../tools/executor.js";
import type { SafetyLevel, Tool } from "../tools/tool.js";
import { estimateTokens, fitToBudget, type Conversation } from "./conversation.js";

export interface RetryPolicy {
  /** Retries after the first attempt, for errors a retry may cure (429, 5xx, overloaded, network). */
  maxRetries: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxRetries: 3, baseDelayMs: 1000, maxDelayMs: 20_000 };
export const DEFAULT_MAX_STEPS = 25;
export const DEFAULT_TURN_TIMEOUT_MS = 15 * 60_000;

export interface TurnSettings {
  provider: LLMProvider;
  model: string;
  system: string;
  tools: readonly Tool[];
  /** Applies to the first request of the turn; later steps use auto, or the model could never stop. */
  toolChoice: ToolChoice;
  maxTokens: number;
  temperature?: number;
  /** Tool steps per turn. */
  maxSteps: number;
  turnTimeoutMs: number;
  retry: RetryPolicy;
  /** Overrides the models table (tests, unusual local models). */
  contextWindow?: number;
  /** The level in force under the user's settings, so a tool's description says truly whether it asks. */
  safetyOf?: (tool: Tool) => SafetyLevel;
}

export interface TurnEvents {
  textDelta(text: string): void;
  /** Before the call runs or asks for approval. */
  toolCall(call: StreamedToolCall, safetyLevel: SafetyLevel | "unknown"): void;
  /** Once per call, as each finishes. */
  toolResult(result: ToolResult): void;
  /** A failed request is about to be retried after DELAYMS. */
  retrying?(attempt: number, delayMs: number, reason: string): void;
}

export interface TurnInput {
  conversation: Conversation;
  turnId: string;
  text: string;
  executor: Executor;
  settings: TurnSettings;
  events: TurnEvents;
  /** Aborted when the user cancels the turn. */
  signal: AbortSignal;
}

interface OutcomeBase {
  steps: number;
  usage: Usage;
  costUsd: number;
  costNote?: string;
  model: string;
  /** LLM requests made, retries included. */
  llmRequests: number;
}

export type TurnOutcome =
  | (OutcomeBase & { status: "finished"; stopReason: StopReason; text: string })
  | (OutcomeBase & { status: "failed"; kind: TurnFailureKind; message: string });

const TIMEOUT = Symbol("turn timeout");

export async function runTurn(input: TurnInput): Promise<TurnOutcome> {
  const { conversation, settings, events, executor, turnId } = input;
  const controller = new AbortController();
  const onCancel = () => controller.abort(input.signal.reason);
  if (input.signal.aborted) onCancel();
  input.signal.addEventListener("abort", onCancel, { once: true });
  const timer = setTimeout(() => controller.abort(TIMEOUT), settings.turnTimeoutMs);
  const signal = controller.signal;
  const tags = { conversationId: conversation.id, turnId };

  // Results are reported as each call finishes; the hook sees every outcome of this turn's calls.
  const reported = new Set<string>();
  const report = (r: ToolResult) => {
    if (reported.has(r.id)) return;
    reported.add(r.id);
    events.toolResult(r);
  };
  const removeHook = executor.addHook((e) => {
    if (e.tags?.turnId === turnId && e.result && (e.phase === "after" || e.phase === "error")) report(e.result);
  });

  let usage = emptyUsage();
  let steps = 0;
  let llmRequests = 0;
  const outcome = (): OutcomeBase => {
    const cost = costOf(settings.model, usage);
    return { steps, usage, costUsd: cost.usd, ...(cost.note ? { costNote: cost.note } : {}), model: settings.model, llmRequests };
  };
  const failed = (err: unknown): TurnOutcome => {
    const base = outcome();
    if (signal.aborted) {
      return signal.reason === TIMEOUT
        ? { ...base, status: "failed", kind: "timeout", message: `The turn took longer than ${Math.round(settings.turnTimeoutMs / 1000)} s and was stopped. Raise turnTimeoutMs, or ask for a smaller piece of work.` }
        : { ...base, status: "failed", kind: "cancelled", message: "The turn was cancelled." };
    }
    if (err instanceof ProviderError) return { ...base, status: "failed", kind: err.kind, message: err.message };
    return { ...base, status: "failed", kind: "internal", message: redact(`Internal error in the agent loop: ${(err as Error)?.message ?? String(err)}`) };
  };

  const tools: ToolDefinition[] = settings.tools.map((t) => ({ name: t.name, description: describeForModel(t, settings.safetyOf?.(t)), inputSchema: t.schema }));
  const window = settings.contextWindow ?? modelInfo(settings.model).contextWindow;
  const fixedTokens = estimateTokens(settings.system) + estimateTokens(JSON.stringify(tools));

  conversation.addUserText(input.text);
  try {
    for (;;) {
      if (signal.aborted) return failed(undefined);
      // Old tool results give way first when the history no longer fits beside the answer's room.
      fitToBudget(conversation.messages, Math.floor((window - settings.maxTokens - fixedTokens) * 0.9));
      let response: ChatResponse;
      try {
        response = await requestWithRetry();
      } catch (err) {
        // The partial answer is dropped: the history still ends with the user's message (or results).
        return failed(err);
      }
      usage = addUsage(usage, response.usage);
      conversation.addAssistant(response.content);
      const text = response.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
      if (response.toolCalls.length === 0) {
        return { ...outcome(), status: "finished", stopReason: response.stopReason, text };
      }

      for (const call of response.toolCalls) events.toolCall(call, safetyOf(executor, call.name));
      const calls: ToolCall[] = response.toolCalls.map((c) => ({
        id: c.id,
        name: c.name,
        // Arguments that did not parse go to the executor as text, which answers with a JSON error the model can fix.
        arguments: c.input ?? c.rawArguments,
      }));
      let results: ToolResult[] = [];
      try {
        results = await executor.executeAll(calls, { signal, tags });
      } finally {
        // Every call gets exactly one result in history, even when executeAll did not finish.
        conversation.addToolResults(results);
      }
      results.forEach(report);
      steps++;
      if (signal.aborted) return failed(undefined);
      if (steps >= settings.maxSteps) {
        return { ...outcome(), status: "finished", stopReason: "step_limit", text };
      }
    }
  } catch (err) {
    if (isAbortError(err) || signal.aborted) return failed(undefined);
    return failed(err);
  } finally {
    clearTimeout(timer);
    input.signal.removeEventListener("abort", onCancel);
    removeHook();
  }

  async function requestWithRetry(): Promise<ChatResponse> {
    const toolChoice: ToolChoice = steps === 0 ? settings.toolChoice : settings.toolChoice === "none" ? "none" : "auto";
    let idleRetried = false;
    for (let attempt = 0; ; attempt++) {
      let emitted = false;
      llmRequests++;
      try {
        return await settings.provider.stream(
          {
            model: settings.model,
            system: settings.system,
            messages: conversation.messages,
            tools,
            toolChoice,
            maxTokens: settings.maxTokens,
            ...(settings.temperature !== undefined ? { temperature: settings.temperature } : {}),
          },
          {
            onText: (delta) => {
              emitted = true;
              events.textDelta(delta);
            },
          },
          signal,
        );
      } catch (err) {
        // A stalled stream is retried once, and only when nothing of it was shown.
        if (err instanceof StreamIdleError && !signal.aborted) {
          if (emitted || idleRetried) throw err.final(emitted);
          idleRetried = true;
          events.retrying?.(attempt + 1, 0, err.message);
          continue;
        }
        // A retry after text reached the user would show it twice: only clean failures are retried.
        if (signal.aborted || !(err instanceof ProviderError) || !err.retryable || emitted || attempt >= settings.retry.maxRetries) throw err;
        const backoff = Math.min(settings.retry.maxDelayMs, err.retryAfterMs ?? settings.retry.baseDelayMs * 2 ** attempt);
        events.retrying?.(attempt + 1, backoff, err.message);
        await sleep(backoff, signal);
      }
    }
  }
}

function safetyOf(executor: Executor, name: string): SafetyLevel | "unknown" {
  const tool = executor.options.registry.get(name);
  return tool ? executor.effectiveSafety(tool) : "unknown";
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

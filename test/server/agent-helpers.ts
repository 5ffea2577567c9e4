// Helpers for the agent loop and provider tests: a registry of node-runtime test tools, the mock
// LLM server, and a way to run one turn against it with a real provider.

import { startMockLLM, type MockLLM, type MockScript } from "../fixtures/mock-llm/server.mjs";
import { AnthropicProvider } from "../../server/llm/anthropic.js";
import { OpenAIProvider } from "../../server/llm/openai.js";
import type { LLMProvider, StreamedToolCall } from "../../server/llm/provider.js";
import { Conversation } from "../../server/agent/conversation.js";
import { runTurn, type TurnOutcome, type TurnSettings } from "../../server/agent/loop.js";
import { Executor, type ToolResult } from "../../server/tools/executor.js";
import { ToolRegistry } from "../../server/tools/registry.js";
import { defineTool, ToolError, type SafetyLevel } from "../../server/tools/tool.js";

export const FAKE_KEY = "sk-test-0123456789abcdef";

export function testRegistry(): ToolRegistry {
  const r = new ToolRegistry();
  const sym = { symbol: { type: "string" as const, description: "A symbol name." } };
  r.register(
    defineTool({
      name: "describe_symbol",
      description: "Describe a symbol. Returns what it names.",
      parameters: sym,
      required: ["symbol"],
      safety: "safe",
      categories: ["introspection"],
      runtime: "node",
      handler: async (a) => `${String(a.symbol).toUpperCase()} names a function: (${String(a.symbol)} items)`,
    }),
  );
  r.register(
    defineTool({
      name: "who_calls",
      description: "List callers of a function.",
      parameters: sym,
      required: ["symbol"],
      safety: "safe",
      categories: ["introspection", "xref"],
      runtime: "node",
      handler: async (a) => `callers of ${String(a.symbol)}: main, run-batch`,
    }),
  );
  r.register(
    defineTool({
      name: "eval_form",
      description: "Evaluate a form in the image.",
      parameters: { form: { type: "string", description: "The form." } },
      required: ["form"],
      safety: "cautious",
      categories: ["execution"],
      runtime: "node",
      handler: async (a) => {
        if (String(a.form).includes("error")) throw new ToolError(`The form signalled an error: ${String(a.form)}`);
        return `=> ${String(a.form).length}`;
      },
    }),
  );
  r.register(
    defineTool({
      name: "slow_tool",
      description: "Takes a long time unless stopped.",
      parameters: {},
      safety: "safe",
      categories: ["test"],
      runtime: "node",
      handler: (_a, ctx) =>
        new Promise((resolve, reject) => {
          const t = setTimeout(() => resolve("slow done"), 10_000);
          ctx.signal.addEventListener("abort", () => {
            clearTimeout(t);
            reject(new ToolError("slow_tool was stopped."));
          });
        }),
    }),
  );
  return r;
}

export interface Harness {
  mock: MockLLM;
  registry: ToolRegistry;
  executor: Executor;
  close(): Promise<void>;
}

export async function harness(): Promise<Harness> {
  const mock = await startMockLLM();
  const registry = testRegistry();
  const executor = new Executor({ registry });
  return { mock, registry, executor, close: () => mock.close() };
}

export function provider(kind: "anthropic" | "openai", mock: MockLLM, apiKey = FAKE_KEY): LLMProvider {
  return kind === "anthropic" ? new AnthropicProvider({ apiKey, baseUrl: mock.url }) : new OpenAIProvider({ apiKey, baseUrl: `${mock.url}/v1` });
}

export interface Recorded {
  text: string[];
  /** The reasoning shown, piece by piece; "(redacted)" for a redacted block. */
  thinking: string[];
  calls: { call: StreamedToolCall; safety: SafetyLevel | "unknown" }[];
  results: ToolResult[];
  order: string[];
  /** What the user is shown of each call, in order: "call:ID", "started:ID" and "result:ID". */
  callsShown: string[];
  /** Notices about the turn, shown in the chat apart from the thinking. */
  notices: string[];
}

export interface TurnRun {
  outcome: TurnOutcome;
  events: Recorded;
}

export async function turn(
  h: Harness,
  kind: "anthropic" | "openai",
  conversation: Conversation,
  text: string,
  opts: { script?: MockScript; settings?: Partial<TurnSettings>; signal?: AbortSignal; onEvent?: (what: string) => void } = {},
): Promise<TurnRun> {
  if (opts.script) h.mock.setScript(opts.script);
  const events: Recorded = { text: [], thinking: [], calls: [], results: [], order: [], callsShown: [], notices: [] };
  const outcome = await runTurn({
    conversation,
    turnId: `turn-${conversation.turns++}`,
    text,
    executor: h.executor,
    signal: opts.signal ?? new AbortController().signal,
    settings: {
      provider: provider(kind, h.mock),
      model: kind === "anthropic" ? "claude-sonnet-4-6" : "gpt-4.1",
      system: "You are a test.",
      tools: h.registry.list(),
      toolChoice: "auto",
      maxTokens: 1024,
      maxSteps: 10,
      turnTimeoutMs: 10_000,
      retry: { maxRetries: 2, baseDelayMs: 1, maxDelayMs: 5 },
      ...opts.settings,
    },
    events: {
      notice: (t) => {
        events.notices.push(t);
        events.order.push("notice");
      },
      thinkingDelta: (t, redacted) => {
        events.thinking.push(redacted ? "(redacted)" : t);
        events.order.push("thinking");
      },
      textDelta: (t) => {
        events.text.push(t);
        events.order.push("text");
        opts.onEvent?.("text");
      },
      toolCall: (call, safety, running) => {
        events.calls.push({ call, safety });
        events.order.push(`call:${call.name}`);
        events.callsShown.push(`call:${call.id}`);
        if (running) events.callsShown.push(`started:${call.id}`);
        opts.onEvent?.("call");
      },
      toolStarted: (call) => {
        events.callsShown.push(`started:${call.id}`);
      },
      toolResult: (r) => {
        events.results.push(r);
        events.order.push(`result:${r.name}`);
        events.callsShown.push(`result:${r.id}`);
        opts.onEvent?.("result");
      },
    },
  });
  return { outcome, events };
}

/**
 * Sends the conversation's history back with one more user message; the mock validates it as the
 * real API would and answers 400 if it is not acceptable. Returns the outcome of that turn.
 */
export async function historyAccepted(h: Harness, kind: "anthropic" | "openai", conversation: Conversation): Promise<TurnOutcome> {
  const { outcome } = await turn(h, kind, conversation, "Thanks. Anything else?", { script: { steps: [{ content: [{ type: "text", text: "No, that is all." }] }] } });
  return outcome;
}

export function newConversation(): Conversation {
  return new Conversation(`c-test-${Math.random().toString(36).slice(2)}`);
}

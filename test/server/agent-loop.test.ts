// The agent loop with the real Anthropic and OpenAI SDKs against the scripted mock LLM server, which
// validates every request as the real API does. Each scenario ends by sending the history back.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RecordedRequest } from "../fixtures/mock-llm/server.mjs";
import { harness, historyAccepted, newConversation, turn, type Harness } from "./agent-helpers.js";
import type { Message } from "../../server/llm/provider.js";

type Kind = "anthropic" | "openai";

/** The tool results of a recorded request's last message(s), whichever the wire format. */
function toolResults(kind: Kind, req: RecordedRequest): { id: string; content: string; isError: boolean }[] {
  const msgs = req.body.messages as any[];
  if (kind === "anthropic") {
    const last = msgs[msgs.length - 1];
    return (Array.isArray(last.content) ? last.content : [])
      .filter((b: any) => b.type === "tool_result")
      .map((b: any) => ({ id: b.tool_use_id, content: String(b.content), isError: b.is_error === true }));
  }
  const out = [];
  for (let i = msgs.length - 1; i >= 0 && msgs[i].role === "tool"; i--) out.unshift({ id: msgs[i].tool_call_id, content: msgs[i].content, isError: String(msgs[i].content).startsWith("Error:") });
  return out;
}

/** Ids of the tool calls in the last assistant message of a recorded request. */
function lastCallIds(kind: Kind, req: RecordedRequest): string[] {
  const msgs = req.body.messages as any[];
  const a = [...msgs].reverse().find((m) => m.role === "assistant");
  if (!a) return [];
  return kind === "anthropic" ? a.content.filter((b: any) => b.type === "tool_use").map((b: any) => b.id) : (a.tool_calls ?? []).map((c: any) => c.id);
}

describe.each<Kind>(["anthropic", "openai"])("agent loop over %s", (kind) => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("runs tool, result, tool, result, answer with exactly one LLM request per step", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Describe process-data", {
      script: {
        steps: [
          { content: [{ type: "text", text: "Let me look at it first." }, { type: "tool_use", name: "describe_symbol", input: { symbol: "process-data" } }] },
          { content: [{ type: "tool_use", name: "who_calls", input: { symbol: "process-data" } }] },
          { content: [{ type: "text", text: "The docs say: {{last_tool_result}}" }], usage: { input_tokens: 1000, output_tokens: 100 } },
        ],
      },
    });
    expect(outcome).toMatchObject({ status: "finished", stopReason: "end_turn", steps: 2, llmRequests: 3 });
    if (outcome.status !== "finished") return;
    expect(outcome.text).toBe("The docs say: callers of process-data: main, run-batch");
    const reqs = h.mock.requests();
    expect(reqs).toHaveLength(3);
    expect(reqs.every((r) => r.status === 200 && r.body.stream === true)).toBe(true);
    // Text is streamed in pieces, and the tool calls come from the same streamed response.
    expect(events.text.length).toBeGreaterThan(2);
    expect(events.text.join("")).toBe("Let me look at it first.The docs say: callers of process-data: main, run-batch");
    expect(events.order.filter((e) => e !== "text")).toEqual(["call:describe_symbol", "result:describe_symbol", "call:who_calls", "result:who_calls"]);
    expect(events.calls[0]!.call.input).toEqual({ symbol: "process-data" });
    expect(events.calls[0]!.safety).toBe("safe");
    // The second request answers the first call by id.
    expect(toolResults(kind, reqs[1]!)).toEqual([{ id: lastCallIds(kind, reqs[1]!)[0], content: "PROCESS-DATA names a function: (process-data items)", isError: false }]);
    expect(outcome.usage.inputTokens).toBeGreaterThan(1000);
    expect(outcome.costUsd).toBeGreaterThan(0);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
    expect(h.mock.requests()[0]!.status).toBe(200);
  });

  it("executes every call of one message and answers them in one message, in order", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Look at three things", {
      script: {
        steps: [
          {
            content: [
              { type: "tool_use", name: "describe_symbol", input: { symbol: "a" } },
              { type: "tool_use", name: "who_calls", input: { symbol: "b" } },
              { type: "tool_use", name: "describe_symbol", input: { symbol: "c" } },
            ],
          },
          { content: [{ type: "text", text: "Done." }] },
        ],
      },
    });
    expect(outcome).toMatchObject({ status: "finished", steps: 1, llmRequests: 2 });
    const reqs = h.mock.requests();
    expect(reqs).toHaveLength(2);
    const ids = lastCallIds(kind, reqs[1]!);
    expect(ids).toHaveLength(3);
    expect(toolResults(kind, reqs[1]!).map((r) => [r.id, r.content])).toEqual([
      [ids[0], "A names a function: (a items)"],
      [ids[1], "callers of b: main, run-batch"],
      [ids[2], "C names a function: (c items)"],
    ]);
    expect(events.order.slice(0, 3)).toEqual(["call:describe_symbol", "call:who_calls", "call:describe_symbol"]);
    expect(events.results.map((r) => r.id).sort()).toEqual([...ids].sort());
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("returns a failing tool as an error result and lets the model recover", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Evaluate something", {
      script: {
        steps: [
          { content: [{ type: "tool_use", name: "eval_form", input: { form: "(error \"bad\")" } }] },
          { content: [{ type: "text", text: "That failed; trying again." }, { type: "tool_use", name: "eval_form", input: { form: "(+ 1 2)" } }] },
          { content: [{ type: "text", text: "Result: {{last_tool_result}}" }] },
        ],
      },
    });
    expect(outcome).toMatchObject({ status: "finished", steps: 2, text: "Result: => 7" });
    expect(events.results.map((r) => r.success)).toEqual([false, true]);
    const [failed] = toolResults(kind, h.mock.requests()[1]!);
    expect(failed!.isError).toBe(true);
    expect(failed!.content).toContain("The form signalled an error");
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("answers an unknown tool name with an error result and goes on", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Do it", {
      script: {
        steps: [
          { content: [{ type: "tool_use", name: "describe_symbols", input: { symbol: "x" } }] },
          { content: [{ type: "text", text: "Sorry: {{last_tool_result}}" }] },
        ],
      },
    });
    expect(outcome.status).toBe("finished");
    expect(events.calls[0]!.safety).toBe("unknown");
    expect(events.results[0]).toMatchObject({ success: false });
    expect(events.results[0]!.content).toMatch(/Unknown tool "describe_symbols".*describe_symbol/);
    expect(toolResults(kind, h.mock.requests()[1]!)[0]!.isError).toBe(true);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("keeps the history valid when the model invents a tool name the API would refuse", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Do it", {
      script: { steps: [{ content: [{ type: "tool_use", name: "lisp.eval form!", input: {} }] }, { content: [{ type: "text", text: "ok" }] }] },
    });
    expect(outcome.status).toBe("finished");
    expect(events.results[0]!.content).toContain('Unknown tool "lisp.eval form!"');
    expect(toolResults(kind, h.mock.requests()[1]!)[0]!.isError).toBe(true);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("turns tool arguments that are not JSON into an error result and goes on", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Describe", {
      script: {
        steps: [
          { content: [{ type: "tool_use", name: "describe_symbol", raw_input: '{"symbol": "proc' }] },
          { content: [{ type: "tool_use", name: "describe_symbol", input: { symbol: "proc" } }] },
          { content: [{ type: "text", text: "Now: {{last_tool_result}}" }] },
        ],
      },
    });
    expect(outcome).toMatchObject({ status: "finished", steps: 2, text: "Now: PROC names a function: (proc items)" });
    expect(events.calls[0]!.call.input).toBeUndefined();
    expect(events.calls[0]!.call.rawArguments).toBe('{"symbol": "proc');
    expect(events.results[0]!.success).toBe(false);
    expect(events.results[0]!.content).toMatch(/not valid JSON/);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("stops at the step limit with a valid history", async () => {
    const c = newConversation();
    const step = { content: [{ type: "tool_use" as const, name: "describe_symbol", input: { symbol: "loop" } }] };
    const { outcome } = await turn(h, kind, c, "Loop forever", { script: { steps: [step, step, step, step] }, settings: { maxSteps: 2 } });
    expect(outcome).toMatchObject({ status: "finished", stopReason: "step_limit", steps: 2, llmRequests: 2 });
    expect(h.mock.requests()).toHaveLength(2);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("cancels mid-stream: the HTTP stream is aborted and the history stays valid", async () => {
    const c = newConversation();
    const ctl = new AbortController();
    const started = Date.now();
    const { outcome, events } = await turn(h, kind, c, "Write a lot", {
      script: { steps: [{ content: [{ type: "text", text: "A long answer that never ends because the server hangs" }], hang_after_chunks: kind === "anthropic" ? 4 : 2 }] },
      signal: ctl.signal,
      onEvent: (e) => e === "text" && ctl.abort(),
    });
    expect(outcome).toMatchObject({ status: "failed", kind: "cancelled" });
    expect(Date.now() - started).toBeLessThan(3000);
    expect(events.text.length).toBeGreaterThan(0);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("cancels mid-tool: the running tool is stopped and answered, the history stays valid", async () => {
    const c = newConversation();
    const ctl = new AbortController();
    const { outcome, events } = await turn(h, kind, c, "Run the slow thing", {
      script: { steps: [{ content: [{ type: "tool_use", name: "slow_tool", input: {} }, { type: "tool_use", name: "describe_symbol", input: { symbol: "s" } }] }] },
      signal: ctl.signal,
      onEvent: (e) => e === "call" && setTimeout(() => ctl.abort(), 50),
    });
    expect(outcome).toMatchObject({ status: "failed", kind: "cancelled", steps: 1 });
    expect(events.results.find((r) => r.name === "slow_tool")).toMatchObject({ success: false });
    // Both calls are answered in history: the stopped one as an error; the safe one beside it had finished.
    const answered = c.messages.flatMap((m) => (m.role === "user" ? m.content.filter((b) => b.type === "tool_result") : []));
    expect(answered).toHaveLength(2);
    expect(answered.map((b) => b.type === "tool_result" && b.isError)).toEqual([true, false]);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("retries a 429 and then succeeds", async () => {
    const c = newConversation();
    const { outcome } = await turn(h, kind, c, "Hi", {
      script: { steps: [{ error: { status: 429, type: "rate_limit_error", message: "Number of requests has exceeded your rate limit", retry_after: 0 } }, { content: [{ type: "text", text: "Hello!" }] }] },
    });
    expect(outcome).toMatchObject({ status: "finished", text: "Hello!", llmRequests: 2 });
    expect(h.mock.requests().map((r) => r.status)).toEqual([429, 200]);
  });

  it("reports a 401 with what to do, without retrying", async () => {
    const c = newConversation();
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [{ error: { status: 401, type: "authentication_error", message: "invalid x-api-key" } }] } });
    expect(outcome).toMatchObject({ status: "failed", kind: "auth", llmRequests: 1 });
    if (outcome.status !== "failed") return;
    expect(outcome.message).toContain("rejected the API key");
    expect(outcome.message).toContain(kind === "anthropic" ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY");
    expect(outcome.message).not.toContain("sk-test");
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("gives up on a server that stays overloaded after the retries", async () => {
    const c = newConversation();
    const err = { error: { status: 529, type: "overloaded_error", message: "Overloaded", retry_after: 0 } };
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [err, err, err, err] } });
    expect(outcome).toMatchObject({ status: "failed", kind: "provider", llmRequests: 3 });
    if (outcome.status === "failed") expect(outcome.message).toMatch(/overloaded.*Try again/);
  });

  it("retries an in-stream overloaded error before any text, and reports one after text without repeating it", async () => {
    const c = newConversation();
    const early = { content: [{ type: "text" as const, text: "never shown" }], stream_error: { after_chunks: 1, type: "overloaded_error", message: "Overloaded" } };
    const { outcome, events } = await turn(h, kind, c, "Hi", { script: { steps: [early, { content: [{ type: "text", text: "Recovered." }] }] } });
    expect(outcome, JSON.stringify(outcome)).toMatchObject({ status: "finished", text: "Recovered.", llmRequests: 2 });
    expect(events.text.join("")).toBe("Recovered.");
    const late = { content: [{ type: "text" as const, text: "Partial answer that stops" }], stream_error: { after_chunks: kind === "anthropic" ? 5 : 3, type: "overloaded_error", message: "Overloaded" } };
    const second = await turn(h, kind, c, "Again", { script: { steps: [late, { content: [{ type: "text", text: "unused" }] }] } });
    expect(second.outcome).toMatchObject({ status: "failed", kind: "provider", llmRequests: 1 });
    expect(second.events.text.length).toBeGreaterThan(0);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("reports a malformed stream clearly and keeps the history valid", async () => {
    const c = newConversation();
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [{ malformed: true }] } });
    expect(outcome).toMatchObject({ status: "failed", kind: "provider" });
    if (outcome.status === "failed") expect(outcome.message).toMatch(/could not be read/);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("stops a turn at its wall-clock limit", async () => {
    const c = newConversation();
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [{ content: [{ type: "text", text: "never finishes" }], hang_after_chunks: 1 }] }, settings: { turnTimeoutMs: 300 } });
    expect(outcome).toMatchObject({ status: "failed", kind: "timeout" });
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("keeps a multi-turn history with tool calls acceptable to the provider", async () => {
    const c = newConversation();
    for (let i = 0; i < 3; i++) {
      const { outcome } = await turn(h, kind, c, `Question ${i}`, {
        script: { steps: [{ content: [{ type: "tool_use", name: "describe_symbol", input: { symbol: `s${i}` } }] }, { content: [{ type: "text", text: "Answer about {{last_user_text}}" }] }] },
      });
      expect(outcome).toMatchObject({ status: "finished", text: `Answer about Question ${i}` });
    }
    expect(c.messages).toHaveLength(12);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });
});

// OpenAI's answer has one text, so only Anthropic's can hold several text blocks.
describe("agent loop, an Anthropic answer of several text blocks", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("shows a later text block of one answer as a paragraph of its own, and keeps the blocks as they came", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, "anthropic", c, "Look", {
      script: {
        steps: [
          { content: [{ type: "text", text: "First the callers." }, { type: "tool_use", name: "who_calls", input: { symbol: "process-data" } }, { type: "text", text: "Then the rest." }] },
          { content: [{ type: "text", text: "Done." }] },
        ],
      },
    });
    expect(outcome.status).toBe("finished");
    expect(events.text.join("")).toBe("First the callers.\n\nThen the rest.Done.");
    // In the model's order: the text written after the call is shown after the call is announced.
    const textsBeforeCall = events.order.slice(0, events.order.indexOf("call:who_calls")).filter((e) => e === "text").length;
    expect(events.text.slice(0, textsBeforeCall).join("")).toBe("First the callers.");
    expect(c.messages[1]!.content.flatMap((b) => (b.type === "text" ? [b.text] : []))).toEqual(["First the callers.", "Then the rest."]);
  });

  it("runs adjacent text blocks on (a quote's citation splits a sentence into blocks), and ends the turn with the text it showed", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, "anthropic", c, "Look", {
      settings: { maxSteps: 1 },
      script: {
        steps: [{ content: [{ type: "text", text: "The answer is " }, { type: "text", text: "42." }, { type: "tool_use", name: "who_calls", input: { symbol: "process-data" } }, { type: "text", text: "Then more." }] }],
      },
    });
    expect(events.text.join("")).toBe("The answer is 42.\n\nThen more.");
    expect(outcome).toMatchObject({ status: "finished", stopReason: "step_limit", text: "The answer is 42.\n\nThen more." });
  });
});

describe("agent loop, provider-independent", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("reports an unreachable endpoint after retrying", async () => {
    const { startMockLLM } = await import("../fixtures/mock-llm/server.mjs");
    const dead = await startMockLLM();
    const url = dead.url;
    await dead.close();
    const { AnthropicProvider } = await import("../../server/llm/anthropic.js");
    const c = newConversation();
    const { outcome } = await turn(h, "anthropic", c, "Hi", { settings: { provider: new AnthropicProvider({ apiKey: "k-12345678", baseUrl: url }) } });
    expect(outcome).toMatchObject({ status: "failed", kind: "provider", llmRequests: 3 });
    if (outcome.status === "failed") expect(outcome.message).toMatch(/Could not reach anthropic/);
  });

  it("shortens long tool results of old steps when the context window gets tight", async () => {
    const big = "x".repeat(20_000);
    const c2 = newConversation();
    // The saved file is told what was shortened (it keeps the results whole).
    const shortened: [string, number][] = [];
    const saved: Message[] = [];
    c2.recorder = { message: (m) => void saved.push(m), compaction: () => undefined, turn: () => undefined, changes: () => undefined, usage: () => undefined, result: () => undefined, shortened: (t, n) => void shortened.push([t, n]) };
    await turn(h, "anthropic", c2, "Read", {
      script: {
        steps: [
          { content: [{ type: "tool_use", name: "describe_symbol", input: { symbol: big } }] },
          { content: [{ type: "tool_use", name: "who_calls", input: { symbol: "z" } }] },
          { content: [{ type: "text", text: "ok" }] },
        ],
      },
      settings: { contextWindow: 9000, maxTokens: 500 },
    });
    // The latest step's result is sent whole; one step later it gives way.
    const latest = h.mock.requests()[1]!.body.messages[2].content[0].content as string;
    expect(latest.length).toBeGreaterThan(40_000);
    expect(latest).not.toContain("shortened");
    const third = h.mock.requests()[2]!.body.messages as any[];
    const firstResult = third[2].content[0];
    expect(firstResult.type).toBe("tool_result");
    expect(firstResult.content).toMatch(/shortened: \d+ of \d+ characters/);
    const lastResult = third[4].content[0];
    expect(lastResult.content).toBe("callers of z: main, run-batch");
    expect(shortened).toHaveLength(1);
    expect(shortened[0]![1]).toBe(1);
    const savedResult = saved[2]!.content[0]!;
    expect(savedResult.type === "tool_result" && savedResult.content.length).toBeGreaterThan(40_000);
  });
});

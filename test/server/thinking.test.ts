// Thinking: the model reasons between its calls, the user is shown it, and every history it leaves
// is one the API accepts. Through the real SDKs against the mock LLM, which signs thinking as the API
// does and refuses a request whose thinking was dropped, changed or moved.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signThinking, validateAnthropic, type MockStep } from "../fixtures/mock-llm/server.mjs";
import { harness, historyAccepted, newConversation, turn, type Harness } from "./agent-helpers.js";
import { ConversationJournal, ConversationStore, STORE_VERSION } from "../../server/agent/conversation-store.js";
import { compactedHistory, transcript } from "../../server/agent/compaction.js";
import { historyProblems, repairHistory } from "../../server/agent/history-rules.js";
import { toParams } from "../../server/llm/anthropic.js";
import { costOf } from "../../server/llm/models.js";
import type { AssistantMessage, Message } from "../../server/llm/provider.js";
import { modelThinking, settingFor, thinkingForRequest, thinkingForTurn, thinkingSupport } from "../../server/llm/thinking.js";

const think = (text: string) => ({ type: "thinking" as const, thinking: text });
const steps3: MockStep[] = [
  { content: [think("Which symbol is it? Describe it first."), { type: "text", text: "Let me look." }, { type: "tool_use", name: "describe_symbol", input: { symbol: "process-data" } }] },
  { content: [think("A function. Who calls it?"), { type: "redacted_thinking" }, { type: "tool_use", name: "who_calls", input: { symbol: "process-data" } }] },
  { content: [think("Two callers: enough to answer."), { type: "text", text: "It is called by {{last_tool_result}}." }], usage: { input_tokens: 100, output_tokens: 700 } },
];

/** The thinking blocks of each assistant message of a recorded request, as sent. */
function sentThinking(body: { messages: { role: string; content: { type: string }[] }[] }): unknown[][] {
  return body.messages.filter((m) => m.role === "assistant").map((m) => m.content.filter((b) => b.type === "thinking" || b.type === "redacted_thinking"));
}

describe("which models think, and how (Anthropic's documentation)", () => {
  it("asks each model in the mode its documentation recommends", () => {
    expect(thinkingSupport("claude-opus-4-7")).toEqual({ kind: "adaptive-only", omitsDisplay: true });
    expect(thinkingSupport("claude-sonnet-5")).toMatchObject({ kind: "adaptive-only" });
    expect(thinkingSupport("claude-sonnet-4-6")).toEqual({ kind: "adaptive" });
    expect(thinkingSupport("anthropic/claude-opus-4.6")).toEqual({ kind: "adaptive" });
    expect(thinkingSupport("claude-sonnet-4-5-20250929")).toEqual({ kind: "budget", interleavedBeta: true });
    expect(thinkingSupport("claude-opus-4-20250514")).toEqual({ kind: "budget", interleavedBeta: true });
    expect(thinkingSupport("claude-3-7-sonnet-20250219")).toEqual({ kind: "budget" });
    expect(thinkingSupport("claude-3-5-haiku-20241022")).toEqual({ kind: "none" });
    const turn = { maxTokens: 8192, toolChoice: "auto" as const };
    expect(thinkingForTurn("anthropic", "claude-opus-4-7", undefined, turn)).toEqual({ request: { mode: "adaptive", display: "summarized" } });
    expect(thinkingForTurn("anthropic", "claude-sonnet-4-6", "medium", turn)).toEqual({ request: { mode: "adaptive", effort: "medium" } });
    expect(thinkingForTurn("anthropic", "claude-sonnet-4-5", undefined, turn)).toEqual({ request: { mode: "budget", budgetTokens: 4096, interleaved: true } });
    expect(thinkingForTurn("anthropic", "claude-sonnet-4-5", 50_000, turn).request).toEqual({ mode: "budget", budgetTokens: 8191, interleaved: true });
    expect(thinkingForTurn("anthropic", "claude-sonnet-4-6", "off", turn)).toEqual({});
    // What the API would refuse is not sent, and the user is told which setting to change.
    expect(thinkingForTurn("anthropic", "claude-sonnet-4-5", undefined, { maxTokens: 1000, toolChoice: "auto" }).note).toMatch(/sly-agent-q-max-tokens/);
    expect(thinkingForTurn("anthropic", "claude-sonnet-4-5", undefined, { maxTokens: 8192, toolChoice: "any" })).toEqual({ note: expect.stringMatching(/forced/) });
    expect(thinkingForTurn("anthropic", "claude-sonnet-4-6", undefined, { ...turn, temperature: 0.2 }).note).toMatch(/temperature from sly-agent-q-extra-configuration/);
    expect(thinkingForTurn("anthropic", "claude-3-5-haiku", "high", turn).note).toMatch(/does not think/);
    expect(thinkingForTurn("anthropic", "claude-3-5-haiku", undefined, turn)).toEqual({});
    expect(thinkingForTurn("openai", "deepseek-reasoner", "high", turn)).toEqual({ request: { mode: "reasoning-effort", effort: "high" } });
    expect(thinkingForTurn("openai", "gpt-4.1", undefined, turn)).toEqual({});
    expect(settingFor({ "*": "low", "claude-opus": "off", "claude-opus-4-7": "max" }, "claude-opus-4-7")).toBe("max");
    expect(settingFor({ "*": "low", "claude-opus": "off" }, "claude-opus-4-5")).toBe("off");
    expect(settingFor({ "*": "low" }, "gpt-5")).toBe("low");
  });

  it("sends adaptive thinking with its effort and display, a budget with the interleaved beta header", () => {
    const base = { system: "", messages: [{ role: "user" as const, content: [{ type: "text" as const, text: "hi" }] }], tools: [], toolChoice: "auto" as const, maxTokens: 8192 };
    const adaptive = toParams({ ...base, model: "claude-opus-4-7", thinking: { mode: "adaptive", effort: "high", display: "summarized" } });
    expect(adaptive.params).toMatchObject({ thinking: { type: "adaptive", display: "summarized" }, output_config: { effort: "high" } });
    expect(adaptive.headers).toBeUndefined();
    const budget = toParams({ ...base, model: "claude-sonnet-4-5", thinking: { mode: "budget", budgetTokens: 4096, interleaved: true } });
    expect(budget.params.thinking).toEqual({ type: "enabled", budget_tokens: 4096 });
    expect(budget.headers).toEqual({ "anthropic-beta": "interleaved-thinking-2025-05-14" });
    expect(toParams({ ...base, model: "claude-sonnet-4-6" }).params.thinking).toBeUndefined();
  });
});

describe("what the menu says of a model's thinking", () => {
  it("names a model that cannot think and why, and never sends it a setting (no 400)", () => {
    const turn = { maxTokens: 8192, toolChoice: "auto" as const };
    for (const [provider, model] of [["anthropic", "claude-3-5-haiku-20241022"], ["openai", "gpt-4.1"], ["openai", "openai/gpt-4o-mini"]] as const) {
      const said = modelThinking(provider, model);
      expect(said.thinks, model).toBe("no");
      expect(said.how).toMatch(/does not (think|reason).*none is sent whatever sly-agent-q-thinking says/);
      const t = thinkingForTurn(provider, model, "high", turn);
      expect(t.request, model).toBeUndefined();
      expect(t.note).toMatch(/not sent/);
      expect(thinkingForTurn(provider, model, "auto", turn)).toEqual({});
    }
    expect(modelThinking("anthropic", "claude-opus-4-7")).toMatchObject({ thinks: "yes", how: expect.stringMatching(/adaptively.*no budget/) });
    expect(modelThinking("anthropic", "claude-sonnet-4-5")).toMatchObject({ thinks: "yes", how: expect.stringMatching(/within a budget/) });
    expect(modelThinking("openai", "o4-mini")).toMatchObject({ thinks: "yes" });
    // A compatible server's model: an effort goes only when set, and the menu says the server may refuse it.
    expect(modelThinking("openai", "deepseek-reasoner")).toMatchObject({ thinks: "if-set", how: expect.stringMatching(/only when you set one/) });
    expect(thinkingForTurn("openai", "deepseek-reasoner", "high", turn).request).toEqual({ mode: "reasoning-effort", effort: "high" });
  });
});

describe("a tool loop with thinking", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("anthropic, adaptive: three steps, each answer's thinking sent back whole, signed, in order; the user is shown it", async () => {
    const c = newConversation();
    const { outcome, events } = await turn(h, "anthropic", c, "Who calls process-data?", { script: { steps: steps3 }, settings: { thinking: { mode: "adaptive" } } });
    expect(outcome).toMatchObject({ status: "finished", steps: 2, llmRequests: 3 });
    const reqs = h.mock.requests();
    expect(reqs.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(reqs.every((r) => r.body.thinking?.type === "adaptive")).toBe(true);
    // Each later request carries every earlier answer's thinking exactly as streamed: text, signature, order.
    const first = { type: "thinking", thinking: "Which symbol is it? Describe it first.", signature: signThinking("Which symbol is it? Describe it first.") };
    const second = sentThinking(reqs[2]!.body)[1]!;
    expect(sentThinking(reqs[1]!.body)).toEqual([[first]]);
    expect(sentThinking(reqs[2]!.body)[0]).toEqual([first]);
    expect(second).toHaveLength(2);
    expect(second[0]).toEqual({ type: "thinking", thinking: "A function. Who calls it?", signature: signThinking("A function. Who calls it?") });
    expect(second[1]).toMatchObject({ type: "redacted_thinking", data: expect.any(String) });
    // The prompt cache's prefix holds: each request begins with the one before, byte for byte (cache marks aside).
    const plain = (i: number) => JSON.parse(JSON.stringify(reqs[i]!.body.messages, (k, v: unknown) => (k === "cache_control" ? undefined : v))) as unknown[];
    expect(plain(2).slice(0, plain(1).length)).toEqual(plain(1));
    // Shown to the user, before the answer it leads to; the redacted block as such.
    expect(events.thinking.join("")).toBe("Which symbol is it? Describe it first.A function. Who calls it?(redacted)Two callers: enough to answer.");
    expect(events.order.indexOf("thinking")).toBeLessThan(events.order.indexOf("text"));
    // Kept in the history, and counted: thinking is output.
    expect((c.messages[1] as AssistantMessage).content[0]).toEqual(first);
    expect(outcome.usage.outputTokens).toBeGreaterThanOrEqual(700);
    expect(costOf("claude-sonnet-4-6", { inputTokens: 0, outputTokens: 700, cacheReadTokens: 0, cacheWriteTokens: 0 }).usd).toBeCloseTo((700 * 15) / 1e6, 9);
    expect(await historyAccepted(h, "anthropic", c)).toMatchObject({ status: "finished" });
  });

  it("anthropic, budget (Claude 4.5): the budget below max tokens, the interleaved beta header, thinking at every step", async () => {
    const c = newConversation();
    const settings = { model: "claude-sonnet-4-5", thinking: { mode: "budget" as const, budgetTokens: 2048, interleaved: true } };
    const { outcome } = await turn(h, "anthropic", c, "Who calls process-data?", { script: { steps: steps3 }, settings });
    expect(outcome).toMatchObject({ status: "finished", steps: 2 });
    const reqs = h.mock.requests();
    expect(reqs.map((r) => [r.status, r.body.thinking, r.headers["anthropic-beta"]])).toEqual(Array(3).fill([200, { type: "enabled", budget_tokens: 2048 }, "interleaved-thinking-2025-05-14"]));
    expect((await turn(h, "anthropic", c, "And then?", { script: { steps: [{ content: [{ type: "text", text: "Nothing." }] }] }, settings })).outcome).toMatchObject({ status: "finished" });
  });

  it("the mock refuses what the real API refuses: a loop whose thinking was dropped, changed or moved", async () => {
    const c = newConversation();
    await turn(h, "anthropic", c, "Who calls process-data?", { script: { steps: [steps3[0]!, { content: [{ type: "text", text: "Done." }] }] }, settings: { model: "claude-sonnet-4-5", thinking: { mode: "budget", budgetTokens: 2048, interleaved: true } } });
    const sent = h.mock.requests()[1]!;
    expect(sent.status).toBe(200);
    const body = structuredClone(sent.body);
    const answer = body.messages[1];
    const headers = { headers: { "anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14" } };
    expect(validateAnthropic(body, headers)).toBeUndefined();
    // Dropped: the answer the results follow must begin with its thinking.
    expect(validateAnthropic({ ...body, messages: [body.messages[0], { ...answer, content: answer.content.slice(1) }, body.messages[2]] }, headers)).toMatch(/Expected `thinking` or `redacted_thinking`/);
    // Changed: the signature no longer matches.
    expect(validateAnthropic({ ...body, messages: [body.messages[0], { ...answer, content: [{ ...answer.content[0], thinking: "edited" }, ...answer.content.slice(1)] }, body.messages[2]] }, headers)).toMatch(/Invalid `signature`/);
    // Moved: after the text.
    expect(validateAnthropic({ ...body, messages: [body.messages[0], { ...answer, content: [answer.content[1], answer.content[0], answer.content[2]] }, body.messages[2]] }, headers)).toMatch(/must come first/);
    // And by the API's own rules on the parameter.
    expect(validateAnthropic({ ...body, model: "claude-opus-4-7" }, headers)).toMatch(/thinking.type.enabled" is not supported/);
    expect(validateAnthropic({ ...body, tool_choice: { type: "any" } }, headers)).toMatch(/forces tool use/);
    expect(validateAnthropic({ ...body, thinking: { type: "enabled", budget_tokens: 4096 } }, { headers: { "anthropic-version": "2023-06-01" } })).toMatch(/max_tokens/);
  });

  it("a stream cut inside a thinking block: the turn fails, nothing of that answer's thinking is kept, the next turn thinks again", async () => {
    const c = newConversation();
    const cut: MockStep = { content: [think("I was thinking about a long thing and then")], stream_error: { after_chunks: 4, type: "overloaded_error", message: "Overloaded" } };
    const { outcome } = await turn(h, "anthropic", c, "Think hard.", { script: { steps: [steps3[0]!, cut, cut, cut] }, settings: { thinking: { mode: "adaptive" } } });
    expect(outcome).toMatchObject({ status: "failed" });
    expect(historyProblems(c.messages)).toEqual([]);
    const { outcome: next } = await turn(h, "anthropic", c, "Try again.", { script: { steps: [steps3[2]!] }, settings: { thinking: { mode: "adaptive" } } });
    expect(next).toMatchObject({ status: "finished" });
    expect(h.mock.requests()[0]!.status).toBe(200);
    expect(sentThinking(h.mock.requests()[0]!.body)[0]).toHaveLength(1);
  });

  it("a fault at every point of a loop with thinking (a budget: the strictest rules) leaves a history the next turn sends and the API accepts", async () => {
    const settings = { model: "claude-sonnet-4-5", thinking: { mode: "budget" as const, budgetTokens: 2048, interleaved: true }, retry: { maxRetries: 0, baseDelayMs: 1, maxDelayMs: 1 } };
    for (let k = 1; k <= 24; k++) {
      const c = newConversation();
      const { outcome } = await turn(h, "anthropic", c, "Who calls process-data?", { script: { steps: [steps3[0]!, { ...steps3[1]!, drop_after_chunks: k }, steps3[2]!] }, settings });
      const cutShort = outcome.status === "failed";
      expect(historyProblems(c.messages), `cut after ${k} chunks`).toEqual([]);
      expect(repairHistory(c.messages).repairs, `cut after ${k} chunks`).toEqual([]);
      const next = await turn(h, "anthropic", c, "Go on.", { script: { steps: [steps3[1]!, steps3[2]!] }, settings });
      expect(next.outcome, `cut after ${k} chunks (${cutShort ? "cut" : "whole"})`).toMatchObject({ status: "finished" });
      expect(h.mock.requests().every((r) => r.status === 200), `cut after ${k} chunks`).toBe(true);
    }
  });

  it("a refusal about thinking names the setting to change, and the conversation stays valid", async () => {
    const c = newConversation();
    // A model the server takes for a budget model that the API says thinks adaptively only.
    const { outcome } = await turn(h, "anthropic", c, "Hi", { script: { steps: [steps3[2]!] }, settings: { model: "claude-opus-4-7", thinking: { mode: "budget", budgetTokens: 2048, interleaved: true } } });
    expect(outcome).toMatchObject({ status: "failed", message: expect.stringMatching(/sly-agent-q-thinking/) });
    expect(historyProblems(c.messages)).toEqual([]);
    expect((await turn(h, "anthropic", c, "Again", { script: { steps: [steps3[2]!] }, settings: { model: "claude-opus-4-7", thinking: { mode: "adaptive" } } })).outcome).toMatchObject({ status: "finished" });
  });

  it("thinking that came without its signature (a proxy): dropped whole, the user told, the turn goes on without thinking", async () => {
    const c = newConversation();
    const unsigned: MockStep = { content: [{ type: "thinking", thinking: "Unsigned.", signature: "" }, { type: "tool_use", name: "describe_symbol", input: { symbol: "car" } }] };
    const settings = { model: "claude-sonnet-4-5", thinking: { mode: "budget" as const, budgetTokens: 2048, interleaved: true } };
    const { outcome, events } = await turn(h, "anthropic", c, "What is car?", { script: { steps: [unsigned, { content: [{ type: "text", text: "A function." }] }] }, settings });
    expect(outcome).toMatchObject({ status: "finished" });
    expect(events.notices.join("")).toMatch(/without its signature and was not kept/);
    expect((c.messages[1] as AssistantMessage).content.map((b) => b.type)).toEqual(["tool_use"]);
    const reqs = h.mock.requests();
    expect(reqs.map((r) => r.status)).toEqual([200, 200]);
    // The loop began without (kept) thinking: the rest of it goes without, as one configuration per turn.
    expect(reqs[1]!.body.thinking).toBeUndefined();
  });

  it("adaptive: an unsigned thinking block beside a valid redacted one: the rest of the turn is sent without thinking, the redacted block kept, the next turn thinks", async () => {
    const c = newConversation();
    const step: MockStep = { content: [{ type: "thinking", thinking: "x", signature: "" }, { type: "redacted_thinking" }, { type: "tool_use", name: "describe_symbol", input: { symbol: "car" } }] };
    const settings = { thinking: { mode: "adaptive" as const } };
    const { outcome, events } = await turn(h, "anthropic", c, "What is car?", { script: { steps: [step, { content: [{ type: "text", text: "A function." }] }] }, settings });
    const reqs = h.mock.requests();
    expect(reqs.map((r) => r.status)).toEqual([200, 200]);
    expect(outcome).toMatchObject({ status: "finished" });
    // Said in the chat, outside the folded thinking.
    expect(events.notices.join("")).toMatch(/without its signature and was not kept; the rest of this turn goes without thinking/);
    expect(events.thinking.join("")).not.toMatch(/not kept/);
    // The turn's later request goes without thinking, as the chat says; the valid redacted block stays.
    expect(reqs[1]!.body.thinking).toBeUndefined();
    expect((c.messages[1] as AssistantMessage).content.map((b) => b.type)).toEqual(["redacted_thinking", "tool_use"]);
    // The next turn thinks again and is accepted.
    const next = await turn(h, "anthropic", c, "And cdr?", { script: { steps: [{ content: [think("Same family."), { type: "text", text: "Also a function." }] }] }, settings });
    expect(next.outcome, JSON.stringify(next.outcome)).toMatchObject({ status: "finished" });
    expect(h.mock.requests()[0]!.body.thinking).toEqual({ type: "adaptive" });
  });

  it("a model switched mid-conversation: to one that does not think and back, every request accepted", async () => {
    const c = newConversation();
    await turn(h, "anthropic", c, "Who calls process-data?", { script: { steps: steps3 }, settings: { thinking: { mode: "adaptive" } } });
    const { outcome: older } = await turn(h, "anthropic", c, "Summarize.", { script: { steps: [{ content: [think("no"), { type: "text", text: "Summary." }] }] }, settings: { model: "claude-3-5-haiku-20241022" } });
    expect(older).toMatchObject({ status: "finished" });
    // The model that does not think is sent no thinking, and gives none.
    expect(sentThinking(h.mock.requests()[0]!.body).flat()).toEqual([]);
    const { outcome: back } = await turn(h, "anthropic", c, "Back to thinking.", { script: { steps: [steps3[0]!, steps3[2]!] }, settings: { model: "claude-opus-4-7", thinking: { mode: "adaptive", display: "summarized" } } });
    expect(back).toMatchObject({ status: "finished" });
    const reqs = h.mock.requests();
    expect(reqs.map((r) => r.status)).toEqual([200, 200]);
    expect(reqs[1]!.body.thinking).toEqual({ type: "adaptive", display: "summarized" });
    // The first turn's thinking is back, unchanged.
    expect(sentThinking(reqs[1]!.body)[0]![0]).toMatchObject({ type: "thinking", signature: signThinking("Which symbol is it? Describe it first.") });
  });

  it("openai-compatible: a three-step loop whose reasoning (reasoning_content, reasoning) is shown and never sent back", async () => {
    const c = newConversation();
    const steps = steps3.map((s, i) => ({ ...s, content: s.content!.filter((b) => b.type !== "redacted_thinking"), ...(i === 1 ? { reasoning_field: "reasoning" as const } : {}) }));
    const { outcome, events } = await turn(h, "openai", c, "Who calls process-data?", { script: { steps }, settings: { model: "deepseek-reasoner", thinking: { mode: "reasoning-effort", effort: "high" } } });
    expect(outcome).toMatchObject({ status: "finished", steps: 2 });
    expect(events.thinking.join("")).toBe("Which symbol is it? Describe it first.A function. Who calls it?Two callers: enough to answer.");
    const reqs = h.mock.requests();
    expect(reqs.map((r) => [r.status, r.body.reasoning_effort])).toEqual([[200, "high"], [200, "high"], [200, "high"]]);
    expect(JSON.stringify(reqs[2]!.body.messages)).not.toMatch(/Describe it first/);
    expect(c.messages.some((m) => m.content.some((b) => b.type === "thinking"))).toBe(false);
  });
});

describe("histories with thinking kept valid", () => {
  const sig = (t: string) => ({ type: "thinking" as const, thinking: t, signature: signThinking(t) });
  const u = (text: string): Message => ({ role: "user", content: [{ type: "text", text }] });
  const loop: Message[] = [
    u("go"),
    { role: "assistant", content: [sig("a"), { type: "tool_use", id: "t1", name: "eval_form", input: {} }] },
    { role: "user", content: [{ type: "tool_result", toolUseId: "t1", content: "1", isError: false }] },
    { role: "assistant", content: [sig("b"), { type: "text", text: "done" }] },
  ];
  const accepted = (messages: Message[], thinking = { mode: "budget" as const, budgetTokens: 2048, interleaved: true }) => {
    const request = thinkingForRequest(messages, thinking);
    const { params } = toParams({ model: "claude-sonnet-4-5", system: "", messages, tools: [{ name: "eval_form", description: "", inputSchema: { type: "object", properties: {} } as never }], toolChoice: "auto", maxTokens: 8192, ...(request ? { thinking: request } : {}) });
    return validateAnthropic(params, { headers: { "anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14" } });
  };

  it("a fault between a thinking block and its call: the answer cut to its thinking is left out, the turn goes on valid", () => {
    const cutShort: Message[] = [...loop.slice(0, 3), { role: "assistant", content: [sig("b")] }];
    const { messages } = repairHistory(cutShort);
    expect(messages).toEqual(loop.slice(0, 3));
    expect(accepted([...messages.slice(0, 2), { role: "user", content: [{ type: "tool_result", toolUseId: "t1", content: "1", isError: false }, { type: "text", text: "again" }] }])).toBeUndefined();
    // A call interrupted after its thinking keeps it: the loop goes on thinking.
    const interrupted = repairHistory(loop.slice(0, 2)).messages;
    expect(interrupted[1]).toEqual(loop[1]);
    expect(accepted(interrupted)).toBeUndefined();
  });

  it("a loop whose later answers did not think (Sonnet 3.7 thinks only before its first call) keeps its budget: the turn began with thinking", () => {
    const budget = { mode: "budget" as const, budgetTokens: 2048, interleaved: false };
    const laterCall: Message[] = [
      ...loop.slice(0, 3),
      { role: "assistant", content: [{ type: "tool_use", id: "t2", name: "eval_form", input: {} }] },
      { role: "user", content: [{ type: "tool_result", toolUseId: "t2", content: "2", isError: false }] },
    ];
    expect(thinkingForRequest(laterCall, budget)).toEqual(budget);
    expect(accepted(laterCall)).toBeUndefined();
  });

  it("thinking out of place, unsigned or in an answer joined to another: that turn's thinking goes whole, the others' stays", () => {
    const moved: Message[] = [...loop, u("more"), { role: "assistant", content: [{ type: "text", text: "x" }, sig("c")] }];
    const r = repairHistory(moved);
    expect(historyProblems(r.messages)).toEqual([]);
    expect(r.messages[1]).toEqual(loop[1]);
    expect(r.messages[5]).toEqual({ role: "assistant", content: [{ type: "text", text: "x" }] });
    expect(r.repairs.map((x) => x.kind)).toContain("thinking");
    // An unsigned block in a loop: the whole turn loses its thinking, so a budget request goes without.
    const unsigned = structuredClone(loop.slice(0, 3));
    (unsigned[1] as AssistantMessage).content[0] = { type: "thinking", thinking: "a", signature: "" };
    const fixed = repairHistory(unsigned).messages;
    expect(fixed[1]).toEqual({ role: "assistant", content: [{ type: "tool_use", id: "t1", name: "eval_form", input: {} }] });
    expect(historyProblems(fixed, true, { mode: "budget", budgetTokens: 2048, interleaved: true })).toEqual(["the request thinks with a budget, but the tool loop it continues did not begin with thinking"]);
    expect(thinkingForRequest(fixed, { mode: "budget", budgetTokens: 2048, interleaved: true })).toBeUndefined();
    expect(accepted(fixed)).toBeUndefined();
    // Two answers in a row joined: neither is as the model wrote it.
    const joined = repairHistory([u("go"), { role: "assistant", content: [sig("a"), { type: "text", text: "one" }] }, { role: "assistant", content: [sig("b"), { type: "text", text: "two" }] }]).messages;
    expect(joined[1]!.content.some((b) => b.type === "thinking")).toBe(false);
    expect(accepted([...joined, u("next")])).toBeUndefined();
  });

  it("compaction and rewind cut at a turn's start: the kept loop keeps its thinking and is accepted; the summary leaves thinking out", () => {
    const two = [...loop, u("second"), { role: "assistant" as const, content: [sig("c"), { type: "tool_use" as const, id: "t2", name: "eval_form", input: {} }] }, { role: "user" as const, content: [{ type: "tool_result" as const, toolUseId: "t2", content: "2", isError: false }] }];
    const compacted = repairHistory(compactedHistory(two, 4, "They evaluated a form.")).messages;
    expect(compacted[1]).toEqual(two[5]);
    expect(accepted(compacted)).toBeUndefined();
    expect(transcript(two)).not.toMatch(/mocksig_/);
    // A rewind to the second turn's start keeps the first whole.
    expect(accepted([...two.slice(0, 4), u("instead")])).toBeUndefined();
  });

  it("are saved with their thinking (format version 3) and read back unchanged; older files are read as before", () => {
    const dir = mkdtempSync(join(tmpdir(), "saq-thinking-"));
    try {
      const store = new ConversationStore(join(dir, "c"));
      store.ensureDirectory();
      const j = ConversationJournal.create(store, { v: STORE_VERSION, type: "header", id: "c-th", created: "2026-12-06T00:00:00.000Z" });
      const redacted: Message = { role: "assistant", content: [{ type: "redacted_thinking", data: "opaque" }, { type: "text", text: "ok" }] };
      for (const m of [...loop, u("next"), redacted]) j.message(m);
      j.close();
      expect(STORE_VERSION).toBe(3);
      expect(store.read("c-th").messages).toEqual([...loop, u("next"), redacted]);
      // A version 2 record holding thinking was not written by the model's server: left out.
      store.appendTo("c-th", { v: 2, type: "message", at: "2026-12-06T00:00:01.000Z", message: { role: "user", content: [{ type: "text", text: "old" }] } });
      store.appendTo("c-th", { v: 2, type: "message", at: "2026-12-06T00:00:02.000Z", message: { role: "assistant", content: [sig("forged"), { type: "text", text: "old answer" }] } });
      const read = store.read("c-th").messages;
      expect(read[read.length - 1]).toEqual({ role: "assistant", content: [{ type: "text", text: "old answer" }] });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

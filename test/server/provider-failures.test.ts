// Provider failures through the real SDKs against the mock LLM: a stream that stalls (the idle
// timeout), HTTP errors and broken connections, each checked by the turn's failure kind, its
// message and how many requests the loop made (retries).

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AnthropicProvider } from "../../server/llm/anthropic.js";
import { OpenAIProvider } from "../../server/llm/openai.js";
import type { LLMProvider } from "../../server/llm/provider.js";
import { FAKE_KEY, harness, historyAccepted, newConversation, turn, type Harness } from "./agent-helpers.js";

type Kind = "anthropic" | "openai";

function idleProvider(kind: Kind, h: Harness, streamIdleTimeoutMs: number): LLMProvider {
  return kind === "anthropic"
    ? new AnthropicProvider({ apiKey: FAKE_KEY, baseUrl: h.mock.url, streamIdleTimeoutMs })
    : new OpenAIProvider({ apiKey: FAKE_KEY, baseUrl: `${h.mock.url}/v1`, streamIdleTimeoutMs });
}

describe.each<Kind>(["anthropic", "openai"])("provider failures over %s", (kind) => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("retries once a stream that stalls before any text reached the user", async () => {
    const c = newConversation();
    // One chunk (Anthropic's message_start, OpenAI's role delta) carries no text, then nothing more.
    const stall = { content: [{ type: "text" as const, text: "never shown" }], hang_after_chunks: 1 };
    const started = Date.now();
    const { outcome, events } = await turn(h, kind, c, "Hi", {
      script: { steps: [stall, { content: [{ type: "text", text: "Recovered." }] }] },
      // The retry's own first chunk must come within the idle limit: room for a loaded machine.
      settings: { provider: idleProvider(kind, h, 1500), turnTimeoutMs: 20_000 },
    });
    expect(outcome, JSON.stringify(outcome)).toMatchObject({ status: "finished", text: "Recovered.", llmRequests: 2 });
    expect(events.text.join("")).toBe("Recovered.");
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("retries a stalled stream only once", async () => {
    const c = newConversation();
    const stall = { content: [{ type: "text" as const, text: "never shown" }], hang_after_chunks: 0 };
    const { outcome } = await turn(h, kind, c, "Hi", {
      script: { steps: [stall, stall, { content: [{ type: "text", text: "unused" }] }] },
      settings: { provider: idleProvider(kind, h, 300), turnTimeoutMs: 20_000 },
    });
    expect(outcome).toMatchObject({ status: "failed", kind: "timeout", llmRequests: 2 });
    if (outcome.status === "failed") expect(outcome.message).toMatch(/^The model's stream sent nothing for 0\.3 s/);
    expect(h.mock.remainingSteps()).toBe(1);
  });

  it("fails the turn with a clear message when the stream stalls after text reached the user", async () => {
    const c = newConversation();
    const stall = { content: [{ type: "text" as const, text: "Partial answer that stops here" }], hang_after_chunks: kind === "anthropic" ? 4 : 2 };
    const { outcome, events } = await turn(h, kind, c, "Hi", {
      script: { steps: [stall, { content: [{ type: "text", text: "unused" }] }] },
      settings: { provider: idleProvider(kind, h, 300), turnTimeoutMs: 20_000 },
    });
    expect(events.text.join("").length).toBeGreaterThan(0);
    expect(outcome).toMatchObject({ status: "failed", kind: "timeout", llmRequests: 1 });
    if (outcome.status !== "failed") return;
    expect(outcome.message).toMatch(/^The model's stream sent nothing for 0\.3 s after part of its answer was shown; the turn was stopped\./);
    expect(h.mock.remainingSteps()).toBe(1);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("does not time out a slow stream that keeps sending", async () => {
    const c = newConversation();
    const slow = { content: [{ type: "text" as const, text: "slow but steady answer" }], chunk_delay_ms: 150, text_delta_chars: 2 };
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [slow] }, settings: { provider: idleProvider(kind, h, 1000), turnTimeoutMs: 20_000 } });
    expect(outcome).toMatchObject({ status: "finished", text: "slow but steady answer", llmRequests: 1 });
  });

  it("counts keep-alive bytes as life: a long pause with pings is not a stall", async () => {
    const c = newConversation();
    const paused = { content: [{ type: "text" as const, text: "after a long think" }], pause: { after_chunks: 1, ms: 2500, ping_every_ms: 100 } };
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [paused] }, settings: { provider: idleProvider(kind, h, 1000), turnTimeoutMs: 20_000 } });
    expect(outcome, JSON.stringify(outcome)).toMatchObject({ status: "finished", text: "after a long think", llmRequests: 1 });
  });

  it.each([
    [401, "authentication_error", "auth", 1],
    [403, "permission_error", "auth", 1],
    [404, "not_found_error", "config", 1],
    [400, "invalid_request_error", "provider", 1],
    [429, "rate_limit_error", "rate_limit", 3],
    [500, "api_error", "provider", 3],
    [529, "overloaded_error", "provider", 3],
  ] as const)("classifies HTTP %i by the SDK's error class as %s (%s), with %i request(s)", async (status, type, failure, requests) => {
    const c = newConversation();
    // A message that names another failure must not mislead the classification.
    const err = { error: { status, type, message: "Overloaded or rate limited, who knows", retry_after: 0 } };
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [err, err, err] } });
    expect(outcome).toMatchObject({ status: "failed", kind: failure, llmRequests: requests });
    if (outcome.status !== "failed") return;
    expect(outcome.message).toContain(`${status}`);
    if (status === 529) expect(outcome.message).toContain("is overloaded");
    else expect(outcome.message).not.toContain("is overloaded");
  });

  it("tells a history the provider rejects from a request too large", async () => {
    const c = newConversation();
    const rejected = { error: { status: 400, type: "invalid_request_error", message: "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after" } };
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [rejected] } });
    expect(outcome).toMatchObject({ status: "failed", kind: "provider" });
    if (outcome.status !== "failed") return;
    expect(outcome.message).toContain("rejected the request as invalid");
    expect(outcome.message).not.toMatch(/too long|too large|compact/i);
    const large = { error: { status: 413, type: "request_too_large", message: "Request exceeds the maximum size" } };
    const second = await turn(h, kind, c, "Hi", { script: { steps: [large] } });
    expect(second.outcome).toMatchObject({ status: "failed", kind: "provider" });
    if (second.outcome.status === "failed") expect(second.outcome.message).toContain("too large for the model");
  });

  it("never sends a history that breaks the rule: the turn fails saying what is wrong", async () => {
    const c = newConversation();
    // A call without its result, as no code path leaves it: the check is the last line of defence.
    c.messages.push({ role: "user", content: [{ type: "text", text: "Run it" }] }, { role: "assistant", content: [{ type: "tool_use", id: "toolu_lost", name: "eval_form", input: {} }] });
    const { outcome } = await turn(h, kind, c, "Go on", { script: { steps: [{ content: [{ type: "text", text: "never asked" }] }] } });
    expect(outcome).toMatchObject({ status: "failed", kind: "internal", llmRequests: 0 });
    if (outcome.status === "failed") expect(outcome.message).toMatch(/history .* was not sent: the call to eval_form \(toolu_lost\) in message 2 \(assistant\) has no result in the next message/);
    expect(h.mock.requests()).toHaveLength(0);
  });

  it("keeps the text of an answer cut short in the history, which the provider then accepts", async () => {
    const c = newConversation();
    const late = { content: [{ type: "text" as const, text: "Partial answer that breaks off somewhere" }], drop_after_chunks: kind === "anthropic" ? 4 : 2 };
    const { outcome, events } = await turn(h, kind, c, "Explain", { script: { steps: [late] } });
    expect(outcome).toMatchObject({ status: "failed" });
    const shown = events.text.join("");
    expect(shown).not.toBe("");
    expect(c.messages.at(-1)).toEqual({ role: "assistant", content: [{ type: "text", text: shown }] });
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });

  it("retries a connection dropped before the answer, then succeeds", async () => {
    const c = newConversation();
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [{ drop: true }, { content: [{ type: "text", text: "Back." }] }] } });
    expect(outcome, JSON.stringify(outcome)).toMatchObject({ status: "finished", text: "Back.", llmRequests: 2 });
  });

  it("retries a connection dropped mid-stream before any text, and reports one after text as lost", async () => {
    const c = newConversation();
    const early = { content: [{ type: "text" as const, text: "never shown" }], drop_after_chunks: 1 };
    const { outcome } = await turn(h, kind, c, "Hi", { script: { steps: [early, { content: [{ type: "text", text: "Again." }] }] } });
    expect(outcome, JSON.stringify(outcome)).toMatchObject({ status: "finished", text: "Again.", llmRequests: 2 });
    const late = { content: [{ type: "text" as const, text: "Partial answer that breaks" }], drop_after_chunks: kind === "anthropic" ? 4 : 2 };
    const second = await turn(h, kind, c, "More", { script: { steps: [late, { content: [{ type: "text", text: "unused" }] }] } });
    expect(second.outcome).toMatchObject({ status: "failed", kind: "provider", llmRequests: 1 });
    if (second.outcome.status === "failed") expect(second.outcome.message).toMatch(/connection .* was lost/);
    expect(await historyAccepted(h, kind, c)).toMatchObject({ status: "finished" });
  });
});

describe("stream idle timeout through the configuration", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await harness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("takes streamIdleTimeoutMs from the configuration", async () => {
    const { createProvider } = await import("../../server/llm/factory.js");
    const { provider } = createProvider({ provider: "anthropic", apiKey: FAKE_KEY, baseUrl: h.mock.url, streamIdleTimeoutMs: 250 }, {});
    const c = newConversation();
    const stall = { content: [{ type: "text" as const, text: "never shown" }], hang_after_chunks: 0 };
    const started = Date.now();
    const { outcome } = await turn(h, "anthropic", c, "Hi", { script: { steps: [stall, stall] }, settings: { provider, turnTimeoutMs: 20_000 } });
    expect(outcome).toMatchObject({ status: "failed", kind: "timeout", llmRequests: 2 });
    if (outcome.status === "failed") expect(outcome.message).toContain("sent nothing for 0.25 s");
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

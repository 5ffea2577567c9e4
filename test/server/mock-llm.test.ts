// The mock LLM server itself: it must reject what the real APIs reject, or the loop tests that
// "send the history back" would prove nothing.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startMockLLM, validateAnthropic, validateOpenAI, type MockLLM } from "../fixtures/mock-llm/server.mjs";

const base = { model: "m", max_tokens: 10 };
const use = (id: string) => ({ type: "tool_use", id, name: "t", input: {} });
const result = (id: string) => ({ type: "tool_result", tool_use_id: id, content: "r" });

describe("Anthropic request validation", () => {
  it("accepts a well-formed tool exchange", () => {
    expect(
      validateAnthropic({
        ...base,
        system: [{ type: "text", text: "s" }],
        tools: [{ name: "t", description: "d", input_schema: { type: "object", properties: {} } }],
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: [{ type: "text", text: "x" }, use("toolu_1"), use("toolu_2")] },
          { role: "user", content: [result("toolu_1"), result("toolu_2"), { type: "text", text: "more" }] },
        ],
      }),
    ).toBeUndefined();
  });

  it.each([
    ["first message from the assistant", [{ role: "assistant", content: "x" }], /first message/],
    ["two user messages in a row", [{ role: "user", content: "a" }, { role: "user", content: "b" }], /alternate/],
    ["empty content", [{ role: "user", content: [] }], /non-empty/],
    ["empty text block", [{ role: "user", content: [{ type: "text", text: "" }] }], /non-empty/],
    ["a tool_use with no result", [{ role: "user", content: "a" }, { role: "assistant", content: [use("toolu_1")] }], /without `tool_result`/],
    [
      "a tool_use answered only in part",
      [{ role: "user", content: "a" }, { role: "assistant", content: [use("toolu_1"), use("toolu_2")] }, { role: "user", content: [result("toolu_1")] }],
      /toolu_2/,
    ],
    ["a tool_result with no tool_use", [{ role: "user", content: [result("toolu_9")] }], /unexpected `tool_use_id`/],
    [
      "a tool_result answered twice",
      [{ role: "user", content: "a" }, { role: "assistant", content: [use("toolu_1")] }, { role: "user", content: [result("toolu_1"), result("toolu_1")] }],
      /multiple/,
    ],
    ["tool_use in a user message", [{ role: "user", content: [use("toolu_1")] }], /only appear in assistant/],
  ])("rejects %s", (_what, messages, message) => {
    expect(validateAnthropic({ ...base, messages })).toMatch(message);
  });

  it("rejects malformed tools and tool_choice", () => {
    const messages = [{ role: "user", content: "a" }];
    expect(validateAnthropic({ ...base, messages, tools: [{ name: "t", description: "d" }] })).toMatch(/input_schema/);
    expect(validateAnthropic({ ...base, messages, tools: [{ name: "bad name", input_schema: { type: "object" } }] })).toMatch(/pattern/);
    expect(validateAnthropic({ ...base, messages, tools: [{ name: "t", input_schema: { type: "object" } }], tool_choice: { type: "tool", name: "u" } })).toMatch(/not found/);
  });
});

describe("OpenAI request validation", () => {
  const call = (id: string) => ({ id, type: "function", function: { name: "t", arguments: "{}" } });
  it("accepts a well-formed tool exchange", () => {
    expect(
      validateOpenAI({
        model: "m",
        messages: [
          { role: "system", content: "s" },
          { role: "user", content: "hi" },
          { role: "assistant", content: null, tool_calls: [call("call_1"), call("call_2")] },
          { role: "tool", tool_call_id: "call_1", content: "r" },
          { role: "tool", tool_call_id: "call_2", content: "r" },
          { role: "user", content: "more" },
        ],
      }),
    ).toBeUndefined();
  });
  it("rejects a tool message without a matching call, and calls without answers", () => {
    expect(validateOpenAI({ model: "m", messages: [{ role: "user", content: "a" }, { role: "tool", tool_call_id: "x", content: "r" }] })).toMatch(/preceeding message with 'tool_calls'/);
    expect(validateOpenAI({ model: "m", messages: [{ role: "user", content: "a" }, { role: "assistant", tool_calls: [call("call_1")] }, { role: "user", content: "b" }] })).toMatch(/did not have response messages: call_1/);
    expect(validateOpenAI({ model: "m", messages: [{ role: "user", content: "a" }, { role: "assistant", tool_calls: [call("call_1")] }] })).toMatch(/call_1/);
  });
});

describe("mock LLM over HTTP", () => {
  let mock: MockLLM;
  beforeAll(async () => {
    mock = await startMockLLM();
  });
  afterAll(async () => {
    await mock.close();
  });
  const post = (path: string, body: unknown, headers: Record<string, string> = { "x-api-key": "k", "anthropic-version": "2023-06-01" }) =>
    fetch(`${mock.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const hello = { ...base, messages: [{ role: "user", content: "hello" }] };

  it("listens on 127.0.0.1 only", () => {
    expect(mock.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  });

  it("is scripted and inspected through /_script and /_requests", async () => {
    expect((await post("/_script", { steps: [{ content: [{ type: "text", text: "you said {{last_user_text}}" }] }] })).status).toBe(200);
    const r = await post("/v1/messages", hello);
    expect(await r.json()).toMatchObject({ type: "message", role: "assistant", content: [{ type: "text", text: "you said hello" }], stop_reason: "end_turn" });
    const recorded = (await (await fetch(`${mock.url}/_requests`)).json()) as any[];
    expect(recorded).toHaveLength(1);
    expect(recorded[0]).toMatchObject({ api: "anthropic", status: 200, step: 0, body: { messages: [{ content: "hello" }] } });
  });

  it("fills a tool input's number from the tool results, as a model reading them would", async () => {
    const pick = { $number_from_tool_results: "^\\s*(\\d+): .*TOTAL-INPUT" };
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "t", input: { frame: pick, keep: "x" } }] }, { content: [{ type: "tool_use", name: "t", input: { frame: pick } }] }] });
    const asked = (...texts: string[]) => ({
      ...base,
      messages: [
        { role: "user", content: "a" },
        ...texts.flatMap((text, i) => [
          { role: "assistant", content: [use(`toolu_${i}`)] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_${i}`, content: text }] },
        ]),
      ],
    });
    // The newest result that shows the frame: here the first, the second shows none.
    const frames = "  0: PARSE-INTEGER\n  1: MY-APP::PARSE-INPUT\n  12: MY-APP::TOTAL-INPUT\n";
    const r = (await (await post("/v1/messages", asked(frames, "Value: 84"))).json()) as any;
    expect(r.content[0].input).toEqual({ frame: 12, keep: "x" });
    // No such frame: a string that says so, which the tool refuses (the test then fails on it).
    const none = (await (await post("/v1/messages", asked("  0: PARSE-INTEGER\n"))).json()) as any;
    expect(none.content[0].input.frame).toMatch(/no match .*TOTAL-INPUT/);
  });

  it("answers errors with the provider's error bodies and headers", async () => {
    mock.setScript({ steps: [{ error: { status: 429, type: "rate_limit_error", message: "slow down", retry_after: 2 } }, { error: { status: 503, type: "api_error", message: "down" } }] });
    const r = await post("/v1/messages", hello);
    expect(r.status).toBe(429);
    expect(r.headers.get("retry-after")).toBe("2");
    expect(await r.json()).toMatchObject({ type: "error", error: { type: "rate_limit_error", message: "slow down" } });
    const o = await post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "x" }] }, { authorization: "Bearer k" });
    expect(o.status).toBe(503);
    expect(await o.json()).toMatchObject({ error: { message: "down", type: "api_error" } });
    const exhausted = await post("/v1/messages", hello);
    expect(exhausted.status).toBe(500);
    expect(((await exhausted.json()) as any).error.message).toMatch(/script is exhausted/);
  });

  it("checks authentication and the anthropic-version header, without consuming a step", async () => {
    mock.setScript({ steps: [{ content: [{ type: "text", text: "ok" }] }] });
    expect((await post("/v1/messages", hello, {})).status).toBe(401);
    expect((await post("/v1/messages", hello, { "x-api-key": "k" })).status).toBe(400);
    expect((await post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "x" }] }, {})).status).toBe(401);
    expect(mock.remainingSteps()).toBe(1);
  });

  it("streams OpenAI chunks with tool call fragments, a usage chunk on request, and [DONE]", async () => {
    mock.setScript({ steps: [{ content: [{ type: "text", text: "hi there" }, { type: "tool_use", name: "t", input: { a: "some longer value" } }] }] });
    const r = await post("/v1/chat/completions", { model: "m", stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: "x" }] }, { authorization: "Bearer k" });
    const text = await r.text();
    const datas = text.split("\n\n").filter(Boolean).map((e) => e.replace(/^data: /, ""));
    expect(datas[datas.length - 1]).toBe("[DONE]");
    const chunks = datas.slice(0, -1).map((d) => JSON.parse(d));
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
    const fragments = chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
    expect(fragments[0]).toMatchObject({ index: 0, id: expect.stringMatching(/^call_/), function: { name: "t", arguments: "" } });
    expect(fragments.length).toBeGreaterThan(2);
    expect(JSON.parse(fragments.map((f: any) => f.function.arguments).join(""))).toEqual({ a: "some longer value" });
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason).toBe("tool_calls");
    expect(chunks[chunks.length - 1]).toMatchObject({ choices: [], usage: { prompt_tokens: expect.any(Number) } });
  });

  it("streams text in deltas of text_delta_chars characters when asked", async () => {
    mock.setScript({ steps: [{ content: [{ type: "text", text: "abcdefghij" }], text_delta_chars: 4 }] });
    const r = await post("/v1/messages", { ...hello, stream: true });
    const deltas = (await r.text())
      .split("\n\n")
      .map((e) => /^data: (.*)$/m.exec(e)?.[1])
      .filter((d): d is string => d !== undefined)
      .map((d) => JSON.parse(d))
      .filter((d) => d.type === "content_block_delta")
      .map((d) => d.delta.text);
    expect(deltas).toEqual(["abcd", "efgh", "ij"]);
  });
});

// Small pure parts of the agent: system prompt, models table, error mapping, history bookkeeping.

import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Conversation, fitToBudget } from "../../server/agent/conversation.js";
import { interruptedResult } from "../../server/agent/history-rules.js";
import { buildSystemPrompt, MAX_INSTRUCTION_CHARS } from "../../server/agent/system-prompt.js";
import { toProviderError } from "../../server/llm/errors.js";
import { loadAnthropicSdk } from "../../server/llm/sdks.js";
import { createProvider } from "../../server/llm/factory.js";
import { costOf, modelInfo } from "../../server/llm/models.js";
import { toMessages } from "../../server/llm/openai.js";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { testRegistry } from "./agent-helpers.js";

// The SDK as a provider loads it at its first request: its error classes are known from then on.
const Anthropic = await loadAnthropicSdk();

describe("system prompt", () => {
  // The tool schemas carry every description; the prompt says only what they cannot: how to work
  // in the image, which tools ask first or are logged under the user's trust levels, the context.
  const PROMPT_BOUND = 2000;

  it("names the offered tools that ask or are logged, repeats no description, and stays small", () => {
    const tools = createDefaultRegistry().list();
    const prompt = buildSystemPrompt({ tools, safetyOf: (t) => t.safety, currentPackage: "CL-USER" });
    for (const t of tools) {
      const first = /^(.*?[.!?])(\s|$)/s.exec(t.description)?.[1] ?? t.description;
      expect(prompt).not.toContain(first);
    }
    const named = (label: RegExp) => (prompt.match(label)?.[1] ?? "").match(/`([a-z_]+)`/g)?.map((n) => n.slice(1, -1)).sort() ?? [];
    expect(named(/^- Ask the user first[^\n]*?: ([^\n]*)$/m)).toEqual(tools.filter((t) => t.safety === "dangerous").map((t) => t.name).sort());
    expect(named(/^- Run without asking, and are logged: ([^\n]*)$/m)).toEqual(tools.filter((t) => t.safety === "cautious").map((t) => t.name).sort());
    expect(named(/^- Ask the user first[^\n]*?: ([^\n]*)$/m)).toContain("write_file");
    expect(prompt).toContain("## How To Work");
    // When to search the project's files and when to ask the image.
    expect(prompt).toMatch(/## Image Or Files\n- What is loaded: ask the image\n.*search_project, find_files/);
    // And when to ask the image what no file holds.
    expect(prompt).toMatch(/^- What the image holds that no file does [^\n]*: image_changes\./m);
    expect(prompt).toContain("Current package in the REPL: CL-USER");
    expect(prompt).not.toMatch(/`[a-z]+-[a-z-]+`/); // no kebab-case tool names from the seed's sketch
    expect(prompt.length).toBeLessThan(PROMPT_BOUND);
  });

  it("names no tool when none is offered, and honours the user's safety overrides", () => {
    const r = testRegistry();
    expect(buildSystemPrompt({ tools: [], safetyOf: () => "safe" })).toContain("No tools are available");
    const p = buildSystemPrompt({ tools: r.list({ names: ["describe_symbol"] }), safetyOf: () => "dangerous" });
    expect(p).toMatch(/^- Ask the user first[^\n]*: `describe_symbol`$/m);
    expect(p).not.toContain("who_calls");
    expect(p).not.toContain("Describe a symbol");
    const safe = buildSystemPrompt({ tools: r.list(), safetyOf: () => "safe" });
    expect(safe).not.toMatch(/Ask the user first|are logged/);
  });

  it("includes AGENT-Q.md before AGENTS.md, bounded in size", () => {
    const root = mkdtempSync(join(tmpdir(), "agent-q-prompt-"));
    writeFileSync(join(root, "AGENTS.md"), "generic");
    writeFileSync(join(root, "AGENT-Q.md"), "y".repeat(MAX_INSTRUCTION_CHARS + 500));
    const p = buildSystemPrompt({ tools: [], safetyOf: () => "safe", projectRoot: root });
    expect(p).toContain("## Project Instructions (from AGENT-Q.md)");
    expect(p).not.toContain("generic");
    expect(p).toContain("AGENT-Q.md is longer; the rest was left out.");
    expect(p.length).toBeLessThan(MAX_INSTRUCTION_CHARS + 3000);
    expect(buildSystemPrompt({ tools: [], safetyOf: () => "safe", projectRoot: join(root, "missing") })).not.toContain("Project Instructions");
  });
});

describe("models", () => {
  it("finds windows and prices by prefix, and prices unknown models at 0 with a note", () => {
    expect(modelInfo("claude-sonnet-4-5-20250929").contextWindow).toBe(200_000);
    expect(modelInfo("anthropic/claude-sonnet-4.5").price?.input).toBe(3);
    expect(modelInfo("gpt-4o-mini").price?.input).toBe(0.15);
    expect(modelInfo("gpt-4o").price?.input).toBe(2.5);
    expect(costOf("claude-sonnet-4-6", { inputTokens: 1_000_000, outputTokens: 1_000_000, cacheReadTokens: 1_000_000, cacheWriteTokens: 0 }).usd).toBeCloseTo(18.3);
    const unknown = costOf("qwen2.5-coder:7b", { inputTokens: 5000, outputTokens: 5000, cacheReadTokens: 0, cacheWriteTokens: 0 });
    expect(unknown).toEqual({ usd: 0, note: expect.stringContaining("qwen2.5-coder:7b") });
    expect(modelInfo("qwen2.5-coder:7b").unknown).toBe(true);
  });
});

describe("provider errors", () => {
  const ctx = { provider: "anthropic", baseUrl: "http://x", model: "m", keyHint: "ANTHROPIC_API_KEY" };
  it("maps statuses to kinds and retryability", () => {
    // The SDK's own constructor picks the subclass by status, as it does for a real response.
    const e = (status: number, message = "m") => toProviderError(Anthropic.APIError.generate(status, { error: { message } }, message, new Headers()), ctx);
    expect(e(401)).toMatchObject({ kind: "auth", retryable: false });
    expect(e(429)).toMatchObject({ kind: "rate_limit", retryable: true });
    expect(e(529, "Overloaded")).toMatchObject({ kind: "provider", retryable: true });
    expect(e(500)).toMatchObject({ retryable: true });
    expect(e(400)).toMatchObject({ retryable: false });
    expect(e(404)).toMatchObject({ kind: "config" });
    expect(toProviderError(new Anthropic.APIConnectionError({ message: "Connection error." }), ctx)).toMatchObject({ retryable: true, message: expect.stringContaining("Could not reach") });
  });
  it("never carries an API key in its message", () => {
    expect(toProviderError(Anthropic.APIError.generate(401, undefined, "bad key sk-ant-abcdefghijklmnop", new Headers()), ctx).message).not.toContain("sk-ant-abcdefghijklmnop");
  });
  it("asks for a key when none is configured", () => {
    expect(() => createProvider({ provider: "anthropic" }, {})).toThrow(/ANTHROPIC_API_KEY/);
    expect(() => createProvider({ provider: "openai" }, {})).toThrow(/OPENAI_API_KEY/);
    expect(createProvider({ provider: "openai", baseUrl: "http://127.0.0.1:11434/v1", model: "llama3" }, {}).model).toBe("llama3");
    expect(createProvider({}, { ANTHROPIC_API_KEY: "k-from-env-123" }).name).toBe("anthropic");
    expect(createProvider({}, { ANTHROPIC_API_KEY: "k-from-env-123", ANTHROPIC_BASE_URL: "http://127.0.0.1:9" }).baseUrl).toBe("http://127.0.0.1:9");
    // The client's configuration wins over the environment.
    expect(createProvider({ baseUrl: "http://127.0.0.1:8", apiKey: "k-config-1234" }, { ANTHROPIC_BASE_URL: "http://127.0.0.1:9" }).baseUrl).toBe("http://127.0.0.1:8");
  });
});

describe("conversation history", () => {
  it("joins user text to a history that ends with a user message, and answers every pending call", () => {
    const c = new Conversation("c");
    c.addUserText("a");
    c.addUserText("b");
    expect(c.messages).toEqual([{ role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }]);
    c.addAssistant([{ type: "text", text: "" }]);
    expect(c.messages).toHaveLength(1);
    c.addAssistant([{ type: "tool_use", id: "1", name: "t", input: {} }, { type: "tool_use", id: "2", name: "t", input: {} }]);
    c.addToolResults([{ id: "2", content: "two", success: true }]);
    expect(c.messages[2]).toEqual({
      role: "user",
      content: [
        { type: "tool_result", toolUseId: "1", content: interruptedResult("t", "the turn was cancelled"), isError: true },
        { type: "tool_result", toolUseId: "2", content: "two", isError: false },
      ],
    });
    c.addUserText("next");
    expect(toMessages("", c.messages).map((m) => m.role)).toEqual(["user", "assistant", "tool", "tool", "user"]);
  });

  it("shortens old tool results first and keeps the latest whole", () => {
    const c = new Conversation("c");
    c.addUserText("q");
    for (let i = 0; i < 3; i++) {
      c.addAssistant([{ type: "tool_use", id: `${i}`, name: "t", input: {} }]);
      c.addToolResults([{ id: `${i}`, content: "z".repeat(8000), success: true }]);
    }
    expect(fitToBudget(c.messages, 10_000)).toBe(0);
    expect(fitToBudget(c.messages, 4500)).toBe(1);
    const sizes = c.messages.flatMap((m) => m.content.flatMap((b) => (b.type === "tool_result" ? [b.content.length] : [])));
    expect(sizes[0]).toBeLessThan(600);
    expect(sizes.slice(1)).toEqual([8000, 8000]);
    fitToBudget(c.messages, 100);
    expect(c.messages[c.messages.length - 1]!.content[0]).toMatchObject({ content: "z".repeat(8000) });
  });
});

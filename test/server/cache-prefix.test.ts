// The prompt cache holds: within a conversation each request repeats the one before it, byte for byte,
// up to that request's last cache breakpoint (Anthropic) or all of it (OpenAI's automatic prefix
// caching), even as old tool results are shortened to fit the window and the REPL's package changes.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { MockStep } from "../fixtures/mock-llm/server.mjs";
import { prefixBreak } from "../fixtures/mock-llm/cache-prefix.mjs";
import type { ChatSendResult, Configuration } from "../../server/protocol.js";
import { FAKE_KEY, testRegistry } from "./agent-helpers.js";
import { chatsWithMock } from "./chat-harness.js";
import { defineTool } from "../../server/tools/tool.js";

const chats = chatsWithMock();

/** A tool whose every result is 3,000 characters long. */
function registry() {
  const r = testRegistry();
  r.register(
    defineTool({
      name: "read_page",
      description: "Read a page.",
      parameters: { page: { type: "string", description: "Which page." } },
      required: ["page"],
      safety: "safe",
      categories: ["files"],
      runtime: "node",
      handler: async (a) => `${String(a.page)}: ${"y".repeat(3000)}`,
    }),
  );
  return r;
}

/** N tool steps, each reading a long page, then an answer. */
function steps(n: number, tag: string): MockStep[] {
  const out: MockStep[] = [];
  for (let i = 0; i < n; i++) out.push({ content: [{ type: "tool_use", name: "read_page", input: { page: `${tag}-${i}` } }] });
  out.push({ content: [{ type: "text", text: `Done with ${tag}.` }] });
  return out;
}

describe.each(["anthropic", "openai"] as const)("the cache prefix over %s", (kind) => {
  it("each request repeats the one before up to its cache breakpoint, through shortening and a package change", async () => {
    const configuration: Configuration = {
      provider: kind,
      apiKey: FAKE_KEY,
      baseUrl: kind === "anthropic" ? chats.mock().url : `${chats.mock().url}/v1`,
      model: kind === "anthropic" ? "claude-sonnet-4-6" : "gpt-4.1",
      // Small enough that old results must give way during the first turn.
      contextWindow: 5000,
      maxTokens: 500,
      maxSteps: 20,
    };
    const h = await chats.connect({ configuration, registry: registry(), capabilities: { tools: true, image: true, approvals: false }, context: { currentPackage: "MY-APP" } });
    chats.mock().setScript({ steps: [...steps(8, "first"), ...steps(2, "second")] });
    const first: ChatSendResult = await h.client.sendRequest("chat/send", { text: "Read them all", context: { currentPackage: "MY-APP" } });
    expect((await h.ended(first.turnId)).method).toBe("chat/turnFinished");
    const second: ChatSendResult = await h.client.sendRequest("chat/send", { conversationId: first.conversationId, text: "And these", context: { currentPackage: "OTHER-PKG" } });
    expect((await h.ended(second.turnId)).method).toBe("chat/turnFinished");

    const requests = chats.mock().requests();
    expect(requests).toHaveLength(12);
    const last = JSON.stringify(requests[requests.length - 1]!.body);
    // The test did make the server shorten old results, and the model was told of the new package.
    expect(last).toMatch(/shortened: \d+ of \d+ characters/);
    expect(last).toContain("OTHER-PKG");
    const breaks = requests.slice(1).flatMap((r, i) => {
      const b = prefixBreak(requests[i]!, r);
      return b ? [{ request: i + 2, ...b }] : [];
    });
    // The only rewrites are old results shortened, well below the window at once so that it happens
    // once in a while, not at every step; the system prompt and the tools never change.
    expect(breaks.length).toBeGreaterThan(0);
    expect(breaks.length).toBeLessThanOrEqual(3);
    expect(breaks.every((b) => b.next?.includes("[... shortened:") && !b.previous?.includes("[... shortened:"))).toBe(true);
  });

  it("a conversation resumed by a restarted server repeats the prefix it sent, old results shortened as they were", async () => {
    const dir = mkdtempSync(join(tmpdir(), "saq-cache-"));
    const configuration: Configuration = {
      provider: kind,
      apiKey: FAKE_KEY,
      baseUrl: kind === "anthropic" ? chats.mock().url : `${chats.mock().url}/v1`,
      model: kind === "anthropic" ? "claude-sonnet-4-6" : "gpt-4.1",
      contextWindow: 5000,
      maxTokens: 500,
      maxSteps: 20,
      conversationDirectory: dir,
    };
    const opts = { configuration, registry: registry(), capabilities: { tools: true, image: true, approvals: false }, context: { currentPackage: "MY-APP" } };
    const h = await chats.connect(opts);
    chats.mock().setScript({ steps: steps(6, "first") });
    const first: ChatSendResult = await h.client.sendRequest("chat/send", { text: "Read them all" });
    expect((await h.ended(first.turnId)).method).toBe("chat/turnFinished");
    const before = chats.mock().requests();
    const last = before[before.length - 1]!;
    expect(JSON.stringify(last.body)).toMatch(/shortened: \d+ of \d+ characters/);
    h.dispose();

    const again = await chats.connect(opts);
    await again.client.sendRequest("conversation/resume", { conversationId: first.conversationId });
    chats.mock().setScript({ steps: [{ content: [{ type: "text", text: "Back." }] }] });
    const next: ChatSendResult = await again.client.sendRequest("chat/send", { conversationId: first.conversationId, text: "And now" });
    expect((await again.ended(next.turnId)).method).toBe("chat/turnFinished");
    expect(prefixBreak(last, chats.mock().requests()[0]!)).toBeUndefined();
    rmSync(dir, { recursive: true, force: true });
  });
});

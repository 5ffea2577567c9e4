// Two chats' turns at once on one server: each conversation's image calls carry its conversationId
// (Emacs runs them in that chat's Lisp) and its message's package, and cancelling one turn withdraws
// its own call alone while the other's result arrives.

import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startMockLLM, type MockLLM } from "../fixtures/mock-llm/server.mjs";
import type { ChatSendResult, Configuration, EmacsCallParams } from "../../server/protocol.js";
import { inImage } from "../../server/tools/handlers.js";
import { defineTool } from "../../server/tools/tool.js";
import { FAKE_KEY, testRegistry } from "./agent-helpers.js";
import { connectChat, type ChatHarness } from "./chat-harness.js";

let mock: MockLLM;
beforeAll(async () => {
  mock = await startMockLLM();
});
afterAll(async () => {
  await mock.close();
});
const open: ChatHarness[] = [];
afterEach(() => {
  open.splice(0).forEach((h) => h.dispose());
});

const config = (): Configuration => ({ provider: "anthropic", apiKey: FAKE_KEY, baseUrl: mock.url, model: "claude-sonnet-4-6" });

describe("turns of two conversations at once", () => {
  it("run together; image calls carry their conversation and package; a cancel stops only its own", async () => {
    mock.setScript({
      steps: [
        { content: [{ type: "tool_use", name: "slow_eval", input: { form: "(sleep 60)" } }] },
        { content: [{ type: "tool_use", name: "slow_eval", input: { form: "(+ 40 2)" } }] },
        { content: [{ type: "text", text: "Beta: {{last_tool_result}}" }] },
      ],
    });
    const registry = testRegistry();
    registry.register(
      defineTool({
        name: "slow_eval",
        description: "Evaluate a form in the image.",
        parameters: { form: { type: "string", description: "The form." } },
        required: ["form"],
        safety: "safe",
        categories: ["evaluation"],
        ...inImage("slow_eval"),
      }),
    );
    const calls: { id: string; params: EmacsCallParams["params"] }[] = [];
    const h = await connectChat({
      configuration: config(),
      registry,
      capabilities: { tools: true, image: true, approvals: false },
      onNote: (note) => {
        if (note.method === "emacs/call" && note.params.kind === "image") calls.push({ id: note.params.id, params: note.params.params });
      },
    });
    open.push(h);
    const imageCall = (n: number) => h.waitFor((note) => note.method === "emacs/call" && calls.length >= n);

    const alpha: ChatSendResult = await h.client.sendRequest("chat/send", { text: "Sleep", context: { currentPackage: "ALPHA", projectRoot: "/tmp" } });
    await imageCall(1);
    const beta: ChatSendResult = await h.client.sendRequest("chat/send", { text: "Sum", context: { currentPackage: "BETA", projectRoot: "/tmp" } });
    await imageCall(2);
    expect(alpha.conversationId).not.toBe(beta.conversationId);
    // Both calls wait in Emacs at once, each with its own conversation and its message's package.
    expect(calls.map((c) => c.params)).toEqual([
      expect.objectContaining({ tool: "slow_eval", conversationId: alpha.conversationId, package: "ALPHA" }),
      expect.objectContaining({ tool: "slow_eval", conversationId: beta.conversationId, package: "BETA" }),
    ]);
    // Alpha's cancel withdraws alpha's call alone.
    expect(await h.client.sendRequest("chat/cancel", { turnId: alpha.turnId })).toEqual({ cancelled: true });
    expect((await h.ended(alpha.turnId)).params).toMatchObject({ kind: "cancelled" });
    const withdrawn = h.notes.filter((n) => n.method === "emacs/cancel").map((n) => n.params.id);
    expect(withdrawn).toEqual([calls[0]!.id]);
    await h.client.sendNotification("emacs/reply", { id: calls[1]!.id, result: { content: "42" } });
    expect((await h.ended(beta.turnId)).params).toMatchObject({ text: "Beta: 42" });
  });
});

// The chat protocol end to end inside one process: an AgentServer on an in-memory JSON-RPC pair,
// test tools in a ToolRegistry, the real SDKs talking to the mock LLM server.

import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { MessageConnection } from "vscode-jsonrpc/node";
import { startMockLLM, type MockLLM, type MockScript } from "../fixtures/mock-llm/server.mjs";
import { ErrorCodes, type ChatSendResult, type Configuration, type EmacsCallParams } from "../../server/protocol.js";
import { FAKE_KEY, testRegistry } from "./agent-helpers.js";
import { connectChat, writeNoteTool, type Note } from "./chat-harness.js";
import { schemaForModel } from "../../server/tools/registry.js";
import { defineTool } from "../../server/tools/tool.js";

let mock: MockLLM;
beforeAll(async () => {
  mock = await startMockLLM();
});
afterAll(async () => {
  await mock.close();
});

const open: (() => void)[] = [];
afterEach(() => {
  open.splice(0).forEach((d) => d());
});

async function connect(configuration: Configuration, opts: { approvals?: boolean; context?: Record<string, string>; onNote?: (n: Note, client: MessageConnection) => void } = {}) {
  const registry = testRegistry();
  registry.register(writeNoteTool());
  const h = await connectChat({
    configuration,
    registry,
    capabilities: { tools: true, image: true, approvals: opts.approvals ?? false },
    ...(opts.context ? { context: opts.context } : {}),
    ...(opts.onNote ? { onNote: opts.onNote } : {}),
  });
  open.push(h.dispose);
  return h;
}

const anthropic: Configuration = { provider: "anthropic", apiKey: FAKE_KEY, baseUrl: "", model: "claude-sonnet-4-6" };
const config = (extra: Configuration = {}): Configuration => ({ ...anthropic, baseUrl: mock.url, ...extra });

const toolScript: MockScript = {
  steps: [
    { content: [{ type: "text", text: "Looking it up." }, { type: "tool_use", name: "describe_symbol", input: { symbol: "process-data" } }] },
    { content: [{ type: "text", text: "It is: {{last_tool_result}}" }], usage: { input_tokens: 200, output_tokens: 20, cache_read_input_tokens: 100 } },
  ],
};

describe("chat over JSON-RPC", () => {
  it("answers chat/send at once and reports the turn in order", async () => {
    mock.setScript(toolScript);
    const s = await connect(config(), { context: { currentPackage: "MY-APP" } });
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "Describe process-data" });
    expect(sent.turnId).toMatch(/^t-/);
    expect(sent.conversationId).toMatch(/^c-/);
    const end = await s.ended(sent.turnId);
    expect(end.method).toBe("chat/turnFinished");
    // chat/turnState is tested on its own (turn-states.test.ts).
    const chatNotes = s.notes.filter((n) => n.method.startsWith("chat/") && n.method !== "chat/turnState");
    expect(chatNotes.every((n) => n.params.turnId === sent.turnId && n.params.conversationId === sent.conversationId)).toBe(true);
    const kinds = chatNotes.map((n) => n.method).filter((m, i, a) => m !== "chat/textDelta" || a[i - 1] !== "chat/textDelta");
    expect(kinds).toEqual(["chat/textDelta", "chat/toolCall", "chat/toolResult", "chat/textDelta", "chat/turnFinished"]);
    // Deltas are joined (text-batcher.ts), but every character arrives, in order, before what follows it.
    const deltas = chatNotes.filter((n) => n.method === "chat/textDelta").map((n) => n.params.text as string);
    expect(deltas.join("")).toBe("Looking it up.It is: PROCESS-DATA names a function: (process-data items)");
    const call = chatNotes.find((n) => n.method === "chat/toolCall")!.params;
    // A read, started as its block ended: announced as running, so no chat/toolStarted follows.
    expect(call).toMatchObject({ name: "describe_symbol", arguments: { symbol: "process-data" }, safetyLevel: "safe", running: true });
    const result = chatNotes.find((n) => n.method === "chat/toolResult")!.params;
    expect(result).toMatchObject({ callId: call.callId, name: "describe_symbol", success: true, approved: true, content: "PROCESS-DATA names a function: (process-data items)" });
    expect(typeof result.executionTimeMs).toBe("number");
    expect(end.params).toMatchObject({ stopReason: "end_turn", steps: 1, model: "claude-sonnet-4-6", text: "It is: PROCESS-DATA names a function: (process-data items)" });
    expect(end.params.usage.cacheReadTokens).toBe(100);
    expect(end.params.costUsd).toBeGreaterThan(0);
    expect(end.params.conversationCostUsd).toBe(end.params.costUsd);
    expect(mock.requests()).toHaveLength(2);
    // The system prompt names the tools that need approval (the schemas carry the descriptions) and the editor's context.
    const system = mock.requests()[0]!.body.system[0].text as string;
    expect(system).toContain("You are Agent-Q");
    expect(system).toMatch(/^- Ask the user first[^\n]*: `write_note`$/m);
    expect(system).not.toContain("Write a note to disk");
    expect(system).toContain("Current package in the REPL: MY-APP");
    expect(mock.requests()[0]!.body.tools.map((t: any) => t.name)).toEqual(s.server.offeredTools().map((t) => t.name));

    // A second turn in the same conversation sends the whole history back; conversation/list adds up.
    mock.setScript({ steps: [{ content: [{ type: "text", text: "Again: {{last_user_text}}" }] }] });
    const again: ChatSendResult = await s.client.sendRequest("chat/send", { conversationId: sent.conversationId, text: "once more" });
    expect((await s.ended(again.turnId)).params).toMatchObject({ text: "Again: once more" });
    expect(mock.requests()[0]!.body.messages).toHaveLength(5);
    const list = await s.client.sendRequest<any>("conversation/list", {});
    expect(list.conversations).toEqual([expect.objectContaining({ conversationId: sent.conversationId, turns: 2, running: false })]);
    expect(list.conversations[0].costUsd).toBeGreaterThan(end.params.costUsd);
  });

  it("refuses a second chat/send while a turn runs, and cancels with chat/cancel", async () => {
    mock.setScript({ steps: [{ content: [{ type: "text", text: "hanging forever and ever" }], hang_after_chunks: 4 }, { content: [{ type: "text", text: "fine" }] }] });
    const s = await connect(config());
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "go" });
    await s.waitFor((n) => n.method === "chat/textDelta");
    await expect(s.client.sendRequest("chat/send", { conversationId: sent.conversationId, text: "again" })).rejects.toMatchObject({ code: ErrorCodes.turnRunning });
    expect(await s.client.sendRequest("chat/cancel", { turnId: sent.turnId })).toEqual({ cancelled: true });
    const end = await s.ended(sent.turnId);
    expect(end).toMatchObject({ method: "chat/turnFailed", params: { kind: "cancelled" } });
    // The conversation goes on, and its history is accepted.
    await new Promise((r) => setTimeout(r, 10));
    const next: ChatSendResult = await s.client.sendRequest("chat/send", { conversationId: sent.conversationId, text: "try again" });
    expect((await s.ended(next.turnId)).params).toMatchObject({ stopReason: "end_turn", text: "fine" });
    expect(await s.client.sendRequest("chat/cancel", { turnId: next.turnId })).toEqual({ cancelled: false });
  });

  it("asks Emacs for approval with the conversation and turn, after announcing the call", async () => {
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "write_note", input: { text: "hi" } }] }, { content: [{ type: "text", text: "{{last_tool_result}}" }] }] });
    const s = await connect(config(), {
      approvals: true,
      onNote: (n, client) => {
        const p = n.params as EmacsCallParams;
        if (n.method === "emacs/call" && p.kind === "approval") void client.sendNotification("emacs/reply", { id: p.id, result: { decision: "approved" } });
      },
    });
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "write it" });
    const end = await s.ended(sent.turnId);
    expect(end.params.text).toBe("wrote hi");
    const seq = s.notes.filter((n) => n.method !== "chat/textDelta" && n.method !== "chat/turnState").map((n) => n.method);
    // Said to start only once approved.
    expect(seq).toEqual(["chat/toolCall", "chat/approvalNeeded", "emacs/call", "chat/toolStarted", "chat/toolResult", "chat/turnFinished"]);
    const approval = s.notes.find((n) => n.method === "emacs/call")!.params;
    expect(approval.params).toMatchObject({ tool: "write_note", conversationId: sent.conversationId, turnId: sent.turnId, safetyLevel: "dangerous" });
    expect(s.notes.find((n) => n.method === "chat/toolCall")!.params.safetyLevel).toBe("dangerous");
  });

  it("judges a turn's calls against the project root its message named, not the one the server was told at start", async () => {
    const started = mkdtempSync(join(tmpdir(), "agent-q-start-"));
    const now = mkdtempSync(join(tmpdir(), "agent-q-now-"));
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "write_note", input: { text: "hi" } }] }, { content: [{ type: "text", text: "done" }] }] });
    const s = await connect(config(), {
      approvals: true,
      context: { projectRoot: started },
      onNote: (n, client) => {
        const p = n.params as EmacsCallParams;
        if (n.method === "emacs/call" && p.kind === "approval") void client.sendNotification("emacs/reply", { id: p.id, result: { decision: "approved" } });
      },
    });
    // The user set another root since (M-: (setq sly-agent-q-project-root ...)): the message says so.
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "write it", context: { projectRoot: now } });
    await s.ended(sent.turnId);
    const approval = s.notes.find((n) => n.method === "emacs/call" && (n.params as EmacsCallParams).kind === "approval")!.params as EmacsCallParams;
    expect((approval.params as { projectRoot?: string }).projectRoot).toBe(now);
  });

  it("names the arguments that are Lisp source in the approval, and keeps that out of the model's schema", async () => {
    const registry = testRegistry();
    registry.register(defineTool({
      name: "eval_note",
      description: "Evaluate a note.",
      parameters: { form: { type: "string", description: "Lisp source text.", lisp: true }, package: { type: "string", description: "The package." } },
      required: ["form"],
      safety: "dangerous",
      categories: ["evaluation"],
      runtime: "node",
      handler: async (a) => `ran ${String(a.form)}`,
    }));
    expect(JSON.stringify(schemaForModel(registry.get("eval_note")!))).not.toContain("lisp");
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "eval_note", input: { form: "(+ 1 2)", package: "CL-USER" } }] }, { content: [{ type: "text", text: "{{last_tool_result}}" }] }] });
    const s = await connectChat({
      configuration: config(),
      registry,
      capabilities: { tools: true, image: true, approvals: true },
      onNote: (n, client) => {
        const p = n.params as EmacsCallParams;
        if (n.method === "emacs/call" && p.kind === "approval") void client.sendNotification("emacs/reply", { id: p.id, result: { decision: "approved" } });
      },
    });
    open.push(s.dispose);
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "run it" });
    expect((await s.ended(sent.turnId)).params.text).toBe("ran (+ 1 2)");
    const approval = s.notes.find((n) => n.method === "emacs/call")!.params;
    expect(approval.params).toMatchObject({ tool: "eval_note", lispArguments: ["form"] });
  });

  it("cancels a turn that waits for approval: Emacs is told, the call is answered, the history stays valid", async () => {
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "write_note", input: { text: "hi" } }] }, { content: [{ type: "text", text: "ok then" }] }] });
    const s = await connect(config(), { approvals: true });
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "write it" });
    const call = await s.waitFor((n) => n.method === "emacs/call");
    expect(await s.client.sendRequest("chat/cancel", { conversationId: sent.conversationId })).toEqual({ cancelled: true });
    expect((await s.ended(sent.turnId)).params).toMatchObject({ kind: "cancelled" });
    expect((await s.waitFor((n) => n.method === "emacs/cancel")).params).toMatchObject({ id: call.params.id });
    expect(s.notes.find((n) => n.method === "chat/toolResult")!.params).toMatchObject({ success: false, approved: false });
    await new Promise((r) => setTimeout(r, 10));
    const next: ChatSendResult = await s.client.sendRequest("chat/send", { conversationId: sent.conversationId, text: "never mind" });
    expect((await s.ended(next.turnId)).params).toMatchObject({ text: "ok then" });
    const last = mock.requests().at(-1)!.body.messages.at(-1);
    expect(last.content.map((b: any) => b.type)).toEqual(["tool_result", "text"]);
    expect(last.content[0].is_error).toBe(true);
  });

  it("fails a turn clearly when no API key is configured", async () => {
    const s = await connect(config({ apiKey: undefined }));
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "hi" });
    const end = await s.ended(sent.turnId);
    expect(end).toMatchObject({ method: "chat/turnFailed", params: { kind: "config" } });
    expect(end.params.message).toContain("ANTHROPIC_API_KEY");
  });

  it("reports a 401 as an auth failure, never echoing the key", async () => {
    mock.setScript({ steps: [{ error: { status: 401, type: "authentication_error", message: "invalid x-api-key" } }] });
    const s = await connect(config());
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "hi" });
    const end = await s.ended(sent.turnId);
    expect(end).toMatchObject({ method: "chat/turnFailed", params: { kind: "auth" } });
    expect(JSON.stringify(s.notes)).not.toContain(FAKE_KEY);
  });

  it("knows conversations: new with overrides, unknown ids refused, the model per conversation", async () => {
    mock.setScript({ steps: [{ content: [{ type: "text", text: "ok" }] }] });
    const s = await connect(config());
    const { conversationId } = await s.client.sendRequest<any>("conversation/new", { configuration: { model: "mystery-model-1" } });
    await expect(s.client.sendRequest("chat/send", { conversationId: "nope", text: "x" })).rejects.toMatchObject({ code: ErrorCodes.unknownConversation });
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { conversationId, text: "hi" });
    const end = await s.ended(sent.turnId);
    expect(end.params).toMatchObject({ model: "mystery-model-1", costUsd: 0 });
    expect(end.params.costNote).toContain("No price is known");
    expect(mock.requests()[0]!.body.model).toBe("mystery-model-1");
  });

  it("frees a conversation with conversation/delete, cancelling its running turn", async () => {
    mock.setScript({ steps: [{ content: [{ type: "text", text: "ok" }] }, { content: [{ type: "text", text: "hanging on" }], hang_after_chunks: 4 }] });
    const s = await connect(config());
    const first: ChatSendResult = await s.client.sendRequest("chat/send", { text: "hi" });
    await s.ended(first.turnId);
    const second: ChatSendResult = await s.client.sendRequest("chat/send", { text: "another" });
    await s.waitFor((n) => n.method === "chat/textDelta" && n.params.turnId === second.turnId);
    expect(await s.client.sendRequest("conversation/delete", { conversationId: first.conversationId })).toEqual({ deleted: true });
    expect(await s.client.sendRequest("conversation/delete", { conversationId: second.conversationId })).toEqual({ deleted: true });
    expect((await s.ended(second.turnId)).params).toMatchObject({ kind: "cancelled" });
    const list = await s.client.sendRequest<any>("conversation/list", {});
    expect(list.conversations).toEqual([]);
    expect(s.chat.conversations.size).toBe(0);
    // Gone means gone: sending to it is refused, and deleting it again says so.
    await expect(s.client.sendRequest("chat/send", { conversationId: first.conversationId, text: "x" })).rejects.toMatchObject({ code: ErrorCodes.unknownConversation });
    expect(await s.client.sendRequest("conversation/delete", { conversationId: first.conversationId })).toEqual({ deleted: false });
    await expect(s.client.sendRequest("conversation/delete", {})).rejects.toMatchObject({ message: expect.stringContaining("conversationId") });
    s.problems.splice(0); // sent out of shape on purpose
  });

  it("passes tool_choice and includes the project's instructions file", async () => {
    const root = mkdtempSync(join(tmpdir(), "agent-q-"));
    writeFileSync(join(root, "AGENTS.md"), "Always use FiveAM for tests.");
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "who_calls", input: { symbol: "f" } }] }, { content: [{ type: "text", text: "done" }] }] });
    const s = await connect(config({ projectRoot: root }));
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "who calls f", toolChoice: { name: "who_calls" } });
    await s.ended(sent.turnId);
    const [first, second] = mock.requests();
    expect(first!.body.tool_choice).toEqual({ type: "tool", name: "who_calls" });
    expect(second!.body.tool_choice).toEqual({ type: "auto" });
    expect(first!.body.system[0].text).toContain("## Project Instructions (from AGENTS.md)\nAlways use FiveAM for tests.");
    expect(first!.body.system[0].text).toContain(`Project root: ${root}`);
  });

  it("runs the same turn over an OpenAI-compatible endpoint", async () => {
    mock.setScript(toolScript);
    const s = await connect({ provider: "openai", baseUrl: `${mock.url}/v1`, apiKey: FAKE_KEY, model: "gpt-4o-mini", temperature: 0.2, maxTokens: 300 });
    const sent: ChatSendResult = await s.client.sendRequest("chat/send", { text: "Describe process-data" });
    const end = await s.ended(sent.turnId);
    expect(end.params).toMatchObject({ stopReason: "end_turn", steps: 1, text: "It is: PROCESS-DATA names a function: (process-data items)" });
    const [first, second] = mock.requests();
    expect(first!.body).toMatchObject({ model: "gpt-4o-mini", temperature: 0.2, max_tokens: 300, stream: true, stream_options: { include_usage: true }, tool_choice: "auto" });
    expect(first!.body.messages[0].role).toBe("system");
    expect(second!.body.messages.map((m: any) => m.role)).toEqual(["system", "user", "assistant", "tool"]);
    // Turn usage adds both requests; the second reported 200 fresh + 100 cached input tokens.
    expect(end.params.usage.cacheReadTokens).toBe(100);
    expect(end.params.usage.inputTokens).toBeGreaterThan(200);
  });
});

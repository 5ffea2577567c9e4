// The note that tells the model the REPL's package changed (the system prompt stays as sent, for the
// prompt cache) is said to the model only: the user never typed it, so the saved conversation shows
// the user's own text where it shows what the user said (resume, the turns list, the export), while
// the model is sent the very same history after a restart. Through the real bundle.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startMockLLM, type MockLLM } from "../fixtures/mock-llm/server.mjs";
import type { ChatSendResult, Configuration, ConversationExportResult, ConversationResumeResult, ConversationTurnsResult } from "../../server/protocol.js";
import { FAKE_KEY, testRegistry } from "./agent-helpers.js";
import { chatsWithMock, type ChatHarness } from "./chat-harness.js";
import { startBundle, type BundleProcess } from "./stdio-client.js";

let mock: MockLLM;
let dir: string;
const running: BundleProcess[] = [];
beforeAll(async () => {
  mock = await startMockLLM();
});
afterAll(async () => {
  await mock.close();
});
afterEach(() => {
  running.splice(0).forEach((b) => b.kill());
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function server(): Promise<{ b: BundleProcess; ended: (turnId: string) => Promise<string> }> {
  const b = startBundle();
  running.push(b);
  const ends = new Map<string, string>();
  const waiters = new Map<string, (m: string) => void>();
  b.connection.onNotification((method: string, params: unknown) => {
    const turnId = (params as { turnId?: string } | undefined)?.turnId;
    if ((method !== "chat/turnFinished" && method !== "chat/turnFailed") || !turnId) return;
    ends.set(turnId, method);
    waiters.get(turnId)?.(method);
  });
  const configuration: Configuration = { provider: "anthropic", apiKey: FAKE_KEY, baseUrl: mock.url, model: "claude-sonnet-4-6", conversationDirectory: join(dir, "conversations") };
  await b.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: {}, configuration, context: { projectRoot: "/proj", currentPackage: "MY-APP" } });
  const ended = (turnId: string) => new Promise<string>((resolve) => (ends.has(turnId) ? resolve(ends.get(turnId)!) : waiters.set(turnId, resolve)));
  return { b, ended };
}

const userTexts = (messages: ConversationResumeResult["messages"]): string[] =>
  messages.flatMap((m) => (m.role === "user" ? m.content.flatMap((b) => (b.type === "text" ? [b.text] : [])) : []));

describe("the package note", () => {
  it("is sent to the model, also after a restart, but never shown as the user's text", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-note-"));
    mock.setScript({ steps: [{ content: [{ type: "text", text: "First answer." }] }, { content: [{ type: "text", text: "Second answer." }] }, { content: [{ type: "text", text: "Third answer." }] }] });
    const a = await server();
    const first: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "Look at MY-APP", context: { currentPackage: "MY-APP" } });
    expect(await a.ended(first.turnId)).toBe("chat/turnFinished");
    const second: ChatSendResult = await a.b.connection.sendRequest("chat/send", { conversationId: first.conversationId, text: "And now this one", context: { currentPackage: "OTHER-PKG" } });
    expect(await a.ended(second.turnId)).toBe("chat/turnFinished");
    // The model was told.
    expect(JSON.stringify(mock.requests()[1]!.body.messages)).toContain("OTHER-PKG");

    const resumed: ConversationResumeResult = await a.b.connection.sendRequest("conversation/resume", { conversationId: first.conversationId });
    expect(userTexts(resumed.messages)).toEqual(["Look at MY-APP", "And now this one"]);
    const turns: ConversationTurnsResult = await a.b.connection.sendRequest("conversation/turns", { conversationId: first.conversationId });
    expect(turns.turns.map((t) => t.text)).toEqual(["Look at MY-APP", "And now this one"]);
    const exported: ConversationExportResult = await a.b.connection.sendRequest("conversation/export", { conversationId: first.conversationId, format: "markdown" });
    expect(exported.text).toContain("And now this one");
    expect(exported.text).not.toContain("OTHER-PKG");
    a.b.kill();
    await a.b.exited;

    // After a restart the model gets the same history, note included: the cached prefix holds.
    const b = await server();
    const third: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: first.conversationId, text: "Go on", context: { currentPackage: "OTHER-PKG" } });
    expect(await b.ended(third.turnId)).toBe("chat/turnFinished");
    const strip = (i: number) => JSON.parse(JSON.stringify(mock.requests()[i]!.body.messages, (k, v: unknown) => (k === "cache_control" ? undefined : v))) as unknown[];
    expect(strip(2).slice(0, strip(1).length)).toEqual(strip(1));
    // ...and the system prompt it had: the package it names is the one it was written with.
    expect(JSON.stringify(mock.requests()[2]!.body.system)).toBe(JSON.stringify(mock.requests()[1]!.body.system));
    const again: ConversationResumeResult = await b.b.connection.sendRequest("conversation/resume", { conversationId: first.conversationId });
    expect(userTexts(again.messages)).toEqual(["Look at MY-APP", "And now this one", "Go on"]);
  });

  it("is said again after a rewind undid the turn that said it", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-note-"));
    mock.setScript({ steps: [{ content: [{ type: "text", text: "First answer." }] }, { content: [{ type: "text", text: "Second answer." }] }, { content: [{ type: "text", text: "Third answer." }] }] });
    const a = await server();
    const first: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "Look at MY-APP", context: { currentPackage: "MY-APP" } });
    expect(await a.ended(first.turnId)).toBe("chat/turnFinished");
    const second: ChatSendResult = await a.b.connection.sendRequest("chat/send", { conversationId: first.conversationId, text: "And now this one", context: { currentPackage: "OTHER-PKG" } });
    expect(await a.ended(second.turnId)).toBe("chat/turnFinished");
    await a.b.connection.sendRequest("conversation/rewind", { conversationId: first.conversationId, turnId: second.turnId, truncate: true });
    const third: ChatSendResult = await a.b.connection.sendRequest("chat/send", { conversationId: first.conversationId, text: "Try again", context: { currentPackage: "OTHER-PKG" } });
    expect(await a.ended(third.turnId)).toBe("chat/turnFinished");
    // The system prompt still names MY-APP, so the model must be told of OTHER-PKG in what it is sent now.
    const sent = mock.requests()[2]!.body;
    expect(JSON.stringify(sent.system)).toContain("MY-APP");
    expect(JSON.stringify(sent.messages)).not.toContain("And now this one");
    expect(JSON.stringify(sent.messages)).toContain("current package is now OTHER-PKG");
  });

  it("is said again after a compaction summarized the turn that said it", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-note-"));
    const answer = (text: string) => ({ content: [{ type: "text" as const, text }] });
    mock.setScript({ steps: [answer("One."), answer("Two."), answer("Three."), answer("Four."), answer("They looked at two packages."), answer("Five.")] });
    const a = await server();
    let id: string | undefined;
    for (const [text, pkg] of [["one", "MY-APP"], ["two", "OTHER-PKG"], ["three", "OTHER-PKG"], ["four", "OTHER-PKG"]] as const) {
      const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { ...(id ? { conversationId: id } : {}), text, context: { currentPackage: pkg } });
      id = sent.conversationId;
      expect(await a.ended(sent.turnId)).toBe("chat/turnFinished");
    }
    const compacted = (await a.b.connection.sendRequest("conversation/compact", { conversationId: id })) as { compacted: boolean };
    expect(compacted.compacted).toBe(true);
    const five: ChatSendResult = await a.b.connection.sendRequest("chat/send", { conversationId: id, text: "five", context: { currentPackage: "OTHER-PKG" } });
    expect(await a.ended(five.turnId)).toBe("chat/turnFinished");
    const sent = mock.requests()[5]!.body;
    expect(JSON.stringify(sent.system)).toContain("MY-APP");
    expect(JSON.stringify(sent.messages)).not.toContain('"two"');
    expect(JSON.stringify(sent.messages)).toContain("current package is now OTHER-PKG");
  });
});

// After a compaction or a restart, the history the model is sent may still hold a note of another
// package than the system prompt's: the model last heard of that one, and is told when the REPL is back
// in the prompt's package (it was not: the server took the prompt's package as the one last said).

const chats = chatsWithMock();

/** The last package a request names: its system prompt's, then each note's, in order. */
function lastPackageSaid(body: { system?: unknown; messages: unknown[] }): string | undefined {
  let said: string | undefined;
  for (const text of [JSON.stringify(body.system ?? ""), JSON.stringify(body.messages)]) {
    for (const m of text.matchAll(/Current package in the REPL: ([^\s"\\]+)|current package is now ([^\s:"\\]+):/g)) said = m[1] ?? m[2];
  }
  return said;
}

describe.each(["anthropic", "openai"] as const)("the package the model last heard of, over %s", (kind) => {
  const configuration = (): Configuration => ({
    provider: kind,
    apiKey: FAKE_KEY,
    baseUrl: kind === "anthropic" ? chats.mock().url : `${chats.mock().url}/v1`,
    model: kind === "anthropic" ? "claude-sonnet-4-6" : "gpt-4.1",
    conversationDirectory: join(dir, "conversations"),
  });
  async function send(h: ChatHarness, text: string, pkg: string, id?: string): Promise<ChatSendResult> {
    chats.mock().setScript({ steps: [{ content: [{ type: "text", text: `ok ${text}` }] }] });
    const sent: ChatSendResult = await h.client.sendRequest("chat/send", { text, ...(id ? { conversationId: id } : {}), context: { currentPackage: pkg } });
    expect((await h.ended(sent.turnId)).method).toBe("chat/turnFinished");
    return sent;
  }
  const lastRequest = () => chats.mock().requests().at(-1)!.body as { system?: unknown; messages: unknown[] };

  it("is the kept part's, after a compaction that kept the note of another package", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-note-"));
    const h = await chats.connect({ configuration: configuration(), registry: testRegistry(), context: { currentPackage: "PKG-A" } });
    const first = await send(h, "one", "PKG-A");
    await send(h, "two", "PKG-B", first.conversationId);
    await send(h, "three", "PKG-B", first.conversationId);
    chats.mock().setScript({ steps: [{ content: [{ type: "text", text: "Summary." }] }] });
    await h.client.sendRequest("conversation/compact", { conversationId: first.conversationId });
    await send(h, "four", "PKG-A", first.conversationId);
    expect(lastPackageSaid(lastRequest())).toBe("PKG-A");
  });

  it("is the saved history's, after a restart and a resume", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-note-"));
    const opts = { configuration: configuration(), registry: testRegistry(), context: { currentPackage: "PKG-A" } };
    const h = await chats.connect(opts);
    const first = await send(h, "one", "PKG-A");
    await send(h, "two", "PKG-B", first.conversationId);
    h.dispose();
    const again = await chats.connect(opts);
    await again.client.sendRequest("conversation/resume", { conversationId: first.conversationId });
    await send(again, "three", "PKG-A", first.conversationId);
    expect(lastPackageSaid(lastRequest())).toBe("PKG-A");
  });
});

describe.each(["anthropic", "openai"] as const)("the package note around a compaction or a new system prompt, over %s", (kind) => {
  const configuration = (extra: Partial<Configuration> = {}): Configuration => ({
    provider: kind,
    apiKey: FAKE_KEY,
    baseUrl: kind === "anthropic" ? chats.mock().url : `${chats.mock().url}/v1`,
    model: kind === "anthropic" ? "claude-sonnet-4-6" : "gpt-4.1",
    conversationDirectory: join(dir, "conversations"),
    ...extra,
  });
  async function send(h: ChatHarness, text: string, context: object, id: string | undefined, steps: string[]): Promise<ChatSendResult> {
    chats.mock().setScript({ steps: steps.map((s) => ({ content: [{ type: "text", text: s }] })) });
    const sent: ChatSendResult = await h.client.sendRequest("chat/send", { text, ...(id ? { conversationId: id } : {}), context });
    expect((await h.ended(sent.turnId)).method).toBe("chat/turnFinished");
    return sent;
  }
  const lastRequest = () => chats.mock().requests().at(-1)!.body as { system?: unknown; messages: unknown[] };

  it("a note decided before the turn's automatic compaction counts: the next turn in the other package is told", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-note-"));
    const h = await chats.connect({ configuration: configuration({ contextWindow: 12_000, maxTokens: 1000 }), registry: testRegistry(), context: { currentPackage: "PKG-A" } });
    const first = await send(h, `one ${"lorem ipsum ".repeat(3000)}`, { currentPackage: "PKG-A" }, undefined, ["ok one"]);
    await send(h, "two", { currentPackage: "PKG-B" }, first.conversationId, ["ok two"]);
    // Back in PKG-A: the note is decided, then the compaction keeps turn 2 (and its note of PKG-B).
    await send(h, "three", { currentPackage: "PKG-A" }, first.conversationId, ["Summary.", "ok three"]);
    expect(h.notes.filter((n) => n.method === "chat/compacted")).toHaveLength(1);
    expect(lastPackageSaid(lastRequest())).toBe("PKG-A");
    await send(h, "four", { currentPackage: "PKG-B" }, first.conversationId, ["ok four"]);
    expect(lastPackageSaid(lastRequest())).toBe("PKG-B");
  });

  it("a system prompt written anew (another project root) is followed by a note where the history last said another package", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-note-"));
    const h = await chats.connect({ configuration: configuration(), registry: testRegistry(), context: { currentPackage: "PKG-A", projectRoot: "/proj" } });
    const first = await send(h, "one", { currentPackage: "PKG-A", projectRoot: "/proj" }, undefined, ["ok one"]);
    await send(h, "two", { currentPackage: "PKG-B", projectRoot: "/proj" }, first.conversationId, ["ok two"]);
    await send(h, "three", { currentPackage: "PKG-A", projectRoot: "/other" }, first.conversationId, ["ok three"]);
    expect(JSON.stringify(lastRequest().system ?? lastRequest().messages)).toContain("/other");
    expect(lastPackageSaid(lastRequest())).toBe("PKG-A");
  });
});

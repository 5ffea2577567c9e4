// Saved conversations through the real bundle: a conversation outlives its server, killed
// between turns or in the middle of one; the model then receives the identical history; the saved
// list, resume, rename, export and delete work on the files.

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startMockLLM, type MockLLM } from "../fixtures/mock-llm/server.mjs";
import type { ChatSendResult, ClientCapabilities, Configuration, ConversationResumeResult, ConversationSavedResult } from "../../server/protocol.js";
import { FAKE_KEY } from "./agent-helpers.js";
import { STORE_VERSION } from "../../server/agent/conversation-store.js";
import { startBundle, type BundleProcess } from "./stdio-client.js";

interface Note {
  method: string;
  params: { turnId?: string; [k: string]: unknown };
}

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

const config = (): Configuration => ({ provider: "anthropic", apiKey: FAKE_KEY, baseUrl: mock.url, model: "claude-sonnet-4-6", conversationDirectory: join(dir, "conversations") });

async function server(configuration: Configuration = config(), capabilities: ClientCapabilities = {}): Promise<{ b: BundleProcess; notes: Note[]; ended: (turnId: string) => Promise<Note>; waitFor: (pred: (n: Note) => boolean) => Promise<Note> }> {
  const b = startBundle();
  running.push(b);
  const notes: Note[] = [];
  const waiters: { pred: (n: Note) => boolean; resolve: (n: Note) => void }[] = [];
  b.connection.onNotification((method: string, params: unknown) => {
    const n = { method, params: params as Note["params"] };
    notes.push(n);
    for (const w of [...waiters]) if (w.pred(n)) (waiters.splice(waiters.indexOf(w), 1), w.resolve(n));
  });
  await b.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities, configuration, context: { projectRoot: "/proj" } });
  const waitFor = (pred: (n: Note) => boolean) => new Promise<Note>((resolve) => (notes.find(pred) ? resolve(notes.find(pred)!) : waiters.push({ pred, resolve })));
  const ended = (turnId: string) => waitFor((n) => (n.method === "chat/turnFinished" || n.method === "chat/turnFailed") && n.params.turnId === turnId);
  return { b, notes, ended, waitFor };
}

/** The messages the model was sent in recorded request I, without the cache marks (they move to the newest message). */
const sentMessages = (i: number): unknown[] =>
  JSON.parse(JSON.stringify((mock.requests()[i]!.body as { messages: unknown[] }).messages, (k, v: unknown) => (k === "cache_control" ? undefined : v))) as unknown[];

/** A neutral history (protocol.ts's HistoryMessage) as Anthropic's wire has it. */
const onTheWire = (messages: ConversationResumeResult["messages"]): unknown[] =>
  messages.map((m) => ({
    role: m.role,
    content: m.content.map((b) => (b.type === "tool_result" ? { type: "tool_result", tool_use_id: b.toolUseId, content: b.content, is_error: b.isError } : b)),
  }));

describe("saved conversations", () => {
  it("survive a killed server: the next turn sends the model the identical history", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({
      steps: [
        { content: [{ type: "text", text: "Let me look." }, { type: "tool_use", name: "no_such_tool", input: { symbol: "car" } }] },
        { content: [{ type: "text", text: "CAR takes a cons." }] },
        { content: [{ type: "text", text: "And CDR the rest." }] },
      ],
    });
    const a = await server();
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "What is car?" });
    expect((await a.ended(sent.turnId)).method).toBe("chat/turnFinished");
    a.b.kill();
    await a.b.exited;

    const b = await server();
    const again: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "And cdr?" });
    expect(again.conversationId).toBe(sent.conversationId);
    expect((await b.ended(again.turnId)).method).toBe("chat/turnFinished");
    // Request 2 of the first server ended the turn; request 3 (the new server's) starts with that
    // same history, then the answer and the new question.
    expect(sentMessages(2)).toEqual([...sentMessages(1), { role: "assistant", content: [{ type: "text", text: "CAR takes a cons." }] }, { role: "user", content: [{ type: "text", text: "And cdr?" }] }]);

    const saved: ConversationSavedResult = await b.b.connection.sendRequest("conversation/saved", { projectRoot: "/proj" });
    expect(saved.errors).toEqual([]);
    expect(saved.conversations).toHaveLength(1);
    expect(saved.conversations[0]).toMatchObject({ conversationId: sent.conversationId, title: "What is car?", turns: 2, messages: 6, open: true, projectRoot: "/proj", model: "claude-sonnet-4-6" });
    expect(saved.conversations[0]!.costUsd).toBeGreaterThan(0);
    const other: ConversationSavedResult = await b.b.connection.sendRequest("conversation/saved", { projectRoot: "/elsewhere" });
    expect(other.conversations).toEqual([]);
  });

  it("are saved under the project of the chat that began them (its message's context), not the server's", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({ steps: [{ content: [{ type: "text", text: "B here." }] }, { content: [{ type: "text", text: "A here." }] }] });
    const a = await server();
    // A second chat, on another project: its messages carry its root.
    const b: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "In project B", context: { projectRoot: "/proj-b" } });
    expect((await a.ended(b.turnId)).method).toBe("chat/turnFinished");
    const first: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "In the first project" });
    expect((await a.ended(first.turnId)).method).toBe("chat/turnFinished");
    const ofB: ConversationSavedResult = await a.b.connection.sendRequest("conversation/saved", { projectRoot: "/proj-b" });
    expect(ofB.conversations.map((c) => c.conversationId)).toEqual([b.conversationId]);
    expect(ofB.conversations[0]).toMatchObject({ projectRoot: "/proj-b" });
    const ofServer: ConversationSavedResult = await a.b.connection.sendRequest("conversation/saved", { projectRoot: "/proj" });
    expect(ofServer.conversations.map((c) => c.conversationId)).toEqual([first.conversationId]);
  });

  it("keep the model's thinking across a server killed mid-loop: shown again without its signature, sent back unchanged", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    const thought = "Look at the symbol before answering.";
    mock.setScript({
      steps: [
        { content: [{ type: "thinking", thinking: thought }, { type: "redacted_thinking" }, { type: "text", text: "Checking." }, { type: "tool_use", name: "no_such_tool", input: { x: 1 } }] },
        // The server dies while the model answers the results: the loop is left open.
        { content: [{ type: "text", text: "never finished" }], hang_after_chunks: 1 },
        { content: [{ type: "thinking", thinking: "Go on." }, { type: "text", text: "Back again." }] },
      ],
    });
    const a = await server();
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "Check x" });
    await a.waitFor((n) => n.method === "chat/toolResult");
    while (mock.requests().length < 2) await new Promise((r) => setTimeout(r, 20));
    a.b.kill();
    await a.b.exited;
    // Streamed to the user as it came, the redacted block as such.
    const shown = a.notes.filter((n) => n.method === "chat/thinkingDelta").map((n) => (n.params.redacted ? "(redacted)" : n.params.text)).join("");
    expect(shown).toBe(`${thought}(redacted)`);
    const sentThinking = (mock.requests()[1]!.body as { messages: { role: string; content: { type: string }[] }[] }).messages[1]!.content.slice(0, 2);

    const b = await server();
    const resumed: ConversationResumeResult = await b.b.connection.sendRequest("conversation/resume", { conversationId: sent.conversationId });
    expect(resumed.messages[1]!.content.slice(0, 2)).toEqual([{ type: "thinking", thinking: thought }, { type: "redacted_thinking" }]);
    expect(JSON.stringify(resumed)).not.toMatch(/mocksig_/);
    const again: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "Go on" });
    expect((await b.ended(again.turnId)).method).toBe("chat/turnFinished");
    // The new server sent the first answer's thinking back exactly as the model gave it, and was accepted.
    const third = mock.requests()[2]!;
    expect(third.status).toBe(200);
    expect((third.body as { messages: { content: unknown[] }[] }).messages[1]!.content.slice(0, 2)).toEqual(sentThinking);
    const exported: { text: string } = await b.b.connection.sendRequest("conversation/export", { conversationId: sent.conversationId, format: "markdown" });
    expect(exported.text).toContain("<summary>Thinking</summary>");
    expect(exported.text).toContain(thought);
    expect(exported.text).not.toMatch(/mocksig_/);
  });

  it("lose nothing when the server is killed in the middle of a turn", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({
      steps: [
        { content: [{ type: "text", text: "Checking." }, { type: "tool_use", name: "no_such_tool", input: { x: 1 } }] },
        // The second request hangs: the server dies while the model is answering.
        { content: [{ type: "text", text: "never finished" }], hang_after_chunks: 1 },
        { content: [{ type: "text", text: "Back again." }] },
      ],
    });
    const a = await server();
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "Check x" });
    await a.waitFor((n) => n.method === "chat/toolResult");
    while (mock.requests().length < 2) await new Promise((r) => setTimeout(r, 20));
    a.b.kill();
    await a.b.exited;

    const b = await server();
    const resumed: ConversationResumeResult = await b.b.connection.sendRequest("conversation/resume", { conversationId: sent.conversationId });
    // Everything up to the tool's result was saved as it happened.
    expect(onTheWire(resumed.messages)).toEqual(sentMessages(1));
    const next: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "Go on" });
    expect((await b.ended(next.turnId)).method).toBe("chat/turnFinished");
    // The history the model gets is valid (roles alternate): the new text joins the tool results' message.
    const last = sentMessages(2) as { role: string; content: { type: string }[] }[];
    expect(last.slice(0, -1)).toEqual(sentMessages(1).slice(0, -1));
    expect(last.at(-1)!.role).toBe("user");
    expect(last.at(-1)!.content.map((c) => c.type)).toEqual(["tool_result", "text"]);
  });

  it("keep the text the user saw of an answer the server died while streaming, marked as cut off", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({
      steps: [
        { content: [{ type: "text", text: "PARSE-INPUT splits the string on commas, then parses each field" }], text_delta_chars: 10, hang_after_chunks: 6 },
        { content: [{ type: "text", text: "Back again." }] },
      ],
    });
    const a = await server();
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "Explain parse-input" });
    const shown = await a.waitFor((n) => n.method === "chat/textDelta");
    a.b.kill();
    await a.b.exited;
    const seen = String(shown.params.text);
    expect(seen.length).toBeGreaterThan(0);

    const b = await server();
    const list: ConversationSavedResult = await b.b.connection.sendRequest("conversation/saved", {});
    expect(JSON.stringify(list)).toMatch(/cut off while it streamed/);
    const resumed: ConversationResumeResult = await b.b.connection.sendRequest("conversation/resume", { conversationId: sent.conversationId });
    const last = resumed.messages.at(-1)!;
    expect(last.role).toBe("assistant");
    expect(JSON.stringify(last.content)).toContain(JSON.stringify(seen).slice(1, -1));
    expect(JSON.stringify(last.content)).toContain("The answer was cut off here");
    const next: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "Go on" });
    expect((await b.ended(next.turnId)).method).toBe("chat/turnFinished");
    // The model is sent what the user saw, then the new question: a history the API accepts.
    const history = sentMessages(1) as { role: string; content: { text?: string }[] }[];
    expect(history.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
    expect(history[1]!.content[0]!.text).toContain(seen);
  });

  for (const provider of ["anthropic", "openai"] as const) {
    it(`go on after the server was killed while a tool call ran (${provider}): the call gets an error result saying it was interrupted`, async () => {
      dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
      mock.setScript({
        steps: [
          { content: [{ type: "text", text: "Reading it." }, { type: "tool_use", name: "read_buffer", input: { buffer: "foo.lisp" } }] },
          { content: [{ type: "text", text: "Back again." }] },
        ],
      });
      const wire: Configuration = provider === "anthropic" ? config() : { ...config(), provider: "openai", baseUrl: `${mock.url}/v1`, model: "gpt-4o" };
      // A client with tools, which never answers the call: the server dies while it runs. (Without
      // one the call would fail at once, and might have a result before the server dies.)
      const a = await server(wire, { tools: true });
      const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "Read foo.lisp" });
      await a.waitFor((n) => n.method === "chat/toolCall");
      a.b.kill();
      await a.b.exited;

      const b = await server(wire);
      const listed: ConversationSavedResult = await b.b.connection.sendRequest("conversation/saved", {});
      expect(listed.conversations[0]).toMatchObject({ conversationId: sent.conversationId, interrupted: { calls: ["read_buffer"] } });
      const next: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "Go on" });
      const end = await b.ended(next.turnId);
      expect(end.params.message).toBeUndefined();
      expect(end.method).toBe("chat/turnFinished");
      const body = JSON.stringify(mock.requests()[1]!.body);
      expect(body).toContain("was interrupted");
      expect(body).toContain("may or may not have happened");
      // The file is repaired: a third server reads a valid history, and the list says when and what.
      const again: ConversationSavedResult = await b.b.connection.sendRequest("conversation/saved", {});
      expect(again.conversations[0]!.interrupted).toBeUndefined();
      expect(again.conversations[0]!.repaired).toMatchObject({ what: [expect.stringContaining("read_buffer")] });
      const resumed: ConversationResumeResult = await b.b.connection.sendRequest("conversation/resume", { conversationId: sent.conversationId });
      expect(resumed.messages.map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    });
  }

  it("go on after the server was killed while an approval waited: the calls that never started are said not to have run", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({
      steps: [
        {
          content: [
            { type: "tool_use", name: "write_file", input: { path: "notes.txt", content: "x\n" } },
            { type: "tool_use", name: "read_buffer", input: { buffer: "bar.lisp" } },
          ],
        },
        { content: [{ type: "text", text: "Back again." }] },
      ],
    });
    // A client that never answers: the write's approval waits, the read after it waits its turn;
    // then the server dies.
    const a = await server(config(), { tools: true, approvals: true });
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "Write, read" });
    await a.waitFor((n) => n.method === "chat/approvalNeeded");
    a.b.kill();
    await a.b.exited;

    // A file that records starts is of a format version an older sly-agent-q refuses to read and write
    // to (it would run calls without recording their starts).
    const header = JSON.parse(readFileSync(join(dir, "conversations", `${sent.conversationId}.jsonl`), "utf8").split("\n")[0]!) as { v: number; starts?: boolean };
    expect(header).toMatchObject({ v: STORE_VERSION, starts: true });

    const b = await server(config());
    const listed: ConversationSavedResult = await b.b.connection.sendRequest("conversation/saved", {});
    expect(listed.conversations[0]).toMatchObject({ conversationId: sent.conversationId, interrupted: { calls: ["write_file", "read_buffer"] } });
    const next: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "Go on" });
    expect((await b.ended(next.turnId)).method).toBe("chat/turnFinished");
    const results = (sentMessages(1) as { content: { type: string; content?: string }[] }[])[2]!.content.filter((c) => c.type === "tool_result").map((c) => String(c.content));
    expect(results).toHaveLength(2);
    expect(results[0]).toMatch(/^The call to write_file was not run: the server stopped before it started.*It had no effect/);
    expect(results[1]).toMatch(/^The call to read_buffer was not run/);
  });

  it("keep a result the user saw when the server dies before the step's other call returned", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({
      steps: [
        { content: [{ type: "tool_use", name: "no_such_tool", input: {} }, { type: "tool_use", name: "read_buffer", input: { buffer: "foo.lisp" } }] },
        { content: [{ type: "text", text: "Back." }] },
      ],
    });
    const a = await server(config(), { tools: true });
    // The read asks Emacs (emacs/call), which never answers: it has started when the server dies.
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "Two calls" });
    const shown = await a.waitFor((n) => n.method === "chat/toolResult");
    await a.waitFor((n) => n.method === "emacs/call");
    a.b.kill();
    await a.b.exited;
    const b = await server();
    const next: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "Go on" });
    expect((await b.ended(next.turnId)).method).toBe("chat/turnFinished");
    const results = (sentMessages(1) as { content: { type: string; content?: string; is_error?: boolean }[] }[])[2]!.content;
    expect(results[0]).toMatchObject({ type: "tool_result", content: shown.params.content, is_error: true });
    expect(results[1]).toMatchObject({ type: "tool_result", content: expect.stringContaining("read_buffer was interrupted"), is_error: true });
  });

  it("go on in memory when the file is deleted under them or the directory cannot be written, and say so once", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({ steps: [{ content: [{ type: "text", text: "One." }] }, { content: [{ type: "text", text: "Two." }] }, { content: [{ type: "text", text: "Three." }] }, { content: [{ type: "text", text: "Unsaved." }] }] });
    const a = await server();
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "one" });
    expect((await a.ended(sent.turnId)).params.saveError).toBeUndefined();
    const file = join(dir, "conversations", `${sent.conversationId}.jsonl`);
    rmSync(file);
    const second: ChatSendResult = await a.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "two" });
    const end = await a.ended(second.turnId);
    expect(end.method).toBe("chat/turnFinished");
    expect(end.params.saveError).toMatch(/was deleted by another program.*no longer saved/);
    expect(existsSync(file)).toBe(false);
    const third: ChatSendResult = await a.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "three" });
    const thirdEnd = await a.ended(third.turnId);
    expect(thirdEnd.method).toBe("chat/turnFinished");
    expect(thirdEnd.params.saveError).toBeUndefined();
    // The model still got the whole conversation, from memory.
    expect(JSON.stringify(mock.requests()[2]!.body)).toContain("Two.");

    // A directory that cannot be made: the new conversation goes on unsaved, and the answer says why.
    writeFileSync(join(dir, "not-a-dir"), "");
    await a.b.connection.sendRequest("configuration/change", { configuration: { ...config(), conversationDirectory: join(dir, "not-a-dir", "conversations") } });
    const unsaved: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "four" });
    expect(unsaved.saveError).toMatch(/not-a-dir\/conversations: cannot be created/);
    expect((await a.ended(unsaved.turnId)).method).toBe("chat/turnFinished");
  });

  it("rename, export and delete a saved conversation; a corrupt file is named and left alone", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({ steps: [{ content: [{ type: "text", text: "Use `(car x)`.\n* not a heading" }] }] });
    const a = await server();
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "How do I get the first element?" });
    await a.ended(sent.turnId);
    expect(await a.b.connection.sendRequest("conversation/rename", { conversationId: sent.conversationId, title: "  First   element " })).toEqual({ title: "First element" });
    const org = (await a.b.connection.sendRequest("conversation/export", { conversationId: sent.conversationId, format: "org" })) as { text: string };
    expect(org.text).toBe(
      "# Conversation exported by sly-agent-q.\n#+title: First element\n\n* You\n#+begin_example\nHow do I get the first element?\n#+end_example\n\n** Agent\n#+begin_example\nUse `(car x)`.\n,* not a heading\n#+end_example\n\n\f\n",
    );
    const md = (await a.b.connection.sendRequest("conversation/export", { conversationId: sent.conversationId, format: "markdown" })) as { text: string };
    expect(md.text).toContain("## You\n\nHow do I get the first element?\n\n### Agent\n\nUse `(car x)`.\n* not a heading\n");

    const file = join(dir, "conversations", `${sent.conversationId}.jsonl`);
    const broken = join(dir, "conversations", "c-broken.jsonl");
    writeFileSync(broken, '{"v":1,"type":"header","id":"c-broken","created":"x"}\n{oops\n{"v":1,"type":"title","at":"y","title":"t"}\n');
    const listed: ConversationSavedResult = await a.b.connection.sendRequest("conversation/saved", {});
    expect(listed.conversations.map((c) => c.title)).toEqual(["First element"]);
    expect(listed.errors).toEqual([`${broken}: line 2 is not a valid record; the file is left as it is.`]);
    await expect(a.b.connection.sendRequest("conversation/resume", { conversationId: "c-broken" })).rejects.toMatchObject({ code: -32013, message: expect.stringContaining("c-broken.jsonl: line 2") });
    await expect(a.b.connection.sendRequest("chat/send", { conversationId: "c-broken", text: "hi" })).rejects.toMatchObject({ code: -32013 });
    expect(readFileSync(broken, "utf8")).toContain("{oops\n");

    expect(existsSync(file)).toBe(true);
    expect(await a.b.connection.sendRequest("conversation/delete", { conversationId: sent.conversationId, saved: true })).toEqual({ deleted: true });
    expect(existsSync(file)).toBe(false);
    expect(existsSync(`${file}.lock`)).toBe(false);
    await expect(a.b.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "hi" })).rejects.toMatchObject({ code: -32010 });
  });

  it("compact older turns into the model's summary; the file and resume keep every message", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    const long = "x".repeat(4000);
    mock.setScript({
      steps: [
        { content: [{ type: "text", text: `First answer ${long}` }] },
        { content: [{ type: "text", text: "Second answer." }] },
        { content: [{ type: "text", text: "Third answer." }] },
        { content: [{ type: "text", text: "They asked three things; the first answer was long." }] },
        { content: [{ type: "text", text: "Fourth answer." }] },
        { content: [{ type: "text", text: "Fifth answer." }] },
      ],
    });
    const a = await server();
    let id: string | undefined;
    for (const text of ["one", "two", "three"]) {
      const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { ...(id ? { conversationId: id } : {}), text });
      id = sent.conversationId;
      await a.ended(sent.turnId);
    }
    const result = (await a.b.connection.sendRequest("conversation/compact", { conversationId: id })) as { compacted: boolean; replacedMessages: number; tokensBefore: number; tokensAfter: number };
    // The last two turns stay whole; the first (question and long answer) is summarized.
    expect(result).toMatchObject({ compacted: true, replacedMessages: 2 });
    expect(result.tokensAfter).toBeLessThan(result.tokensBefore - 900);
    const summaryRequest = mock.requests()[3]!.body as { system: unknown; messages: { content: { text: string }[] }[]; tools?: unknown[] };
    expect(JSON.stringify(summaryRequest.system)).toContain("You summarize the earlier part of a conversation");
    expect(summaryRequest.messages).toHaveLength(1);
    expect(summaryRequest.messages[0]!.content[0]!.text).toContain(`Assistant: First answer ${long}`);
    expect(summaryRequest.messages[0]!.content[0]!.text).not.toContain("Second answer");

    const next: ChatSendResult = await a.b.connection.sendRequest("chat/send", { conversationId: id, text: "four" });
    await a.ended(next.turnId);
    const compacted = sentMessages(4) as { role: string; content: { type: string; text: string }[] }[];
    expect(compacted[0]!.content[0]!.text).toBe("[Summary of the earlier part of this conversation, written when it was compacted]\nThey asked three things; the first answer was long.");
    expect(compacted[0]!.content[1]!.text).toBe("two");
    expect(JSON.stringify(compacted)).not.toContain(long);

    // A new server goes on from the same summary; resume still shows every message.
    a.b.kill();
    await a.b.exited;
    const b = await server();
    const resumed: ConversationResumeResult = await b.b.connection.sendRequest("conversation/resume", { conversationId: id });
    expect(resumed.messages).toHaveLength(8);
    expect(JSON.stringify(resumed.messages)).toContain(long);
    const fifth: ChatSendResult = await b.b.connection.sendRequest("chat/send", { conversationId: id, text: "five" });
    await b.ended(fifth.turnId);
    expect(sentMessages(5).slice(0, -2)).toEqual(sentMessages(4));
  });

  it("compact by themselves when the history nears the context window, and say so", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    const huge = "z".repeat(80_000);
    mock.setScript({
      steps: [
        { content: [{ type: "text", text: huge }] },
        { content: [{ type: "text", text: "Short." }] },
        { content: [{ type: "text", text: "The first answer was 80,000 z." }] },
        { content: [{ type: "text", text: "Third." }] },
      ],
    });
    const b = startBundle();
    running.push(b);
    const notes: Note[] = [];
    b.connection.onNotification((method: string, params: unknown) => void notes.push({ method, params: params as Note["params"] }));
    await b.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: {}, configuration: { ...config(), contextWindow: 25_000, maxTokens: 1000 } });
    const until = async (turnId: string) => {
      while (!notes.some((n) => (n.method === "chat/turnFinished" || n.method === "chat/turnFailed") && n.params.turnId === turnId)) await new Promise((r) => setTimeout(r, 10));
    };
    let id: string | undefined;
    for (const text of ["one", "two", "three"]) {
      const sent: ChatSendResult = await b.connection.sendRequest("chat/send", { ...(id ? { conversationId: id } : {}), text });
      id = sent.conversationId;
      await until(sent.turnId);
    }
    const compacted = notes.filter((n) => n.method === "chat/compacted");
    expect(compacted).toHaveLength(1);
    expect(compacted[0]!.params).toMatchObject({ conversationId: id, replacedMessages: 2 });
    expect(compacted[0]!.params.tokensBefore as number).toBeGreaterThan(20_000);
    expect(compacted[0]!.params.tokensAfter as number).toBeLessThan(100);
    // Before the third turn's first state; its request starts from the summary.
    const third = notes.findIndex((n) => n.method === "chat/compacted");
    expect(notes.slice(third).find((n) => n.method === "chat/turnState")?.params.state).toBe("requesting");
    expect(JSON.stringify(mock.requests()[2]!.body)).toContain("You summarize the earlier part");
    const sent = sentMessages(3) as { content: { text: string }[] }[];
    expect(sent[0]!.content[0]!.text).toContain("The first answer was 80,000 z.");
    expect(JSON.stringify(sent)).not.toContain(huge);
  });

  it("let go of a conversation's file when it is closed, even after the configuration stopped saving", async () => {
    dir = mkdtempSync(join(tmpdir(), "saq-saved-"));
    mock.setScript({ steps: [{ content: [{ type: "text", text: "Hi." }] }] });
    const a = await server();
    const sent: ChatSendResult = await a.b.connection.sendRequest("chat/send", { text: "hello" });
    await a.ended(sent.turnId);
    const lock = join(dir, "conversations", `${sent.conversationId}.jsonl.lock`);
    expect(existsSync(lock)).toBe(true);
    // Saving is turned off for new conversations; the open one is closed: its lock goes.
    const { conversationDirectory: _dir, ...unsaved } = config();
    await a.b.connection.sendRequest("configuration/change", { configuration: unsaved });
    expect(await a.b.connection.sendRequest("conversation/delete", { conversationId: sent.conversationId })).toEqual({ deleted: true });
    expect(existsSync(lock)).toBe(false);
    expect(existsSync(join(dir, "conversations", `${sent.conversationId}.jsonl`))).toBe(true);
  });
});

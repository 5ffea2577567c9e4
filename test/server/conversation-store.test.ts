// The conversation files: written as the conversation happens, read back after a crash
// cut the last write short, refused (named, untouched) when corrupt, foreign or locked by a live server.

import { spawn } from "node:child_process";
import { appendFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, truncateSync, unlinkSync, writeFileSync, writeSync, statSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConversationJournal, ConversationStore, journalIO, lockIO, STORE_VERSION, StoreError, type HeaderRecord } from "../../server/agent/conversation-store.js";
import type { Message } from "../../server/llm/provider.js";

let dir: string;
let store: ConversationStore;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "saq-store-"));
  store = new ConversationStore(join(dir, "conversations"));
  store.ensureDirectory();
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const header = (id: string, projectRoot = "/proj"): HeaderRecord => ({ v: STORE_VERSION, type: "header", id, created: "2026-11-23T10:00:00.000Z", projectRoot, provider: "anthropic", model: "m" });
const user = (text: string): Message => ({ role: "user", content: [{ type: "text", text }] });
const toolCall: Message = { role: "assistant", content: [{ type: "text", text: "Looking." }, { type: "tool_use", id: "tu1", name: "describe_symbol", input: { symbol: "car" } }] };
const toolResult: Message = { role: "user", content: [{ type: "tool_result", toolUseId: "tu1", content: "CAR names a function", isError: false }] };
const answer: Message = { role: "assistant", content: [{ type: "text", text: "CAR is a function." }] };

function writeTurn(id: string): ConversationJournal {
  const j = ConversationJournal.create(store, header(id));
  for (const m of [user("What is car?"), toolCall, toolResult, answer]) j.message(m);
  j.usage("t1", { inputTokens: 100, outputTokens: 20, cacheReadTokens: 0, cacheWriteTokens: 0 }, 0.0123, "anthropic", "m");
  return j;
}

describe("conversation files", () => {
  it("keep each call's run as the chat showed it: its time, the approval's wait, the arguments that ran", () => {
    const j = ConversationJournal.create(store, header("c-run"));
    j.message(user("What is car?"));
    j.message(toolCall);
    j.result("tu1", "CAR names a function", false, { executionTimeMs: 3.25, approvalWaitMs: 4200, arguments: { symbol: "cdr" } });
    j.message(toolResult);
    j.message(answer);
    j.close();
    expect(store.read("c-run").calls).toEqual({ tu1: { executionTimeMs: 3.25, approvalWaitMs: 4200, arguments: { symbol: "cdr" } } });
  });

  it("keep each call's trust level and each turn's end (its usage, cost, steps, how it stopped) where it was shown; a rewind drops the turns it cut", () => {
    const j = ConversationJournal.create(store, header("c-ends"));
    const u = (n: number) => ({ inputTokens: n, outputTokens: 2, cacheReadTokens: 0, cacheWriteTokens: 0 });
    j.turn("t1", 0, 0);
    j.message(user("What is car?"));
    j.message(toolCall);
    j.result("tu1", "CAR names a function", false, { executionTimeMs: 3, safetyLevel: "safe", approved: true });
    j.message(toolResult);
    j.message(answer);
    j.usage("t1", u(100), 0.01, "anthropic", "m", { steps: 1, stopReason: "end_turn" });
    j.turn("t2", 4, 0);
    j.message(user("And cdr?"));
    j.usage("t2", u(7), 0.001, "anthropic", "m", { failed: { kind: "cancelled", message: "cancelled by the user" } });
    j.usage("compaction", u(5), 0.002, "anthropic", "m");
    j.close();
    const s = store.read("c-ends");
    expect(s.calls.tu1).toEqual({ executionTimeMs: 3, safetyLevel: "safe", approved: true });
    expect(s.turnEnds).toEqual([
      { afterMessage: 4, usage: u(100), costUsd: 0.01, steps: 1, stopReason: "end_turn" },
      { afterMessage: 5, afterBlocks: 1, usage: u(7), costUsd: 0.001, failed: { kind: "cancelled", message: "cancelled by the user" } },
    ]);
    store.appendTo("c-ends", { v: STORE_VERSION, type: "truncate", at: "2026-11-23T11:00:00.000Z", keep: 4, keepBlocks: 0 });
    expect(store.read("c-ends").turnEnds).toEqual([{ afterMessage: 4, usage: u(100), costUsd: 0.01, steps: 1, stopReason: "end_turn" }]);
  });

  it("read back every message, the usage, the title and the turns", () => {
    const j = writeTurn("c-1");
    j.close();
    const s = store.read("c-1");
    expect(s.messages).toEqual([user("What is car?"), toolCall, toolResult, answer]);
    expect(s.title).toBe("What is car?");
    expect(s.turns).toBe(1);
    expect(s.costUsd).toBeCloseTo(0.0123);
    expect(s.usage.inputTokens).toBe(100);
    expect(s.header.projectRoot).toBe("/proj");
    expect(s.truncatedBytes).toBeUndefined();
  });

  it("never take over a lock another server took over first from the same dead owner", () => {
    writeTurn("c-race").close();
    const lockFile = `${store.fileOf("c-race")}.lock`;
    // Left by a server that is gone.
    writeFileSync(lockFile, `999999@${hostname()}`);
    // Between this server's reading of the dead owner and its taking the lock, another live server
    // (here: this test's parent process) took it over.
    const live = `${process.ppid}@${hostname()}`;
    const saved = lockIO.beforeTakeover;
    lockIO.beforeTakeover = () => writeFileSync(lockFile, live);
    try {
      expect(() => store.lock("c-race")).toThrow(/is open in another sly-agent-q/);
    } finally {
      lockIO.beforeTakeover = saved;
    }
    expect(readFileSync(lockFile, "utf8")).toBe(live);
    unlinkSync(lockFile);
  });

  it("create a lock whole and leave nothing beside it", () => {
    writeTurn("c-whole-lock").close();
    const lockFile = `${store.fileOf("c-whole-lock")}.lock`;
    const lock = store.lock("c-whole-lock");
    expect(readFileSync(lock, "utf8")).toBe(`${process.pid}@${hostname()}`);
    store.unlock(lock);
    expect(existsSync(lockFile)).toBe(false);
    expect(readdirSync(join(dir, "conversations")).filter((f) => f.includes(".lock"))).toEqual([]);
  });

  it("keep the text the user saw of an answer the server died while streaming", () => {
    const j = ConversationJournal.create(store, header("c-streamed"));
    j.message(user("Explain car"));
    j.streamed("CAR returns ");
    j.streamed("the first element");
    j.close();
    // The server died here: no assistant message was written, only what had streamed.
    const s = store.read("c-streamed");
    expect(s.messages).toHaveLength(2);
    const text = s.messages[1]!.content[0]!;
    expect(s.messages[1]!.role).toBe("assistant");
    expect(text.type === "text" && text.text).toMatch(/^CAR returns the first element\n\[The answer was cut off/);
    expect(s.interrupted?.what.join(" ")).toMatch(/cut off while it streamed/);
    // The user goes on: the text stays where it was, before the next message.
    const again = ConversationJournal.reopen(store, "c-streamed", s);
    again.message(user("Go on"));
    again.close();
    const t = store.read("c-streamed");
    expect(t.messages.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
    expect(JSON.stringify(t.messages[1])).toContain("CAR returns the first element");
  });

  it("drop the streamed text once the whole answer is recorded", () => {
    const j = ConversationJournal.create(store, header("c-whole"));
    j.message(user("What is car?"));
    j.streamed("CAR is ");
    j.streamed("a function.");
    j.message(answer);
    j.close();
    const s = store.read("c-whole");
    expect(s.messages).toEqual([user("What is car?"), answer]);
    expect(s.interrupted).toBeUndefined();
  });

  it("are written as the conversation happens, one line per record, not on close", () => {
    const j = ConversationJournal.create(store, header("c-live"));
    j.message(user("first"));
    // Read while the journal is still open: the record is on disk already.
    expect(store.read("c-live").messages).toEqual([user("first")]);
    const lines = readFileSync(store.fileOf("c-live"), "utf8").split("\n");
    expect(lines.at(-1)).toBe("");
    expect(lines.slice(0, -1).every((l) => JSON.parse(l).v === STORE_VERSION)).toBe(true);
    j.close();
  });

  it("resume up to the last complete record when the last write was cut off, and seal it on reopening", () => {
    writeTurn("c-cut").close();
    const file = store.fileOf("c-cut");
    const full = statSync(file).size;
    const before = store.read("c-cut");
    // Cut the usage record (the last line) in the middle.
    truncateSync(file, full - 30);
    const cut = store.read("c-cut");
    expect(cut.messages).toEqual(before.messages);
    expect(cut.costUsd).toBe(0);
    expect(cut.truncatedBytes).toBeGreaterThan(0);
    // Reopen and go on: the cut line is sealed off and later records read back.
    const j = ConversationJournal.reopen(store, "c-cut", cut);
    j.message(user("and cdr?"));
    j.close();
    const after = store.read("c-cut");
    expect(after.messages).toEqual([...before.messages, user("and cdr?")]);
    expect(after.truncatedBytes).toBeUndefined();
    expect(after.turns).toBe(2);
  });

  it("refuse a file corrupt in the middle, naming it and the line, and leave it as it is", () => {
    writeTurn("c-bad").close();
    const file = store.fileOf("c-bad");
    const lines = readFileSync(file, "utf8").split("\n");
    lines[2] = "{not json";
    writeFileSync(file, lines.join("\n"));
    const bytes = readFileSync(file);
    expect(() => store.read("c-bad")).toThrow(StoreError);
    expect(() => store.read("c-bad")).toThrow(new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: line 3 is not a valid record`));
    expect(() => store.appendTo("c-bad", { v: 1, type: "title", at: "x", title: "t" })).toThrow(/line 3/);
    expect(readFileSync(file)).toEqual(bytes);
  });

  it("refuse a file of a newer format version and one that is not a conversation", () => {
    const file = store.fileOf("c-new");
    writeFileSync(file, `${JSON.stringify({ ...header("c-new"), v: STORE_VERSION + 1 })}\n`);
    expect(() => store.read("c-new")).toThrow(new RegExp(`format version ${STORE_VERSION + 1}, newer than this sly-agent-q reads`));
    writeFileSync(store.fileOf("c-foreign"), `${JSON.stringify({ v: 1, type: "message", at: "x", message: user("hi") })}\n`);
    expect(() => store.read("c-foreign")).toThrow(/does not start with a sly-agent-q conversation header/);
    writeFileSync(store.fileOf("c-empty"), "");
    expect(() => store.read("c-empty")).toThrow(/is empty/);
    expect(() => store.read("c-absent")).toThrow(/c-absent\.jsonl: cannot be read/);
    expect(() => store.fileOf("../etc/passwd")).toThrow(/is not a conversation id/);
  });

  it("list a project's conversations newest first and name the files they cannot read", () => {
    const a = ConversationJournal.create(store, header("c-a"));
    a.append({ v: 1, type: "message", at: "2026-11-23T11:00:00.000Z", message: user("older") });
    a.close();
    const b = ConversationJournal.create(store, header("c-b"));
    b.append({ v: 1, type: "message", at: "2026-11-23T12:00:00.000Z", message: user("newer") });
    b.append({ v: 1, type: "title", at: "2026-11-23T12:00:01.000Z", title: "Renamed" });
    b.close();
    ConversationJournal.create(store, header("c-other", "/elsewhere")).close();
    writeFileSync(store.fileOf("c-broken"), "garbage\nmore\n");
    const { conversations, errors } = store.list("/proj/");
    expect(conversations.map((c) => [c.conversationId, c.title])).toEqual([
      ["c-b", "Renamed"],
      ["c-a", "older"],
    ]);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain("c-broken.jsonl");
  });

  it("leave out of the list a conversation with nothing in it to resume", () => {
    ConversationJournal.create(store, header("c-nothing")).close();
    const t = ConversationJournal.create(store, header("c-cut"));
    t.append({ v: 1, type: "message", at: "2026-11-23T11:00:00.000Z", message: user("gone") });
    t.append({ v: 1, type: "truncate", at: "x", keep: 0 });
    t.close();
    writeTurn("c-full").close();
    const { conversations } = store.list("/proj");
    expect(conversations.map((c) => c.conversationId)).toEqual(["c-full"]);
    expect(conversations.map((c) => c.title)).not.toContain("(empty)");
  });

  it("apply rewinds and compactions recorded in the file", () => {
    const j = writeTurn("c-rw");
    j.message(user("second question"));
    j.message(answer);
    j.append({ v: 1, type: "compaction", at: "x", replaced: 4, summary: "They asked about CAR.", tokensBefore: 500, tokensAfter: 50 });
    expect(store.read("c-rw").compaction).toEqual({ replaced: 4, summary: "They asked about CAR." });
    j.append({ v: 1, type: "truncate", at: "x", keep: 2 });
    j.close();
    const s = store.read("c-rw");
    // Cut after a tool call: the history read back is repaired, the call answered as interrupted.
    expect(s.messages.slice(0, 2)).toEqual([user("What is car?"), toolCall]);
    expect(s.messages[2]).toEqual({ role: "user", content: [{ type: "tool_result", toolUseId: "tu1", content: expect.stringContaining("was interrupted"), isError: true }] });
    expect(s.interrupted).toMatchObject({ calls: ["describe_symbol"] });
    expect(s.compaction).toBeUndefined();
  });

  it("are not appended to by two servers at once; a lock left by a dead process is taken over", async () => {
    const j = writeTurn("c-lock");
    const lockFile = `${store.fileOf("c-lock")}.lock`;
    expect(readFileSync(lockFile, "utf8")).toBe(`${process.pid}@${hostname()}`);
    j.close();
    expect(existsSync(lockFile)).toBe(false);
    // Another live process (a second Emacs's server) holds it: refused, and the file is untouched.
    const other = spawn("sleep", ["30"], { stdio: "ignore" });
    try {
      writeFileSync(lockFile, `${other.pid}@${hostname()}`);
      const bytes = readFileSync(store.fileOf("c-lock"));
      expect(() => ConversationJournal.reopen(store, "c-lock", store.read("c-lock"))).toThrow(new RegExp(`is open in another sly-agent-q \\(process ${other.pid}@`));
      expect(() => store.delete("c-lock")).toThrow(/is open in another sly-agent-q/);
      expect(readFileSync(store.fileOf("c-lock"))).toEqual(bytes);
      expect(readFileSync(lockFile, "utf8")).toBe(`${other.pid}@${hostname()}`);
    } finally {
      other.kill();
    }
    await new Promise((r) => other.once("exit", r));
    // Now its process is gone: the stale lock is taken over.
    const again = ConversationJournal.reopen(store, "c-lock", store.read("c-lock"));
    again.message(user("after the crash"));
    again.close();
    expect(store.read("c-lock").messages.at(-1)).toEqual(user("after the crash"));
    expect(existsSync(lockFile)).toBe(false);
  });

  it("never glue a new record to a half-written line (appendFileSync of a partial record)", () => {
    writeTurn("c-glue").close();
    appendFileSync(store.fileOf("c-glue"), '{"v":1,"type":"message","at":"x","message":{"role":"user","con');
    const cut = store.read("c-glue");
    const j = ConversationJournal.reopen(store, "c-glue", cut);
    j.message(user("next"));
    j.close();
    // Read twice (as a second resume would): the sealed line stays skipped.
    expect(store.read("c-glue").messages.at(-1)).toEqual(user("next"));
    expect(store.read("c-glue").messages).toHaveLength(5);
  });

  it("drop the rewound turns, a turn that joined a user message included, and what they changed", () => {
    const j = ConversationJournal.create(store, header("c-turns"));
    j.turn("t1", 0, 0);
    j.message(user("one"));
    j.message(toolCall);
    j.changes("t1", "tu1", "write_file", [{ kind: "file", name: "/proj/a", before: null, after: "A" }]);
    j.message(toolResult);
    // Turn 2 was sent after turn 1 was cancelled: its text joined the tool results' message.
    j.turn("t2", 2, 1);
    j.message(user("two"));
    j.changes("t2", "tu2", "write_file", [{ kind: "file", name: "/proj/a", before: "A", after: "B" }]);
    const both = store.read("c-turns");
    expect(both.messages[2]!.content.map((b) => b.type)).toEqual(["tool_result", "text"]);
    expect(both.turnStarts.map((t) => t.turnId)).toEqual(["t1", "t2"]);
    j.append({ v: 1, type: "truncate", at: "x", keep: 2, keepBlocks: 1 });
    j.close();
    const s = store.read("c-turns");
    expect(s.messages).toEqual([user("one"), toolCall, toolResult]);
    expect(s.turnStarts.map((t) => t.turnId)).toEqual(["t1"]);
    expect(s.changes.map((c) => c.turnId)).toEqual(["t1"]);
  });
});

describe("conversation files under disk faults", () => {
  const realIO = { ...journalIO };
  afterEach(() => Object.assign(journalIO, realIO));

  /** Makes the Nth write from now write half its bytes, then fail as a full disk does. */
  function diskFullAt(n: number, truncateFails = false): void {
    let writes = 0;
    journalIO.write = (fd, data, offset) => {
      if (++writes < n) return writeSync(fd, data, offset);
      if (offset === 0) return writeSync(fd, data, 0, Math.ceil(data.length / 2));
      throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
    };
    if (truncateFails) {
      journalIO.truncate = () => {
        throw Object.assign(new Error("EIO: i/o error, ftruncate"), { code: "EIO" });
      };
    }
  }

  it("a full disk mid-append: the half-written record is cut back, the fault is told once, the conversation's calls do not fail", () => {
    const j = writeTurn("c-full");
    const before = readFileSync(store.fileOf("c-full"), "utf8");
    const faults: string[] = [];
    j.onFault = (m) => faults.push(m);
    diskFullAt(1);
    expect(() => j.message(user("lost to a full disk"))).not.toThrow();
    Object.assign(journalIO, realIO);
    // Nothing more is written after the fault, even when the disk has room again.
    j.message(user("after the fault"));
    j.close();
    expect(faults).toHaveLength(1);
    expect(faults[0]).toMatch(/c-full\.jsonl: could not be written \(the disk is full\).*no longer saved; what was saved before is intact/);
    expect(readFileSync(store.fileOf("c-full"), "utf8")).toBe(before);
    const s = store.read("c-full");
    expect(s.truncatedBytes).toBeUndefined();
    expect(s.messages).toEqual([user("What is car?"), toolCall, toolResult, answer]);
  });

  it("a full disk whose half record cannot be cut back: a later resume reads every complete record and seals the cut line", () => {
    const j = writeTurn("c-half");
    j.onFault = () => undefined;
    diskFullAt(1, true);
    j.message(user("half of me"));
    Object.assign(journalIO, realIO);
    j.close();
    const s = store.read("c-half");
    expect(s.truncatedBytes).toBeGreaterThan(0);
    expect(s.messages).toEqual([user("What is car?"), toolCall, toolResult, answer]);
    const again = ConversationJournal.reopen(store, "c-half", s);
    again.message(user("resumed"));
    again.close();
    expect(store.read("c-half").messages.at(-1)).toEqual(user("resumed"));
  });

  it("a file deleted or replaced under an open conversation is left alone and the fault is named", () => {
    const j = writeTurn("c-gone");
    const faults: string[] = [];
    j.onFault = (m) => faults.push(m);
    unlinkSync(store.fileOf("c-gone"));
    j.message(user("into the void"));
    expect(faults).toEqual([expect.stringMatching(/c-gone\.jsonl: was deleted by another program/)]);
    expect(existsSync(store.fileOf("c-gone"))).toBe(false);
    j.close();

    const k = writeTurn("c-swap");
    const seen: string[] = [];
    k.onFault = (m) => seen.push(m);
    const other = join(dir, "other.jsonl");
    writeFileSync(other, `${JSON.stringify(header("c-swap"))}\n`);
    renameSync(other, store.fileOf("c-swap"));
    k.message(user("not into the new file"));
    k.close();
    expect(seen).toEqual([expect.stringMatching(/was replaced by another program/)]);
    expect(readFileSync(store.fileOf("c-swap"), "utf8")).toBe(`${JSON.stringify(header("c-swap"))}\n`);
  });
});

// The conversation store never follows a link it did not make: a link, a FIFO or a directory planted
// at a conversation's name, or the conversations directory swapped for another, is never read as the
// conversation nor written through, and nothing outside the directory changes. Real files throughout.

import { execFileSync } from "node:child_process";
import { linkSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConversationJournal, ConversationStore, STORE_VERSION, StoreError, type HeaderRecord } from "../../server/agent/conversation-store.js";
import type { Message } from "../../server/llm/provider.js";

let base: string;
let conversations: string;
let store: ConversationStore;
let outside: string;
beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), "saq-links-"));
  conversations = join(base, "conversations");
  store = new ConversationStore(conversations);
  store.ensureDirectory();
  outside = join(base, "elsewhere");
  mkdirSync(outside);
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

const header = (id: string): HeaderRecord => ({ v: STORE_VERSION, type: "header", id, created: "2026-11-23T10:00:00.000Z", projectRoot: "/proj", starts: true });
const user = (text: string): Message => ({ role: "user", content: [{ type: "text", text }] });
const answer: Message = { role: "assistant", content: [{ type: "text", text: "Done." }] };

/** A conversation ID that claims starts, one turn in, still open. */
function openConversation(id: string): ConversationJournal {
  const j = ConversationJournal.create(store, header(id));
  j.message(user("first turn"));
  j.message(answer);
  return j;
}

/** A file outside the directory holding a copy of conversation ID (the same header, claiming starts). */
function outsideCopy(id: string): { file: string; text: string } {
  const file = join(outside, `${id}.jsonl`);
  const text = readFileSync(store.fileOf(id), "utf8");
  writeFileSync(file, text);
  return { file, text };
}

describe("the open conversation's file replaced by a link between two turns", () => {
  it("stops the saving, and neither the next record nor the starts claim's withdrawal writes the file outside", () => {
    const j = openConversation("c-link");
    const { file, text } = outsideCopy("c-link");
    const faults: string[] = [];
    j.onFault = (m) => faults.push(m);
    const original = join(base, "moved-away.jsonl");
    renameSync(store.fileOf("c-link"), original);
    symlinkSync(file, store.fileOf("c-link"));
    j.message(user("second turn"));
    const mayRun = j.started("call-after-the-swap");
    j.close();
    expect(faults).toEqual([expect.stringMatching(/c-link\.jsonl: was replaced by another program/)]);
    expect(readFileSync(file, "utf8")).toBe(text);
    // Nor the file the journal wrote, moved outside: its claim stays, so no call runs unrecorded.
    expect(readFileSync(original, "utf8")).toContain('"starts":true');
    expect(mayRun).toBe(false);
  });

  it("a link to the very file the journal has open is not that file either", () => {
    const j = openConversation("c-self");
    const faults: string[] = [];
    j.onFault = (m) => faults.push(m);
    const moved = join(outside, "c-self.jsonl");
    renameSync(store.fileOf("c-self"), moved);
    symlinkSync(moved, store.fileOf("c-self"));
    j.message(user("second turn"));
    j.close();
    expect(faults).toEqual([expect.stringMatching(/was replaced by another program/)]);
    expect(readFileSync(moved, "utf8")).not.toContain("second turn");
  });

  it("a hard link made to the open file elsewhere stops the saving: the name outside sees no later record", () => {
    const j = openConversation("c-hard");
    const faults: string[] = [];
    j.onFault = (m) => faults.push(m);
    const elsewhere = join(outside, "copy.jsonl");
    linkSync(store.fileOf("c-hard"), elsewhere);
    const text = readFileSync(elsewhere, "utf8");
    j.message(user("second turn"));
    expect(j.started("call-after-the-link")).toBe(false);
    j.close();
    expect(faults).toEqual([expect.stringMatching(/was given another name \(a hard link\)/)]);
    expect(readFileSync(elsewhere, "utf8")).toBe(text);
    // Nor is it reopened for writing while it has that other name.
    const stored = store.read("c-hard");
    expect(() => ConversationJournal.reopen(store, "c-hard", stored)).toThrow(/not opened for writing: it has another name elsewhere/);
  });

  it("the conversations directory swapped for a link to another holding a copy: the copy outside is left as it is", () => {
    const j = openConversation("c-dir");
    const { file, text } = outsideCopy("c-dir");
    const faults: string[] = [];
    j.onFault = (m) => faults.push(m);
    renameSync(conversations, join(base, "conversations.old"));
    symlinkSync(outside, conversations);
    j.message(user("second turn"));
    j.close();
    expect(faults).toEqual([expect.stringMatching(/was replaced by another program/)]);
    expect(readFileSync(file, "utf8")).toBe(text);
    expect(readFileSync(join(base, "conversations.old", "c-dir.jsonl"), "utf8")).toContain('"starts":null');
  });
});

describe("a saved conversation whose file is not a regular file of the directory", () => {
  it("a link to a copy elsewhere is listed as not read, a link, and never resumed nor appended to", () => {
    openConversation("c-saved").close();
    const { file, text } = outsideCopy("c-saved");
    unlinkSync(store.fileOf("c-saved"));
    symlinkSync(file, store.fileOf("c-saved"));
    const { conversations: listed, errors } = store.list();
    expect(listed.map((c) => c.conversationId)).not.toContain("c-saved");
    expect(errors).toEqual([expect.stringMatching(/c-saved\.jsonl: not read: a link/)]);
    expect(() => store.read("c-saved")).toThrow(/not read: a link/);
    expect(() => store.appendTo("c-saved", { v: STORE_VERSION, type: "title", at: "x", title: "renamed" })).toThrow(StoreError);
    expect(readFileSync(file, "utf8")).toBe(text);
  });

  it("a file read, then swapped for a link before it is opened for writing, is not written", () => {
    openConversation("c-race").close();
    const stored = store.read("c-race");
    const { file, text } = outsideCopy("c-race");
    unlinkSync(store.fileOf("c-race"));
    symlinkSync(file, store.fileOf("c-race"));
    expect(() => ConversationJournal.reopen(store, "c-race", stored)).toThrow(/not opened for writing: a link/);
    expect(readFileSync(file, "utf8")).toBe(text);
  });

  it("a file read, then swapped for another regular file before it is opened for writing, is not written", () => {
    openConversation("c-swap").close();
    const stored = store.read("c-swap");
    const { file, text } = outsideCopy("c-swap");
    renameSync(file, store.fileOf("c-swap"));
    expect(() => ConversationJournal.reopen(store, "c-swap", stored)).toThrow(/replaced by another program after it was read/);
    expect(readFileSync(store.fileOf("c-swap"), "utf8")).toBe(text);
  });

  it("a FIFO or a directory at a conversation's name is refused at once, without blocking", () => {
    execFileSync("mkfifo", [store.fileOf("c-fifo")]);
    mkdirSync(store.fileOf("c-folder"));
    expect(() => store.read("c-fifo")).toThrow(/c-fifo\.jsonl: not read: not a regular file/);
    expect(() => store.read("c-folder")).toThrow(/c-folder\.jsonl: not read: not a regular file/);
    expect(store.list().errors).toHaveLength(2);
  });

  it("deleting a linked conversation deletes the link, not the file it points to", () => {
    openConversation("c-del").close();
    const { file, text } = outsideCopy("c-del");
    unlinkSync(store.fileOf("c-del"));
    symlinkSync(file, store.fileOf("c-del"));
    expect(store.delete("c-del")).toBe(true);
    expect(readFileSync(file, "utf8")).toBe(text);
  });
});

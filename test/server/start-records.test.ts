// Each call's start is saved before it runs, so that a resumed conversation can say a call without one
// was not run. That must never be said of a call that ran: when saving stops part way (a full disk, the
// file replaced), the file no longer claims it; a call run with the user's edited arguments says which.
import * as fs from "node:fs";
import { copyFileSync, mkdtempSync, readFileSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ConversationJournal, ConversationStore, journalIO, STORE_VERSION } from "../../server/agent/conversation-store.js";
import { Conversation } from "../../server/agent/conversation.js";
import { Executor, type ApprovalFn } from "../../server/tools/executor.js";
import { defineTool, type ToolHandler } from "../../server/tools/tool.js";
import { harness, turn, type Harness } from "./agent-helpers.js";

// The file system can go read-only (ext4 errors=remount-ro after an I/O error): every open for writing
// fails with EROFS, the journal's appends and the in-place rewrite of the header alike.
const fsState = { readOnly: false };
vi.mock("node:fs", async (importOriginal) => {
  const real = await importOriginal<typeof import("node:fs")>();
  return {
    ...real,
    openSync: (path: fs.PathLike, flags: fs.OpenMode = "r", mode?: fs.Mode) => {
      if (fsState.readOnly && flags !== "r") throw Object.assign(new Error("EROFS: read-only file system, open"), { code: "EROFS" });
      return real.openSync(path, flags, mode);
    },
  };
});

const realIO = { ...journalIO };

/** From now on every write of a journal fails as on a full disk. */
function fillTheDisk(): void {
  journalIO.write = () => {
    throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
  };
}

/** Registers a dangerous tool NAME with HANDLER in H. */
function dangerousTool(h: Harness, name: string, handler: ToolHandler, parameters: Record<string, { type: "string"; description: string }> = {}): void {
  h.registry.register(defineTool({ name, description: `Test tool ${name}.`, parameters, required: Object.keys(parameters), safety: "dangerous", categories: ["test"], runtime: "node", handler }));
}

/** A destructive call that notes in EFFECTS that it ran. */
function dropTable(h: Harness, effects: string[]): void {
  dangerousTool(h, "drop_table", async () => {
    effects.push("dropped");
    return "dropped";
  });
}

/** Conversation ID saved in a new store, its file claiming starts, as the server makes them. */
function savedConversation(id: string): { store: ConversationStore; c: Conversation; journal: ConversationJournal } {
  const store = new ConversationStore(join(mkdtempSync(join(tmpdir(), "saq-starts-")), "conversations"));
  store.ensureDirectory();
  const c = new Conversation(id);
  const journal = ConversationJournal.create(store, { v: STORE_VERSION, type: "header", id, created: new Date().toISOString(), starts: true });
  journal.onFault = () => undefined;
  c.recorder = journal;
  return { store, c, journal };
}

/** The model's two calls, FIRST then drop_table, and its answer after them. */
const firstThenDrop = (first: string) => ({
  steps: [{ content: [{ type: "tool_use" as const, name: first, input: {} }, { type: "tool_use" as const, name: "drop_table", input: {} }] }, { content: [{ type: "text" as const, text: "Done." }] }],
});

const approveAll: ApprovalFn = async () => ({ decision: "approved" });

describe("the saved start of each call", () => {
  let h: Harness | undefined;
  afterEach(async () => {
    Object.assign(journalIO, realIO);
    fsState.readOnly = false;
    await h?.close();
    h = undefined;
  });

  for (const kind of ["anthropic", "openai"] as const) {
    it(`a call that runs after saving stopped (the disk filled) is never said not to have run (${kind})`, async () => {
      h = await harness();
      const effects: string[] = [];
      // A call whose own work fills the disk (a big build, a log, another program).
      dangerousTool(h, "fill_disk", async () => (fillTheDisk(), "built"));
      dropTable(h, effects);
      const { store, c, journal } = savedConversation(`c-starts-${kind}`);
      const faults: string[] = [];
      journal.onFault = (m) => faults.push(m);
      const { outcome } = await turn({ ...h, executor: new Executor({ registry: h.registry, approve: approveAll }) }, kind, c, "Build, then drop", { script: firstThenDrop("fill_disk") });
      Object.assign(journalIO, realIO);
      journal.close();
      expect(outcome.status).toBe("finished");
      expect(faults).toHaveLength(1);
      expect(effects).toEqual(["dropped"]);
      // Resumed later, the model is told the call that ran may have had an effect, never that it had none.
      const saved = store.read(c.id);
      expect(JSON.stringify(saved.messages.at(-1))).toMatch(/drop_table was interrupted/);
    });
  }

  it("a call whose approval waited while the disk filled runs, and is never said not to have run", async () => {
    h = await harness();
    const effects: string[] = [];
    dropTable(h, effects);
    // The user takes a while to approve; meanwhile a build fills the disk.
    const executor = new Executor({ registry: h.registry, approve: async () => (fillTheDisk(), { decision: "approved" }) });
    const { store, c, journal } = savedConversation("c-starts-one");
    const { outcome } = await turn({ ...h, executor }, "anthropic", c, "Drop it", {
      script: { steps: [{ content: [{ type: "tool_use", name: "drop_table", input: {} }] }, { content: [{ type: "text", text: "Done." }] }] },
    });
    Object.assign(journalIO, realIO);
    journal.close();
    expect(outcome.status).toBe("finished");
    expect(effects).toEqual(["dropped"]);
    expect(JSON.stringify(store.read(c.id).messages.at(-1))).toMatch(/drop_table was interrupted/);
  });

  it("a call that runs after the file was replaced by a copy (a sync tool) is never said not to have run by the copy", async () => {
    h = await harness();
    const effects: string[] = [];
    const { store, c, journal } = savedConversation("c-starts-copied");
    dangerousTool(h, "sync_copy", async () => {
      copyFileSync(journal.file, `${journal.file}.copy`);
      renameSync(`${journal.file}.copy`, journal.file);
      return "synced";
    });
    dropTable(h, effects);
    const { outcome } = await turn({ ...h, executor: new Executor({ registry: h.registry, approve: approveAll }) }, "anthropic", c, "Sync, then drop", { script: firstThenDrop("sync_copy") });
    journal.close();
    expect(outcome.status).toBe("finished");
    expect(effects).toEqual(["dropped"]);
    expect(JSON.stringify(store.read(c.id).messages.at(-1))).toMatch(/drop_table was interrupted/);
  });

  it("a call whose start can be neither saved nor its file's claim withdrawn (a read-only file system) is not run", async () => {
    h = await harness();
    const effects: string[] = [];
    dangerousTool(h, "break_disk", async () => {
      // An I/O error: the kernel remounts the file system read-only.
      fsState.readOnly = true;
      journalIO.write = () => {
        throw Object.assign(new Error("EROFS: read-only file system, write"), { code: "EROFS" });
      };
      return "built";
    });
    dropTable(h, effects);
    const { store, c, journal } = savedConversation("c-starts-erofs");
    const { outcome, events } = await turn({ ...h, executor: new Executor({ registry: h.registry, approve: approveAll }) }, "anthropic", c, "Build, then drop", { script: firstThenDrop("break_disk") });
    Object.assign(journalIO, realIO);
    fsState.readOnly = false; // after fsck and a reboot
    journal.close();
    expect(outcome.status).toBe("finished");
    expect(effects).toEqual([]);
    expect(events.results[1]!.content).toMatch(/drop_table was not run: this conversation's file can no longer be written/);
    // The header still claims starts, and it is true of the call: it never ran.
    expect(readFileSync(journal.file, "utf8").split("\n")[0]).toContain('"starts":true');
    expect(JSON.stringify(store.read(c.id).messages.at(-1))).toMatch(/drop_table was not run/);
  });

  it("a file last written before the machine started is not trusted to hold every start", async () => {
    const { store, c, journal } = savedConversation("c-starts-reboot");
    c.addUserText("Drop it");
    c.addAssistant([{ type: "tool_use", id: "call_1", name: "drop_table", input: {} }]);
    journal.close();
    expect(JSON.stringify(store.read(c.id).messages.at(-1))).toMatch(/drop_table was not run/);
    // As after a crash of the machine: the file's time is before this boot.
    const long = new Date(Date.now() - 1000 * 60 * 60 * 24 * 365 * 20);
    fs.utimesSync(journal.file, long, long);
    const told = JSON.stringify(store.read(c.id).messages.at(-1));
    expect(told).toMatch(/drop_table was interrupted/);
    expect(told).not.toMatch(/not run/);
  });

  it("a refusal lasts only while the claim cannot be withdrawn: once the file system is writable again, calls run", () => {
    const { c, journal } = savedConversation("c-starts-writable-again");
    c.addUserText("Go");
    fsState.readOnly = true;
    journalIO.write = () => {
      throw Object.assign(new Error("EROFS: read-only file system, write"), { code: "EROFS" });
    };
    expect(c.recordStarted("call_1")).toBe(false);
    // Remounted writable (or space freed): saving stays stopped, but the claim can now be withdrawn.
    fsState.readOnly = false;
    Object.assign(journalIO, realIO);
    expect(c.recordStarted("call_2")).toBe(true);
    journal.close();
    expect(readFileSync(journal.file, "utf8").split("\n")[0]).toContain('"starts":null');
  });

  it("a file from before the machine started stays distrusted after a later write (a rename from the list)", () => {
    const { store, c, journal } = savedConversation("c-starts-renamed");
    c.addUserText("Drop it");
    c.addAssistant([{ type: "tool_use", id: "call_1", name: "drop_table", input: {} }]);
    journal.close();
    const long = new Date(Date.now() - 1000 * 60 * 60 * 24 * 365 * 20);
    fs.utimesSync(journal.file, long, long);
    // After the reboot the user renames it in the resume list (conversation/rename: appendTo).
    store.appendTo(c.id, { v: STORE_VERSION, type: "title", at: new Date().toISOString(), title: "Renamed" });
    const told = JSON.stringify(store.read(c.id).messages.at(-1));
    expect(told).toMatch(/drop_table was interrupted/);
    expect(told).not.toMatch(/not run/);
  });

  it("a call run with the user's edited arguments, cut off by a crash: the resumed history says which arguments may have taken effect", async () => {
    h = await harness();
    const effects: string[] = [];
    let ran!: () => void;
    const running = new Promise<void>((r) => (ran = r));
    dangerousTool(
      h,
      "write_thing",
      (a, ctx) =>
        new Promise((_resolve, reject) => {
          effects.push(String(a.path));
          ran();
          // The server is killed here, before the result is written.
          ctx.signal.addEventListener("abort", () => reject(new Error("stopped")));
        }),
      { path: { type: "string", description: "Where." } },
    );
    // The user edits the path before approving.
    const executor = new Executor({ registry: h.registry, approve: async () => ({ decision: "modified", arguments: { path: "other.txt" } }) });
    const { store, c, journal } = savedConversation("c-starts-edited");
    const stop = new AbortController();
    const done = turn({ ...h, executor }, "anthropic", c, "Write notes.txt", {
      signal: stop.signal,
      script: { steps: [{ content: [{ type: "tool_use", name: "write_thing", input: { path: "notes.txt" } }] }, { content: [{ type: "text", text: "Done." }] }] },
    });
    await running;
    // What a resume after the crash reads now.
    const saved = store.read(c.id);
    c.recorder = undefined;
    stop.abort("test over");
    await done.catch(() => undefined);
    journal.close();
    expect(effects).toEqual(["other.txt"]);
    const history = JSON.stringify(saved.messages.slice(-2));
    expect(history).toMatch(/write_thing was interrupted/);
    // Not only the model's notes.txt: the arguments it ran with.
    expect(history).toMatch(/It ran with arguments the user edited, not yours: \{\\"path\\":\\"other\.txt\\"\}/);
  });
});

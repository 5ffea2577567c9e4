// Each call's start is saved before it runs, so that a resumed conversation can say a call without one
// was not run. That must never be said of a call that ran: when saving stops part way (a full disk, the
// file replaced), the file no longer claims it; a call run with the user's edited arguments says which.
import { copyFileSync, mkdtempSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ConversationJournal, ConversationStore, journalIO, STORE_VERSION } from "../../server/agent/conversation-store.js";
import { Conversation } from "../../server/agent/conversation.js";
import { Executor } from "../../server/tools/executor.js";
import { defineTool } from "../../server/tools/tool.js";
import { harness, turn, type Harness } from "./agent-helpers.js";

const realIO = { ...journalIO };

describe("the saved start of each call", () => {
  let h: Harness | undefined;
  afterEach(async () => {
    Object.assign(journalIO, realIO);
    await h?.close();
    h = undefined;
  });

  for (const kind of ["anthropic", "openai"] as const) {
    it(`a call that runs after saving stopped (the disk filled) is never said not to have run (${kind})`, async () => {
      h = await harness();
      const effects: string[] = [];
      h.registry.register(
        defineTool({
          name: "fill_disk",
          description: "A call whose own work fills the disk (a big build, a log, another program).",
          parameters: {},
          safety: "dangerous",
          categories: ["test"],
          runtime: "node",
          handler: async () => {
            // From now on every write fails as on a full disk.
            journalIO.write = () => {
              throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
            };
            return "built";
          },
        }),
      );
      h.registry.register(
        defineTool({
          name: "drop_table",
          description: "A destructive call.",
          parameters: {},
          safety: "dangerous",
          categories: ["test"],
          runtime: "node",
          handler: async () => {
            effects.push("dropped");
            return "dropped";
          },
        }),
      );
      const executor = new Executor({ registry: h.registry, approve: async () => ({ decision: "approved" }) });
      const dir = mkdtempSync(join(tmpdir(), "saq-starts-"));
      const store = new ConversationStore(join(dir, "conversations"));
      store.ensureDirectory();
      const c = new Conversation(`c-starts-${kind}`);
      const journal = ConversationJournal.create(store, { v: STORE_VERSION, type: "header", id: c.id, created: new Date().toISOString(), starts: true });
      const faults: string[] = [];
      journal.onFault = (m) => faults.push(m);
      c.recorder = journal;
      const { outcome } = await turn({ ...h, executor }, kind, c, "Build, then drop", {
        script: {
          steps: [
            { content: [{ type: "tool_use", name: "fill_disk", input: {} }, { type: "tool_use", name: "drop_table", input: {} }] },
            { content: [{ type: "text", text: "Done." }] },
          ],
        },
      });
      Object.assign(journalIO, realIO);
      journal.close();
      expect(outcome.status).toBe("finished");
      expect(faults).toHaveLength(1);
      // The destructive call ran.
      expect(effects).toEqual(["dropped"]);
      // The user later resumes the saved conversation (the next day, after a restart): the model is told...
      const saved = store.read(c.id);
      const told = JSON.stringify(saved.messages[saved.messages.length - 1]);
      // ...that the call that ran may have had an effect, never that it had none.
      expect(told).not.toMatch(/drop_table was not run.*It had no effect/);
    });
  }

  it("a call whose approval waited while the disk filled runs, and is never said not to have run", async () => {
    h = await harness();
    const effects: string[] = [];
    h.registry.register(
      defineTool({
        name: "drop_table",
        description: "A destructive call.",
        parameters: {},
        safety: "dangerous",
        categories: ["test"],
        runtime: "node",
        handler: async () => {
          effects.push("dropped");
          return "dropped";
        },
      }),
    );
    // The user takes a while to approve; meanwhile a build fills the disk (or the file system goes read-only).
    const executor = new Executor({
      registry: h.registry,
      approve: async () => {
        journalIO.write = () => {
          throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
        };
        return { decision: "approved" };
      },
    });
    const dir = mkdtempSync(join(tmpdir(), "saq-starts-"));
    const store = new ConversationStore(join(dir, "conversations"));
    store.ensureDirectory();
    const c = new Conversation("c-starts-one");
    const journal = ConversationJournal.create(store, { v: STORE_VERSION, type: "header", id: c.id, created: new Date().toISOString(), starts: true });
    journal.onFault = () => undefined;
    c.recorder = journal;
    const { outcome } = await turn({ ...h, executor }, "anthropic", c, "Drop it", {
      script: { steps: [{ content: [{ type: "tool_use", name: "drop_table", input: {} }] }, { content: [{ type: "text", text: "Done." }] }] },
    });
    Object.assign(journalIO, realIO);
    journal.close();
    expect(outcome.status).toBe("finished");
    expect(effects).toEqual(["dropped"]);
    const saved = store.read(c.id);
    expect(JSON.stringify(saved.messages.at(-1))).not.toMatch(/drop_table was not run.*It had no effect/);
  });

  it("a call that runs after the file was replaced by a copy (a sync tool) is never said not to have run by the copy", async () => {
    h = await harness();
    const effects: string[] = [];
    let file = "";
    h.registry.register(
      defineTool({
        name: "sync_copy",
        description: "Another program puts a copy of the conversation's file at its name.",
        parameters: {},
        safety: "dangerous",
        categories: ["test"],
        runtime: "node",
        handler: async () => {
          copyFileSync(file, `${file}.copy`);
          renameSync(`${file}.copy`, file);
          return "synced";
        },
      }),
    );
    h.registry.register(
      defineTool({
        name: "drop_table",
        description: "A destructive call.",
        parameters: {},
        safety: "dangerous",
        categories: ["test"],
        runtime: "node",
        handler: async () => {
          effects.push("dropped");
          return "dropped";
        },
      }),
    );
    const executor = new Executor({ registry: h.registry, approve: async () => ({ decision: "approved" }) });
    const store = new ConversationStore(join(mkdtempSync(join(tmpdir(), "saq-starts-")), "conversations"));
    store.ensureDirectory();
    const c = new Conversation("c-starts-copied");
    const journal = ConversationJournal.create(store, { v: STORE_VERSION, type: "header", id: c.id, created: new Date().toISOString(), starts: true });
    file = journal.file;
    journal.onFault = () => undefined;
    c.recorder = journal;
    const { outcome } = await turn({ ...h, executor }, "anthropic", c, "Sync, then drop", {
      script: {
        steps: [
          { content: [{ type: "tool_use", name: "sync_copy", input: {} }, { type: "tool_use", name: "drop_table", input: {} }] },
          { content: [{ type: "text", text: "Done." }] },
        ],
      },
    });
    journal.close();
    expect(outcome.status).toBe("finished");
    expect(effects).toEqual(["dropped"]);
    const saved = store.read(c.id);
    expect(JSON.stringify(saved.messages.at(-1))).toMatch(/drop_table was interrupted/);
  });

  it("a call run with the user's edited arguments, cut off by a crash: the resumed history says which arguments may have taken effect", async () => {
    h = await harness();
    const effects: string[] = [];
    let ran!: () => void;
    const running = new Promise<void>((r) => (ran = r));
    h.registry.register(
      defineTool({
        name: "write_thing",
        description: "Writes a file.",
        parameters: { path: { type: "string", description: "Where." } },
        required: ["path"],
        safety: "dangerous",
        categories: ["test"],
        runtime: "node",
        handler: (a, ctx) =>
          new Promise((_resolve, reject) => {
            effects.push(String(a.path));
            ran();
            // The server is killed here, before the result is written.
            ctx.signal.addEventListener("abort", () => reject(new Error("stopped")));
          }),
      }),
    );
    // The user edits the path before approving.
    const executor = new Executor({ registry: h.registry, approve: async () => ({ decision: "modified", arguments: { path: "other.txt" } }) });
    const dir = mkdtempSync(join(tmpdir(), "saq-starts-"));
    const store = new ConversationStore(join(dir, "conversations"));
    store.ensureDirectory();
    const c = new Conversation("c-starts-edited");
    const journal = ConversationJournal.create(store, { v: STORE_VERSION, type: "header", id: c.id, created: new Date().toISOString(), starts: true });
    c.recorder = journal;
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

// The lean tool set: where the model's context window is small a conversation is offered a core set and
// add_tools; the model brings in a category, which stays for the rest of the conversation (after the
// tools it had, so what was sent stays the same) and after it is saved and resumed; every tool stays
// reachable. A large window is offered every tool, without add_tools.

import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { RecordedRequest } from "../fixtures/mock-llm/server.mjs";
import type { ChatSendResult, Configuration } from "../../server/protocol.js";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { categoriesOf, CORE_TOOLS, moreToolsSection } from "../../server/agent/tool-set.js";
import { FAKE_KEY } from "./agent-helpers.js";
import { chatsWithMock, type ChatHarness } from "./chat-harness.js";

const chats = chatsWithMock();

/** The tools the server's policy offers H (the lean set or not). */
const offeredBy = (h: ChatHarness) => h.server.policyFor(h.server.configuration).offered();
const names = (r: RecordedRequest): string[] => (r.body.tools as { name: string }[]).map((t) => t.name);
const system = (r: RecordedRequest): string => (r.body.system as { text: string }[]).map((b) => b.text).join("");

function connect(extra: Configuration): Promise<ChatHarness> {
  return chats.connect({
    configuration: { provider: "anthropic", apiKey: FAKE_KEY, baseUrl: chats.mock().url, model: "claude-sonnet-4-6", ...extra },
    registry: createDefaultRegistry(),
    capabilities: { tools: true, image: true, approvals: false },
  });
}

async function send(h: ChatHarness, text: string, conversationId?: string): Promise<ChatSendResult> {
  const sent: ChatSendResult = await h.client.sendRequest("chat/send", { text, ...(conversationId ? { conversationId } : {}) });
  const end = await h.ended(sent.turnId);
  expect(end.method, JSON.stringify(end.params)).toBe("chat/turnFinished");
  return sent;
}

describe("the lean tool set", () => {
  it("lists what each category would add, the core set left out, a category inside another named there, not repeated", () => {
    const all = createDefaultRegistry().list();
    const lines = moreToolsSection(all).split("\n").slice(2);
    const read = new Map(lines.map((l) => /^- ([a-z]+): (?:the ([a-z, ]+) tools(?:, |$))?(.*)$/.exec(l)!).map((m) => [m[1]!, { parts: m[2] ? m[2].split(/, | and /) : [], own: m[3] ? m[3].split(", ") : [] }]));
    const expand = (c: string): string[] => [...read.get(c)!.parts.flatMap(expand), ...read.get(c)!.own];
    for (const [c, names] of categoriesOf(all)) {
      const adds = names.filter((n) => !CORE_TOOLS.includes(n));
      if (adds.length === 0) expect(read.has(c)).toBe(false);
      else expect(expand(c).sort()).toEqual(adds.sort());
    }
    // A tool named once per line: introspection names xref, packages and clos rather than their tools.
    expect(read.get("introspection")!.parts).toEqual(["xref", "packages", "clos", "project"]);
    expect(read.get("introspection")!.own).not.toContain("xref");
    for (const { own } of read.values()) expect(new Set(own).size).toBe(own.length);
    // Internal tools (buffer_file: Emacs's answer for the protected-buffer check) are never offered,
    // so never listed.
    const internal = all.filter((t) => t.internal).map((t) => t.name);
    expect(internal.length).toBeGreaterThan(0);
    for (const name of internal) expect(moreToolsSection(all)).not.toMatch(new RegExp(`\\b${name}\\b`));
  });

  it("offers a small window the core set and add_tools; an added category stays, after what was sent, and through a resume", async () => {
    const dir = mkdtempSync(join(tmpdir(), "saq-lean-"));
    const h = await connect({ contextWindow: 16_000, conversationDirectory: dir });
    const all = offeredBy(h).map((t) => t.name);
    chats.mock().setScript({
      steps: [
        { content: [{ type: "tool_use", name: "add_tools", input: { category: "debugger" } }] },
        { content: [{ type: "text", text: "Now I can look at the debugger." }] },
        { content: [{ type: "text", text: "Still here." }] },
      ],
    });
    const first = await send(h, "What is on the stack?");
    await send(h, "And now?", first.conversationId);
    const [r1, r2, r3] = chats.mock().requests() as [RecordedRequest, RecordedRequest, RecordedRequest];
    expect(names(r1).sort()).toEqual([...CORE_TOOLS, "add_tools"].sort());
    // Every tool stays reachable: the prompt names each one the set holds back, under its category,
    // and none of those it offers already.
    const more = system(r1).split("## More Tools\n")[1]!.split("\n\n")[0]!;
    const listed = new Set(more.split("\n").slice(1).flatMap((l) => l.replace(/^- [a-z]+: (the [a-z, ]+ tools, )?/, "").split(", ")));
    for (const name of all.filter((n) => !names(r1).includes(n))) expect(listed).toContain(name);
    for (const name of names(r1)) expect(listed).not.toContain(name);
    // The debugger's tools come after the ones already sent, which stay as they were.
    const debuggerTools = offeredBy(h).filter((t) => t.categories.includes("debugger")).map((t) => t.name);
    expect(names(r2).slice(0, names(r1).length)).toEqual(names(r1));
    expect(names(r2).slice(names(r1).length)).toEqual(debuggerTools.filter((n) => !names(r1).includes(n)));
    expect(JSON.stringify(r2.body.tools.slice(0, names(r1).length))).toBe(JSON.stringify(r1.body.tools.map(({ cache_control: _, ...t }: { cache_control?: unknown }) => t)));
    // The next turn keeps them, with the same system prompt.
    expect(names(r3)).toEqual(names(r2));
    expect(system(r3)).toBe(system(r1));

    // A server started again resumes the saved conversation with the tools it had.
    h.dispose();
    const again = await connect({ contextWindow: 16_000, conversationDirectory: dir });
    await again.client.sendRequest("conversation/resume", { conversationId: first.conversationId });
    chats.mock().setScript({ steps: [{ content: [{ type: "text", text: "Back." }] }] });
    await send(again, "Go on", first.conversationId);
    expect(names(chats.mock().requests()[0]!)).toEqual(names(r2));
  });

  it("answers an unknown category with the categories there are", async () => {
    const h = await connect({ contextWindow: 8_000 });
    chats.mock().setScript({
      steps: [{ content: [{ type: "tool_use", name: "add_tools", input: { category: "teleportation" } }] }, { content: [{ type: "text", text: "ok" }] }],
    });
    await send(h, "Teleport");
    const result = JSON.stringify(chats.mock().requests()[1]!.body.messages[2]);
    expect(result).toContain('Unknown category \\"teleportation\\"');
    expect(result).toContain("debugger");
    expect(names(chats.mock().requests()[1]!)).toEqual(names(chats.mock().requests()[0]!));
  });

  it("offers a large window every tool, and no add_tools", async () => {
    const h = await connect({});
    chats.mock().setScript({ steps: [{ content: [{ type: "text", text: "Hello." }] }] });
    await send(h, "Hi");
    const offered = names(chats.mock().requests()[0]!);
    expect(offered).not.toContain("add_tools");
    expect(offered).toEqual(offeredBy(h).flatMap((t) => (t.name === "add_tools" ? [] : [t.name])));
    expect(system(chats.mock().requests()[0]!)).not.toContain("add_tools");
  });

  it("keeps the added categories after the turn that added them is compacted and the server restarted", async () => {
    const dir = mkdtempSync(join(tmpdir(), "saq-lean-"));
    const h = await connect({ contextWindow: 16_000, conversationDirectory: dir });
    chats.mock().setScript({
      steps: [
        { content: [{ type: "tool_use", name: "add_tools", input: { category: "debugger" } }] },
        { content: [{ type: "text", text: "Added." }] },
        { content: [{ type: "text", text: "Second." }] },
        { content: [{ type: "text", text: "Third." }] },
        { content: [{ type: "text", text: "They added the debugger's tools." }] },
      ],
    });
    const first = await send(h, "What is on the stack?");
    await send(h, "two", first.conversationId);
    await send(h, "three", first.conversationId);
    const before = names(chats.mock().requests()[3]!);
    expect(before).toContain("debugger_state");
    const compacted = (await h.client.sendRequest("conversation/compact", { conversationId: first.conversationId })) as { compacted: boolean };
    expect(compacted.compacted).toBe(true);
    h.dispose();

    const again = await connect({ contextWindow: 16_000, conversationDirectory: dir });
    await again.client.sendRequest("conversation/resume", { conversationId: first.conversationId });
    chats.mock().setScript({ steps: [{ content: [{ type: "text", text: "Back." }] }] });
    await send(again, "four", first.conversationId);
    expect(names(chats.mock().requests()[0]!)).toEqual(before);
  });

  it("offers add_tools under a categories setting, and adds only what that setting allows", async () => {
    const h = await connect({ contextWindow: 16_000, categories: ["introspection", "debugger"] });
    const allowed = offeredBy(h).map((t) => t.name);
    chats.mock().setScript({
      steps: [
        { content: [{ type: "tool_use", name: "add_tools", input: { category: "debugger" } }] },
        { content: [{ type: "tool_use", name: "add_tools", input: { category: "filesystem" } }] },
        { content: [{ type: "text", text: "Done." }] },
      ],
    });
    await send(h, "Look");
    const [r1, r2, r3] = chats.mock().requests() as [RecordedRequest, RecordedRequest, RecordedRequest];
    expect(names(r1)).toContain("add_tools");
    expect(names(r2).some((n) => n.startsWith("debugger_"))).toBe(true);
    // Nothing the user's categories leave out is ever offered.
    for (const n of names(r3)) if (n !== "add_tools") expect(allowed).toContain(n);
    expect(names(r3)).toEqual(names(r2));
    expect(JSON.stringify(r3.body.messages[4])).toContain('Unknown category \\"filesystem\\"');
  });
});

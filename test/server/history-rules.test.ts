// The rule for a valid history and its repair (history-rules.ts): unit cases for each fault a
// process's death or a bad file can leave, and properties over random histories cut at random
// points, checked by the rule and by the mock's validators of both wire formats (what the real
// APIs accept).

import { describe, expect, it } from "vitest";
import { historyProblems, interruptedResult, isValidHistory, repairHistory } from "../../server/agent/history-rules.js";
import { toMessageParam } from "../../server/llm/anthropic.js";
import { toMessages } from "../../server/llm/openai.js";
import { isThinking, type AssistantMessage, type Message, type UserMessage } from "../../server/llm/provider.js";
import { thinkingForRequest } from "../../server/llm/thinking.js";
import { redactedData, signThinking, validateAnthropic, validateOpenAI } from "../fixtures/mock-llm/server.mjs";

const user = (text: string): UserMessage => ({ role: "user", content: [{ type: "text", text }] });
const say = (text: string): AssistantMessage => ({ role: "assistant", content: [{ type: "text", text }] });
const call = (id: string, name = "eval_form", text?: string): AssistantMessage => ({
  role: "assistant",
  content: [...(text ? [{ type: "text" as const, text }] : []), { type: "tool_use", id, name, input: { form: "(+ 1 2)" } }],
});
const result = (id: string, content = "3"): UserMessage => ({ role: "user", content: [{ type: "tool_result", toolUseId: id, content, isError: false }] });

/** What the mock (the real APIs' rules) says of HISTORY sent as a request, a user text added when it ends with an answer. */
function wireProblems(history: readonly Message[]): { anthropic?: string; openai?: string } {
  const messages = history[history.length - 1]?.role === "user" ? history : [...history, user("next")];
  // Sent as a model that thinks with a budget would send it: the strictest of the API's thinking rules.
  const thinking = thinkingForRequest(messages, { mode: "budget", budgetTokens: 2048, interleaved: false });
  return {
    anthropic: validateAnthropic({ model: "claude-sonnet-4-5", max_tokens: 4096, messages: messages.map((m) => toMessageParam(m)), ...(thinking ? { thinking: { type: "enabled", budget_tokens: 2048 } } : {}) }),
    openai: validateOpenAI({ model: "m", messages: toMessages("system", messages) }),
  };
}

describe("the history rule", () => {
  it("accepts a complete conversation, and one that ends with an answer", () => {
    const h: Message[] = [user("hi"), call("a", "eval_form", "Let me see."), result("a"), say("It is 3.")];
    expect(historyProblems(h, true)).toEqual(["the history does not end with a user message"]);
    expect(isValidHistory(h)).toBe(true);
    expect(isValidHistory([...h, user("more")], true)).toBe(true);
  });

  it("names each way a history can be broken", () => {
    expect(historyProblems([user("hi"), call("a")], true)).toEqual(expect.arrayContaining([expect.stringMatching(/eval_form.*have no result/)]));
    expect(historyProblems([user("hi"), call("a"), user("go on")])).toEqual([expect.stringMatching(/call to eval_form \(a\) .* has no result/)]);
    expect(historyProblems([user("hi"), say("x"), result("zz")])).toEqual([expect.stringMatching(/answers no call/)]);
    expect(historyProblems([say("x")])).toContain("the first message is not the user's");
    expect(historyProblems([user("a"), user("b")])).toEqual([expect.stringMatching(/follows another user message/)]);
    expect(historyProblems([user("a"), { role: "assistant", content: [] }])).toEqual([expect.stringMatching(/is empty/)]);
    expect(historyProblems([user("a"), call("x"), result("x"), call("x"), result("x")])).toEqual([expect.stringMatching(/id x is used twice/)]);
    expect(historyProblems([user("a"), call("x"), { role: "user", content: [{ type: "text", text: "t" }, { type: "tool_result", toolUseId: "x", content: "", isError: false }] }])).toEqual([
      expect.stringMatching(/tool result after text/),
    ]);
  });
});

describe("the repair", () => {
  it("answers a call the server died in with an error saying it was interrupted, by what, and that its effect is unknown", () => {
    const { messages, repairs } = repairHistory([user("run it"), call("a", "eval_form", "Running.")], { interruptedBy: "the server stopped while it ran" });
    expect(messages).toEqual([
      user("run it"),
      call("a", "eval_form", "Running."),
      { role: "user", content: [{ type: "tool_result", toolUseId: "a", content: interruptedResult("eval_form", "the server stopped while it ran"), isError: true }] },
    ]);
    expect(messages[2]!.content[0]).toMatchObject({ content: expect.stringMatching(/interrupted \(the server stopped while it ran\).*may or may not have happened/) });
    expect(repairs).toEqual([expect.objectContaining({ kind: "interrupted-call", tool: "eval_form", index: 2 })]);
  });

  it("names each repaired call by its tool and first text argument, on one short line", () => {
    const twoWrites: AssistantMessage = {
      role: "assistant",
      content: [
        { type: "tool_use", id: "a", name: "write_file", input: { path: "one.lisp", content: "x" } },
        { type: "tool_use", id: "b", name: "write_file", input: { path: "two\u001b[31m\nlisp", content: "y" } },
        { type: "tool_use", id: "c", name: "eval_form", input: { form: "(".repeat(100) } },
        { type: "tool_use", id: "d", name: "list_threads", input: {} },
      ],
    };
    const { repairs } = repairHistory([user("go"), twoWrites], { started: new Set(["c"]) });
    expect(repairs.map((r) => r.description)).toEqual([
      "the call to write_file (one.lisp) had not started; it was answered with an error saying it was not run",
      "the call to write_file (two\\e[31m\\nlisp) had not started; it was answered with an error saying it was not run",
      `the call to eval_form (${"(".repeat(39)}…) was interrupted; it was answered with an error saying so`,
      "the call to list_threads had not started; it was answered with an error saying it was not run",
    ]);
    // The sessions list's interrupted calls name tools only.
    expect(repairs.map((r) => r.tool)).toEqual(["write_file", "write_file", "eval_form", "list_threads"]);
  });

  it("never cuts a character in two in what it says of a call (half a surrogate pair: the API refuses the request)", () => {
    const loneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
    const prefix = JSON.stringify({ path: "other.txt", content: "" }).length - 2;
    const content = `${"a".repeat(2000 - prefix - 1)}😀 and more ${"b".repeat(100)}`;
    expect(interruptedResult("write_file", "the server stopped", { path: "other.txt", content })).not.toMatch(loneSurrogate);
    const { repairs } = repairHistory([user("go"), { role: "assistant", content: [{ type: "tool_use", id: "a", name: "write_file", input: { path: `${"x".repeat(38)}😀.lisp` } }] }]);
    expect(repairs[0]!.description).toMatch(/write_file \(x+…\)/);
    expect(repairs[0]!.description).not.toMatch(loneSurrogate);
  });

  it("names a call on one short line, the tool's name (the model's text too) cut and its control and bidi characters escaped", () => {
    const name = `write_file\n${"\u202e".repeat(3)}${"N".repeat(400)}`;
    const { repairs } = repairHistory([user("go"), { role: "assistant", content: [{ type: "tool_use", id: "a", name, input: { path: "p\u202egnp.lisp" } }] }]);
    const d = repairs.find((r) => r.kind === "interrupted-call")!.description;
    expect(d).not.toMatch(/[\n\u202a-\u202e\u2066-\u2069]/);
    expect(d.length).toBeLessThan(200);
    expect(d).toContain("p\\u202Egnp.lisp");
  });

  it("puts the missing result before the user's text when the text was appended after the call (the saved file of the old fault)", () => {
    const { messages } = repairHistory([user("run it"), call("a"), user("go on")]);
    expect(messages).toHaveLength(3);
    expect(messages[2]!.content.map((b) => b.type)).toEqual(["tool_result", "text"]);
    expect(isValidHistory(messages, true)).toBe(true);
  });

  it("drops orphan and repeated results, joins messages of one role, renames a reused id with its result", () => {
    const { messages, repairs } = repairHistory([say("lost start"), result("nobody"), user("a"), user("b"), call("x"), result("x"), result("x"), call("x"), result("x")]);
    expect(isValidHistory(messages)).toBe(true);
    expect(repairs.map((r) => r.kind)).toEqual(expect.arrayContaining(["lost-start", "orphan-result", "merged", "duplicate-id"]));
    const ids = messages.flatMap((m) => m.content.flatMap((b) => (b.type === "tool_use" ? [b.id] : [])));
    expect(new Set(ids).size).toBe(ids.length);
    expect(wireProblems(messages)).toEqual({ anthropic: undefined, openai: undefined });
  });

  it("changes nothing in a valid history", () => {
    const h: Message[] = [user("hi"), call("a", "eval_form", "Let me see."), result("a"), say("It is 3.")];
    expect(repairHistory(h)).toEqual({ messages: h, repairs: [] });
  });
});

// ---------------------------------------------------------------------------------------------------
// Properties over random histories (a small seeded generator: a failure prints its seed).

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A valid conversation of a few turns: text, answers with 0-3 calls, their results, text joined to
 * results; in a turn that thinks, every answer begins with one or two thinking blocks (signed as the
 * API signs them, or redacted).
 */
function randomHistory(r: () => number): Message[] {
  const pick = (n: number) => Math.floor(r() * n);
  const out: Message[] = [user(`question ${pick(1000)}`)];
  let n = 0;
  const turns = 1 + pick(4);
  for (let t = 0; t < turns; t++) {
    const steps = pick(3);
    const thinks = r() < 0.5;
    for (let s = 0; s <= steps; s++) {
      const calls = s < steps ? 1 + pick(3) : 0;
      const content: AssistantMessage["content"] = [];
      if (thinks) {
        for (let k = 1 + pick(2); k > 0; k--) {
          const text = `thought ${++n}`;
          content.push(r() < 0.2 ? { type: "redacted_thinking", data: redactedData() } : { type: "thinking", thinking: text, signature: signThinking(text) });
        }
      }
      if (calls === 0 || r() < 0.6) content.push({ type: "text", text: `answer ${pick(1000)}` });
      for (let c = 0; c < calls; c++) content.push({ type: "tool_use", id: `toolu_${++n}`, name: ["eval_form", "read_buffer", "write_file"][pick(3)]!, input: { n } });
      out.push({ role: "assistant", content });
      if (calls > 0) {
        const ids = content.flatMap((b) => (b.type === "tool_use" ? [b.id] : []));
        out.push({ role: "user", content: ids.map((id) => ({ type: "tool_result" as const, toolUseId: id, content: `result of ${id}`, isError: r() < 0.2 })) });
      }
    }
    if (t < turns - 1) {
      // The next turn's text: a message of its own, or joined to results (a turn that stopped at the step limit).
      const last = out[out.length - 1]!;
      if (last.role === "user") last.content.push({ type: "text", text: `follow-up ${pick(1000)}` });
      else out.push(user(`follow-up ${pick(1000)}`));
    }
  }
  return out;
}

/** HISTORY cut at a random point: the messages before it whole, the one at it with its first blocks only (a write or a stream cut short). */
function cut(history: readonly Message[], r: () => number): { messages: Message[]; whole: number } {
  const at = Math.floor(r() * (history.length + 1));
  const messages = structuredClone(history.slice(0, at));
  const partial = history[at];
  if (partial && r() < 0.5) {
    const blocks = Math.floor(r() * partial.content.length);
    if (blocks > 0) messages.push({ ...structuredClone(partial), content: structuredClone(partial.content.slice(0, blocks)) } as Message);
  }
  return { messages, whole: at };
}

/** The blocks of MESSAGES, in order, without the results the repair wrote, and without thinking (checked apart). */
const keptBlocks = (messages: readonly Message[]) =>
  messages.flatMap((m) => m.content.filter((b) => !(b.type === "tool_result" && b.isError && b.content.includes("was interrupted")) && !isThinking(b)).map((b) => ({ role: m.role, b })));

/** Whether every answer of REPAIRED holds either no thinking or thinking exactly as one answer of ORIGINAL began. */
function thinkingUnchanged(original: readonly Message[], repaired: readonly Message[]): boolean {
  const runs = new Set(original.map((m) => JSON.stringify(m.content.filter(isThinking))));
  return repaired.every((m) => {
    const run = m.content.filter(isThinking);
    return run.length === 0 || runs.has(JSON.stringify(run));
  });
}

describe("repair on random histories cut at random points", () => {
  const RUNS = 400;
  it(`always gives a valid history that both wire formats accept, keeping every block that was written (${RUNS} seeds)`, () => {
    for (let seed = 1; seed <= RUNS; seed++) {
      const r = rng(seed);
      const full = randomHistory(r);
      expect(isValidHistory(full), `seed ${seed}: generator`).toBe(true);
      const { messages, whole } = cut(full, r);
      const repaired = repairHistory(messages).messages;
      expect(historyProblems(repaired), `seed ${seed}`).toEqual([]);
      if (repaired.length > 0) expect(wireProblems(repaired), `seed ${seed}`).toEqual({ anthropic: undefined, openai: undefined });
      // Every complete message, and what was written of the one cut short, is kept in its order;
      // thinking, only whole and unchanged.
      const written = messages.flatMap((m) => m.content.filter((b) => !isThinking(b)).map((b) => ({ role: m.role, b })));
      expect(keptBlocks(repaired), `seed ${seed}`).toEqual(written);
      expect(thinkingUnchanged(full, repaired), `seed ${seed}`).toBe(true);
      // The whole messages before the cut keep their thinking.
      expect(repaired.slice(0, Math.max(0, whole - 1)).filter((m) => m.role === "assistant").map((m) => m.content.filter(isThinking)), `seed ${seed}`).toEqual(
        full.slice(0, Math.max(0, whole - 1)).filter((m) => m.role === "assistant").map((m) => m.content.filter(isThinking)),
      );
      // Repairing again changes nothing.
      expect(repairHistory(repaired), `seed ${seed}`).toEqual({ messages: repaired, repairs: [] });
    }
  });

  it(`always gives a valid history after random damage: messages dropped, repeated or swapped (${RUNS} seeds)`, () => {
    for (let seed = 1; seed <= RUNS; seed++) {
      const r = rng(seed * 7919);
      const damaged = structuredClone(randomHistory(r));
      const faults = 1 + Math.floor(r() * 3);
      for (let f = 0; f < faults && damaged.length > 0; f++) {
        const i = Math.floor(r() * damaged.length);
        const kind = Math.floor(r() * 3);
        if (kind === 0) damaged.splice(i, 1);
        else if (kind === 1) damaged.splice(i, 0, structuredClone(damaged[i]!));
        else if (i + 1 < damaged.length) [damaged[i], damaged[i + 1]] = [damaged[i + 1]!, damaged[i]!];
      }
      const repaired = repairHistory(damaged).messages;
      expect(historyProblems(repaired), `seed ${seed}`).toEqual([]);
      if (repaired.length > 0) expect(wireProblems(repaired), `seed ${seed}`).toEqual({ anthropic: undefined, openai: undefined });
      expect(repairHistory(repaired).repairs, `seed ${seed}`).toEqual([]);
      // No text is lost: every text block of the damaged history is in the repaired one.
      const texts = (ms: readonly Message[]) => ms.flatMap((m) => m.content.flatMap((b) => (b.type === "text" ? [b.text] : [])));
      expect(texts(repaired).filter((t) => !t.startsWith("[The beginning"))).toEqual(texts(damaged));
      expect(thinkingUnchanged(damaged, repaired), `seed ${seed}`).toBe(true);
    }
  });
});

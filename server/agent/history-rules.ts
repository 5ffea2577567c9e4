// The one rule a conversation's history must keep to be sent to either provider, and the one repair
// that brings any history back under it. Both APIs refuse a request whose history breaks it, and a
// history broken once is refused on every later turn: so a history read from disk, restored after a
// restart, compacted or rewound is repaired, and every request is checked before it is sent.
//
// The rule, on the provider-neutral format both providers translate from (provider.ts):
// - the first message is the user's, and roles alternate;
// - no message is empty, no text block is empty;
// - every tool call of an assistant message is answered by exactly one result in the very next
//   message, results before any text; no result answers anything else;
// - tool call ids are unique in the whole history;
// - thinking and redacted_thinking blocks (Anthropic's) only in answers, whole (a thinking block
//   with its signature, a redacted one with its data), all of them before the answer's text and
//   calls, and never an answer of thinking alone: the API checks each against its signature and
//   wants the sequence exactly as the model wrote it.
// A request must also end with a user message (the model answers it); a request that thinks with a
// budget wants the tool loop it continues to have thought from its start (thinking.ts).
//
// The repair never rewrites a thinking block: when one cannot stay valid (cut short, unsigned, out
// of place, an answer joined to another), the thinking of that whole turn is left out, which the
// API allows for the turns it does not continue, and which turns a continued turn's thinking off.

import { isThinking, type AssistantMessage, type Message, type TextBlock, type ThinkingRequest, type ToolResultBlock, type ToolUseBlock, type UserMessage } from "../llm/provider.js";
import { openLoop } from "../llm/thinking.js";
import { cutText, escapeUnsafe, oneLine } from "../text.js";

/** What the repair did, one entry per change, in words the user can read. */
export interface Repair {
  kind: "interrupted-call" | "not-run-call" | "interrupted-step" | "orphan-result" | "duplicate-result" | "duplicate-id" | "empty" | "merged" | "lost-start" | "bad-block" | "thinking";
  /** The index of the message (in the repaired history) the change is in. */
  index: number;
  /** For an interrupted call, the tool it called. */
  tool?: string;
  description: string;
}

export interface RepairOptions {
  /** What interrupted the calls left without a result, when it is known ("the server stopped"). */
  interruptedBy?: string;
  /**
   * Results that came for calls, by call id, though the message of the step's results was never
   * written (the process died before the step's last call ended): such a call gets its result.
   */
  results?: ReadonlyMap<string, ToolResultBlock>;
  /**
   * The calls that started to run, by call id, when that is known (the saved file records each
   * call's start before it runs): a call without a result that is not here never ran.
   */
  started?: ReadonlySet<string>;
  /** What stopped the calls that never started, when it is known ("the server stopped"). */
  notRunBy?: string;
  /** By call id: the arguments a call started with when the user had edited the model's. */
  ranArguments?: ReadonlyMap<string, Record<string, unknown>>;
}

const LOST_START = "[The beginning of this conversation was lost; it goes on from here.]";

/**
 * The result an interrupted tool call gets: it says so, and that its effect is not known; with
 * RANARGUMENTS, that it ran with those (the user's edit), not the model's.
 */
export function interruptedResult(tool: string, by?: string, ranArguments?: Record<string, unknown>): string {
  const edited = ranArguments ? JSON.stringify(ranArguments) : undefined;
  return (
    `The call to ${tool} was interrupted${by ? ` (${by})` : ""} before it returned a result. ` +
    (edited ? `It ran with arguments the user edited, not yours: ${edited.length > 2000 ? `${cutText(edited, 2000)}…` : edited}. ` : "") +
    "Its effect in the Lisp image, in files or in buffers may or may not have happened: check before relying on it or repeating it."
  );
}

/** The result a call that never started gets: it was not run, so it had no effect. */
export function notRunResult(tool: string, by?: string): string {
  return (
    `The call to ${tool} was not run: ${by ?? "the turn stopped"} before it started (it waited for the user's approval or for the calls before it). ` +
    "It had no effect; call it again if it is still needed."
  );
}

/**
 * What is wrong with MESSAGES under the rule, first problem first (empty: nothing). With
 * FORREQUEST the history must also end with a user message.
 */
export function historyProblems(messages: readonly Message[], forRequest = false, thinking?: ThinkingRequest): string[] {
  const problems: string[] = [];
  const ids = new Set<string>();
  if (forRequest && messages.length === 0) problems.push("the history is empty");
  messages.forEach((m, i) => {
    const at = `message ${i + 1} (${String(m?.role)})`;
    if (m?.role !== "user" && m?.role !== "assistant") return void problems.push(`${at} has no valid role`);
    if (!Array.isArray(m.content) || m.content.length === 0) problems.push(`${at} is empty`);
    if (i === 0 && m.role !== "user") problems.push("the first message is not the user's");
    if (i > 0 && messages[i - 1]?.role === m.role) problems.push(`${at} follows another ${m.role} message`);
    const content: readonly { type?: unknown }[] = Array.isArray(m.content) ? m.content : [];
    for (const b of content) {
      if (!validBlock(b, m.role)) problems.push(`${at} holds a block that is not valid there (${String(b?.type)})`);
      else if (b.type === "text" && (b as TextBlock).text === "") problems.push(`${at} holds an empty text`);
    }
    if (m.role === "assistant") {
      const firstOther = content.findIndex((b) => !isThinking(b));
      if (content.length > 0 && firstOther === -1) problems.push(`${at} holds only thinking`);
      if (firstOther !== -1 && content.slice(firstOther).some((b) => isThinking(b))) problems.push(`${at} holds thinking after its text or calls`);
      for (const b of content) {
        if (b.type !== "tool_use") continue;
        const id = (b as ToolUseBlock).id;
        if (ids.has(id)) problems.push(`tool call id ${id} is used twice (${at})`);
        ids.add(id);
      }
      const calls = content.filter((b): b is ToolUseBlock => b.type === "tool_use");
      const next = messages[i + 1];
      if (calls.length === 0) return;
      if (!next) {
        if (forRequest) problems.push(`the tool calls of ${at} (${calls.map((c) => c.name).join(", ")}) have no result`);
        return;
      }
      const results = next.role === "user" && Array.isArray(next.content) ? next.content.filter((b): b is ToolResultBlock => b.type === "tool_result") : [];
      for (const c of calls) {
        const n = results.filter((r) => r.toolUseId === c.id).length;
        if (n === 0) problems.push(`the call to ${c.name} (${c.id}) in ${at} has no result in the next message`);
        if (n > 1) problems.push(`the call to ${c.name} (${c.id}) in ${at} has ${n} results`);
      }
    } else {
      const prev = messages[i - 1];
      const calls = prev?.role === "assistant" && Array.isArray(prev.content) ? prev.content.filter((b): b is ToolUseBlock => b.type === "tool_use").map((b) => b.id) : [];
      let textSeen = false;
      for (const b of content) {
        if (b.type === "text") textSeen = true;
        if (b.type !== "tool_result") continue;
        const r = b as ToolResultBlock;
        if (!calls.includes(r.toolUseId)) problems.push(`${at} holds a tool result (${r.toolUseId}) that answers no call of the message before it`);
        if (textSeen) problems.push(`${at} holds a tool result after text`);
      }
    }
  });
  if (forRequest && messages.length > 0 && messages[messages.length - 1]?.role !== "user") problems.push("the history does not end with a user message");
  if (forRequest && thinking?.mode === "budget" && problems.length === 0 && !openLoop(messages).every((m) => isThinking(m.content[0]))) {
    problems.push("the request thinks with a budget, but the tool loop it continues did not begin with thinking");
  }
  return problems;
}

/** Whether MESSAGES keeps the rule. */
export function isValidHistory(messages: readonly Message[], forRequest = false): boolean {
  return historyProblems(messages, forRequest).length === 0;
}

function validBlock(b: { type?: unknown } | null | undefined, role: "user" | "assistant"): boolean {
  if (b === null || typeof b !== "object") return false;
  const x = b as Record<string, unknown>;
  switch (b.type) {
    case "text":
      return typeof x.text === "string";
    case "tool_use":
      return role === "assistant" && typeof x.id === "string" && x.id !== "" && typeof x.name === "string" && x.name !== "" && x.input !== null && typeof x.input === "object" && !Array.isArray(x.input);
    case "tool_result":
      return role === "user" && typeof x.toolUseId === "string" && typeof x.content === "string";
    case "thinking":
      return role === "assistant" && typeof x.thinking === "string" && typeof x.signature === "string" && x.signature !== "";
    case "redacted_thinking":
      return role === "assistant" && typeof x.data === "string" && x.data !== "";
    default:
      return false;
  }
}

/** A call of the assistant message before: its id in the repaired history, its id as found, and whether it is answered. */
interface OpenCall {
  id: string;
  original: string;
  name: string;
  /** The call's arguments: its first text one tells two calls of one tool apart in a repair's description. */
  input: unknown;
  answered: boolean;
}

/** NAME with the first text argument of INPUT, on one short line: `write_file (notes.lisp)`. Both are
 *  the model's text, shown to the user: control, bidi and format characters are shown escaped. */
function callLabel(name: string, input: unknown): string {
  const tool = oneLine(escapeUnsafe(name), 64);
  const first = input && typeof input === "object" ? Object.values(input as Record<string, unknown>).find((v): v is string => typeof v === "string" && v.trim() !== "") : undefined;
  return first === undefined ? tool : `${tool} (${oneLine(escapeUnsafe(first), 40)})`;
}

/**
 * MESSAGES brought under the rule, with the least change: a tool call without a result gets an
 * error result saying it was interrupted (OPTIONS.interruptedBy, when known) and that its effect
 * is unknown; results that answer nothing, or answer a call twice, are dropped; a later use of an
 * id gets a new one (its result follows it); empty texts and messages go; two messages of one
 * role in a row are joined (an assistant's calls are closed first); a history that starts with
 * the assistant gets a user message saying its start was lost. Every block that can stay, stays,
 * in its order: the text of an answer cut short is kept. MESSAGES is not changed.
 */
export function repairHistory(messages: readonly Message[], options: RepairOptions = {}): { messages: Message[]; repairs: Repair[] } {
  const out: Message[] = [];
  const repairs: Repair[] = [];
  const ids = new Set<string>();
  let open: OpenCall[] = [];
  /** Where (in OUT) an answer's thinking could not be kept: its turn's thinking goes too. */
  const dropThinking = new Set<number>();

  /** Whether call C is known never to have started (so nothing of it happened). */
  const neverStarted = (c: OpenCall): boolean => options.started !== undefined && !options.started.has(c.original);
  /** The result a call left without one gets: the one that came for it, or an error saying it was interrupted or not run. */
  const answer = (c: OpenCall): ToolResultBlock => {
    const came = options.results?.get(c.original);
    if (came) return { ...came, toolUseId: c.id };
    const content = neverStarted(c) ? notRunResult(c.name, options.notRunBy) : interruptedResult(c.name, options.interruptedBy, options.ranArguments?.get(c.original));
    return { type: "tool_result", toolUseId: c.id, content, isError: true };
  };
  const answered = (c: OpenCall, index: number): Repair => {
    const label = callLabel(c.name, c.input);
    return options.results?.has(c.original)
      ? { kind: "interrupted-step", index, tool: c.name, description: `the step was interrupted after the call to ${label} returned; its result was kept` }
      : neverStarted(c)
        ? { kind: "not-run-call", index, tool: c.name, description: `the call to ${label} had not started; it was answered with an error saying it was not run` }
        : { kind: "interrupted-call", index, tool: c.name, description: `the call to ${label} was interrupted; it was answered with an error saying so` };
  };

  const closeOpen = (): void => {
    const missing = open.filter((c) => !c.answered);
    open = [];
    if (missing.length === 0) return;
    out.push({ role: "user", content: missing.map(answer) });
    for (const c of missing) repairs.push(answered(c, out.length - 1));
  };

  for (const [i, raw] of messages.entries()) {
    const role = raw?.role;
    const found: unknown[] = Array.isArray(raw?.content) ? raw.content : [];
    if (role !== "user" && role !== "assistant") {
      repairs.push({ kind: "bad-block", index: out.length, description: `message ${i + 1} had no valid role and was left out` });
      continue;
    }
    const blocks = found.filter((b) => {
      const ok = validBlock(b as { type?: unknown }, role);
      if (!ok) repairs.push({ kind: "bad-block", index: out.length, description: `a block of message ${i + 1} that is not valid there was left out` });
      return ok && !((b as { type: string }).type === "text" && (b as TextBlock).text === "");
    }) as (AssistantMessage["content"][number] | ToolResultBlock)[];

    if (role === "assistant") {
      let content = structuredClone(blocks.filter((b): b is AssistantMessage["content"][number] => b.type !== "tool_result"));
      // Thinking stays only whole and first, beside an answer: else this turn's thinking goes.
      const hadThinking = found.some((b) => isThinking(b as { type?: unknown }));
      const firstOther = content.findIndex((b) => !isThinking(b));
      const whole = found.every((b) => !isThinking(b as { type?: unknown }) || validBlock(b as { type?: unknown }, role));
      const placed = firstOther !== -1 && content.slice(firstOther).every((b) => !isThinking(b));
      // Joined to the answer before when that one made no call left open (closeOpen answers those).
      const joins = out[out.length - 1]?.role === "assistant" && open.every((c) => c.answered);
      const dropped = hadThinking && !(whole && placed && !joins);
      if (dropped) content = content.filter((b) => !isThinking(b));
      if (content.length === 0) {
        repairs.push({ kind: "empty", index: out.length, description: `an empty answer (message ${i + 1}) was left out` });
        continue;
      }
      // The calls of an answer before this one, if any, are closed first.
      closeOpen();
      if (out.length === 0) {
        out.push({ role: "user", content: [{ type: "text", text: LOST_START }] });
        repairs.push({ kind: "lost-start", index: 0, description: "the history started with an answer; a note that its start was lost was put before it" });
      }
      const calls: OpenCall[] = [];
      for (const b of content) {
        if (b.type !== "tool_use") continue;
        const original = b.id;
        if (ids.has(b.id)) {
          b.id = freshId(b.id, ids);
          repairs.push({ kind: "duplicate-id", index: out.length, description: `tool call id ${original} was used again; the later call got id ${b.id}` });
        }
        ids.add(b.id);
        calls.push({ id: b.id, original, name: b.name, input: b.input, answered: false });
      }
      const last = out[out.length - 1];
      if (last?.role === "assistant") {
        // An answer another is joined to is no longer as the model wrote it: its turn's thinking goes.
        dropThinking.add(out.length - 1);
        (last as AssistantMessage).content.push(...content);
        repairs.push({ kind: "merged", index: out.length - 1, description: `two answers in a row (message ${i + 1}) were joined` });
      } else {
        out.push({ role: "assistant", content });
      }
      if (dropped) dropThinking.add(out.length - 1);
      open = calls;
      continue;
    }

    // A user message: results for the calls just made, in the calls' order, then text.
    const results: ToolResultBlock[] = [];
    for (const b of blocks) {
      if (b.type !== "tool_result") continue;
      const call = open.find((c) => !c.answered && c.original === b.toolUseId);
      if (!call) {
        const twice = open.some((c) => c.original === b.toolUseId);
        repairs.push({
          kind: twice ? "duplicate-result" : "orphan-result",
          index: out.length,
          description: twice ? `a second result for call ${b.toolUseId} was left out` : `a tool result (${b.toolUseId}) that answered no call was left out`,
        });
        continue;
      }
      call.answered = true;
      results.push({ ...b, toolUseId: call.id });
    }
    const texts = structuredClone(blocks.filter((b): b is TextBlock => b.type === "text"));
    // Calls this message leaves unanswered get their result in it, in order with the others.
    const missing = open.filter((c) => !c.answered);
    for (const c of missing) repairs.push(answered(c, out.length));
    const ordered: ToolResultBlock[] = open.map((c) => results.find((r) => r.toolUseId === c.id) ?? answer(c));
    const hadOpen = open.length > 0;
    open = [];
    const content: UserMessage["content"] = [...ordered, ...texts];
    if (content.length === 0) {
      repairs.push({ kind: "empty", index: out.length, description: `an empty message (message ${i + 1}) was left out` });
      continue;
    }
    const last = out[out.length - 1];
    if (last?.role === "user" && !hadOpen) {
      (last as UserMessage).content.push(...texts);
      if (texts.length > 0) repairs.push({ kind: "merged", index: out.length - 1, description: `two user messages in a row (message ${i + 1}) were joined` });
    } else {
      out.push({ role: "user", content });
    }
  }
  closeOpen();
  stripTurnsThinking(out, dropThinking, repairs);
  return { messages: out, repairs };
}

/**
 * Leaves out the thinking of every turn of MESSAGES that holds an answer in AT (one whose thinking
 * was dropped): a turn runs from the user's text to the next, and keeps one configuration.
 */
function stripTurnsThinking(messages: Message[], at: ReadonlySet<number>, repairs: Repair[]): void {
  if (at.size === 0) return;
  let start = 0;
  const strip = (from: number, to: number): void => {
    const hit = [...at].some((i) => i >= from && i < to);
    if (!hit) return;
    for (let i = from; i < to; i++) {
      const m = messages[i];
      if (m?.role !== "assistant" || !m.content.some(isThinking)) {
        if (m?.role === "assistant" && at.has(i)) repairs.push({ kind: "thinking", index: i, description: `the thinking of answer ${i + 1} could not be kept whole; the thinking of its turn was left out` });
        continue;
      }
      m.content = m.content.filter((b) => !isThinking(b));
      repairs.push({ kind: "thinking", index: i, description: `the thinking of answer ${i + 1} was left out, so that its turn stays one the API accepts` });
    }
  };
  messages.forEach((m, i) => {
    if (i > 0 && m.role === "user" && m.content.some((b) => b.type === "text")) {
      strip(start, i);
      start = i;
    }
  });
  strip(start, messages.length);
}

function freshId(id: string, taken: ReadonlySet<string>): string {
  const base = id.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 56) || "call";
  for (let n = 2; ; n++) {
    const candidate = `${base}_r${n}`;
    if (!taken.has(candidate)) return candidate;
  }
}

/** The tools of the calls REPAIRS answered as interrupted. */
export function interruptedTools(repairs: readonly Repair[]): string[] {
  return repairs.flatMap((r) => ((r.kind === "interrupted-call" || r.kind === "not-run-call") && r.tool ? [r.tool] : []));
}

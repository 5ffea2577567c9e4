// A conversation: its history in the provider-neutral format, kept valid for both APIs at every
// moment a request can be built from it (roles alternate, every tool call has exactly one result),
// plus its usage, cost and the turn that is running, if any.

import type { Change, Configuration, ConversationSummary, HistoryMessage, ToolCallRun, TurnEnd, Usage } from "../protocol.js";
import { addUsage, emptyUsage, isThinking, type AssistantMessage, type Message, type TextBlock, type ToolResultBlock } from "../llm/provider.js";
import { compactedHistory } from "./compaction.js";
import type { KeptPrompt } from "./system-prompt.js";
import { interruptedResult, repairHistory } from "./history-rules.js";
import { cutText } from "../text.js";

export interface RunningTurn {
  turnId: string;
  controller: AbortController;
}

/** Where a conversation's history goes as it happens (conversation-store.ts's journal). */
export interface ConversationRecorder {
  message(message: Message): void;
  compaction(replaced: number, summary: string, tokensBefore: number, tokensAfter: number): void;
  turn(turnId: string, index: number, blocks: number): void;
  /** CALLIDS: the calls whose results were shortened, shortened again when the conversation resumes. */
  shortened(turnId: string, results: number, callIds?: readonly string[]): void;
  changes(turnId: string, callId: string, tool: string, changes: Change[]): void;
  /** One call's result as it comes, before the step's results go into the history together; RUN is
   *  how it ran (time, approval wait, edited arguments), shown again when the conversation resumes. */
  result(callId: string, content: string, isError: boolean, run?: ToolCallRun): void;
  /** A call starts to run: recorded before it runs, so that a call without a start is known not to have
   *  run; RANARGUMENTS are the arguments it runs with when the user edited the model's. */
  started?(callId: string, ranArguments?: Record<string, unknown>): boolean;
  /** Text of the answer as it streams to the user, before the answer's own message. */
  streamed?(text: string): void;
  /** A system prompt was written anew, naming CURRENTPACKAGE: a resumed conversation writes it the same. */
  prompt?(currentPackage: string | undefined): void;
  usage(turnId: string, usage: Usage, costUsd: number, provider?: string, model?: string, end?: TurnEnd): void;
}

export class Conversation {
  readonly messages: Message[] = [];
  /** Set when the conversation is saved: each change is recorded as it is made. */
  recorder: ConversationRecorder | undefined;
  /** Why its saving stopped part way (a full disk, its file deleted), until the user is told. */
  unsavedReason: string | undefined;
  /** How many saved messages the summary at the head of messages stands for (0: not compacted). */
  compactedMessages = 0;
  usage: Usage = emptyUsage();
  costUsd = 0;
  turns = 0;
  running: RunningTurn | undefined;
  /** The system prompt its requests carry, kept while only the REPL's package changes (promptForTurn). */
  prompt: KeptPrompt | undefined;
  /** What the chat was last told of the project instructions the prompt includes (chat-handlers.ts). */
  instructionsTold: string | undefined;
  /** Of a conversation read from its file: the package its last system prompt was written with. */
  savedPrompt: { currentPackage?: string } | undefined;
  /** The tool categories the model added to a lean tool set (tool-set.ts), in order; undefined until known. */
  addedCategories: string[] | undefined;

  constructor(
    readonly id: string,
    /** Overrides of the server's configuration for this conversation (model, provider...). */
    readonly configuration: Configuration = {},
  ) {}

  /**
   * A turn starts (before its text is added): counted, and where its text goes is recorded in the
   * saved file (as the file numbers messages: the summary of a compaction stands for the first ones).
   */
  beginTurn(turnId: string): void {
    this.turns++;
    const last = this.messages[this.messages.length - 1];
    const joins = last?.role === "user";
    const index = joins ? this.messages.length - 1 : this.messages.length;
    let blocks = joins ? last.content.length : 0;
    // The first message kept by a compaction carries the summary as an extra first block.
    if (index === 0 && this.compactedMessages > 0) blocks -= 1;
    this.recorder?.turn(turnId, index + this.compactedMessages, blocks);
  }

  /** Records that RESULTS old tool results were shortened for the model in turn TURNID (the file keeps them whole). */
  noteShortened(turnId: string, results: number, callIds?: readonly string[]): void {
    this.recorder?.shortened(turnId, results, callIds);
  }

  /**
   * Records one call's result as it comes: should the process die before the step's other calls
   * end, the result the user saw is not lost (the saved file's repair answers the call with it).
   */
  /** The system prompt KEPT is the one requests carry from now on; recorded when it was written anew. */
  keepPrompt(kept: KeptPrompt): void {
    if (this.prompt?.text !== kept.text) this.recorder?.prompt?.(kept.currentPackage);
    this.prompt = kept;
  }

  /** Records text of the answer as it is shown, so that a crash keeps what the user saw. */
  recordStreamed(text: string): void {
    this.recorder?.streamed?.(text);
  }

  /**
   * Records that call CALLID starts to run (with RANARGUMENTS, the user's edit), before it runs.
   * Returns whether it may run: false when its start could not be saved in a file that says a call
   * without a saved start never ran (ConversationRecorder.started).
   */
  recordStarted(callId: string, ranArguments?: Record<string, unknown>): boolean {
    return this.recorder?.started?.(callId, ranArguments) ?? true;
  }

  recordResult(callId: string, content: string, success: boolean, run?: ToolCallRun): void {
    this.recorder?.result(callId, content, !success, run);
  }

  /** Records what a tool call of turn TURNID changed in files and buffers (for rewinding). */
  recordChanges(turnId: string, callId: string, tool: string, changes: Change[]): void {
    if (changes.length > 0) this.recorder?.changes(turnId, callId, tool, changes);
  }

  /**
   * Adds the user's text. When the history already ends with a user message (the last turn was
   * cancelled or failed before the model answered, or stopped at the step limit after tool results)
   * the text joins it, so that roles keep alternating. NOTE: the server's word to the model (kept
   * in the history the model is sent, left out of what shows the user's text: shownHistory).
   */
  addUserText(text: string, note = false): void {
    const block: TextBlock = { type: "text", text, ...(note ? { note: true as const } : {}) };
    const last = this.messages[this.messages.length - 1];
    if (last?.role === "user") last.content.push(block);
    else this.messages.push({ role: "user", content: [block] });
    // A user message following a user message is joined to it again when the file is read.
    this.recorder?.message({ role: "user", content: [{ ...block }] });
  }

  /** Adds the model's answer, its thinking as it came. An empty answer is not kept: both APIs reject empty messages. */
  addAssistant(content: AssistantMessage["content"]): void {
    const kept = content
      .filter((b) => b.type !== "text" || b.text !== "")
      // A name the model made up outside the APIs' pattern would make every later request fail;
      // the executor still sees (and reports) the original.
      .map((b) => (b.type === "tool_use" && !VALID_NAME.test(b.name) ? { ...b, name: b.name.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 64) || "unnamed_tool" } : b));
    // Thinking alone (an answer cut after it) is no answer: the API refuses it, and it answers nothing.
    if (!kept.some((b) => !isThinking(b))) return;
    this.messages.push({ role: "assistant", content: kept });
    this.recorder?.message(structuredClone(this.messages[this.messages.length - 1]!));
  }

  /**
   * Answers every tool call of the last assistant message, in its order. A call with no result
   * (the turn stopped before it returned, INTERRUPTEDBY) gets an error result saying so, and that
   * its effect is unknown, so the history stays valid.
   */
  addToolResults(results: readonly { id: string; content: string; success: boolean }[], interruptedBy = "the turn was cancelled"): void {
    const last = this.messages[this.messages.length - 1];
    if (last?.role !== "assistant") return;
    const byId = new Map(results.map((r) => [r.id, r]));
    const blocks: ToolResultBlock[] = last.content.flatMap((b) => {
      if (b.type !== "tool_use") return [];
      const r = byId.get(b.id);
      return [{ type: "tool_result", toolUseId: b.id, content: r ? r.content : interruptedResult(b.name, interruptedBy), isError: r ? !r.success : true }];
    });
    if (blocks.length === 0) return;
    this.messages.push({ role: "user", content: blocks });
    this.recorder?.message(structuredClone(this.messages[this.messages.length - 1]!));
  }

  /**
   * Replaces the messages before CUT (a turn's start: compaction.ts's compactionPoint) by SUMMARY,
   * for the model; the saved file keeps them and records the summary.
   */
  compact(cut: number, summary: string): { replaced: number; tokensBefore: number; tokensAfter: number } {
    const tokensBefore = estimateMessages(this.messages);
    // The kept part is valid on its own by compactionPoint; the repair makes sure of it.
    const kept = repairHistory(compactedHistory(this.messages, cut, summary)).messages;
    this.messages.splice(0, this.messages.length, ...kept);
    this.compactedMessages += cut;
    const tokensAfter = estimateMessages(this.messages);
    this.recorder?.compaction(this.compactedMessages, summary, tokensBefore, tokensAfter);
    return { replaced: cut, tokensBefore, tokensAfter };
  }

  /** Adds a turn's usage and cost; TURN names it in the saved file. */
  record(usage: Usage, costUsd: number, turn?: { turnId: string; provider?: string; model?: string; end?: TurnEnd }): void {
    this.usage = addUsage(this.usage, usage);
    this.costUsd = Math.round((this.costUsd + costUsd) * 1e6) / 1e6;
    if (turn) this.recorder?.usage(turn.turnId, usage, costUsd, turn.provider, turn.model, turn.end);
  }

  summary(): ConversationSummary {
    return { conversationId: this.id, turns: this.turns, usage: { ...this.usage }, costUsd: this.costUsd, running: this.running !== undefined };
  }
}

const SHORTENED_KEEP = 300;
const VALID_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** Rough token count: about four characters per token in code and English. */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

export function estimateMessages(messages: readonly Message[]): number {
  let chars = 0;
  for (const m of messages) {
    for (const b of m.content) {
      chars += 20;
      if (b.type === "text") chars += b.text.length;
      else if (b.type === "tool_result") chars += b.content.length;
      // The API leaves earlier turns' thinking out of the window, and a signature is not read as text:
      // the thinking's own text is counted, an upper bound for the turn under way.
      else if (b.type === "thinking") chars += b.thinking.length;
      else if (b.type === "redacted_thinking") continue;
      else chars += b.name.length + JSON.stringify(b.input).length;
    }
  }
  return Math.ceil(chars / 4);
}

/**
 * When the history is over BUDGET tokens, shortens long tool results of earlier steps, oldest first,
 * until it fits TARGET (BUDGET by default). The results of the latest step are kept whole: the model is
 * about to read them. Returns how many results were shortened.
 *
 * A shortened result rewrites what was already sent, so the prompt cache is lost from there on: a
 * TARGET well under BUDGET makes that happen once in a while rather than at every step.
 */
export function fitToBudget(messages: Message[], budgetTokens: number, targetTokens = budgetTokens, shortenedIds?: string[]): number {
  let total = estimateMessages(messages);
  if (total <= budgetTokens) return 0;
  budgetTokens = Math.min(budgetTokens, targetTokens);
  let shortened = 0;
  const lastUser = messages.map((m) => m.role).lastIndexOf("user");
  for (let i = 0; i < messages.length && total > budgetTokens; i++) {
    const m = messages[i]!;
    if (m.role !== "user" || i === lastUser) continue;
    for (const b of m.content) {
      if (b.type !== "tool_result" || b.content.length <= SHORTENED_KEEP * 2) continue;
      const before = b.content.length;
      b.content = shortenedResult(b.content);
      total -= Math.floor((before - b.content.length) / 4);
      shortened++;
      shortenedIds?.push(b.toolUseId);
      if (total <= budgetTokens) break;
    }
  }
  return shortened;
}

/** An old tool result's CONTENT as fitToBudget shortens it (the same text each time, for the prompt cache). */
export function shortenedResult(content: string): string {
  if (content.length <= SHORTENED_KEEP * 2) return content;
  const kept = cutText(content, SHORTENED_KEEP);
  return `${kept}\n[... shortened: ${content.length - kept.length} of ${content.length} characters of this old tool result were left out to fit the context window. Call the tool again if you need them.]`;
}

/** Shortens in MESSAGES the results of the calls IDS name, as they were before (a resumed conversation). */
export function shortenAgain(messages: Message[], ids: ReadonlySet<string>): void {
  if (ids.size === 0) return;
  for (const m of messages) {
    if (m.role !== "user") continue;
    for (const b of m.content) if (b.type === "tool_result" && ids.has(b.toolUseId)) b.content = shortenedResult(b.content);
  }
}

/**
 * MESSAGES as the user is shown them (resume, rewind, export): without the notes the server said to
 * the model (TextBlock.note), and without a message that held nothing else.
 */
export function shownHistory<M extends Message>(messages: readonly M[]): M[] {
  return messages.flatMap((m) => {
    if (!m.content.some(isNote)) return [m];
    const content = m.content.filter((b) => !isNote(b));
    return content.length > 0 ? [{ ...m, content } as M] : [];
  });
}

/**
 * MESSAGES as the client is shown them (shownHistory), each thinking block with its text only: its
 * signature or encrypted data is for the API, and stays on the server.
 */
export function historyForClient(messages: readonly Message[]): HistoryMessage[] {
  return shownHistory(messages).map(
    (m) =>
      ({
        ...m,
        content: m.content.map((b) => (b.type === "thinking" ? { type: "thinking", thinking: b.thinking } : b.type === "redacted_thinking" ? { type: "redacted_thinking" } : b)),
      }) as HistoryMessage,
  );
}

/** Whether BLOCK is a note the server said to the model, which the user is not shown. */
function isNote(block: Message["content"][number]): boolean {
  return block.type === "text" && Boolean((block as TextBlock).note);
}

/** ENDS (positions in MESSAGES, as saved) as positions in `shownHistory(MESSAGES)`: the notes it
 *  leaves out must not move a turn's end onto another message or block. */
export function shownTurnEnds<E extends { afterMessage: number; afterBlocks?: number }>(messages: readonly Message[], ends: readonly E[] | undefined): E[] | undefined {
  if (!ends) return ends;
  const shownBefore: number[] = [0];
  for (const m of messages) shownBefore.push(shownBefore[shownBefore.length - 1] + (m.content.some(isNote) && m.content.every(isNote) ? 0 : 1));
  return ends.map((end) => {
    const at = Math.min(Math.max(end.afterMessage, 0), messages.length);
    const out: E = { ...end, afterMessage: shownBefore[at] };
    const last = messages[at - 1];
    if (end.afterBlocks !== undefined && last) {
      if (last.content.every(isNote)) delete out.afterBlocks;
      else out.afterBlocks = last.content.slice(0, end.afterBlocks).filter((b) => !isNote(b)).length;
    }
    return out;
  });
}

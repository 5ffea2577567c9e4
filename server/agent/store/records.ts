// The record types, as the reader takes them: one entry per type of format.ts's RecordFields, with
// what a line of that type must hold and how it changes what is read. The table's type names every
// record type, so a type without an entry here does not compile (test/server/store-records.test.ts).

import type { Change, SavedTurnEnd, ToolCallRun, TurnEnd, Usage } from "../../protocol.js";
import { addUsage, isThinking, type Message, type ToolResultBlock } from "../../llm/provider.js";
import { StoreError, THINKING_VERSION, type RecordOf, type RecordType } from "./format.js";

/** What the records read so far say: the reader folds each line into it, in order. */
export interface Reading {
  /** The file read, and the line (from 1) of the record being read: errors name both. */
  readonly file: string;
  line: number;
  messages: Message[];
  compaction?: { replaced: number; summary: string };
  prompt?: { currentPackage?: string };
  title?: string;
  usage: Usage;
  costUsd: number;
  provider?: string;
  model?: string;
  turnStarts: { turnId: string; at: string; index: number; blocks: number }[];
  shortened: Set<string>;
  changes: { turnId: string; changes: Change[] }[];
  repaired?: { at: string; what: string[] };
  results: Map<string, ToolResultBlock>;
  started: Set<string>;
  /** The arguments calls ran with, when the user edited the model's (recorded with the start). */
  ranArguments: Map<string, Record<string, unknown>>;
  calls: Record<string, ToolCallRun>;
  turnEnds: (SavedTurnEnd & { turnId: string })[];
  /** Text streamed since the last message: an answer whose own message was never written. */
  streamed: string;
}

interface RecordReader<T extends RecordType> {
  /**
   * Whether a line of this type, valid JSON, has the fields it is read by: a file edited by hand or
   * by another program must give a clear error naming its line, never a TypeError deep in the server.
   */
  shaped(record: Record<string, unknown>): boolean;
  /** Folds RECORD into READING. */
  read(record: RecordOf<T>, reading: Reading): void;
}

/** An entry for every record type: the compiler refuses a table that lacks one. */
export type RecordReaders = { [T in RecordType]: RecordReader<T> };

const isObject = (x: unknown): x is Record<string, unknown> => x !== null && typeof x === "object" && !Array.isArray(x);
const always = (): boolean => true;

export const recordReaders: RecordReaders = {
  header: {
    shaped: always,
    read: (_record, reading) => {
      throw new StoreError(reading.file, `line ${reading.line} is a second header; the file is left as it is.`);
    },
  },
  message: {
    shaped: (r) => {
      const m = r.message;
      return isObject(m) && typeof m.role === "string" && Array.isArray(m.content) && m.content.every(isObject);
    },
    read: (record, reading) => {
      // No server before version 3 wrote thinking: such a block in an older record is not the model's.
      if (record.v < THINKING_VERSION && Array.isArray(record.message.content)) {
        record.message = { ...record.message, content: (record.message.content as { type?: unknown }[]).filter((b) => !isThinking(b)) } as Message;
      }
      // The answer's own message holds what streamed; a user's message after a cut-off answer follows it.
      if (record.message.role === "assistant") reading.streamed = "";
      else keepStreamed(reading);
      // Text the user sent after a turn that ended on a user message joins it (Conversation.addUserText).
      const last = reading.messages[reading.messages.length - 1];
      // A result saved before this call is another call's, whose id this one reuses (some
      // OpenAI-compatible servers number their calls per message): it never answers this call.
      if (record.message.role === "assistant") for (const b of record.message.content) if (b.type === "tool_use") reading.results.delete(b.id);
      if (last?.role === "user" && record.message.role === "user") last.content.push(...record.message.content);
      else reading.messages.push(record.message);
    },
  },
  title: {
    shaped: (r) => typeof r.title === "string",
    read: (record, reading) => {
      reading.title = record.title;
    },
  },
  usage: {
    shaped: (r) => isObject(r.usage) && Object.values(r.usage).every((n) => typeof n === "number" && Number.isFinite(n)) && typeof r.costUsd === "number" && Number.isFinite(r.costUsd),
    read: (record, reading) => {
      reading.usage = addUsage(reading.usage, record.usage);
      reading.costUsd = Math.round((reading.costUsd + record.costUsd) * 1e6) / 1e6;
      reading.provider = record.provider ?? reading.provider;
      reading.model = record.model ?? reading.model;
      const end = turnEnd(record.end);
      // A turn that ended on a user message (cancelled before the answer) may see the user's next
      // text join that message: its end is placed after the blocks the message had then.
      const last = reading.messages[reading.messages.length - 1];
      if (end) reading.turnEnds.push({ turnId: record.turnId, afterMessage: reading.messages.length, ...(last?.role === "user" ? { afterBlocks: last.content.length } : {}), usage: record.usage, costUsd: record.costUsd, ...end });
    },
  },
  shortened: {
    shaped: always,
    read: (record, reading) => {
      if (Array.isArray(record.callIds)) for (const id of record.callIds) if (typeof id === "string") reading.shortened.add(id);
    },
  },
  compaction: {
    shaped: (r) => typeof r.replaced === "number" && typeof r.summary === "string",
    read: (record, reading) => {
      reading.streamed = "";
      reading.compaction = { replaced: record.replaced, summary: record.summary };
    },
  },
  turn: {
    shaped: (r) => typeof r.turnId === "string" && typeof r.index === "number" && typeof r.blocks === "number",
    read: (record, reading) => {
      reading.turnStarts.push({ turnId: record.turnId, at: record.at, index: record.index, blocks: record.blocks });
    },
  },
  change: {
    shaped: (r) => typeof r.turnId === "string" && Array.isArray(r.changes),
    read: (record, reading) => {
      reading.changes.push({ turnId: record.turnId, changes: record.changes });
    },
  },
  truncate: {
    shaped: (r) => typeof r.keep === "number" && (r.keepBlocks === undefined || typeof r.keepBlocks === "number"),
    read: (record, reading) => {
      reading.streamed = "";
      const keepBlocks = record.keepBlocks ?? 0;
      const partial = keepBlocks > 0 ? reading.messages[record.keep] : undefined;
      reading.messages = reading.messages.slice(0, record.keep);
      const messages = reading.messages;
      if (partial) messages.push({ ...partial, content: partial.content.slice(0, keepBlocks) } as Message);
      if (reading.compaction && reading.compaction.replaced > record.keep) reading.compaction = undefined;
      // The turns cut off, and what they changed, are gone with them.
      const cut = new Set(reading.turnStarts.filter((t) => t.index > record.keep || (t.index === record.keep && t.blocks >= keepBlocks)).map((t) => t.turnId));
      reading.turnStarts = reading.turnStarts.filter((t) => !cut.has(t.turnId));
      reading.changes = reading.changes.filter((c) => !cut.has(c.turnId));
      reading.turnEnds = reading.turnEnds.filter((t) => !cut.has(t.turnId) && (t.afterMessage < messages.length || (t.afterMessage === messages.length && (t.afterBlocks ?? 0) <= (messages[messages.length - 1]?.content.length ?? 0))));
    },
  },
  sealed: {
    shaped: always,
    read: () => {},
  },
  started: {
    shaped: (r) => typeof r.callId === "string" && (r.arguments === undefined || isObject(r.arguments)),
    read: (record, reading) => {
      // Never forgotten, even for an id a later call reuses: a call wrongly said to have started is
      // told its effect is unknown, never that it had none.
      reading.started.add(record.callId);
      if (record.arguments) reading.ranArguments.set(record.callId, record.arguments);
    },
  },
  result: {
    shaped: always,
    read: (record, reading) => {
      if (typeof record.callId === "string" && typeof record.content === "string") {
        reading.results.set(record.callId, { type: "tool_result", toolUseId: record.callId, content: record.content, isError: record.isError === true });
        const run = toolCallRun(record.run);
        if (run) reading.calls[record.callId] = run;
      }
    },
  },
  prompt: {
    // A package name as the REPL gives it, written into the system prompt: one line, bounded.
    shaped: (r) => r.currentPackage === undefined || (typeof r.currentPackage === "string" && r.currentPackage.length <= 1000 && !/[\n\r]/.test(r.currentPackage)),
    read: (record, reading) => {
      reading.prompt = record.currentPackage !== undefined ? { currentPackage: record.currentPackage } : {};
    },
  },
  repaired: {
    shaped: always,
    read: (record, reading) => {
      reading.repaired = { at: record.at, what: Array.isArray(record.what) ? record.what.map(String) : [] };
    },
  },
  streamed: {
    shaped: (r) => typeof r.text === "string",
    read: (record, reading) => {
      reading.streamed += record.text;
    },
  },
};

/** The entry of record type TYPE, or undefined for a type this server does not know (skipped). */
export function readerOf(type: string): RecordReader<RecordType> | undefined {
  // Own entries only: a line of type "constructor" or "__proto__" is no record type.
  return Object.hasOwn(recordReaders, type) ? (recordReaders[type as RecordType] as RecordReader<RecordType>) : undefined;
}

/** Folds RECORD, whose entry is known, into READING. */
export function readRecord<T extends RecordType>(record: RecordOf<T>, reading: Reading): void {
  recordReaders[record.type].read(record, reading);
}

export const CUT_OFF_NOTE = "the answer was cut off while it streamed; the text shown is kept";

/** Puts the text streamed since the last message, if any, in the history as a cut-off answer. */
export function keepStreamed(reading: Reading): void {
  if (reading.streamed.trim() !== "") reading.messages.push(cutOffAnswer(reading.streamed));
  reading.streamed = "";
}

/** The answer a crash cut off while it streamed: the text the user saw, marked as cut off. */
function cutOffAnswer(text: string): Message {
  return { role: "assistant", content: [{ type: "text", text: `${text}\n[The answer was cut off here: the server stopped while it streamed.]` }] };
}

/** A saved call's run, if the record holds a well-formed one: a file is read as data, not trusted. */
function toolCallRun(value: unknown): ToolCallRun | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const v = value as Record<string, unknown>;
  if (typeof v.executionTimeMs !== "number" || !Number.isFinite(v.executionTimeMs)) return undefined;
  return {
    executionTimeMs: v.executionTimeMs,
    ...(typeof v.approvalWaitMs === "number" && Number.isFinite(v.approvalWaitMs) ? { approvalWaitMs: v.approvalWaitMs } : {}),
    ...(typeof v.arguments === "object" && v.arguments !== null && !Array.isArray(v.arguments) ? { arguments: v.arguments as Record<string, unknown> } : {}),
    ...(typeof v.safetyLevel === "string" ? { safetyLevel: v.safetyLevel } : {}),
    ...(typeof v.approved === "boolean" ? { approved: v.approved } : {}),
  };
}

/** A saved turn's end, if the record holds a well-formed one (read as data, not trusted). */
function turnEnd(value: unknown): TurnEnd | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const v = value as Record<string, unknown>;
  const failed = v.failed as Record<string, unknown> | undefined;
  return {
    ...(typeof v.steps === "number" && Number.isFinite(v.steps) ? { steps: v.steps } : {}),
    ...(typeof v.stopReason === "string" ? { stopReason: v.stopReason } : {}),
    ...(typeof failed === "object" && failed !== null && typeof failed.kind === "string" && typeof failed.message === "string"
      ? { failed: { kind: failed.kind, message: failed.message } }
      : {}),
  };
}

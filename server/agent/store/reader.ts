// Reading a conversation file back: each line is checked and folded in by its record type's entry
// (records.ts); a last line cut short by a crash is left out, and a history a fault left broken is
// repaired (history-rules.ts), the same at every reading.

import type { Change, SavedTurnEnd, ToolCallRun, Usage } from "../../protocol.js";
import { emptyUsage, type Message } from "../../llm/provider.js";
import { oneLine } from "../../text.js";
import { interruptedTools, repairHistory } from "../history-rules.js";
import { INTERRUPTED_BY_STOP, NOT_RUN_BY_STOP, STORE_VERSION, StoreError, type HeaderRecord, type StoreRecord } from "./format.js";
import type { FileIdentity } from "./files.js";
import { CUT_OFF_NOTE, keepStreamed, readerOf, readRecord, type Reading } from "./records.js";

/** What a file says, once read. */
export interface StoredConversation {
  header: HeaderRecord;
  /** The whole history (what the chat shows). */
  messages: Message[];
  /** The latest compaction still in force, if any. */
  compaction?: { replaced: number; summary: string };
  /** The calls whose results the model was sent shortened (the file keeps them whole). */
  shortened?: string[];
  /** The package the last system prompt was written with (a "prompt" record), if one was recorded. */
  prompt?: { currentPackage?: string };
  /** The header claims starts, but the file was last written before this boot: the claim was not used. */
  startsDistrusted?: true;
  title: string;
  turns: number;
  usage: Usage;
  costUsd: number;
  provider?: string;
  model?: string;
  /** The turns, in order, where each starts. */
  turnStarts: { turnId: string; at: string; index: number; blocks: number }[];
  /** What each turn's tools changed, in order. */
  changes: { turnId: string; changes: Change[] }[];
  /** Per tool call id, how it ran (result records that kept it). */
  calls: Record<string, ToolCallRun>;
  /** Each turn's end (usage records that kept it), in order, with the turn it ended. */
  turnEnds: SavedTurnEnd[];
  /** Set when the last line was cut off (a crash mid-write): how many bytes were left out. */
  truncatedBytes?: number;
  updated: string;
  /**
   * Set when the history as written breaks the rule both APIs keep (history-rules.ts): a fault
   * interrupted it; messages is the repaired history. APPEND, when the repair only added messages
   * at the end (what a crash leaves), is what makes the file valid again once appended.
   */
  interrupted?: { at: string; calls: string[]; what: string[]; append?: Message[] };
  /** The last time the history was repaired, and what was done. */
  repaired?: { at: string; what: string[] };
  /** The file that was read (device and inode), when read from disk: a journal reopens that file or none. */
  identity?: FileIdentity;
}

function titleOf(messages: readonly Message[]): string {
  for (const m of messages) {
    if (m.role !== "user") continue;
    for (const b of m.content) {
      if (b.type === "text" && !b.note && b.text.trim() !== "") return oneLine(b.text, 72);
    }
  }
  return "(empty)";
}

/** A user message that carries the user's text (not only tool results) starts a turn. */
function countTurns(messages: readonly Message[]): number {
  let turns = 0;
  for (const m of messages) if (m.role === "user" && m.content.some((b) => b.type === "text")) turns++;
  return turns;
}

/** Whether RECORD, valid JSON, is a record whose fields its type is read by (records.ts). */
function wellShaped(record: StoreRecord): boolean {
  return readerOf(record.type)?.shaped(record as unknown as Record<string, unknown>) ?? true;
}

/**
 * FILE's TEXT as a conversation. Throws StoreError for anything it cannot trust. With STARTSTRUSTED
 * false (the file was last written before this machine started: records not yet on the disk may
 * have been lost with it), the file's starts are not trusted: no call is said not to have run.
 */
export function parseConversation(file: string, text: string, startsTrusted = true): StoredConversation {
  const lines = text.split("\n");
  // Text after the last newline is a record whose write was cut off.
  const tail = lines.pop() ?? "";
  let header: HeaderRecord | undefined;
  let updated = "";
  const reading: Reading = {
    file,
    line: 0,
    messages: [],
    usage: emptyUsage(),
    costUsd: 0,
    turnStarts: [],
    shortened: new Set(),
    changes: [],
    results: new Map(),
    started: new Set(),
    ranArguments: new Map(),
    calls: Object.create(null) as Record<string, ToolCallRun>,
    turnEnds: [],
    streamed: "",
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    let record: StoreRecord;
    try {
      record = JSON.parse(line) as StoreRecord;
      if (record === null || typeof record !== "object" || typeof record.type !== "string" || !wellShaped(record)) throw new Error("not a record");
    } catch {
      // A line cut off by a crash, sealed off when the file was reopened: skip it.
      if (sealedNext(lines[i + 1])) continue;
      throw new StoreError(file, `line ${i + 1} is not a valid record; the file is left as it is.`);
    }
    if (typeof record.v !== "number" || record.v > STORE_VERSION) {
      throw new StoreError(file, `line ${i + 1} is of format version ${String(record.v)}, newer than this sly-agent-q reads (${STORE_VERSION}); update sly-agent-q to open it.`);
    }
    if (i === 0) {
      if (record.type !== "header") throw new StoreError(file, "does not start with a sly-agent-q conversation header.");
      header = record;
      continue;
    }
    if ("at" in record && typeof record.at === "string") updated = record.at;
    reading.line = i + 1;
    // A type this server does not know is skipped.
    if (readerOf(record.type)) readRecord(record, reading);
  }
  if (!header) {
    if (tail !== "") throw new StoreError(file, "holds no complete record.");
    throw new StoreError(file, "is empty.");
  }
  const cutOff = reading.streamed.trim() !== "";
  keepStreamed(reading);
  const { messages, repaired, results, started, ranArguments } = reading;
  // A fault can leave a history no API accepts (a tool call whose result was never written): the
  // conversation goes on from its repair, the same at every reading.
  const claimsStarts = header.starts === true;
  const startsDistrusted = claimsStarts && !startsTrusted;
  const repair = repairHistory(messages, { interruptedBy: INTERRUPTED_BY_STOP, results, notRunBy: NOT_RUN_BY_STOP, ranArguments, ...(claimsStarts && startsTrusted ? { started } : {}) });
  let interrupted: StoredConversation["interrupted"];
  if (cutOff && repair.repairs.length === 0) {
    interrupted = { at: updated || header.created, calls: [], what: [CUT_OFF_NOTE] };
  } else if (repair.repairs.length > 0) {
    const onlyAppended = JSON.stringify(repair.messages.slice(0, messages.length)) === JSON.stringify(messages);
    const endsOpen = messages[messages.length - 1]?.role === "assistant" && messages[messages.length - 1]!.content.some((b) => b.type === "tool_use");
    // Repaired once already (when it was resumed) and not interrupted since: only the file's older part needs the repair.
    if (!repaired || endsOpen) {
      interrupted = {
        at: updated || header.created,
        calls: interruptedTools(repair.repairs),
        what: [...(cutOff ? [CUT_OFF_NOTE] : []), ...repair.repairs.map((r) => r.description)],
        ...(onlyAppended ? { append: repair.messages.slice(messages.length) } : {}),
      };
    }
  }
  const { compaction, prompt, shortened, title, provider, model } = reading;
  return {
    header,
    messages: repair.messages,
    ...(interrupted ? { interrupted } : {}),
    ...(repaired ? { repaired } : {}),
    ...(compaction ? { compaction } : {}),
    ...(prompt ? { prompt } : {}),
    ...(shortened.size > 0 ? { shortened: [...shortened] } : {}),
    ...(startsDistrusted ? { startsDistrusted: true as const } : {}),
    title: title ?? titleOf(repair.messages),
    turns: countTurns(repair.messages),
    usage: reading.usage,
    costUsd: reading.costUsd,
    ...((provider ?? header.provider) ? { provider: provider ?? header.provider } : {}),
    ...((model ?? header.model) ? { model: model ?? header.model } : {}),
    turnStarts: reading.turnStarts,
    changes: reading.changes,
    calls: reading.calls,
    turnEnds: reading.turnEnds.map(({ turnId: _turnId, ...end }) => end),
    ...(tail !== "" ? { truncatedBytes: Buffer.byteLength(tail) } : {}),
    updated: updated || header.created,
  };
}

function sealedNext(line: string | undefined): boolean {
  if (line === undefined) return false;
  try {
    return (JSON.parse(line) as { type?: unknown }).type === "sealed";
  } catch {
    return false;
  }
}

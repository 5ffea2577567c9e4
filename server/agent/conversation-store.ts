// Conversations on disk: one JSON Lines file per conversation, one record per line,
// appended as the conversation happens (each message, each tool result, each turn's usage), never
// rewritten. A record is one write(2) of one line, so a crash leaves at worst a last line cut
// short; reading stops before such a line, and reopening seals it off with a `sealed` record so that
// later records are not glued to it. A file that is corrupt elsewhere, of another format version,
// or unreadable is reported with its name and never written to. A lock file per conversation keeps
// two servers (two Emacsen) from appending to the same file; a lock whose process is gone is taken over.

import { closeSync, constants, fstatSync, ftruncateSync, linkSync, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, readlinkSync, readSync, renameSync, statSync, unlinkSync, writeFileSync, writeSync } from "node:fs";
import { hostname, uptime } from "node:os";
import { dirname, join } from "node:path";
import type { Change, SavedConversationSummary, SavedTurnEnd, ToolCallRun, TurnEnd, Usage } from "../protocol.js";
import { addUsage, emptyUsage, isThinking, type Message, type ToolResultBlock } from "../llm/provider.js";
import { oneLine } from "../text.js";
import { interruptedTools, repairHistory } from "./history-rules.js";

/**
 * The format version this server writes and reads. 3: answers carry their thinking blocks (thinking
 * with its signature, redacted_thinking with its data), which older servers would drop; files of
 * versions 1 and 2 are read as they were (they hold no thinking).
 */
export const STORE_VERSION = 3;
/** The first version whose answers may hold thinking blocks. */
const THINKING_VERSION = 3;

export interface HeaderRecord {
  v: number;
  type: "header";
  id: string;
  created: string;
  projectRoot?: string;
  provider?: string;
  model?: string;
  /** The file records each call's start ("started"): a call without one never ran. Absent in files
   *  written before starts were recorded, where an unanswered call may or may not have run. */
  starts?: boolean;
}

export type StoreRecord =
  | HeaderRecord
  | { v: number; type: "message"; at: string; message: Message }
  | { v: number; type: "title"; at: string; title: string }
  | { v: number; type: "usage"; at: string; turnId: string; usage: Usage; costUsd: number; provider?: string; model?: string; end?: TurnEnd }
  /** Tool results the model saw shortened to fit the context window (the file keeps them whole). */
  | { v: number; type: "shortened"; at: string; turnId: string; results: number; callIds?: string[] }
  /** Messages [0, replaced) are, for the model, the summary (the file and the chat keep them). */
  | { v: number; type: "compaction"; at: string; replaced: number; summary: string; tokensBefore: number; tokensAfter: number }
  /** A turn starts: its text is block `blocks` of message `index` (0 unless it joined a user message). */
  | { v: number; type: "turn"; at: string; turnId: string; index: number; blocks: number }
  /** Files and buffers a tool call of a turn changed, with their texts before and after. */
  | { v: number; type: "change"; at: string; turnId: string; callId: string; tool: string; changes: Change[] }
  /** The conversation was rewound: its first `keep` messages remain, and `keepBlocks` blocks of the next. */
  | { v: number; type: "truncate"; at: string; keep: number; keepBlocks?: number }
  /** The line before this one was cut off by a crash and is not part of the conversation. */
  | { v: number; type: "sealed"; at: string }
  /** A tool call starts to run, written before it runs (for a call that starts while the answer
   *  streams, before the answer's message). */
  | { v: number; type: "started"; at: string; callId: string; arguments?: Record<string, unknown> }
  /** One tool call's result as it came (the step's results message follows once every call ended). */
  | { v: number; type: "result"; at: string; callId: string; content: string; isError: boolean; run?: ToolCallRun }
  /** A system prompt was written anew, naming this package (written the same when the conversation resumes). */
  | { v: number; type: "prompt"; at: string; currentPackage?: string }
  /** The history was repaired when it was opened again after a fault: what was done. */
  | { v: number; type: "repaired"; at: string; what: string[] }
  /** Text of the answer being streamed, as it was sent to Emacs: what the user saw of an answer a
   *  crash cut off. The answer's own message, once recorded, holds it; until then this is all there is. */
  | { v: number; type: "streamed"; at: string; text: string };

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

/** What interrupted the calls a file's history leaves without a result: nothing else can. */
export const INTERRUPTED_BY_STOP = "the server stopped while it ran";

/** What stopped a call a file's history leaves without a result and without a start. */
export const NOT_RUN_BY_STOP = "the server stopped";

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

/** A file or directory as the system knows it, whatever its name. */
export interface FileIdentity {
  dev: number;
  ino: number;
}

const sameFile = (a: FileIdentity, b: FileIdentity): boolean => a.dev === b.dev && a.ino === b.ino;

/**
 * Opens FILE, a conversation file or its name, with FLAGS, never through a link and never anything
 * but a regular file: a link planted at a conversation's name would make the store read or write a
 * file outside its directory. O_NOFOLLOW refuses a link as the last component, O_NONBLOCK keeps a
 * FIFO from blocking the open, and the name's lstat must still be the file the descriptor holds
 * (nothing swapped between the two). WHAT says what was to be done ("read", "opened for writing").
 */
function openRegular(file: string, flags: number, what: string): number {
  let fd: number;
  try {
    fd = openSync(file, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o600);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ELOOP") throw new StoreError(file, `not ${what}: a link (sly-agent-q never follows a link in its conversations directory).`, code);
    throw new StoreError(file, `cannot be ${what}: ${(err as Error).message}`, code);
  }
  try {
    const opened = fstatSync(fd);
    if (!opened.isFile()) throw new StoreError(file, `not ${what}: not a regular file.`);
    // A file with another name elsewhere (a hard link) is read, never written: writing it would write there.
    if (opened.nlink > 1 && (flags & (constants.O_WRONLY | constants.O_RDWR)) !== 0) throw new StoreError(file, `not ${what}: it has another name elsewhere (a hard link).`);
    if (!sameFile(lstatSync(file), opened)) throw new StoreError(file, `not ${what}: it was replaced while it was opened.`);
    return fd;
  } catch (err) {
    closeSync(fd);
    if (err instanceof StoreError) throw err;
    throw new StoreError(file, `cannot be ${what}: ${(err as Error).message}`, (err as NodeJS.ErrnoException).code);
  }
}

/** The identity of directory DIR (followed if the configuration names a link: the user's choice). */
function directoryIdentity(dir: string): FileIdentity | undefined {
  try {
    const st = statSync(dir);
    return st.isDirectory() ? { dev: st.dev, ino: st.ino } : undefined;
  } catch {
    return undefined;
  }
}

export class StoreError extends Error {
  constructor(
    readonly file: string,
    message: string,
    /** The system's error code when a file operation failed (ENOENT: there is no such file). */
    readonly code?: string,
  ) {
    super(`${file}: ${message}`);
    this.name = "StoreError";
  }
}

const now = (): string => new Date().toISOString();

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

/** Parses the text of FILE into a conversation. Throws StoreError for anything it cannot trust. */
const isObject = (x: unknown): x is Record<string, unknown> => x !== null && typeof x === "object" && !Array.isArray(x);

/**
 * Whether RECORD, valid JSON, has the fields its type is read by: a file edited by hand or by
 * another program must give a clear error naming its line, never a TypeError deep in the server.
 */
function wellShaped(record: StoreRecord): boolean {
  const r = record as unknown as Record<string, unknown>;
  switch (record.type) {
    case "message": {
      const m = r.message;
      return isObject(m) && typeof m.role === "string" && Array.isArray(m.content) && m.content.every(isObject);
    }
    case "title":
      return typeof r.title === "string";
    case "usage":
      return isObject(r.usage) && Object.values(r.usage).every((n) => typeof n === "number" && Number.isFinite(n)) && typeof r.costUsd === "number" && Number.isFinite(r.costUsd);
    case "compaction":
      return typeof r.replaced === "number" && typeof r.summary === "string";
    case "turn":
      return typeof r.turnId === "string" && typeof r.index === "number" && typeof r.blocks === "number";
    case "change":
      return typeof r.turnId === "string" && Array.isArray(r.changes);
    case "truncate":
      return typeof r.keep === "number" && (r.keepBlocks === undefined || typeof r.keepBlocks === "number");
    case "streamed":
      return typeof r.text === "string";
    case "started":
      return typeof r.callId === "string" && (r.arguments === undefined || isObject(r.arguments));
    case "prompt":
      // A package name as the REPL gives it, written into the system prompt: one line, bounded.
      return r.currentPackage === undefined || (typeof r.currentPackage === "string" && r.currentPackage.length <= 1000 && !/[\n\r]/.test(r.currentPackage));
    default:
      return true;
  }
}

/**
 * FILE's TEXT as a conversation. With STARTSTRUSTED false (the file was last written before this
 * machine started: records not yet on the disk may have been lost with it), the file's starts are not
 * trusted: no call is said not to have run.
 */
export function parseConversation(file: string, text: string, startsTrusted = true): StoredConversation {
  const lines = text.split("\n");
  // Text after the last newline is a record whose write was cut off.
  const tail = lines.pop() ?? "";
  let header: HeaderRecord | undefined;
  let messages: Message[] = [];
  let compaction: StoredConversation["compaction"];
  let prompt: StoredConversation["prompt"];
  let title: string | undefined;
  let usage = emptyUsage();
  let costUsd = 0;
  let provider: string | undefined;
  let model: string | undefined;
  let updated = "";
  let turnStarts: StoredConversation["turnStarts"] = [];
  const shortened = new Set<string>();
  let changes: StoredConversation["changes"] = [];
  let repaired: StoredConversation["repaired"];
  const results = new Map<string, ToolResultBlock>();
  const started = new Set<string>();
  /** The arguments calls ran with, when the user edited the model's (recorded with the start). */
  const ranArguments = new Map<string, Record<string, unknown>>();
  const calls: Record<string, ToolCallRun> = Object.create(null) as Record<string, ToolCallRun>;
  let turnEnds: (SavedTurnEnd & { turnId: string })[] = [];
  // Text streamed since the last message: an answer whose own message was never written.
  let streamed = "";
  const keepStreamed = (): void => {
    if (streamed.trim() !== "") messages.push(cutOffAnswer(streamed));
    streamed = "";
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
    switch (record.type) {
      case "message": {
        // No server before version 3 wrote thinking: such a block in an older record is not the model's.
        if (record.v < THINKING_VERSION && Array.isArray(record.message.content)) {
          record.message = { ...record.message, content: (record.message.content as { type?: unknown }[]).filter((b) => !isThinking(b)) } as Message;
        }
        // The answer's own message holds what streamed; a user's message after a cut-off answer follows it.
        if (record.message.role === "assistant") streamed = "";
        else keepStreamed();
        // Text the user sent after a turn that ended on a user message joins it (Conversation.addUserText).
        const last = messages[messages.length - 1];
        // A result saved before this call is another call's, whose id this one reuses (some
        // OpenAI-compatible servers number their calls per message): it never answers this call.
        if (record.message.role === "assistant") for (const b of record.message.content) if (b.type === "tool_use") results.delete(b.id);
        if (last?.role === "user" && record.message.role === "user") last.content.push(...record.message.content);
        else messages.push(record.message);
        break;
      }
      case "title":
        title = record.title;
        break;
      case "usage":
        usage = addUsage(usage, record.usage);
        costUsd = Math.round((costUsd + record.costUsd) * 1e6) / 1e6;
        provider = record.provider ?? provider;
        model = record.model ?? model;
        {
          const end = turnEnd(record.end);
          // A turn that ended on a user message (cancelled before the answer) may see the user's next
          // text join that message: its end is placed after the blocks the message had then.
          const last = messages[messages.length - 1];
          if (end) turnEnds.push({ turnId: record.turnId, afterMessage: messages.length, ...(last?.role === "user" ? { afterBlocks: last.content.length } : {}), usage: record.usage, costUsd: record.costUsd, ...end });
        }
        break;
      case "compaction":
        streamed = "";
        compaction = { replaced: record.replaced, summary: record.summary };
        break;
      case "turn":
        turnStarts.push({ turnId: record.turnId, at: record.at, index: record.index, blocks: record.blocks });
        break;
      case "change":
        changes.push({ turnId: record.turnId, changes: record.changes });
        break;
      case "truncate": {
        streamed = "";
        const keepBlocks = record.keepBlocks ?? 0;
        const partial = keepBlocks > 0 ? messages[record.keep] : undefined;
        messages = messages.slice(0, record.keep);
        if (partial) messages.push({ ...partial, content: partial.content.slice(0, keepBlocks) } as Message);
        if (compaction && compaction.replaced > record.keep) compaction = undefined;
        // The turns cut off, and what they changed, are gone with them.
        const cut = new Set(turnStarts.filter((t) => t.index > record.keep || (t.index === record.keep && t.blocks >= keepBlocks)).map((t) => t.turnId));
        turnStarts = turnStarts.filter((t) => !cut.has(t.turnId));
        changes = changes.filter((c) => !cut.has(c.turnId));
        turnEnds = turnEnds.filter((t) => !cut.has(t.turnId) && (t.afterMessage < messages.length || (t.afterMessage === messages.length && (t.afterBlocks ?? 0) <= (messages[messages.length - 1]?.content.length ?? 0))));
        break;
      }
      case "result":
        if (typeof record.callId === "string" && typeof record.content === "string") {
          results.set(record.callId, { type: "tool_result", toolUseId: record.callId, content: record.content, isError: record.isError === true });
          const run = toolCallRun(record.run);
          if (run) calls[record.callId] = run;
        }
        break;
      case "repaired":
        repaired = { at: record.at, what: Array.isArray(record.what) ? record.what.map(String) : [] };
        break;
      case "started":
        // Never forgotten, even for an id a later call reuses: a call wrongly said to have started is
        // told its effect is unknown, never that it had none.
        started.add(record.callId);
        if (record.arguments) ranArguments.set(record.callId, record.arguments);
        break;
      case "streamed":
        streamed += record.text;
        break;
      case "shortened":
        if (Array.isArray(record.callIds)) for (const id of record.callIds) if (typeof id === "string") shortened.add(id);
        break;
      case "prompt":
        prompt = record.currentPackage !== undefined ? { currentPackage: record.currentPackage } : {};
        break;
      case "header":
        throw new StoreError(file, `line ${i + 1} is a second header; the file is left as it is.`);
      default:
        break;
    }
  }
  if (!header) {
    if (tail !== "") throw new StoreError(file, "holds no complete record.");
    throw new StoreError(file, "is empty.");
  }
  const cutOff = streamed.trim() !== "";
  keepStreamed();
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
  messages = repair.messages;
  return {
    header,
    messages,
    ...(interrupted ? { interrupted } : {}),
    ...(repaired ? { repaired } : {}),
    ...(compaction ? { compaction } : {}),
    ...(prompt ? { prompt } : {}),
    ...(shortened.size > 0 ? { shortened: [...shortened] } : {}),
    ...(startsDistrusted ? { startsDistrusted: true as const } : {}),
    title: title ?? titleOf(messages),
    turns: countTurns(messages),
    usage,
    costUsd,
    ...((provider ?? header.provider) ? { provider: provider ?? header.provider } : {}),
    ...((model ?? header.model) ? { model: model ?? header.model } : {}),
    turnStarts,
    changes,
    calls,
    turnEnds: turnEnds.map(({ turnId: _turnId, ...end }) => end),
    ...(tail !== "" ? { truncatedBytes: Buffer.byteLength(tail) } : {}),
    updated: updated || header.created,
  };
}

const CUT_OFF_NOTE = "the answer was cut off while it streamed; the text shown is kept";

/** The answer a crash cut off while it streamed: the text the user saw, marked as cut off. */
function cutOffAnswer(text: string): Message {
  return { role: "assistant", content: [{ type: "text", text: `${text}\n[The answer was cut off here: the server stopped while it streamed.]` }] };
}

function sealedNext(line: string | undefined): boolean {
  if (line === undefined) return false;
  try {
    return (JSON.parse(line) as { type?: unknown }).type === "sealed";
  } catch {
    return false;
  }
}

/**
 * The system calls a journal writes with: a test replaces them to inject a fault (ENOSPC after
 * half a record, EIO...) that a real disk gives only rarely.
 */
export const journalIO = {
  write: (fd: number, data: Buffer, offset: number): number => writeSync(fd, data, offset),
  truncate: (fd: number, length: number): void => ftruncateSync(fd, length),
};

/** An open conversation file this server appends to, holding its lock. */
export class ConversationJournal {
  private fd: number | undefined;
  /**
   * Why the file is no longer written to (a write failed, the file was deleted or replaced): the
   * conversation goes on in memory, the file keeps every record written before.
   */
  fault: string | undefined;
  /** Told once, when a fault stops the saving. */
  onFault: ((message: string) => void) | undefined;
  /** Whether the file's header says it records every call's start (and so that a call without one never ran). */
  private claimsStarts = false;

  private constructor(
    private readonly store: ConversationStore,
    private readonly id: string,
    readonly file: string,
    private readonly lockFile: string,
    fd: number,
    /** The conversations directory as it was when the file was opened: a name is resolved in it or not at all. */
    private readonly directory: FileIdentity | undefined,
  ) {
    this.fd = fd;
  }

  /** Creates FILE with HEADER. Throws StoreError when it exists or cannot be written. */
  static create(store: ConversationStore, header: HeaderRecord): ConversationJournal {
    const journal = ConversationJournal.open(store, header.id, "wx", "created");
    journal.append(header);
    journal.claimsStarts = header.starts === true;
    return journal;
  }

  /** Opens an existing FILE for appending, sealing off a last line cut short by a crash. */
  static reopen(store: ConversationStore, id: string, stored: StoredConversation): ConversationJournal {
    const journal = ConversationJournal.open(store, id, "a", "opened for writing");
    // The file read is the file written to: one swapped at its name in between is not.
    if (stored.identity && !sameFile(fstatSync(journal.fd!), stored.identity)) {
      journal.close();
      throw new StoreError(journal.file, "not opened for writing: it was replaced by another program after it was read.");
    }
    journal.claimsStarts = stored.header.starts === true;
    // A claim the reading did not trust (the file was last written before this boot) is withdrawn
    // before anything is appended: the append would otherwise make the file look trustworthy again.
    if (stored.startsDistrusted) journal.withdrawStartsClaim();
    if (stored.truncatedBytes !== undefined) {
      journal.write(`\n${JSON.stringify({ v: STORE_VERSION, type: "sealed", at: now() })}\n`);
    }
    return journal;
  }

  /** Takes conversation ID's lock and opens its file with FLAGS; on failure lets go of the lock. */
  private static open(store: ConversationStore, id: string, flags: "wx" | "a", what: string): ConversationJournal {
    const file = store.fileOf(id);
    const directory = directoryIdentity(store.directory);
    const lock = store.lock(id);
    try {
      // O_EXCL creates a new file and never follows a link; an existing file is appended to only
      // when it is itself a regular file in the directory (openRegular).
      const bits = flags === "wx" ? constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL : constants.O_WRONLY | constants.O_APPEND;
      return new ConversationJournal(store, id, file, lock, openRegular(file, bits, what), directory);
    } catch (err) {
      store.unlock(lock);
      if (err instanceof StoreError) throw err;
      throw new StoreError(file, `cannot be ${what}: ${(err as Error).message}`);
    }
  }

  /** Appends RECORD as one line, in one write. */
  append(record: StoreRecord): void {
    this.write(`${JSON.stringify(record)}\n`);
  }

  // What the conversation records as it happens never fails the conversation: a fault stops the
  // saving (record), the chat goes on.
  message(message: Message): void {
    this.record({ v: STORE_VERSION, type: "message", at: now(), message });
  }

  compaction(replaced: number, summary: string, tokensBefore: number, tokensAfter: number): void {
    this.record({ v: STORE_VERSION, type: "compaction", at: now(), replaced, summary, tokensBefore, tokensAfter });
  }

  shortened(turnId: string, results: number, callIds?: readonly string[]): void {
    this.record({ v: STORE_VERSION, type: "shortened", at: now(), turnId, results, ...(callIds && callIds.length > 0 ? { callIds: [...callIds] } : {}) });
  }

  turn(turnId: string, index: number, blocks: number): void {
    this.record({ v: STORE_VERSION, type: "turn", at: now(), turnId, index, blocks });
  }

  changes(turnId: string, callId: string, tool: string, changes: Change[]): void {
    this.record({ v: STORE_VERSION, type: "change", at: now(), turnId, callId, tool, changes });
  }

  /**
   * Records that CALLID starts. Returns whether it may run: its start is saved, or the file does not
   * claim starts (it never did, or the claim was withdrawn when saving stopped). False only when saving
   * stopped and the claim could not be withdrawn: run, the call would later be said not to have run.
   */
  started(callId: string, ranArguments?: Record<string, unknown>): boolean {
    // Saving stopped: a withdrawal that failed is tried again (the file system may be writable again).
    // Else the start is recorded, and a fault in doing so withdraws the claim itself (record).
    if (this.fault !== undefined) this.withdrawStartsClaim();
    else this.record({ v: STORE_VERSION, type: "started", at: now(), callId, ...(ranArguments ? { arguments: ranArguments } : {}) });
    return this.fault === undefined || !this.claimsStarts;
  }

  result(callId: string, content: string, isError: boolean, run?: ToolCallRun): void {
    this.record({ v: STORE_VERSION, type: "result", at: now(), callId, content, isError, ...(run ? { run } : {}) });
  }

  streamed(text: string): void {
    if (text !== "") this.record({ v: STORE_VERSION, type: "streamed", at: now(), text });
  }

  prompt(currentPackage: string | undefined): void {
    this.record({ v: STORE_VERSION, type: "prompt", at: now(), ...(currentPackage !== undefined ? { currentPackage } : {}) });
  }

  usage(turnId: string, usage: Usage, costUsd: number, provider?: string, model?: string, end?: TurnEnd): void {
    this.record({ v: STORE_VERSION, type: "usage", at: now(), turnId, usage, costUsd, ...(provider ? { provider } : {}), ...(model ? { model } : {}), ...(end ? { end } : {}) });
  }

  /** Appends RECORD unless saving stopped; a failure stops it (fault, onFault) instead of throwing. */
  private record(record: StoreRecord): void {
    if (this.fault !== undefined) return;
    try {
      this.append(record);
    } catch (err) {
      // A record after a gap could make the history read back differ from the one the model saw:
      // nothing more is written to this file.
      this.fault ??= `${(err as Error).message} This conversation goes on, but is no longer saved; what was saved before is intact.`;
      this.withdrawStartsClaim();
      this.onFault?.(this.fault);
    }
  }

  /** Withdraws the file's starts claim, if it makes one (disclaimStarts); claimsStarts says whether it still does. */
  private withdrawStartsClaim(): void {
    if (this.claimsStarts && this.disclaimStarts()) this.claimsStarts = false;
  }

  /**
   * Saving stopped: the starts of the calls that run from now on are not recorded, so the file may no
   * longer say that a call without one never ran. Its header's `"starts":true` becomes
   * `"starts":null` in place (the same length: it needs no room on a full disk), in the file this
   * journal wrote and in a copy put at its name (by a sync tool, say) with the same id. Returns
   * whether no file of this conversation claims starts any more; false when a rewrite failed (a file
   * system gone read-only), and then no call may run unrecorded (started).
   */
  private disclaimStarts(): boolean {
    let withdrawn = true;
    // The file this journal has open, even if unlinked or renamed (opened with O_APPEND, where a
    // positioned write would append: opened again for writing in place through /proc, a link the
    // kernel made to this very descriptor's file; Linux only), while it has no name or its one name
    // is in the conversations directory; and a regular file at its name in the same directory. Never
    // a link at the name, a name in a directory swapped for another, nor a file that another program
    // moved or linked outside: its claim then stays, and no call runs unrecorded (started).
    const opened = this.fd !== undefined ? fstatSync(this.fd) : undefined;
    const proc = this.fd !== undefined ? `/proc/self/fd/${this.fd}` : undefined;
    const ownInside = (): boolean => {
      if (!opened || proc === undefined) return false;
      if (opened.nlink === 0) return true;
      if (opened.nlink > 1 || !this.directory) return false;
      try {
        const dir = directoryIdentity(dirname(readlinkSync(proc)));
        return dir !== undefined && sameFile(dir, this.directory);
      } catch {
        return false;
      }
    };
    const targets: { path: string; ours: boolean }[] = [
      ...(proc !== undefined && directoryIdentity("/proc/self/fd") ? (ownInside() ? [{ path: proc, ours: true }] : (withdrawn = false, [])) : []),
      { path: this.file, ours: false },
    ];
    for (const target of targets) {
      let fd: number | undefined;
      try {
        if (!target.ours) {
          let named;
          try {
            named = lstatSync(target.path);
          } catch {
            continue; // Nothing at its name.
          }
          const dir = directoryIdentity(this.store.directory);
          // A link or other non-file at its name, or a directory not the one opened: nothing outside is written.
          if (!named.isFile() || !dir || !this.directory || !sameFile(dir, this.directory)) continue;
          if (opened && sameFile(named, opened) && targets[0]?.ours) continue; // Done through the descriptor.
        }
        fd = target.ours ? openSync(target.path, constants.O_RDWR) : openRegular(target.path, constants.O_RDWR, "rewritten");
        if (target.ours && (!opened || !sameFile(fstatSync(fd), opened))) throw new Error("not the file this journal opened");
        const head = Buffer.alloc(65536);
        const n = readSync(fd, head, 0, head.length, 0);
        const line = head.subarray(0, n).toString("utf8").split("\n", 1)[0]!;
        const header = JSON.parse(line) as Partial<HeaderRecord>;
        const at = line.indexOf('"starts":true');
        if (header.type !== "header" || header.id !== this.id || at < 0) continue;
        writeSync(fd, Buffer.from("null"), 0, 4, Buffer.byteLength(line.slice(0, at + '"starts":'.length)));
      } catch {
        // The file may still claim starts: calls are then refused rather than run unrecorded.
        withdrawn = false;
      } finally {
        if (fd !== undefined) closeSync(fd);
      }
    }
    return withdrawn;
  }

  /**
   * Writes LINE at the end of the file, all of it or nothing: a write that fails part way (a full
   * disk) is cut back to where it started. Refuses when the file at its name is no longer the one
   * this journal opened (deleted or replaced by another program).
   */
  private write(line: string): void {
    if (this.fd === undefined) throw new StoreError(this.file, "is closed.");
    if (this.fault !== undefined) throw new StoreError(this.file, `is no longer saved to: ${this.fault}`);
    const opened = fstatSync(this.fd);
    let named: ReturnType<typeof lstatSync> | undefined;
    try {
      // lstat: a link at the name, even one to this very file, is not the file this journal opened.
      named = lstatSync(this.file);
    } catch {
      named = undefined;
    }
    const dir = directoryIdentity(this.store.directory);
    if (!named || !sameFile(named, opened) || !dir || !this.directory || !sameFile(dir, this.directory)) {
      throw new StoreError(this.file, `was ${named ? "replaced" : "deleted"} by another program while this conversation was open; it is left as it is.`);
    }
    // A hard link made to it elsewhere would see every record appended from now on.
    if (opened.nlink > 1) throw new StoreError(this.file, "was given another name (a hard link) by another program while this conversation was open; it is left as it is.");
    const start = opened.size;
    const data = Buffer.from(line);
    let done = 0;
    try {
      while (done < data.length) done += journalIO.write(this.fd, data, done);
    } catch (err) {
      let cut = done === 0;
      if (!cut) {
        try {
          journalIO.truncate(this.fd, start);
          cut = true;
        } catch {
          // The part written stays: the next reading leaves it out (a last line cut short).
        }
      }
      const code = (err as NodeJS.ErrnoException).code;
      throw new StoreError(this.file, `could not be written${code === "ENOSPC" ? " (the disk is full)" : ""}: ${(err as Error).message}.${cut ? "" : " Its last line was left cut short."}`, code);
    }
  }

  /** Closes the file and lets go of its lock (in the directory it was opened in, whatever the configuration says now). */
  close(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
    this.store.unlock(this.lockFile);
  }
}

/** A summary for listing, read from the file: the protocol's, less what only the server knows. */
export type StoredSummary = Omit<SavedConversationSummary, "open"> & { file: string };

/** The directory of conversation files. */
export class ConversationStore {
  constructor(readonly directory: string) {}

  fileOf(id: string): string {
    if (!/^[A-Za-z0-9._-]{1,128}$/.test(id) || id.startsWith(".")) throw new StoreError(this.directory, `"${id}" is not a conversation id.`);
    return join(this.directory, `${id}.jsonl`);
  }

  ensureDirectory(): void {
    try {
      mkdirSync(this.directory, { recursive: true, mode: 0o700 });
    } catch (err) {
      throw new StoreError(this.directory, `cannot be created: ${(err as Error).message}`);
    }
  }

  /** Reads conversation ID. Throws StoreError naming the file when it cannot be trusted. */
  read(id: string): StoredConversation {
    const file = this.fileOf(id);
    let text: string;
    let mtimeMs = 0;
    let identity: FileIdentity;
    // Never through a link: a linked conversation is listed as one that cannot be read, never resumed.
    const fd = openRegular(file, constants.O_RDONLY, "read");
    try {
      const st = fstatSync(fd);
      mtimeMs = st.mtimeMs;
      identity = { dev: st.dev, ino: st.ino };
      text = readFileSync(fd, "utf8");
    } catch (err) {
      throw new StoreError(file, `cannot be read: ${(err as Error).message}`, (err as NodeJS.ErrnoException).code);
    } finally {
      closeSync(fd);
    }
    // A crash of the machine (not only of a process) can lose what the page cache held: a start record
    // written before this boot is not trusted to be the last one written.
    const stored = parseConversation(file, text, mtimeMs > Date.now() - uptime() * 1000 + 1000);
    if (stored.header.id !== id) throw new StoreError(file, `holds conversation ${stored.header.id}, not ${id}.`);
    return { ...stored, identity };
  }

  /** The conversations in the directory, newest first; files that cannot be read are listed in ERRORS. */
  list(projectRoot?: string): { conversations: StoredSummary[]; errors: string[] } {
    const conversations: StoredSummary[] = [];
    const errors: string[] = [];
    let names: string[];
    try {
      names = readdirSync(this.directory);
    } catch {
      return { conversations, errors };
    }
    for (const name of names) {
      if (!name.endsWith(".jsonl")) continue;
      const id = name.slice(0, -".jsonl".length);
      try {
        const s = this.read(id);
        if (projectRoot !== undefined && s.header.projectRoot !== undefined && !sameRoot(s.header.projectRoot, projectRoot)) continue;
        // Nothing to resume (opened and never used, or rewound to before its first turn): no "(empty)" row.
        if (s.messages.length === 0) continue;
        conversations.push({
          conversationId: id,
          file: this.fileOf(id),
          title: s.title,
          created: s.header.created,
          updated: s.updated,
          turns: s.turns,
          messages: s.messages.length,
          costUsd: s.costUsd,
          ...(s.header.projectRoot ? { projectRoot: s.header.projectRoot } : {}),
          ...(s.model ? { model: s.model } : {}),
          ...(s.interrupted ? { interrupted: { at: s.interrupted.at, calls: s.interrupted.calls, what: s.interrupted.what } } : {}),
          ...(s.repaired ? { repaired: s.repaired } : {}),
        });
      } catch (err) {
        errors.push((err as Error).message);
      }
    }
    conversations.sort((a, b) => (a.updated < b.updated ? 1 : a.updated > b.updated ? -1 : 0));
    return { conversations, errors };
  }

  /** Appends a record to a conversation this server does not hold open (rename, truncate from a list). */
  appendTo(id: string, record: StoreRecord): void {
    const stored = this.read(id);
    const journal = ConversationJournal.reopen(this, id, stored);
    try {
      journal.append(record);
    } finally {
      journal.close();
    }
  }

  /** Deletes conversation ID's file, unless another live server holds it. */
  delete(id: string): boolean {
    const file = this.fileOf(id);
    try {
      lstatSync(file); // A link is deleted itself (unlink never follows one), a dangling one too.
    } catch {
      return false;
    }
    const lock = this.lock(id);
    try {
      unlinkSync(file);
    } finally {
      this.unlock(lock);
    }
    return true;
  }

  /**
   * Takes the lock of conversation ID: a file naming this process, made whole beside it and linked
   * into place (so no one ever reads a lock without its owner). A lock left by a process that is
   * gone (same host) is taken over; one held by a live process is refused. Two servers taking over
   * the same stale lock at once cannot both win: the stale lock is moved aside in one step, and
   * what was moved is checked, since another server may have replaced it meanwhile.
   */
  lock(id: string): string {
    const lockFile = `${this.fileOf(id)}.lock`;
    const me = `${process.pid}@${hostname()}`;
    const unique = `${process.pid}.${Date.now().toString(36)}.${Math.random().toString(36).slice(2)}`;
    const whole = `${lockFile}.${unique}.new`;
    try {
      writeFileSync(whole, me, { flag: "wx", mode: 0o600 });
    } catch (err) {
      throw new StoreError(lockFile, `cannot be created: ${(err as Error).message}`);
    }
    const inUse = (owner: string) =>
      new StoreError(this.fileOf(id), `is open in another sly-agent-q (process ${owner}); close it there first.`);
    try {
      for (let attempt = 0; attempt < 3; attempt++) {
        try {
          linkSync(whole, lockFile);
          return lockFile;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw new StoreError(lockFile, `cannot be created: ${(err as Error).message}`);
        }
        const owner = readLock(lockFile);
        if (owner === me) return lockFile;
        if (owner !== undefined && ownerAlive(owner)) throw inUse(owner);
        lockIO.beforeTakeover();
        const aside = `${lockFile}.${unique}.stale`;
        try {
          renameSync(lockFile, aside);
        } catch {
          continue; // Gone already: another server took it over, or let go.
        }
        const moved = readLock(aside);
        if (moved !== undefined && moved !== owner && moved !== me && ownerAlive(moved)) {
          // A live server's lock, made after the stale one was read: put it back.
          try {
            linkSync(aside, lockFile);
          } catch {
            // It made another meanwhile.
          }
          unlinkQuietly(aside);
          throw inUse(moved);
        }
        unlinkQuietly(aside);
      }
      throw new StoreError(this.fileOf(id), "its lock could not be taken.");
    } finally {
      unlinkQuietly(whole);
    }
  }

  unlock(lockFile: string): void {
    try {
      if (readLock(lockFile) === `${process.pid}@${hostname()}`) unlinkSync(lockFile);
    } catch {
      // Already gone.
    }
  }
}

function unlinkQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // Not there.
  }
}

/** Where a test steps in between reading a stale lock's owner and taking the lock over. */
export const lockIO = {
  beforeTakeover: (): void => {},
};

function readLock(lockFile: string): string | undefined {
  try {
    // Read only, never blocking (a FIFO planted at its name).
    const fd = openSync(lockFile, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      const size = Math.min(fstatSync(fd).size, 256);
      const buf = Buffer.alloc(size);
      readSync(fd, buf, 0, size, 0);
      return buf.toString("utf8").trim();
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

/** Whether the process named OWNER ("pid@host") still runs; a lock from another host counts as live. */
function ownerAlive(owner: string): boolean {
  const [pidText, host] = owner.split("@");
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (host !== hostname()) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

function sameRoot(a: string, b: string): boolean {
  const norm = (p: string) => p.replace(/\/+$/, "");
  return norm(a) === norm(b);
}

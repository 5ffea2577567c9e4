// The format of a conversation file: one JSON Lines file per conversation, one record per line,
// appended as the conversation happens and never rewritten. Every record type is declared once, in
// RecordFields; the reader's table (records.ts) must have an entry for each, or the server does not
// compile.

import type { Change, ToolCallRun, TurnEnd, Usage } from "../../protocol.js";
import type { Message } from "../../llm/provider.js";

/**
 * The format version this server writes and reads. 3: answers carry their thinking blocks (thinking
 * with its signature, redacted_thinking with its data), which older servers would drop; files of
 * versions 1 and 2 are read as they were (they hold no thinking).
 */
export const STORE_VERSION = 3;
/** The first version whose answers may hold thinking blocks. */
export const THINKING_VERSION = 3;

/** Each record type, with the fields it carries besides `v` and `type`. */
export interface RecordFields {
  /** The first line, and only the first. */
  header: {
    id: string;
    created: string;
    projectRoot?: string;
    provider?: string;
    model?: string;
    /** The file records each call's start ("started"): a call without one never ran. Absent in files
     *  written before starts were recorded, where an unanswered call may or may not have run. */
    starts?: boolean;
  };
  message: { at: string; message: Message };
  title: { at: string; title: string };
  usage: { at: string; turnId: string; usage: Usage; costUsd: number; provider?: string; model?: string; end?: TurnEnd };
  /** Tool results the model saw shortened to fit the context window (the file keeps them whole). */
  shortened: { at: string; turnId: string; results: number; callIds?: string[] };
  /** Messages [0, replaced) are, for the model, the summary (the file and the chat keep them). */
  compaction: { at: string; replaced: number; summary: string; tokensBefore: number; tokensAfter: number };
  /** A turn starts: its text is block `blocks` of message `index` (0 unless it joined a user message). */
  turn: { at: string; turnId: string; index: number; blocks: number };
  /** Files and buffers a tool call of a turn changed, with their texts before and after. */
  change: { at: string; turnId: string; callId: string; tool: string; changes: Change[] };
  /** The conversation was rewound: its first `keep` messages remain, and `keepBlocks` blocks of the next. */
  truncate: { at: string; keep: number; keepBlocks?: number };
  /** The line before this one was cut off by a crash and is not part of the conversation. */
  sealed: { at: string };
  /** A tool call starts to run, written before it runs (for a call that starts while the answer
   *  streams, before the answer's message). */
  started: { at: string; callId: string; arguments?: Record<string, unknown> };
  /** One tool call's result as it came (the step's results message follows once every call ended). */
  result: { at: string; callId: string; content: string; isError: boolean; run?: ToolCallRun };
  /** A system prompt was written anew, naming this package (written the same when the conversation resumes). */
  prompt: { at: string; currentPackage?: string };
  /** The history was repaired when it was opened again after a fault: what was done. */
  repaired: { at: string; what: string[] };
  /** Text of the answer being streamed, as it was sent to Emacs: what the user saw of an answer a
   *  crash cut off. The answer's own message, once recorded, holds it; until then this is all there is. */
  streamed: { at: string; text: string };
}

export type RecordType = keyof RecordFields;

/** A record of type T, as a line of the file holds it. */
export type RecordOf<T extends RecordType> = { v: number; type: T } & RecordFields[T];

export type StoreRecord = { [T in RecordType]: RecordOf<T> }[RecordType];

export type HeaderRecord = RecordOf<"header">;

/** What interrupted the calls a file's history leaves without a result: nothing else can. */
export const INTERRUPTED_BY_STOP = "the server stopped while it ran";

/** What stopped a call a file's history leaves without a result and without a start. */
export const NOT_RUN_BY_STOP = "the server stopped";

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

export const now = (): string => new Date().toISOString();

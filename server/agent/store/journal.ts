// Writing a conversation file: appended as the conversation happens (each message, each tool
// result, each turn's usage), never rewritten. A record is one write(2) of one line, so a crash
// leaves at worst a last line cut short; reopening seals it off with a `sealed` record so that later
// records are not glued to it. The journal holds the conversation's lock while the file is open.

import { closeSync, constants, fstatSync, ftruncateSync, lstatSync, openSync, readSync, readlinkSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import type { Change, ToolCallRun, TurnEnd, Usage } from "../../protocol.js";
import type { Message } from "../../llm/provider.js";
import { directoryIdentity, openRegular, sameFile, type FileIdentity } from "./files.js";
import { now, STORE_VERSION, StoreError, type HeaderRecord, type StoreRecord } from "./format.js";
import type { StoredConversation } from "./reader.js";

/**
 * The system calls a journal writes with: a test replaces them to inject a fault (ENOSPC after
 * half a record, EIO...) that a real disk gives only rarely.
 */
export const journalIO = {
  write: (fd: number, data: Buffer, offset: number): number => writeSync(fd, data, offset),
  truncate: (fd: number, length: number): void => ftruncateSync(fd, length),
};

/** What a journal needs of the directory it writes in (directory.ts's ConversationStore). */
export interface JournalStore {
  readonly directory: string;
  fileOf(id: string): string;
  lock(id: string): string;
  unlock(lockFile: string): void;
}

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
    private readonly store: JournalStore,
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
  static create(store: JournalStore, header: HeaderRecord): ConversationJournal {
    const journal = ConversationJournal.open(store, header.id, "wx", "created");
    journal.append(header);
    journal.claimsStarts = header.starts === true;
    return journal;
  }

  /** Opens an existing FILE for appending, sealing off a last line cut short by a crash. */
  static reopen(store: JournalStore, id: string, stored: StoredConversation): ConversationJournal {
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
  private static open(store: JournalStore, id: string, flags: "wx" | "a", what: string): ConversationJournal {
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


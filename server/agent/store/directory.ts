// The directory of conversation files: a conversation's file by its id, reading, listing, deleting,
// and appending to a conversation this server does not hold open.

import { constants, closeSync, fstatSync, lstatSync, mkdirSync, readFileSync, readdirSync, unlinkSync } from "node:fs";
import { uptime } from "node:os";
import { join } from "node:path";
import type { SavedConversationSummary } from "../../protocol.js";
import { openRegular, type FileIdentity } from "./files.js";
import { StoreError, type StoreRecord } from "./format.js";
import { ConversationJournal } from "./journal.js";
import { releaseLock, takeLock } from "./locks.js";
import { parseConversation, type StoredConversation } from "./reader.js";

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

  /** Takes the lock of conversation ID (locks.ts); refused while another live server holds it. */
  lock(id: string): string {
    return takeLock(this.fileOf(id));
  }

  unlock(lockFile: string): void {
    releaseLock(lockFile);
  }
}

function sameRoot(a: string, b: string): boolean {
  const norm = (p: string) => p.replace(/\/+$/, "");
  return norm(a) === norm(b);
}

// Saved conversations on the server: a conversation started while the configuration names a
// conversationDirectory is saved as it happens (conversation-store.ts); conversation/saved lists a
// project's files, conversation/resume brings one back (also done by chat/send for a conversation
// this server does not hold: the server restarted), conversation/rename and conversation/export work
// on them. A file that cannot be trusted is never written to; its error names it.

import { ResponseError, ErrorCodes as RpcErrorCodes } from "vscode-jsonrpc/node";
import {
  ErrorCodes,
  Requests,
  type Configuration,
  type ConversationExportParams,
  type ConversationExportResult,
  type ConversationRenameParams,
  type ConversationRenameResult,
  type ConversationResumeParams,
  type ConversationResumeResult,
  type ConversationSavedParams,
  type ConversationSavedResult,
  type ConversationRewindParams,
  type ConversationRewindResult,
  type ConversationTurnsParams,
  type ConversationTurnsResult,
  type HistoryMessage,
  type Restore,
} from "../protocol.js";
import type { Message } from "../llm/provider.js";
import type { AgentServer } from "../rpc/server.js";
import { oneLine } from "../text.js";
import { ConversationJournal, ConversationStore, STORE_VERSION, StoreError, type StoreRecord, type StoredConversation } from "./conversation-store.js";
import { compactedHistory } from "./compaction.js";
import { repairHistory } from "./history-rules.js";
import { Conversation, historyForClient, shortenAgain, shownTurnEnds } from "./conversation.js";
import { exportConversation } from "./export.js";
import { categoriesAddedIn } from "./tool-set.js";

export class SavedConversations {
  private readonly journals = new Map<string, ConversationJournal>();

  constructor(
    private readonly server: AgentServer,
    private readonly conversations: Map<string, Conversation>,
  ) {}

  register(): this {
    const s = this.server;
    s.addRequest(Requests.conversationSaved, (p: ConversationSavedParams) => this.saved(p));
    s.addRequest(Requests.conversationResume, (p: ConversationResumeParams) => this.resume(p));
    s.addRequest(Requests.conversationRename, (p: ConversationRenameParams) => this.rename(p));
    s.addRequest(Requests.conversationExport, (p: ConversationExportParams) => this.export(p));
    s.addRequest(Requests.conversationTurns, (p: ConversationTurnsParams) => this.turns(p));
    s.addRequest(Requests.conversationRewind, (p: ConversationRewindParams) => this.rewind(p));
    s.connection.onClose(() => this.closeAll());
    return this;
  }

  /** The store the configuration names, if any. */
  private store(): ConversationStore | undefined {
    const dir = this.server.configuration.conversationDirectory;
    return dir ? new ConversationStore(dir) : undefined;
  }

  private requireStore(): ConversationStore {
    const store = this.store();
    if (!store) throw new ResponseError(RpcErrorCodes.InvalidParams, "No conversationDirectory is configured: conversations are not saved.");
    return store;
  }

  /**
   * Starts saving C, a new conversation, under CHATROOT (the project of the chat that began it)
   * or else the server's project. Returns why it cannot be saved, if it cannot (the chat
   * goes on unsaved and the user is told).
   */
  startSaving(c: Conversation, config: Configuration, chatRoot?: string): string | undefined {
    const store = this.store();
    if (!store) return undefined;
    try {
      store.ensureDirectory();
      const projectRoot = chatRoot ?? this.server.context.projectRoot ?? config.projectRoot;
      const journal = ConversationJournal.create(store, {
        v: STORE_VERSION,
        type: "header",
        id: c.id,
        created: new Date().toISOString(),
        ...(projectRoot ? { projectRoot } : {}),
        ...(config.provider ? { provider: config.provider } : {}),
        ...(config.model ? { model: config.model } : {}),
        starts: true,
      });
      this.attach(c, journal);
      return undefined;
    } catch (err) {
      this.server.logger.warn(`conversation ${c.id} is not saved: ${(err as Error).message}`);
      return (err as Error).message;
    }
  }

  private attach(c: Conversation, journal: ConversationJournal): void {
    this.journals.set(c.id, journal);
    c.recorder = journal;
    journal.onFault = (message) => {
      this.server.logger.warn(`conversation ${c.id}: ${message}`);
      c.unsavedReason = message;
    };
  }

  /**
   * Conversation ID from its file (STORED, when it was just read), held by this server again and saved
   * on from where it ended. Throws a ResponseError when there is no such file or it cannot be trusted.
   */
  load(id: string, stored?: StoredConversation): Conversation {
    return this.loadReporting(id, stored).conversation;
  }

  /** load, and what was repaired in the history because a fault had interrupted it (undefined: nothing). */
  loadReporting(id: string, stored?: StoredConversation): { conversation: Conversation; repaired?: string[] } {
    const open = this.conversations.get(id);
    if (open) return { conversation: open };
    const store = this.store();
    if (!store) throw new ResponseError(ErrorCodes.unknownConversation, `No conversation ${id}; start one with conversation/new or omit conversationId.`);
    let journal: ConversationJournal;
    try {
      stored ??= store.read(id);
      journal = ConversationJournal.reopen(store, id, stored);
    } catch (err) {
      if (err instanceof StoreError && err.code === "ENOENT") {
        throw new ResponseError(ErrorCodes.unknownConversation, `No conversation ${id}, here or saved in ${store.directory}.`);
      }
      throw new ResponseError(ErrorCodes.savedConversation, (err as Error).message);
    }
    const c = new Conversation(id);
    restoreHistory(c, stored);
    c.usage = { ...stored.usage };
    c.costUsd = stored.costUsd;
    this.conversations.set(id, c);
    this.attach(c, journal);
    if (stored.truncatedBytes !== undefined) {
      this.server.logger.warn(`${store.fileOf(id)}: its last record was cut off (${stored.truncatedBytes} bytes) and is left out.`);
    }
    const interrupted = stored.interrupted;
    if (!interrupted) return { conversation: c };
    // The repair goes into the file as it went into memory, so that every later reading agrees.
    try {
      for (const m of interrupted.append ?? []) journal.message(structuredClone(m));
      journal.append({ v: STORE_VERSION, type: "repaired", at: new Date().toISOString(), what: interrupted.what });
    } catch (err) {
      this.server.logger.warn(`${store.fileOf(id)}: the repair could not be saved: ${(err as Error).message}`);
    }
    this.server.logger.warn(`${store.fileOf(id)}: a fault had interrupted this conversation; repaired: ${interrupted.what.join("; ")}.`);
    return { conversation: c, repaired: interrupted.what };
  }

  /** Stops saving conversation ID (it is deleted or closed); with DELETEFILE its file goes too. */
  forget(id: string, deleteFile = false): void {
    this.journals.get(id)?.close();
    this.journals.delete(id);
    if (deleteFile) {
      try {
        this.requireStore().delete(id);
      } catch (err) {
        throw new ResponseError(ErrorCodes.savedConversation, (err as Error).message);
      }
    }
  }

  closeAll(): void {
    for (const j of this.journals.values()) j.close();
    this.journals.clear();
  }

  /** Appends RECORD to conversation ID's file, through its journal when this server holds it open. */
  private append(id: string, record: StoreRecord): void {
    try {
      const journal = this.journals.get(id);
      if (journal) journal.append(record);
      else this.requireStore().appendTo(id, record);
    } catch (err) {
      if (err instanceof ResponseError) throw err;
      throw new ResponseError(ErrorCodes.savedConversation, (err as Error).message);
    }
  }

  private saved(p: ConversationSavedParams): ConversationSavedResult {
    const store = this.requireStore();
    const { conversations, errors } = store.list(p?.projectRoot);
    return {
      conversations: conversations.map(({ file: _file, ...s }) => ({ ...s, open: this.conversations.has(s.conversationId) })),
      errors,
    };
  }

  private resume(p: ConversationResumeParams): ConversationResumeResult {
    const stored = this.readSaved(p?.conversationId);
    const { repaired } = this.loadReporting(p.conversationId, stored);
    return {
      conversationId: p.conversationId,
      title: stored.title,
      messages: historyForClient(stored.messages),
      calls: stored.calls,
      turnEnds: shownTurnEnds(stored.messages, stored.turnEnds),
      usage: stored.usage,
      costUsd: stored.costUsd,
      ...(stored.model ? { model: stored.model } : {}),
      ...(stored.truncatedBytes !== undefined ? { truncated: true } : {}),
      ...(repaired ? { repaired } : {}),
    };
  }

  /** Reads saved conversation ID, or fails with a ResponseError naming the file. */
  private readSaved(id: unknown): StoredConversation {
    if (typeof id !== "string") throw new ResponseError(RpcErrorCodes.InvalidParams, "A conversationId is needed.");
    try {
      return this.requireStore().read(id);
    } catch (err) {
      if (err instanceof ResponseError) throw err;
      throw new ResponseError(ErrorCodes.savedConversation, (err as Error).message);
    }
  }

  private turns(p: ConversationTurnsParams): ConversationTurnsResult {
    const stored = this.readSaved(p?.conversationId);
    return {
      turns: stored.turnStarts.map((t) => ({
        turnId: t.turnId,
        at: t.at,
        text: turnText(stored.messages, t.index, t.blocks),
        changed: [...new Set(stored.changes.filter((c) => c.turnId === t.turnId).flatMap((c) => c.changes.map((x) => x.name)))],
      })),
    };
  }

  /**
   * What puts back the files and buffers changed from turn P.turnId on: for each, the text before its
   * first change and the text its last change left. With P.truncate the turns go too.
   */
  private rewind(p: ConversationRewindParams): ConversationRewindResult {
    const stored = this.readSaved(p?.conversationId);
    const open = this.conversations.get(p.conversationId);
    if (open?.running) throw new ResponseError(ErrorCodes.turnRunning, "A turn is running in this conversation; cancel it or wait before rewinding.");
    const from = stored.turnStarts.findIndex((t) => t.turnId === p.turnId);
    if (from < 0) throw new ResponseError(RpcErrorCodes.InvalidParams, `Conversation ${p.conversationId} has no turn ${String(p.turnId)}.`);
    const undone = new Set(stored.turnStarts.slice(from).map((t) => t.turnId));
    const restore = new Map<string, Restore>();
    for (const record of stored.changes) {
      if (!undone.has(record.turnId)) continue;
      for (const change of record.changes) {
        const key = `${change.kind}\u0000${change.name}`;
        const seen = restore.get(key);
        if (!seen) restore.set(key, { kind: change.kind, name: change.name, before: change.before ?? null, expected: change.after ?? null, ...(change.tooLarge ? { tooLarge: true } : {}) });
        else {
          seen.expected = change.after ?? null;
          if (change.tooLarge) seen.tooLarge = true;
        }
      }
    }
    if (p.truncate !== true) return { restore: [...restore.values()] };
    const start = stored.turnStarts[from]!;
    const record = { v: STORE_VERSION, type: "truncate" as const, at: new Date().toISOString(), keep: start.index, ...(start.blocks > 0 ? { keepBlocks: start.blocks } : {}) };
    this.append(p.conversationId, record);
    const after = this.readSaved(p.conversationId);
    // The server's copy goes on from the same history as the file.
    if (open) restoreHistory(open, after);
    return { restore: [...restore.values()], messages: historyForClient(after.messages), calls: after.calls, turnEnds: shownTurnEnds(after.messages, after.turnEnds) };
  }

  private rename(p: ConversationRenameParams): ConversationRenameResult {
    if (typeof p?.conversationId !== "string" || typeof p.title !== "string" || p.title.trim() === "") {
      throw new ResponseError(RpcErrorCodes.InvalidParams, "conversation/rename needs a conversationId and a non-empty title.");
    }
    const title = oneLine(p.title);
    this.append(p.conversationId, { v: STORE_VERSION, type: "title", at: new Date().toISOString(), title });
    return { title };
  }

  private export(p: ConversationExportParams): ConversationExportResult {
    if (p?.format !== "org" && p?.format !== "markdown") throw new ResponseError(RpcErrorCodes.InvalidParams, 'conversation/export needs a format, "org" or "markdown".');
    const open = this.conversations.get(p.conversationId);
    let title = "Conversation";
    let messages: HistoryMessage[];
    const store = this.store();
    let stored: StoredConversation | undefined;
    if (store) {
      try {
        stored = store.read(p.conversationId);
      } catch {
        stored = undefined;
      }
    }
    if (stored) {
      title = stored.title;
      messages = historyForClient(stored.messages);
    } else if (open) {
      messages = historyForClient(open.messages);
    } else {
      throw new ResponseError(ErrorCodes.unknownConversation, `No conversation ${p.conversationId}.`);
    }
    return { text: exportConversation(title, messages, p.format) };
  }
}

/** Sets C's history (what the model is sent) and turn count from what STORED holds. */
function restoreHistory(c: Conversation, stored: StoredConversation): void {
  // After a compaction the model goes on from the summary, as it did before; the file keeps every message.
  const view = stored.compaction ? compactedHistory(stored.messages, stored.compaction.replaced, stored.compaction.summary) : structuredClone(stored.messages);
  // The file's history is repaired as it is read; the summary's view is kept to the same rule.
  // A copy: the file's messages (shown on resume) keep every result whole.
  const messages = structuredClone(repairHistory(view).messages);
  // The old results the model was sent shortened are sent shortened again: the prefix it had stays the same.
  shortenAgain(messages, new Set(stored.shortened ?? []));
  c.messages.splice(0, c.messages.length, ...messages);
  c.compactedMessages = stored.compaction?.replaced ?? 0;
  c.turns = stored.turns;
  // What add_tools added, from every message the file keeps: a compaction's summary has no calls.
  c.addedCategories = categoriesAddedIn(stored.messages);
  // The system prompt stays as it was sent (the package the model last heard of is read from the history).
  if (!c.prompt) c.savedPrompt = stored.prompt;
}

/** The start of the text of the turn whose text is block BLOCKS of message INDEX. */
function turnText(messages: readonly Message[], index: number, blocks: number): string {
  // The user's own text: not a note the server said to the model before it.
  const block = messages[index]?.content.slice(blocks).find((b) => b.type === "text" && !b.note);
  return block?.type === "text" ? oneLine(block.text, 80) : "";
}

// Conversations on disk, the store's one entry: callers import from here, the parts live in store/.
// One JSON Lines file per conversation, one record per line, appended as the conversation happens
// and never rewritten (store/format.ts: the record types; store/records.ts: how each is read;
// store/reader.ts: a file read back; store/journal.ts: a file written; store/locks.ts: one server
// per file; store/files.ts: never through a link; store/directory.ts: the directory of files). A
// file that is corrupt, of another format version, or unreadable is reported with its name and
// never written to.

export { INTERRUPTED_BY_STOP, NOT_RUN_BY_STOP, STORE_VERSION, StoreError, type HeaderRecord, type RecordType, type StoreRecord } from "./store/format.js";
export type { FileIdentity } from "./store/files.js";
export { parseConversation, type StoredConversation } from "./store/reader.js";
export { ConversationJournal, journalIO } from "./store/journal.js";
export { lockIO } from "./store/locks.js";
export { ConversationStore, type StoredSummary } from "./store/directory.js";

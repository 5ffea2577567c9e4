// An AgentServer with the chat handlers on an in-memory JSON-RPC pair, the way the chat tests talk to
// it: the client records every notification, can wait for one, and for a turn's end.

import { afterAll, afterEach, beforeAll } from "vitest";
import type { MessageConnection } from "vscode-jsonrpc/node";
import { startMockLLM, type MockLLM } from "../fixtures/mock-llm/server.mjs";
import { registerChatHandlers, type ChatService } from "../../server/agent/chat-handlers.js";
import { Logger } from "../../server/log.js";
import type { ClientCapabilities, Configuration, EditorContext } from "../../server/protocol.js";
import { AgentServer } from "../../server/rpc/server.js";
import type { ToolRegistry } from "../../server/tools/registry.js";
import { defineTool, type Tool } from "../../server/tools/tool.js";
import { connectionPair } from "./helpers.js";

export interface Note {
  method: string;
  params: any;
}

export interface ChatHarness {
  /** What was out of the protocol's shape so far (connectionPair). */
  problems: string[];
  client: MessageConnection;
  server: AgentServer;
  chat: ChatService;
  notes: Note[];
  waitFor(pred: (n: Note) => boolean): Promise<Note>;
  /** The turn's chat/turnFinished or chat/turnFailed. */
  ended(turnId: string): Promise<Note>;
  dispose(): void;
}

export interface ChatHarnessOptions {
  configuration: Configuration;
  registry: ToolRegistry;
  capabilities?: ClientCapabilities;
  context?: EditorContext;
  /** Sees each notification first (to answer an emacs/call, say). */
  onNote?: (n: Note, client: MessageConnection) => void;
}

/**
 * Records every notification CLIENT receives, after handing it to ON_NOTE; waitFor resolves with the
 * first recorded or future notification that matches.
 */
export function recordNotes(client: MessageConnection, onNote?: (n: Note) => void): { notes: Note[]; waitFor(pred: (n: Note) => boolean): Promise<Note> } {
  const notes: Note[] = [];
  const waiters: { pred: (n: Note) => boolean; resolve: (n: Note) => void }[] = [];
  client.onNotification((method: string, params: unknown) => {
    const n: Note = { method, params };
    notes.push(n);
    onNote?.(n);
    for (const w of [...waiters]) {
      if (w.pred(n)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(n);
      }
    }
  });
  const waitFor = (pred: (n: Note) => boolean) =>
    new Promise<Note>((resolve) => {
      const found = notes.find(pred);
      if (found) resolve(found);
      else waiters.push({ pred, resolve });
    });
  return { notes, waitFor };
}

export async function connectChat(opts: ChatHarnessOptions): Promise<ChatHarness> {
  const pair = connectionPair();
  const { client, serverSide } = pair;
  const server = new AgentServer(serverSide, { registry: opts.registry, logger: new Logger("error", () => undefined) });
  const chat = registerChatHandlers(server, { retry: { maxRetries: 1, baseDelayMs: 1, maxDelayMs: 2 }, env: {} });
  const { notes, waitFor } = recordNotes(client, (n) => opts.onNote?.(n, client));
  server.listen();
  client.listen();
  await client.sendRequest("initialize", {
    clientInfo: { name: "test" },
    capabilities: opts.capabilities ?? { tools: true, image: true, approvals: false },
    configuration: opts.configuration,
    context: opts.context,
  });
  const ended = (turnId: string) => waitFor((n) => (n.method === "chat/turnFinished" || n.method === "chat/turnFailed") && n.params.turnId === turnId);
  const dispose = () => {
    chat.cancelAll();
    // Throws when a message either end sent was out of the protocol's shape.
    pair.dispose();
  };
  return { client, server, chat, notes, waitFor, ended, dispose, problems: pair.problems };
}

/** A dangerous Node tool the chat tests approve or deny. */
export function writeNoteTool(): Tool {
  return defineTool({
    name: "write_note",
    description: "Write a note to disk.",
    parameters: { text: { type: "string", description: "The note." } },
    required: ["text"],
    safety: "dangerous",
    categories: ["filesystem"],
    runtime: "node",
    handler: async (a) => `wrote ${String(a.text)}`,
  });
}

/**
 * For a test file's chats: a mock LLM started before its tests and closed after them, and chats
 * connected with these options' defaults, each disposed of after its test.
 */
export function chatsWithMock(): { mock(): MockLLM; connect(opts: ChatHarnessOptions): Promise<ChatHarness> } {
  let mock: MockLLM | undefined;
  const open: ChatHarness[] = [];
  beforeAll(async () => {
    mock = await startMockLLM();
  });
  afterAll(async () => {
    await mock?.close();
  });
  afterEach(() => {
    open.splice(0).forEach((h) => h.dispose());
  });
  return {
    mock: () => mock!,
    connect: async (opts) => {
      const h = await connectChat(opts);
      open.push(h);
      return h;
    },
  };
}

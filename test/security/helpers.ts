// The security suite's harness: the real AgentServer with the real built-in tool declarations on an
// in-memory JSON-RPC pair, a fake Emacs side that answers emacs/call, and the mock LLM. Each tool's
// handler is wrapped so that the test sees which tools really ran (not a status flag).

import { execFileSync } from "node:child_process";
import { mkdtempSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { MessageConnection } from "vscode-jsonrpc/node";
import type { MockLLM } from "../fixtures/mock-llm/server.mjs";
import { registerChatHandlers, type ChatService } from "../../server/agent/chat-handlers.js";
import { Logger } from "../../server/log.js";
import type { Configuration, EmacsCallParams, InitializeResult } from "../../server/protocol.js";
import { AgentServer } from "../../server/rpc/server.js";
import { builtinTools } from "../../server/tools/catalog/index.js";
import { ToolRegistry } from "../../server/tools/registry.js";
import { defineTool, type Tool } from "../../server/tools/tool.js";
import { recordNotes, type Note } from "../server/chat-harness.js";
import { connectionPair } from "../server/helpers.js";

export type { Note };

export interface Side {
  client: MessageConnection;
  server: AgentServer;
  chat: ChatService;
  registry: ToolRegistry;
  /** Names of the tools whose handler ran for the model's calls, in order. */
  ran: string[];
  /** Names of the tools the server ran by itself at a turn's end (image_changes' line), in order. */
  ranAtTurnEnd: string[];
  /** Every emacs/call of kind approval. */
  approvals: any[];
  notes: Note[];
  logs: string[];
  /** How the fake Emacs answers an approval (default: approved). */
  answerApproval: (params: any) => { result?: unknown; error?: { message: string } };
  /** How the fake Emacs answers a tool or image call (default: content "ok"). */
  answerCall: (call: EmacsCallParams) => { result?: unknown; error?: { message: string } };
  init(configuration: Configuration, opts?: { approvals?: boolean }): Promise<InitializeResult>;
  configure(configuration: Configuration): Promise<{ tools: string[] }>;
  call(name: string, args: Record<string, unknown>): Promise<any>;
  waitFor(pred: (n: Note) => boolean): Promise<Note>;
  dispose(): void;
}

/** The built-in tools, each handler wrapped to record that it ran before doing its real work: in RAN
 *  for the model's calls, in AT_TURN_END for the server's own call at a turn's end (its call id says so). */
export function recordingRegistry(ran: string[], atTurnEnd: string[] = ran): ToolRegistry {
  const registry = new ToolRegistry();
  for (const t of builtinTools) {
    const { schema: _schema, ...spec } = t;
    registry.register(defineTool({ ...spec, required: [...t.required], handler: (args, ctx) => ((ctx.callId.startsWith("turn-end-") ? atTurnEnd : ran).push(t.name), t.handler(args, ctx)) }));
  }
  return registry;
}

export function side(): Side {
  const pair = connectionPair();
  const { client, serverSide } = pair;
  const ran: string[] = [];
  const ranAtTurnEnd: string[] = [];
  const registry = recordingRegistry(ran, ranAtTurnEnd);
  const logs: string[] = [];
  const server = new AgentServer(serverSide, { registry, logger: new Logger("debug", (l) => logs.push(l)) });
  const chat = registerChatHandlers(server, { retry: { maxRetries: 0, baseDelayMs: 1, maxDelayMs: 1 }, env: {} });
  const { notes, waitFor } = recordNotes(client, (n) => {
    // The fake Emacs: answers each emacs/call as the test says.
    if (n.method !== "emacs/call") return;
    const call = n.params as EmacsCallParams;
    let answer;
    if (call.kind === "approval") {
      s.approvals.push(call.params);
      answer = s.answerApproval(call.params);
    } else {
      answer = s.answerCall(call);
    }
    void client.sendNotification("emacs/reply", { id: call.id, ...answer });
  });
  const s: Side = {
    client,
    server,
    chat,
    registry,
    ran,
    ranAtTurnEnd,
    approvals: [],
    notes,
    logs,
    answerApproval: () => ({ result: { decision: "approved" } }),
    answerCall: (call) => ({ result: { content: fakeContent(call) } }),
    init: (configuration, opts = {}) =>
      client.sendRequest<InitializeResult>("initialize", {
        clientInfo: { name: "security-test" },
        capabilities: { tools: true, image: true, approvals: opts.approvals ?? true },
        configuration,
      }),
    configure: (configuration) => client.sendRequest("configuration/change", { configuration }),
    call: (name, args) => client.sendRequest("tools/call", { name, arguments: args }),
    waitFor,
    dispose: () => {
      chat.cancelAll();
      server.dispose();
      // Throws when a message either end sent was out of the protocol's shape.
      pair.dispose();
    },
  };
  server.listen();
  client.listen();
  return s;
}

let project: string | undefined;

/** The fake Emacs's project: a real directory, a git repository holding x.lisp in one commit, so that
 *  the tools that run in the server on the project's files and git (search_project, git_log...) run. */
export function fakeProject(): string {
  if (project) return project;
  project = realpathSync(mkdtempSync(join(tmpdir(), "agent-q-security-project-")));
  writeFileSync(join(project, "x.lisp"), "(defun x ())\n");
  const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=Test", "-c", "user.email=test@example.org", "-C", project!, ...args]);
  git("init", "-q");
  git("add", "x.lisp");
  git("commit", "-qm", "x");
  return project;
}

/** What the fake Emacs answers a call: "ok", or where a definition is for the image's definition_edit
 *  (which the server's definition tools read as JSON), and the project root it is in. */
export function fakeContent(call: EmacsCallParams): string {
  const params = call.params as { tool?: string };
  if (call.kind === "image" && params.tool === "definition_edit") {
    return JSON.stringify({ file: join(fakeProject(), "x.lisp"), line: 1, label: "(DEFUN X)", old: "(defun x ())" });
  }
  // The project the definition above is in (read_definition asks before reading outside it).
  if (call.kind === "tool" && params.tool === "current_directory") return `Project root: ${fakeProject()}/ (relative paths are resolved against it).`;
  // Which buffer a buffer-writing tool changes (asked before it runs): one visiting no file.
  if (call.kind === "tool" && params.tool === "buffer_file") return JSON.stringify({ buffer: "*scratch*" });
  return "ok";
}

/** Arguments that pass TOOL's schema: each required parameter with a harmless value of its type. */
export function validArgs(tool: Tool): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  // insert_form needs one of two optional parameters (after or path), which a schema cannot say.
  if (tool.name === "insert_form") out.after = "x";
  // run_command needs argv or shell, which a schema cannot say either: a program that does nothing.
  if (tool.name === "run_command") out.argv = ["true"];
  for (const name of tool.required) {
    const p = tool.schema.properties[name]!;
    out[name] = p.enum ? p.enum[0] : p.type === "string" ? "x.lisp" : p.type === "integer" || p.type === "number" ? 1 : p.type === "boolean" ? true : p.type === "array" ? [] : {};
  }
  return out;
}

export function mockConfig(mock: MockLLM, extra: Configuration = {}): Configuration {
  return { provider: "anthropic", apiKey: "sk-security-test-0123456789", baseUrl: mock.url, model: "claude-sonnet-4-6", ...extra };
}

/** Runs one chat turn and waits for its end notification. */
export async function runTurn(s: Side, text = "go"): Promise<Note> {
  const sent = await s.client.sendRequest<{ turnId: string }>("chat/send", { text });
  return s.waitFor((n) => (n.method === "chat/turnFinished" || n.method === "chat/turnFailed") && n.params.turnId === sent.turnId);
}

// The JSON-RPC server in process, over an in-memory stream pair: initialize, tools, and the
// emacs/call + emacs/reply protocol for tools, images and approvals.

import { afterEach, describe, expect, it, vi } from "vitest";
import type { MessageConnection } from "vscode-jsonrpc/node";
import { ErrorCodes, type EmacsCallParams, type InitializeParams, type InitializeResult, type ToolsListResult } from "../../server/protocol.js";
import { AgentServer } from "../../server/rpc/server.js";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import type { ToolResult } from "../../server/tools/executor.js";
import { emacsTool } from "../../server/tools/handlers.js";
import { defineTool } from "../../server/tools/tool.js";
import { connectionPair } from "./helpers.js";

interface Harness {
  client: MessageConnection;
  server: AgentServer;
  calls: EmacsCallParams[];
  cancels: { id: string; reason: string }[];
  /** How Emacs answers each emacs/call; default: no answer. */
  answer: (call: EmacsCallParams) => { result?: unknown; error?: { message: string } } | undefined;
  /** What was out of the protocol's shape so far (connectionPair). */
  problems: string[];
  dispose(): void;
}

let current: Harness | undefined;
afterEach(() => current?.dispose());

function harness(): Harness {
  const pair = connectionPair();
  const server = new AgentServer(pair.serverSide, { registry: createDefaultRegistry() });
  server.logger.level = "error";
  const h: Harness = {
    client: pair.client,
    server,
    problems: pair.problems,
    calls: [],
    cancels: [],
    answer: () => undefined,
    dispose: () => {
      server.dispose();
      pair.dispose();
    },
  };
  pair.client.onNotification("emacs/call", (p: EmacsCallParams) => {
    h.calls.push(p);
    const a = h.answer(p);
    if (a) void pair.client.sendNotification("emacs/reply", { id: p.id, ...a });
  });
  pair.client.onNotification("emacs/cancel", (p: { id: string; reason: string }) => {
    h.cancels.push(p);
  });
  pair.client.listen();
  server.listen();
  current = h;
  return h;
}

const init = (h: Harness, p: InitializeParams = {}) =>
  h.client.sendRequest<InitializeResult>("initialize", {
    clientInfo: { name: "test" },
    capabilities: { tools: true, image: true, approvals: true },
    ...p,
  });

describe("JSON-RPC server", () => {
  it("refuses requests before initialize", async () => {
    const h = harness();
    await expect(h.client.sendRequest("tools/list", {})).rejects.toMatchObject({ code: ErrorCodes.notInitialized });
  });

  it("initializes and offers tools according to capabilities and configuration", async () => {
    const h = harness();
    const r = await init(h, { capabilities: { tools: true, image: false, approvals: true }, configuration: { maxSafetyLevel: "cautious" } });
    expect(r.serverInfo.name).toBe("sly-agent-q");
    expect(r.protocolVersion).toBe(1);
    expect(r.tools).toContain("read_buffer");
    expect(r.tools).toContain("buffer_edit");
    expect(r.tools).not.toContain("describe_symbol");
    expect(r.tools).not.toContain("write_file");
    const list = await h.client.sendRequest<ToolsListResult>("tools/list", {});
    expect(list.tools.map((t) => t.name).sort()).toEqual([...r.tools].sort());
    const all = await h.client.sendRequest<ToolsListResult>("tools/list", { all: true });
    expect(all.tools.find((t) => t.name === "file_read")).toMatchObject({ aliasOf: "read_file", offered: false });
    expect(all.tools.find((t) => t.name === "describe_symbol")).toMatchObject({ runtime: "image", safetyLevel: "safe", offered: false });
  });

  it("names each tool's Lisp source parameters, offered or not, for the chat to show as Lisp", async () => {
    const h = harness();
    const r = await init(h, { capabilities: { tools: true, image: false, approvals: true } });
    expect(r.tools).not.toContain("eval_form");
    expect(r.lispArguments?.eval_form).toEqual(["form"]);
    expect(r.lispArguments?.read_file).toBeUndefined();
  });

  it("answers unknown methods with MethodNotFound and keeps serving", async () => {
    const h = harness();
    await init(h);
    await expect(h.client.sendRequest("no/such/method", {})).rejects.toMatchObject({ code: -32601 });
    await expect(h.client.sendRequest("tools/call", { name: 5 })).rejects.toMatchObject({ code: -32602 });
    h.problems.splice(0); // sent out of shape on purpose
    const list = await h.client.sendRequest<ToolsListResult>("tools/list", {});
    expect(list.tools.length).toBeGreaterThan(10);
  });

  it("rejects an unknown safety level in the configuration", async () => {
    const h = harness();
    await init(h);
    await expect(h.client.sendRequest("configuration/change", { configuration: { safetyOverrides: { eval_form: "yolo" } } })).rejects.toMatchObject({
      code: ErrorCodes.invalidConfiguration,
    });
  });

  it("refuses a configuration out of the protocol's shape, naming the key: a typo is not silently ignored", async () => {
    const h = harness();
    await init(h);
    const refused = async (configuration: unknown, message: RegExp) =>
      expect(h.client.sendRequest("configuration/change", { configuration })).rejects.toMatchObject({ code: ErrorCodes.invalidConfiguration, message: expect.stringMatching(message) });
    await refused({ maxSafetyLevel: "safe", modle: "x" }, /unknown key modle/);
    await refused({ permissionRules: { action: "deny" } }, /permissionRules should be array/);
    await refused({ maxSteps: "many" }, /maxSteps should be number/);
    // A trust level that nothing would take: the user would believe they are asked.
    await refused({ safetyOverrides: { systems: "dangerous" } }, /"systems" is a category: give its level in categoryLevels/);
    await refused({ safetyOverrides: { evalform: "dangerous" } }, /no tool is named "evalform"/);
    await refused("x", /expected an object/);
    h.problems.splice(0); // sent out of shape on purpose
    // Refused whole: what was in force stays.
    const tools = (await h.client.sendRequest("tools/list", {})) as { tools: { name: string }[] };
    expect(tools.tools.map((t) => t.name)).toContain("eval_form");
  });

  it("relays an emacs tool through emacs/call and emacs/reply", async () => {
    const h = harness();
    await init(h);
    h.answer = (c) => ({ result: { content: `listed with ${JSON.stringify(c.params)}` } });
    const r = await h.client.sendRequest<ToolResult>("tools/call", { name: "buffer_list", arguments: { include_hidden: true } });
    expect(r.success).toBe(true);
    expect(h.calls[0]).toMatchObject({ kind: "tool", params: { tool: "buffer_list", arguments: { include_hidden: true } } });
    expect(r.content).toContain("include_hidden");
  });

  it("renames an alias's parameters onto the shared capability", async () => {
    const h = harness();
    // An alias runs only when aliases are offered.
    await init(h, { configuration: { offerAliases: true } });
    h.answer = () => ({ result: { content: "text" } });
    await h.client.sendRequest<ToolResult>("tools/call", { name: "file_read", arguments: { file_path: "a.lisp" } });
    expect(h.calls[0]).toMatchObject({ kind: "tool", params: { tool: "read_file", arguments: { path: "a.lisp" } } });
  });

  it("turns an error reply into a failed tool result with Emacs's message", async () => {
    const h = harness();
    await init(h);
    h.answer = () => ({ error: { message: "Path ../etc/passwd is outside the project root" } });
    const r = await h.client.sendRequest<ToolResult>("tools/call", { name: "read_file", arguments: { path: "../etc/passwd" } });
    expect(r).toMatchObject({ success: false, error: "Path ../etc/passwd is outside the project root" });
  });

  it("passes the REPL's current package to image calls", async () => {
    const h = harness();
    await init(h, { context: { currentPackage: "CL-USER" } });
    void h.client.sendNotification("context/change", { currentPackage: "MY-APP" });
    h.answer = () => ({ result: { content: "described" } });
    const r = await h.client.sendRequest<ToolResult>("tools/call", { name: "describe_symbol", arguments: { symbol: "process-data" } });
    expect(r.content).toBe("described");
    expect(h.calls[0]).toMatchObject({ kind: "image", params: { tool: "describe_symbol", package: "MY-APP", arguments: { symbol: "process-data" } } });
  });

  it("asks Emacs before a dangerous tool: denied never runs it", async () => {
    const h = harness();
    await init(h);
    h.answer = (c) => (c.kind === "approval" ? { result: { decision: "denied", reason: "no writes today" } } : { result: { content: "wrote" } });
    const r = await h.client.sendRequest<ToolResult>("tools/call", { name: "write_file", arguments: { path: "a", content: "b" } });
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/no writes today/);
    expect(h.calls.map((c) => c.kind)).toEqual(["approval"]);
  });

  it("asks Emacs before a dangerous tool: modified runs with the new arguments", async () => {
    const h = harness();
    await init(h);
    h.answer = (c) =>
      c.kind === "approval"
        ? { result: { decision: "modified", arguments: { path: "b.lisp", content: "edited" } } }
        : { result: { content: `wrote ${JSON.stringify(c.params)}` } };
    const r = await h.client.sendRequest<ToolResult>("tools/call", { name: "write_file", arguments: { path: "a", content: "b" } });
    expect(r.success).toBe(true);
    expect(h.calls[0]).toMatchObject({ kind: "approval", params: { tool: "write_file", safetyLevel: "dangerous", arguments: { path: "a", content: "b" } } });
    expect(h.calls[1]).toMatchObject({ kind: "tool", params: { tool: "write_file", arguments: { path: "b.lisp", content: "edited" } } });
  });

  it("denies dangerous tools when the client has no approval interface", async () => {
    const h = harness();
    await init(h, { capabilities: { tools: true, image: true, approvals: false } });
    const r = await h.client.sendRequest<ToolResult>("tools/call", { name: "write_file", arguments: { path: "a", content: "b" } });
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/no approval interface/);
    expect(h.calls).toEqual([]);
  });

  it("respects the user's trust level overrides", async () => {
    const h = harness();
    await init(h, { configuration: { safetyOverrides: { eval_form: "dangerous" } } });
    h.answer = (c) => (c.kind === "approval" ? { result: { decision: "denied" } } : { result: { content: "1" } });
    const r = await h.client.sendRequest<ToolResult>("tools/call", { name: "eval_form", arguments: { form: "(+ 1 0)" } });
    expect(r.success).toBe(false);
    expect(r.metadata.safetyLevel).toBe("dangerous");
    expect(h.calls.map((c) => c.kind)).toEqual(["approval"]);
  });

  it("fails a call Emacs never answers with a timeout and sends emacs/cancel", async () => {
    const h = harness();
    h.server.registry.register(defineTool({
      name: "slow_emacs",
      description: "A tool Emacs will not answer.",
      parameters: {},
      safety: "safe",
      categories: ["test"],
      runtime: "emacs",
      handler: emacsTool("slow_emacs"),
      timeoutMs: 100,
    }));
    await init(h);
    const t0 = Date.now();
    const r = await h.client.sendRequest<ToolResult>("tools/call", { name: "slow_emacs", arguments: {} });
    expect(r).toMatchObject({ success: false });
    expect(r.error).toMatch(/slow_emacs timed out after 100 ms/);
    expect(Date.now() - t0).toBeLessThan(5000);
    await vi.waitFor(() => expect(h.cancels).toEqual([{ id: h.calls[0]!.id, reason: "cancelled" }]), { timeout: 10_000 });
    // The late answer is dropped, and the server still serves.
    void h.client.sendNotification("emacs/reply", { id: h.calls[0]!.id, result: { content: "late" } });
    h.answer = () => ({ result: { content: "fine" } });
    const again = await h.client.sendRequest<ToolResult>("tools/call", { name: "buffer_list", arguments: {} });
    expect(again.content).toBe("fine");
  });

  it("drops late and unknown replies without harm", async () => {
    const h = harness();
    await init(h);
    void h.client.sendNotification("emacs/reply", { id: "e999", result: { content: "stray" } });
    void h.client.sendNotification("emacs/reply", { nonsense: true });
    void h.client.sendNotification("emacs/reply", null);
    // Answered after the notifications before it were handled: the connection keeps their order.
    const list = await h.client.sendRequest<ToolsListResult>("tools/list", {});
    h.problems.splice(0); // sent out of shape on purpose
    expect(list.tools.length).toBeGreaterThan(0);
  });

  it("fails pending Emacs calls when the connection closes", async () => {
    const h = harness();
    await init(h);
    const pending = h.server.executor.execute({ id: "x", name: "buffer_list", arguments: {} });
    await vi.waitFor(() => expect(h.server.bridge.inFlight).toBe(1), { timeout: 10_000 });
    h.server.bridge.close("The connection to Emacs is closed.");
    const r = await pending;
    expect(r).toMatchObject({ success: false, error: "The connection to Emacs is closed." });
  });
});

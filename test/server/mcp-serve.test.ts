// The registry served over MCP, tested with the real bundle and the official MCP client
// from the SDK. This test stands in for Emacs on the bundle's stdio (it answers emacs/call for
// tools and approvals); the real Emacs and Lisp are in test/e2e.

import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, statSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { BUNDLE, startBundle, type BundleProcess } from "./stdio-client.js";

const ROOT = resolve(import.meta.dirname, "../..");
type Decision = { decision: "approved" } | { decision: "denied"; reason?: string } | "silent";

interface Harness {
  bundle: BundleProcess;
  stateFile: string;
  url: string;
  token: string;
  /** emacs/call params seen, by kind. */
  calls: { kind: string; params: Record<string, unknown> }[];
  notes: { method: string; params: Record<string, unknown> }[];
  decisions: Decision[];
}

const open: BundleProcess[] = [];
afterEach(() => {
  for (const b of open.splice(0)) b.kill();
});

async function start(approvalTimeoutMs = 20_000, sessions: { maxSessions?: number; sessionIdleTimeoutMs?: number } = {}, logLevel = "warn"): Promise<Harness> {
  const bundle = startBundle(["--log-level", logLevel]);
  open.push(bundle);
  const stateFile = join(mkdtempSync(join(tmpdir(), "agent-q-mcp-")), "state", "mcp.json");
  const h: Harness = { bundle, stateFile, url: "", token: "", calls: [], notes: [], decisions: [] };
  bundle.connection.onNotification((method: string, params: any) => {
    h.notes.push({ method, params });
    if (method !== "emacs/call") return;
    h.calls.push({ kind: params.kind, params: params.params });
    if (params.kind === "approval") {
      const d = h.decisions.shift() ?? { decision: "denied" };
      if (d !== "silent") void bundle.connection.sendNotification("emacs/reply", { id: params.id, result: d });
    } else {
      void bundle.connection.sendNotification("emacs/reply", { id: params.id, result: { content: `emacs ran ${params.params.tool} ${JSON.stringify(params.params.arguments)}` } });
    }
  });
  await bundle.connection.sendRequest("initialize", { clientInfo: { name: "mcp-test" }, capabilities: { tools: true, image: true, approvals: true }, configuration: {} });
  const r = await bundle.connection.sendRequest<any>("mcp/start", { stateFile, approvalTimeoutMs, ...sessions });
  const state = JSON.parse(readFileSync(stateFile, "utf8"));
  expect(r.url).toBe(state.url);
  h.url = state.url;
  h.token = state.token;
  return h;
}

async function connect(h: Harness, name = "Claude Code"): Promise<Client> {
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(h.url), { requestInit: { headers: { Authorization: `Bearer ${h.token}` } } }));
  return client;
}

const INIT = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } } });
const HEADERS = { "content-type": "application/json", accept: "application/json, text/event-stream" };

describe("MCP server", () => {
  it("writes the URL and token to a file only the user can read, on loopback", async () => {
    const h = await start();
    expect(statSync(h.stateFile).mode & 0o777).toBe(0o600);
    expect(h.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    expect(h.token.length).toBeGreaterThanOrEqual(40);
    await h.bundle.connection.sendRequest("mcp/stop", {});
    expect(existsSync(h.stateFile)).toBe(false);
  });

  it("refuses no token, a wrong token, a foreign Host and a foreign Origin", async () => {
    const h = await start();
    const post = (headers: Record<string, string>) => fetch(h.url, { method: "POST", headers: { ...HEADERS, ...headers }, body: INIT });
    expect((await post({})).status).toBe(401);
    expect((await post({ authorization: `Bearer ${h.token}x` })).status).toBe(401);
    expect((await post({ authorization: "Bearer " })).status).toBe(401);
    const good = { authorization: `Bearer ${h.token}` };
    expect((await post({ ...good, origin: "http://evil.example" })).status).toBe(403);
    expect((await post({ ...good, origin: "null" })).status).toBe(403);
    // fetch sets Host itself; a raw request names a rebinding host.
    const port = new URL(h.url).port;
    const raw = spawnSync(process.execPath, ["-e", `
      const http = require("node:http");
      const req = http.request({ host: "127.0.0.1", port: ${port}, path: "/mcp", method: "POST", headers: { ...${JSON.stringify({ ...HEADERS, ...good })}, host: "evil.example:${port}" } }, (res) => { console.log(res.statusCode); });
      req.end(${JSON.stringify(INIT)});`], { encoding: "utf8" });
    expect(raw.stdout.trim()).toBe("403");
    // Only loopback is listened on: another interface of this machine gets no answer.
    const other = Object.values((await import("node:os")).networkInterfaces()).flat().find((i) => i && i.family === "IPv4" && !i.internal);
    if (other) await expect(fetch(`http://${other.address}:${port}/mcp`, { method: "POST", headers: { ...HEADERS, ...good }, body: INIT })).rejects.toThrow();
    // The same request with the token and a loopback Origin is served.
    expect((await post({ ...good, origin: `http://localhost:${port}` })).status).toBe(200);
    // The token never reaches the logs.
    expect(h.bundle.stderr()).not.toContain(h.token);
  });

  it("holds at most maxSessions open: a new session closes the longest unused one (a client that never closed its session, as a killed stdio shim), is refused only while every session answers a request; an unused session expires", async () => {
    // Approvals left unanswered time out after 3 s.
    const h = await start(3000, { maxSessions: 3, sessionIdleTimeoutMs: 1500 });
    const auth = { ...HEADERS, authorization: `Bearer ${h.token}` };
    const init = () => fetch(h.url, { method: "POST", headers: auth, body: INIT });
    const list = (sid: string) =>
      fetch(h.url, { method: "POST", headers: { ...auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18" }, body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list", params: {} }) });
    // Twenty clients one after another that never close their sessions (each stdio shim that a client
    // killed leaves one): every one is served, and only the cap's worth stay open, the newest.
    const opened: string[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await init();
      expect(r.status).toBe(200);
      opened.push(r.headers.get("mcp-session-id")!);
      await r.text();
    }
    for (const sid of opened.slice(0, 17)) expect((await list(sid)).status).toBe(404);
    for (const sid of opened.slice(17)) {
      const r = await list(sid);
      expect(r.status).toBe(200);
      await r.text();
    }
    // Sessions answering a request are never closed for a new one: while all three wait for an
    // approval, an initialize is refused, saying so.
    h.decisions.push("silent", "silent", "silent");
    const busy = opened.slice(17).map((sid) =>
      fetch(h.url, { method: "POST", headers: { ...auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18" },
                     body: JSON.stringify({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "write_file", arguments: { path: "x.txt", content: "x" } } }) }));
    await vi.waitFor(() => expect(h.calls.filter((c) => c.kind === "approval")).toHaveLength(3), { timeout: 10_000 });
    const refused = await init();
    expect(refused.status).toBe(503);
    const error = ((await refused.json()) as { error: { message: string } }).error.message;
    expect(error).toMatch(/already has 3 open sessions, its maximum \(sly-agent-q-mcp-max-sessions\), each answering a request/);
    await Promise.all((await Promise.all(busy)).map((r) => r.text()));
    // The first stays in use; the two others expire.
    const [kept, ...idle] = opened.slice(17);
    for (let i = 0; i < 6; i++) {
      await new Promise((r) => setTimeout(r, 500));
      const r = await list(kept!);
      expect(r.status).toBe(200);
      await r.text();
    }
    for (const sid of idle) expect((await list(sid)).status).toBe(404);
    expect((await list(kept!)).status).toBe(200);
  }, 30_000);

  it("names a hostile client by a printable, bounded name: no control or bidi character, no line of its own", async () => {
    const h = await start();
    const hostile = "Claude Code\n  ✓ approved write_file\n\u001b[2J\u202eedoc\u2066x\u2069\u200f\u061c\u0085" + "Z".repeat(500);
    const client = await connect(h, hostile);
    h.decisions.push({ decision: "denied" });
    await client.callTool({ name: "write_file", arguments: { path: "x.txt", content: "hi" } });
    const asked = h.calls.find((c) => c.kind === "approval")!.params.client as string;
    expect(asked.startsWith("Claude Code")).toBe(true);
    expect(asked).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u);
    expect(asked).toContain("\\n");
    expect(asked).toContain("\\u202E");
    expect(asked.length).toBeLessThanOrEqual(80);
    await vi.waitFor(() => expect(h.notes.filter((n) => n.method === "mcp/call" && n.params.phase === "done")).toHaveLength(1), { timeout: 10_000 });
    for (const n of h.notes.filter((n) => n.method === "mcp/call")) expect(n.params.client).toBe(asked);
    await client.close();
  });

  it("lists the registry's tools and runs them through the executor; dangerous asks in Emacs naming the client", async () => {
    const h = await start();
    const client = await connect(h);
    const names = (await client.listTools()).tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(["describe_symbol", "eval_form", "write_file", "read_file"]));

    const d = await client.callTool({ name: "describe_symbol", arguments: { symbol: "car" } });
    expect(d.isError).toBeFalsy();
    expect((d.content as any)[0].text).toContain("emacs ran describe_symbol");
    expect(h.calls.filter((c) => c.kind === "approval")).toHaveLength(0);

    // Invalid arguments are refused before anything runs.
    const bad = await client.callTool({ name: "describe_symbol", arguments: { nope: 1 } });
    expect(bad.isError).toBe(true);
    expect((bad.content as any)[0].text).toMatch(/missing required parameter "symbol"/);

    h.decisions.push({ decision: "denied" }, { decision: "approved" });
    const denied = await client.callTool({ name: "write_file", arguments: { path: "x.txt", content: "hi" } });
    expect(denied.isError).toBe(true);
    expect((denied.content as any)[0].text).toMatch(/denied write_file/);
    expect(h.calls.filter((c) => c.kind === "tool" && c.params.tool === "write_file")).toHaveLength(0);
    const approved = await client.callTool({ name: "write_file", arguments: { path: "x.txt", content: "hi" } });
    expect(approved.isError).toBeFalsy();
    expect(h.calls.filter((c) => c.kind === "tool" && c.params.tool === "write_file")).toHaveLength(1);
    const approvals = h.calls.filter((c) => c.kind === "approval");
    expect(approvals).toHaveLength(2);
    expect(approvals[0]!.params).toMatchObject({ tool: "write_file", client: "Claude Code", safetyLevel: "dangerous" });

    // Every call is shown in Emacs (the last notice may trail the MCP answer).
    await vi.waitFor(() => expect(h.notes.filter((n) => n.method === "mcp/call" && n.params.phase === "done")).toHaveLength(4), { timeout: 10_000 });
    const logged = h.notes.filter((n) => n.method === "mcp/call" && n.params.phase === "done").map((n) => [n.params.tool, n.params.success, n.params.client]);
    expect(logged).toEqual([
      ["describe_symbol", true, "Claude Code"],
      ["describe_symbol", false, "Claude Code"],
      ["write_file", false, "Claude Code"],
      ["write_file", true, "Claude Code"],
    ]);
    await client.close();
  });

  it("an MCP call asks as a chat call does: the declared order, the review kind, capability, categories and reason", async () => {
    const h = await start();
    const client = await connect(h);
    h.decisions.push({ decision: "denied" });
    // The client puts a long content first, hoping the path is cut off.
    await client.callTool({ name: "write_file", arguments: { content: "x".repeat(5000), path: "x/../../../etc/passwd" } });
    const asked = h.calls.find((c) => c.kind === "approval")!.params;
    expect(Object.keys(asked.arguments as object)).toEqual(["path", "content"]);
    expect(asked).toMatchObject({ tool: "write_file", capability: "write_file", review: "target", categories: ["buffer", "filesystem"], reason: { kind: "level", level: "dangerous" }, client: "Claude Code" });
    expect(asked).not.toHaveProperty("conversationId");
    await client.close();
  });

  it("an \"always allow\" answer holds for that client only", async () => {
    const h = await start();
    const claude = await connect(h, "Claude Code");
    const codex = await connect(h, "Codex");
    h.decisions.push({ decision: "approved", always: true } as unknown as Decision, { decision: "denied" });
    const args = { name: "write_file", arguments: { path: "x.txt", content: "hi" } };
    expect((await claude.callTool(args)).isError).toBeFalsy();
    expect((await claude.callTool(args)).isError).toBeFalsy();
    expect((await codex.callTool(args)).isError).toBe(true);
    expect(h.calls.filter((c) => c.kind === "approval").map((c) => c.params.client)).toEqual(["Claude Code", "Codex"]);
    await claude.close();
    await codex.close();
  });

  it("denies a dangerous call when nobody answers in time", async () => {
    const h = await start(500);
    const client = await connect(h);
    h.decisions.push("silent");
    const r = await client.callTool({ name: "write_file", arguments: { path: "x.txt", content: "hi" } });
    expect(r.isError).toBe(true);
    expect((r.content as any)[0].text).toMatch(/nobody answered in Emacs within 1 s/);
    expect(h.calls.filter((c) => c.kind === "tool")).toHaveLength(0);
    // Emacs is told to drop the question.
    await vi.waitFor(() => expect(h.notes.some((n) => n.method === "emacs/cancel")).toBe(true), { timeout: 10_000 });
    await client.close();
  });

  it("honours the user's policy: a tool not offered is neither listed nor run", async () => {
    const h = await start();
    await h.bundle.connection.sendRequest("configuration/change", { configuration: { maxSafetyLevel: "safe" } });
    const client = await connect(h);
    const names = (await client.listTools()).tools.map((t) => t.name);
    expect(names).toContain("describe_symbol");
    expect(names).not.toContain("write_file");
    const r = await client.callTool({ name: "write_file", arguments: { path: "x.txt", content: "hi" } });
    expect(r.isError).toBe(true);
    expect((r.content as any)[0].text).toMatch(/not available under the user's configuration/);
    expect(h.calls).toHaveLength(0);
    await client.close();
  });

  it("serves stdio clients through the --mcp-stdio shim", async () => {
    const h = await start();
    const client = new Client({ name: "Codex", version: "1.0.0" });
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [BUNDLE, "--mcp-stdio", "--mcp-state", h.stateFile], stderr: "pipe" }));
    expect((await client.listTools()).tools.map((t) => t.name)).toContain("eval_form");
    const r = await client.callTool({ name: "eval_form", arguments: { form: "(+ 1 2)" } });
    expect((r.content as any)[0].text).toContain("emacs ran eval_form");
    h.decisions.push({ decision: "denied" });
    const w = await client.callTool({ name: "write_file", arguments: { path: "x.txt", content: "hi" } });
    expect(w.isError).toBe(true);
    expect(h.calls.find((c) => c.kind === "approval")!.params.client).toBe("Codex");
    await client.close();
  });

  it("the shim ends its HTTP session when its client goes: stdin closed, or a signal", async () => {
    const h = await start(20_000, {}, "info");
    const ended = () => h.bundle.stderr().split("\n").filter((l) => /MCP: session \S+ ended by its client/.test(l)).length;
    // The client closes the shim's stdin (as Claude Code does on exit).
    const a = new Client({ name: "Codex", version: "1.0.0" });
    await a.connect(new StdioClientTransport({ command: process.execPath, args: [BUNDLE, "--mcp-stdio", "--mcp-state", h.stateFile], stderr: "pipe" }));
    expect((await a.listTools()).tools.length).toBeGreaterThan(0);
    expect(ended()).toBe(0);
    await a.close();
    await vi.waitFor(() => expect(ended()).toBe(1), { timeout: 5000, interval: 50 });
    // Killed by a signal (a terminal closed, a supervisor stopping it) with its stdin still open.
    for (const signal of ["SIGTERM", "SIGHUP"] as const) {
      const transport = new StdioClientTransport({ command: process.execPath, args: [BUNDLE, "--mcp-stdio", "--mcp-state", h.stateFile], stderr: "pipe" });
      const b = new Client({ name: "Codex", version: "1.0.0" });
      await b.connect(transport);
      await b.listTools();
      const before = ended();
      process.kill(transport.pid!, signal);
      await vi.waitFor(() => expect(ended()).toBe(before + 1), { timeout: 5000, interval: 50 });
      await b.close();
    }
  }, 30_000);

  it("the shim says clearly when no server is running", () => {
    const r = spawnSync(process.execPath, [BUNDLE, "--mcp-stdio", "--mcp-state", join(tmpdir(), "no-such-dir-agent-q", "mcp.json")], { encoding: "utf8", cwd: ROOT, input: "" });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/is the MCP server started\? M-x sly-agent-q-mcp-start/);
  });
});

// MCP servers used by our agent: a real stdio MCP server written with the SDK (the
// fixture), the real bundle, the scripted model. This test stands in for Emacs (approvals).

import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, expect, it, vi } from "vitest";
import { startMockLLM, type MockScript } from "../fixtures/mock-llm/server.mjs";
import { startBundle, type BundleProcess } from "./stdio-client.js";

const FIXTURE = resolve(import.meta.dirname, "../fixtures/mcp/stdio-server.mjs");
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

async function turn(bundle: BundleProcess, conversationId: string | undefined, text: string): Promise<any> {
  const done = new Promise<any>((r) => {
    const subs: { dispose(): void }[] = [];
    const end = (v: unknown): void => {
      subs.forEach((s) => s.dispose());
      r(v);
    };
    subs.push(bundle.connection.onNotification("chat/turnFinished", (p: unknown) => end(p)));
    subs.push(bundle.connection.onNotification("chat/turnFailed", (p: unknown) => end({ failed: p })));
  });
  const sent = await bundle.connection.sendRequest<any>("chat/send", { conversationId, text });
  return { ...(await done), conversationId: sent.conversationId };
}

it("offers a configured MCP server's tools to the model under its trust level, survives its crash, reports a broken one", async () => {
  const dir = mkdtempSync(join(tmpdir(), "agent-q-mcpc-"));
  const touched = join(dir, "touched.txt");
  const mock = await startMockLLM({
    script: {
      steps: [
        { content: [{ type: "tool_use", name: "mcp__fixture__echo", input: { text: "hi" } }] },
        { content: [{ type: "text", text: "1: {{last_tool_result}}" }] },
        { content: [{ type: "tool_use", name: "mcp__fixture__touch", input: { text: "first" } }] },
        { content: [{ type: "text", text: "2: {{last_tool_result}}" }] },
        { content: [{ type: "tool_use", name: "mcp__fixture__touch", input: { text: "second" } }] },
        { content: [{ type: "text", text: "3: {{last_tool_result}}" }] },
        { content: [{ type: "tool_use", name: "mcp__fixture__crash", input: {} }] },
        { content: [{ type: "text", text: "4: {{last_tool_result}}" }] },
        { content: [{ type: "tool_use", name: "mcp__fixture__echo", input: { text: "again" } }] },
        { content: [{ type: "text", text: "5: {{last_tool_result}}" }] },
      ],
    },
  });
  cleanups.push(() => mock.close());
  const bundle = startBundle(["--log-level", "warn"]);
  cleanups.push(() => bundle.kill());
  const decisions: string[] = [];
  const approvals: any[] = [];
  const statuses: any[] = [];
  bundle.connection.onNotification("emacs/call", (p: any) => {
    if (p.kind !== "approval") return;
    approvals.push(p.params);
    void bundle.connection.sendNotification("emacs/reply", { id: p.id, result: { decision: decisions.shift() ?? "denied" } });
  });
  bundle.connection.onNotification("mcp/serverStatus", (p: any) => void statuses.push(p));
  await bundle.connection.sendRequest("initialize", {
    clientInfo: { name: "mcp-client-test" },
    capabilities: { tools: false, image: true, approvals: true },
    configuration: { provider: "anthropic", baseUrl: mock.url, apiKey: "any-test-key", model: "claude-sonnet-4-6" },
  });
  const servers = {
    fixture: { command: process.execPath, args: [FIXTURE], env: { FIXTURE_TOUCH_FILE: touched } },
    broken: { command: join(dir, "no-such-program") },
  };
  const conf = await bundle.connection.sendRequest<any>("mcp/clientConfigure", { servers, levels: { fixture: "safe" } });
  expect(conf.servers).toEqual([
    { name: "fixture", ok: true, tools: ["mcp__fixture__echo", "mcp__fixture__touch", "mcp__fixture__env", "mcp__fixture__crash"] },
    { name: "broken", ok: false, tools: [], error: expect.stringMatching(/MCP server broken could not start: .*ENOENT/) },
  ]);
  expect(statuses.map((s) => [s.name, s.status])).toEqual([["fixture", "connected"], ["broken", "failed"]]);

  // Safe: runs without asking, and the model sees the tool beside ours.
  const t1 = await turn(bundle, undefined, "echo");
  expect(t1.text).toBe("1: fixture echo: hi");
  expect(approvals).toHaveLength(0);
  const offered = mock.requests()[0]!.body.tools.map((t: any) => t.name);
  expect(offered).toEqual(expect.arrayContaining(["mcp__fixture__echo", "describe_symbol"]));

  // Default level (no level given): every call asks; denied once, approved once, the disk says which ran.
  await bundle.connection.sendRequest<any>("mcp/clientConfigure", { servers: { fixture: servers.fixture } });
  decisions.push("denied", "approved");
  const t2 = await turn(bundle, t1.conversationId, "touch");
  expect(t2.text).toMatch(/^2: Error: The user denied mcp__fixture__touch/);
  expect(existsSync(touched)).toBe(false);
  const t3 = await turn(bundle, t1.conversationId, "touch again");
  expect(t3.text).toBe("3: written");
  expect(readFileSync(touched, "utf8")).toBe("second");
  expect(approvals.map((a) => [a.tool, a.safetyLevel])).toEqual([["mcp__fixture__touch", "dangerous"], ["mcp__fixture__touch", "dangerous"]]);

  // The server dies in the middle of a call: an error result, the death reported, and the next turn works.
  decisions.push("approved", "approved");
  const t4 = await turn(bundle, t1.conversationId, "crash");
  expect(t4.text).toMatch(/^4: Error: crash on MCP server fixture failed: .*(closed|Connection)/i);
  await vi.waitFor(() => expect(statuses.some((s) => s.name === "fixture" && s.status === "exited")).toBe(true), { timeout: 10_000 });
  const t5 = await turn(bundle, t1.conversationId, "echo again");
  expect(t5.text).toBe("5: fixture echo: again");
  await bundle.connection.sendRequest("mcp/clientConfigure", { servers: {} });
}, 60_000);

it("reads servers from .mcp.json files itself, and their secrets never reach the model or the logs", async () => {
  const dir = mkdtempSync(join(tmpdir(), "agent-q-mcpf-"));
  const secret = "fixture-secret-value-0123456789";
  const file = join(dir, ".mcp.json");
  writeFileSync(file, JSON.stringify({ mcpServers: { fromfile: { command: process.execPath, args: [FIXTURE], env: { FIXTURE_API_TOKEN: secret } } } }));
  const mock = await startMockLLM({
    script: {
      steps: [
        { content: [{ type: "tool_use", name: "mcp__fromfile__env", input: { text: "FIXTURE_API_TOKEN" } }] },
        { content: [{ type: "text", text: "said: {{last_tool_result}}" }] },
      ],
    },
  });
  cleanups.push(() => mock.close());
  const bundle = startBundle(["--log-level", "debug"]);
  cleanups.push(() => bundle.kill());
  await bundle.connection.sendRequest("initialize", {
    clientInfo: { name: "mcp-client-test" },
    capabilities: { tools: false, image: false, approvals: false },
    configuration: { provider: "anthropic", baseUrl: mock.url, apiKey: "any-test-key", model: "claude-sonnet-4-6" },
  });
  const conf = await bundle.connection.sendRequest<any>("mcp/clientConfigure", { files: [file, join(dir, "missing.json")], servers: {}, levels: { fromfile: "safe" } });
  expect(conf.servers).toEqual([
    { name: join(dir, "missing.json"), ok: false, tools: [], error: expect.stringMatching(/cannot read .*missing\.json/) },
    { name: "fromfile", ok: true, tools: expect.arrayContaining(["mcp__fromfile__env"]) },
  ]);
  const t = await turn(bundle, undefined, "env");
  expect(t.text).toMatch(/^said: value: \[/);
  expect(t.text).not.toContain(secret);
  expect(JSON.stringify(mock.requests())).not.toContain(secret);
  expect(bundle.stderr()).not.toContain(secret);
  await bundle.connection.sendRequest("mcp/clientConfigure", { servers: {} });
}, 60_000);

const HOSTILE = resolve(import.meta.dirname, "../fixtures/mcp/hostile-server.mjs");
const UNSAFE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;

async function hostileBundle(script: MockScript, toolTimeoutMs = 2_000): Promise<{ bundle: BundleProcess; mock: { url: string; requests(): any[] }; statuses: any[]; results: any[] }> {
  const mock = await startMockLLM({ script });
  cleanups.push(() => mock.close());
  const bundle = startBundle(["--log-level", "warn"]);
  cleanups.push(() => bundle.kill());
  const statuses: any[] = [];
  const results: any[] = [];
  bundle.connection.onNotification("mcp/serverStatus", (p: any) => void statuses.push(p));
  bundle.connection.onNotification("chat/toolResult", (p: any) => void results.push(p));
  await bundle.connection.sendRequest("initialize", {
    clientInfo: { name: "mcp-client-test" },
    capabilities: { tools: false, image: false, approvals: false },
    configuration: { provider: "anthropic", baseUrl: mock.url, apiKey: "any-test-key", model: "claude-sonnet-4-6", toolTimeoutMs },
  });
  return { bundle, mock, statuses, results };
}

it("a hostile configured MCP server: odd and colliding tool names renamed or refused visibly, a huge description cut, a 5 MB result bounded, 30 MB refused clearly", async () => {
  const h = await hostileBundle({
    steps: [
      { content: [{ type: "tool_use", name: "mcp__hostile__big", input: {} }] },
      { content: [{ type: "text", text: "1" }] },
      { content: [{ type: "tool_use", name: "mcp__hostile__huge", input: {} }] },
      { content: [{ type: "text", text: "3: {{last_tool_result}}" }] },
    ],
  }, 120_000); // megabytes through a pipe on a loaded machine: the error must be the size, not the time
  const conf = await h.bundle.connection.sendRequest<any>("mcp/clientConfigure", { servers: { hostile: { command: process.execPath, args: [HOSTILE, "names"] } }, levels: { hostile: "safe" } });
  const tools: string[] = conf.servers[0].tools;
  expect(tools).toEqual(expect.arrayContaining(["mcp__hostile__echo", "mcp__hostile__echo_txt_exe", "mcp__hostile__big", "mcp__hostile__huge", "mcp__hostile__hang"]));
  expect(tools).toHaveLength(5);
  // Said where the user sees it (the status Emacs shows and logs), drawn as data.
  const connected = h.statuses.find((s) => s.name === "hostile" && s.status === "connected");
  expect(connected.message).toMatch(/tool "Echo\\u202Etxt\.exe\\n" is offered as mcp__hostile__echo_txt_exe/);
  expect(connected.message).toMatch(/tool "ECHO" is refused: its name mcp__hostile__echo is taken/);
  expect(connected.message).not.toMatch(UNSAFE);
  expect(conf.servers[0].notes.join("; ")).toBe(connected.message);

  const t1 = await turn(h.bundle, undefined, "big");
  expect(t1.text).toBe("1");
  const offered = h.mock.requests()[0]!.body.tools.find((t: any) => t.name === "mcp__hostile__echo");
  expect(offered.description.length).toBeLessThan(2_200);
  expect(offered.description).toMatch(/cut: \d+ more characters/);
  expect(offered.description).not.toMatch(UNSAFE);
  // The 5 MB result reaches neither the model nor Emacs whole: bounded as our own tools' results are.
  const toModel = JSON.stringify(h.mock.requests()[1]!.body.messages);
  expect(toModel.length).toBeLessThan(100_000);
  expect(toModel).toMatch(/B{1000}/);
  const r = h.results.find((x) => x.name === "mcp__hostile__big");
  expect(r.success).toBe(true);
  expect(r.content.length).toBeLessThan(100_000);

  // 30 MB is more than an MCP message may be: a clear error, nothing held, and the server starts again.
  const t3 = await turn(h.bundle, t1.conversationId, "huge");
  expect(t3.text).toMatch(/^3: Error: huge on MCP server hostile failed: its answer was larger than 10 MB/);
  expect(JSON.stringify(h.mock.requests().at(-1)!.body.messages).length).toBeLessThan(100_000);
  await h.bundle.connection.sendRequest("mcp/clientConfigure", { servers: {} });
}, 90_000);

it("a configured MCP server that never answers fails to connect in time, a call never answered times out; endless stderr is reported bounded, as data", async () => {
  const h = await hostileBundle({
    steps: [
      { content: [{ type: "tool_use", name: "mcp__hostile__hang", input: {} }] },
      { content: [{ type: "text", text: "2: {{last_tool_result}}" }] },
      { content: [{ type: "tool_use", name: "mcp__spew__die", input: {} }] },
      { content: [{ type: "text", text: "done" }] },
    ],
  }, 6_000);
  const started = Date.now();
  const conf = await h.bundle.connection.sendRequest<any>("mcp/clientConfigure", {
    servers: {
      silent: { command: process.execPath, args: [HOSTILE, "silent"] },
      spew: { command: process.execPath, args: [HOSTILE, "stderr"] },
      hostile: { command: process.execPath, args: [HOSTILE, "names"] },
    },
    levels: { spew: "safe", hostile: "safe" },
  });
  expect(Date.now() - started).toBeLessThan(40_000);
  expect(conf.servers[0]).toEqual({ name: "silent", ok: false, tools: [], error: expect.stringMatching(/MCP server silent could not start: .*(timed out|timeout)/i) });
  expect(conf.servers[1]).toMatchObject({ name: "spew", ok: true, tools: ["mcp__spew__die"] });
  const hanging = Date.now();
  const t2 = await turn(h.bundle, undefined, "hang");
  expect(t2.text).toMatch(/^2: Error: mcp__hostile__hang timed out after 6000 ms/);
  expect(Date.now() - hanging).toBeLessThan(20_000);
  const t = await turn(h.bundle, t2.conversationId, "die");
  expect(t.text).toBe("done");
  await vi.waitFor(() => expect(h.statuses.some((s) => s.name === "spew" && s.status === "exited")).toBe(true), { timeout: 10_000 });
  const exited = h.statuses.find((s) => s.name === "spew" && s.status === "exited");
  expect(exited.message.length).toBeLessThanOrEqual(600);
  expect(exited.message).not.toMatch(UNSAFE);
  expect(exited.message).toMatch(/^MCP server spew exited: /);
  // The server still answers.
  const again = await h.bundle.connection.sendRequest<any>("mcp/clientConfigure", { servers: {} });
  expect(again.servers).toEqual([]);
}, 90_000);

it("never starts an MCP tool while the answer streams, whatever level its server has: nothing says it only reads", async () => {
  const dir = mkdtempSync(join(tmpdir(), "agent-q-mcpe-"));
  const touched = join(dir, "touched.txt");
  // The touch call's block is complete; then the answer stalls before it ends, and is cancelled.
  const mock = await startMockLLM({
    script: { steps: [{ content: [{ type: "tool_use", name: "mcp__fixture__touch", input: { text: "early" } }, { type: "tool_use", name: "mcp__fixture__echo", input: { text: "x" } }], hang_after_chunks: 9 }] },
  });
  cleanups.push(() => mock.close());
  const bundle = startBundle(["--log-level", "warn"]);
  cleanups.push(() => bundle.kill());
  await bundle.connection.sendRequest("initialize", {
    clientInfo: { name: "mcp-client-test" },
    capabilities: { tools: false, image: false, approvals: false },
    configuration: { provider: "anthropic", baseUrl: mock.url, apiKey: "any-test-key", model: "claude-sonnet-4-6" },
  });
  const servers = { fixture: { command: process.execPath, args: [FIXTURE], env: { FIXTURE_TOUCH_FILE: touched } } };
  const conf = await bundle.connection.sendRequest<{ servers: { ok: boolean }[] }>("mcp/clientConfigure", { servers, levels: { fixture: "safe" } });
  expect(conf.servers[0]!.ok).toBe(true);
  const ended = turn(bundle, undefined, "touch");
  await vi.waitFor(() => expect(mock.requests()).toHaveLength(1), { timeout: 10_000 });
  await new Promise((r) => setTimeout(r, 1000));
  expect(existsSync(touched)).toBe(false);
  const [conversation] = (await bundle.connection.sendRequest<{ conversations: { conversationId: string }[] }>("conversation/list")).conversations;
  await bundle.connection.sendRequest("chat/cancel", { conversationId: conversation!.conversationId });
  expect((await ended).failed).toBeDefined();
  expect(existsSync(touched)).toBe(false);
  await bundle.connection.sendRequest("mcp/clientConfigure", { servers: {} });
}, 30_000);

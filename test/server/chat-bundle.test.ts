// The bundled server (dist/, plain node, no node_modules) and the mock LLM as separate processes,
// talking as Emacs will: Content-Length framed JSON-RPC over stdio, the mock started by its CLI.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { copyFileSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";

const ROOT = resolve(import.meta.dirname, "../..");
const children: ChildProcess[] = [];
let bundle: string;
let dir: string;

beforeAll(() => {
  const built = spawnSync(process.execPath, ["scripts/build.mjs"], { cwd: ROOT, encoding: "utf8" });
  expect(built.status, built.stderr).toBe(0);
  // A directory with no node_modules anywhere above it: the bundle must carry its dependencies.
  dir = mkdtempSync(join(tmpdir(), "agent-q-bundle-"));
  bundle = join(dir, "sly-agent-q-server.js");
  copyFileSync(join(ROOT, "dist/sly-agent-q-server.js"), bundle);
}, 60_000);

afterAll(() => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGTERM");
});

/** Starts the mock's CLI and reads its one line of JSON. */
async function startMockProcess(script: unknown): Promise<{ url: string; proc: ChildProcess }> {
  const file = join(dir, `script-${Date.now()}.json`);
  writeFileSync(file, JSON.stringify(script));
  const proc = spawn(process.execPath, [join(ROOT, "test/fixtures/mock-llm/cli.mjs"), "--script", file], { stdio: ["pipe", "pipe", "inherit"] });
  children.push(proc);
  const line = await new Promise<string>((res) => createInterface({ input: proc.stdout! }).once("line", res));
  const ready = JSON.parse(line) as { port: number; url: string };
  expect(ready.url).toBe(`http://127.0.0.1:${ready.port}`);
  return { url: ready.url, proc };
}

it("runs a tool-using turn in the bundled server against the mock CLI", async () => {
  const mock = await startMockProcess({
    steps: [
      { content: [{ type: "text", text: "Checking." }, { type: "tool_use", name: "nonexistent_tool", input: { x: 1 } }] },
      { content: [{ type: "text", text: "Result: {{last_tool_result}}" }] },
      { content: [{ type: "text", text: "Over OpenAI: {{last_user_text}}" }] },
    ],
  });
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(ANTHROPIC|OPENAI)_/.test(k)));
  const server = spawn(process.execPath, [bundle, "--stdio", "--log-level", "warn"], { cwd: dir, env, stdio: ["pipe", "pipe", "pipe"] });
  children.push(server);
  let stderr = "";
  server.stderr!.on("data", (d) => (stderr += d));
  const conn = createMessageConnection(new StreamMessageReader(server.stdout!), new StreamMessageWriter(server.stdin!));
  const notes: { method: string; params: any }[] = [];
  let finish: (v: unknown) => void;
  const finished = new Promise((r) => (finish = r));
  conn.onNotification((method: string, params: any) => {
    notes.push({ method, params });
    if (method === "chat/turnFinished" || method === "chat/turnFailed") finish(params);
  });
  conn.listen();
  const key = "sk-bundle-test-key-0123456789";
  await conn.sendRequest("initialize", { clientInfo: { name: "bundle-test" }, capabilities: { tools: false, image: false, approvals: false }, configuration: { provider: "anthropic", baseUrl: mock.url, apiKey: key, model: "claude-sonnet-4-6" } });
  const sent = await conn.sendRequest<any>("chat/send", { text: "go" });
  const end: any = await finished;
  expect(end).toMatchObject({ turnId: sent.turnId, stopReason: "end_turn", steps: 1 });
  expect(end.text).toMatch(/^Result: Error: Unknown tool "nonexistent_tool"/);
  expect(notes.map((n) => n.method)).toContain("chat/toolCall");
  const recorded = (await (await fetch(`${mock.url}/_requests`)).json()) as any[];
  expect(recorded).toHaveLength(2);
  expect(recorded.every((r) => r.status === 200)).toBe(true);

  // The OpenAI SDK is in the bundle too: the same conversation goes on over the other wire format.
  await conn.sendRequest("configuration/change", { configuration: { provider: "openai", baseUrl: `${mock.url}/v1`, model: "gpt-4.1" } });
  const done2 = new Promise<any>((r) => conn.onNotification("chat/turnFinished", r));
  await conn.sendRequest<any>("chat/send", { conversationId: sent.conversationId, text: "and now?" });
  expect(await done2).toMatchObject({ text: "Over OpenAI: and now?", model: "gpt-4.1" });
  expect(stderr).not.toContain(key);
  await conn.sendRequest("shutdown");
  const exited = new Promise((r) => server.once("exit", r));
  void conn.sendNotification("exit");
  expect(await exited).toBe(0);
  conn.dispose();

  // Closing the mock's stdin ends it (how Emacs or a test harness stops it).
  const mockExit = new Promise((r) => mock.proc.once("exit", r));
  mock.proc.stdin!.end();
  expect(await mockExit).toBe(0);
}, 30_000);

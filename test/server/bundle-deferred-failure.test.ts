// The bundle's deferred program (the providers' SDKs, the MCP SDK, Ajv: scripts/build.mjs) failing to
// load, injected by a --require preload that makes its decompression throw once: what the chat turn,
// mcp/start and the --mcp-stdio shim say. Nothing was sent anywhere, so none may blame the provider.
// The real bundle, the mock LLM's CLI on loopback.

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BUNDLE, startBundle } from "./stdio-client.js";

const ROOT = resolve(import.meta.dirname, "../..");
const LOAD_FAILED = /^The server's bundled packages \(the providers' SDKs, the MCP SDK, Ajv\) could not be loaded: injected: the deferred program's decompression failed\./;
let dir: string;
let preload: string;
const children: ChildProcess[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "agent-q-deferred-failure-"));
  preload = join(dir, "decompress-fails-once.cjs");
  writeFileSync(
    preload,
    `const zlib = require("node:zlib");
const decompress = zlib.brotliDecompressSync;
let failed = false;
zlib.brotliDecompressSync = function (...args) {
  if (!failed) { failed = true; throw new Error("injected: the deferred program's decompression failed"); }
  return decompress.apply(this, args);
};
`,
  );
});

afterAll(() => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

/** The mock LLM's CLI with SCRIPT; its URL. */
async function startMock(script: unknown): Promise<string> {
  const file = join(dir, `script-${Date.now()}.json`);
  writeFileSync(file, JSON.stringify(script));
  const proc = spawn(process.execPath, [join(ROOT, "test/fixtures/mock-llm/cli.mjs"), "--script", file], { stdio: ["pipe", "pipe", "inherit"] });
  children.push(proc);
  const line = await new Promise<string>((res) => createInterface({ input: proc.stdout! }).once("line", res));
  return (JSON.parse(line) as { url: string }).url;
}

/** Env for a start under the preload, with a cache directory of its own. */
function faulted(): NodeJS.ProcessEnv {
  return { NODE_OPTIONS: `--require ${preload}`, XDG_CACHE_HOME: mkdtempSync(join(dir, "xdg-")) };
}

describe("the bundled packages failing to load", () => {
  it("fail the chat turn with what failed and that nothing was sent, and the next turn loads them", async () => {
    const url = await startMock({ steps: [{ content: [{ type: "text", text: "Loaded after all." }] }] });
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(ANTHROPIC|OPENAI)_/.test(k)));
    const server = startBundle(["--stdio", "--log-level", "warn"], { ...env, ...faulted() });
    try {
      const ends: { method: string; params: { message?: string; text?: string } }[] = [];
      let ended: () => void = () => undefined;
      for (const method of ["chat/turnFinished", "chat/turnFailed"]) server.connection.onNotification(method, (params: { message?: string; text?: string }) => (ends.push({ method, params }), ended()));
      const nextEnd = () => new Promise<void>((r) => (ended = r));
      await server.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: false, image: false, approvals: false }, configuration: { provider: "anthropic", baseUrl: url, apiKey: "sk-test-0123456789", model: "claude-sonnet-4-6" } });
      let end = nextEnd();
      const sent = await server.connection.sendRequest<{ conversationId: string }>("chat/send", { text: "go" });
      await end;
      expect(ends[0]!.method).toBe("chat/turnFailed");
      const message = ends[0]!.params.message!;
      expect(message).toMatch(LOAD_FAILED);
      expect(message).toContain(`Nothing was sent to anthropic (${url}).`);
      expect(message).not.toMatch(/The request to|failed: fault|Could not reach/);
      // The mock saw nothing.
      expect(await (await fetch(`${url}/_requests`)).json()).toEqual([]);
      end = nextEnd();
      await server.connection.sendRequest("chat/send", { conversationId: sent.conversationId, text: "again" });
      await end;
      expect(ends[1]).toMatchObject({ method: "chat/turnFinished", params: { text: "Loaded after all." } });
    } finally {
      server.kill();
    }
  }, 60_000);

  it("fail mcp/start with what failed", async () => {
    const server = startBundle(["--stdio", "--log-level", "error"], faulted());
    try {
      await server.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true }, configuration: {} });
      const err = await server.connection.sendRequest("mcp/start", { stateFile: join(dir, "state-unused.json") }).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err?.message).toMatch(/^mcp\/start failed: The server's bundled packages \(the providers' SDKs, the MCP SDK, Ajv\) could not be loaded: injected: /);
    } finally {
      server.kill();
    }
  }, 60_000);

  it("stop the --mcp-stdio shim with what failed", async () => {
    const stateFile = join(dir, "state", "mcp.json");
    const server = startBundle(["--stdio", "--log-level", "error"], { XDG_CACHE_HOME: mkdtempSync(join(dir, "xdg-")) });
    try {
      await server.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true }, configuration: {} });
      await server.connection.sendRequest("mcp/start", { stateFile });
      const shim = spawn(process.execPath, [BUNDLE, "--mcp-stdio", "--mcp-state", stateFile], { env: { ...process.env, ...faulted() }, stdio: ["pipe", "pipe", "pipe"] });
      children.push(shim);
      let stderr = "";
      shim.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      const code = await new Promise<number | null>((r) => shim.on("exit", r));
      expect(code).toBe(1);
      expect(stderr).toMatch(/^sly-agent-q --mcp-stdio: The server's bundled packages \(the providers' SDKs, the MCP SDK, Ajv\) could not be loaded: injected: /);
    } finally {
      server.kill();
    }
  }, 60_000);
});

// Files the server reads on its own (the project's instructions) are confined like the file tools:
// a cloned repository that plants them as links to /proc/self/environ, to a file outside the
// project or to a FIFO sends nothing of them to the provider, and the user is told once.
// The real bundle over stdio, the mock LLM as a separate process, this test as the Emacs side.

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { startBundle } from "../server/stdio-client.js";
import { Processes } from "./processes.js";

const processes = new Processes();
afterAll(() => processes.end());

it("sends nothing of planted instruction links (environ, a file outside, a FIFO) and says so once", async () => {
  // A name no redaction rule knows: were the environment read, this value would go out as it is.
  const planted = "planted-environment-value-5c1e7";
  const outsideText = "OUTSIDE-THE-PROJECT-5c1e7";
  const base = mkdtempSync(join(tmpdir(), "agent-q-planted-"));
  const outside = join(base, "outside.md");
  writeFileSync(outside, outsideText);
  const fifo = join(base, "a-fifo");
  execFileSync("mkfifo", [fifo]);
  const root = (name: string) => {
    const dir = join(base, name);
    mkdirSync(dir);
    return dir;
  };
  const environRoot = root("environ");
  symlinkSync("/proc/self/environ", join(environRoot, "AGENT-Q.md"));
  const outsideRoot = root("outside");
  symlinkSync(outside, join(outsideRoot, "AGENTS.md"));
  const fifoRoot = root("fifo");
  symlinkSync(fifo, join(fifoRoot, "AGENT-Q.md"));
  execFileSync("mkfifo", [join(fifoRoot, "AGENTS.md")]);
  const goodRoot = root("good");
  writeFileSync(join(goodRoot, "AGENTS.md"), "Use tabs. GOOD-INSTRUCTIONS");

  const roots = [environRoot, outsideRoot, fifoRoot, environRoot, goodRoot];
  const url = await processes.mock({ steps: roots.map(() => ({ content: [{ type: "text", text: "ok" }] })) });
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(ANTHROPIC|OPENAI)_/.test(k)));
  const b = startBundle(["--stdio", "--log-level", "debug"], { ...clean, ANTHROPIC_API_KEY: "sk-ant-planted-test-key-0000", PLANTED_VALUE: planted });
  processes.keep(b);
  const notes: { method: string; params: any }[] = [];
  let finish: ((p: any) => void) | undefined;
  b.connection.onNotification((method: string, params: any) => {
    notes.push({ method, params });
    if (method === "chat/turnFinished" || method === "chat/turnFailed") finish?.({ method, ...params });
  });
  await b.connection.sendRequest("initialize", {
    clientInfo: { name: "security" },
    capabilities: { tools: true, image: true, approvals: false },
    configuration: { provider: "anthropic", baseUrl: url, model: "claude-sonnet-4-6" },
  });
  const { conversationId } = (await b.connection.sendRequest("conversation/new", {})) as { conversationId: string };
  for (const projectRoot of roots) {
    const ended = new Promise<any>((r) => (finish = r));
    await b.connection.sendRequest("chat/send", { conversationId, text: "hello", context: { projectRoot } });
    expect((await ended).method).toBe("chat/turnFinished");
  }
  const requests = ((await (await fetch(`${url}/_requests`)).json()) as { body: { system?: unknown } }[]).map((r) => JSON.stringify(r.body));
  expect(requests).toHaveLength(roots.length);
  for (const r of requests) {
    for (const leak of [planted, outsideText, "PATH="]) expect(r.includes(leak), `a request holds ${leak}`).toBe(false);
  }
  expect(requests[4]).toContain("GOOD-INSTRUCTIONS");
  const said = notes.filter((n) => n.method === "chat/notice").map((n) => n.params.text as string);
  // The environ root twice, said once; the FIFO root's two files each.
  expect(said).toEqual([
    "AGENT-Q.md was not read: it leads into a system tree (/proc, /sys or /dev).",
    "AGENTS.md was not read: it leads outside the project root.",
    "AGENT-Q.md was not read: it leads outside the project root.",
    "AGENTS.md was not read: it is not a regular file.",
    "Project instructions sent to the model: AGENTS.md, 27 bytes. M-x sly-agent-q-show-system-prompt shows what the model is told.",
  ]);
  expect(JSON.stringify(notes) + b.stderr()).not.toContain(planted);
}, 60_000);

it("reads no MCP servers file that leads to /proc or a FIFO, and quotes none of it", async () => {
  const planted = "planted-environment-value-9a2b4";
  const base = mkdtempSync(join(tmpdir(), "agent-q-planted-mcp-"));
  const environ = join(base, "environ.mcp.json");
  symlinkSync("/proc/self/environ", environ);
  const fifo = join(base, "fifo.mcp.json");
  execFileSync("mkfifo", [fifo]);
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(ANTHROPIC|OPENAI)_/.test(k)));
  // First in the environment, where a JSON parser's error would quote it.
  const b = startBundle(["--stdio", "--log-level", "debug"], { PLANTED_VALUE: planted, ...clean, ANTHROPIC_API_KEY: "sk-ant-planted-test-key-0000" });
  processes.keep(b);
  const notes: { method: string; params: any }[] = [];
  b.connection.onNotification((method: string, params: any) => {
    notes.push({ method, params });
  });
  await b.connection.sendRequest("initialize", { clientInfo: { name: "security" }, capabilities: { tools: true, image: true, approvals: false }, configuration: {} });
  const result = (await b.connection.sendRequest("mcp/clientConfigure", { files: [environ, fifo] })) as { servers: { name: string; ok: boolean; error?: string }[] };
  expect(result.servers.map((s) => [s.ok, s.error])).toEqual([
    [false, `cannot read MCP servers from ${environ}: it leads into a system tree (/proc, /sys or /dev)`],
    [false, `cannot read MCP servers from ${fifo}: it is not a regular file`],
  ]);
  expect(JSON.stringify(notes) + b.stderr()).not.toContain(planted);
}, 30_000);

it("sends no instruction file that is a link to a file the file tools refuse as holding credentials (.authinfo, .netrc, .ssh/), and says so", async () => {
  const { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { readInstructions } = await import("../../server/agent/system-prompt.js");
  const root = mkdtempSync(join(tmpdir(), "agent-q-private-"));
  try {
    writeFileSync(join(root, ".authinfo"), "machine api.example.com login me password hunter2-secret\n");
    writeFileSync(join(root, ".netrc"), "machine github.com login me password ghp_secretToken123\n");
    mkdirSync(join(root, ".ssh"));
    writeFileSync(join(root, ".ssh", "notes"), "ssh-secret-passphrase\n");
    symlinkSync(".authinfo", join(root, "AGENT-Q.md"));
    symlinkSync(".netrc", join(root, "AGENTS.md"));
    const refused: string[] = [];
    expect(readInstructions(root, (m) => refused.push(m))).toBeUndefined();
    expect(refused).toEqual(["AGENT-Q.md was not read: it is a link to .authinfo, a file holding credentials.", "AGENTS.md was not read: it is a link to .netrc, a file holding credentials."]);
    rmSync(join(root, "AGENT-Q.md"));
    rmSync(join(root, "AGENTS.md"));
    symlinkSync(".ssh/notes", join(root, "AGENT-Q.md"));
    expect(readInstructions(root)?.text ?? "").not.toMatch(/secret/);
    // A link to a plain file of the project is read.
    rmSync(join(root, "AGENT-Q.md"));
    writeFileSync(join(root, "guide.md"), "Use tabs.\n");
    symlinkSync("guide.md", join(root, "AGENT-Q.md"));
    expect(readInstructions(root)?.text).toBe("Use tabs.");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

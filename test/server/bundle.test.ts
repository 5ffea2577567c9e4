// The real bundle, spawned as a child process and spoken to over stdio with Content-Length framing.

import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { InitializeResult, ToolsListResult } from "../../server/protocol.js";
import { BUNDLE, frame, startBundle, type BundleProcess } from "./stdio-client.js";
import { sleep } from "./helpers.js";

let proc: BundleProcess | undefined;
afterEach(() => {
  proc?.kill();
  proc = undefined;
});

const initParams = { clientInfo: { name: "bundle-test" }, capabilities: { tools: true, image: true, approvals: true } };

describe("the bundled server", () => {
  it("is one file that runs without node_modules", () => {
    expect(statSync(BUNDLE).size).toBeGreaterThan(10_000);
    // Copied alone into an empty directory, far from any node_modules.
    const dir = mkdtempSync(join(tmpdir(), "sly-agent-q-bundle-"));
    const alone = join(dir, "server.js");
    copyFileSync(BUNDLE, alone);
    const version = execFileSync(process.execPath, [alone, "--version"], { cwd: dir, env: { PATH: process.env.PATH } }).toString().trim();
    expect(version).toMatch(/^\d+\.\d+\.\d+$/);
    const help = execFileSync(process.execPath, [alone, "--help"], { cwd: dir }).toString();
    rmSync(dir, { recursive: true });
    expect(help).toMatch(/Content-Length/);
    expect(help).toMatch(/--log-level/);
  });

  it("is built in a checkout that has no dist/ yet (a fresh clone)", () => {
    // The sources, the build script and the dependencies of this checkout, linked into a directory
    // without dist/: the build makes it and writes a bundle that runs.
    const root = join(__dirname, "..", "..");
    const dir = mkdtempSync(join(tmpdir(), "sly-agent-q-fresh-"));
    try {
      for (const name of ["server", "scripts", "node_modules", "package.json"]) symlinkSync(join(root, name), join(dir, name));
      execFileSync(process.execPath, ["scripts/build.mjs"], { cwd: dir, stdio: "pipe" });
      const built = join(dir, "dist", "sly-agent-q-server.js");
      // The bundle alone: the file written aside (named by the build's process) was renamed over it.
      expect(readdirSync(join(dir, "dist"))).toEqual(["sly-agent-q-server.js"]);
      const version = execFileSync(process.execPath, [built, "--version"], { cwd: dir, env: { PATH: process.env.PATH } }).toString().trim();
      expect(version).toMatch(/^\d+\.\d+\.\d+$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("rejects an unknown option with a usage message", () => {
    expect(() => execFileSync(process.execPath, [BUNDLE, "--frobnicate"], { stdio: "pipe" })).toThrow(/unknown option --frobnicate/);
  });

  it("initializes, lists tools and shuts down cleanly over stdio", async () => {
    proc = startBundle();
    const init = await proc.connection.sendRequest<InitializeResult>("initialize", initParams);
    expect(init.serverInfo.name).toBe("sly-agent-q");
    // The version handshake: the Elisp compares this with the version it needs (package.json's).
    expect(init.serverInfo.version).toBe(JSON.parse(readFileSync("package.json", "utf8")).version);
    expect(init.tools).toContain("describe_symbol");
    const list = await proc.connection.sendRequest<ToolsListResult>("tools/list", {});
    expect(list.tools.length).toBe(init.tools.length);
    await proc.connection.sendRequest("shutdown", null);
    await proc.connection.sendNotification("exit");
    expect(await proc.exited).toBe(0);
  });

  it("writes each message in one piece, its header and its body together", async () => {
    // Emacs waits on the pipe: a header written on its own woke it for nothing, twice per message.
    const dir = mkdtempSync(join(tmpdir(), "sly-agent-q-writes-"));
    const preload = join(dir, "log-writes.cjs");
    writeFileSync(
      preload,
      `const write = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, ...rest) => {
  process.stderr.write("WRITE " + Buffer.from(chunk).toString("base64") + "\\n");
  return write(chunk, ...rest);
};\n`,
    );
    try {
      proc = startBundle([], { NODE_OPTIONS: `--require ${preload}` });
      await proc.connection.sendRequest("initialize", initParams);
      await proc.connection.sendRequest("tools/list", {});
      // An answer with multibyte text in it: the length is counted in bytes.
      const answer = await proc.connection.sendRequest<{ content: string }>("tools/call", { name: "λ_ünknown", arguments: {} });
      expect(answer.content).toContain("λ_ünknown");
      const writes = proc
        .stderr()
        .split("\n")
        .filter((line) => line.startsWith("WRITE "))
        .map((line) => Buffer.from(line.slice(6), "base64"));
      expect(writes.length).toBeGreaterThanOrEqual(3);
      for (const chunk of writes) {
        const header = /^Content-Length: (\d+)\r\n\r\n/.exec(chunk.toString("latin1"));
        expect(header, `a write that is not a whole message: ${JSON.stringify(chunk.toString("utf8").slice(0, 60))}`).not.toBeNull();
        const body = chunk.subarray(header![0].length);
        expect(body.length).toBe(Number(header![1]));
        expect(() => JSON.parse(body.toString("utf8"))).not.toThrow();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("answers malformed messages with JSON-RPC errors and keeps serving", async () => {
    proc = startBundle();
    await proc.connection.sendRequest("initialize", initParams);
    // A body that is not JSON, a JSON value that is no message, and a request with a bad id shape.
    proc.raw(frame("{this is not json"));
    proc.raw(frame("[1,2,3]"));
    proc.raw(frame('{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}'));
    proc.raw(frame('{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"nope","arguments":"{bad"}}'));
    await sleep(100);
    const list = await proc.connection.sendRequest<ToolsListResult>("tools/list", {});
    expect(list.tools.length).toBeGreaterThan(10);
    expect(proc.child.exitCode).toBeNull();
  });

  it("answers each malformed message with the JSON-RPC error the spec names", async () => {
    const child = spawn(process.execPath, [BUNDLE], { stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    // Only whole frames: a body read in part is not parsed before the rest of it comes.
    const responses = () => {
      const rs: { id: unknown; error?: { code: number; message: string }; result?: unknown }[] = [];
      let rest = Buffer.from(out);
      for (;;) {
        const m = /^Content-Length: (\d+)\r\n\r\n/.exec(rest.toString("latin1"));
        if (!m) break;
        const start = m[0].length;
        const end = start + Number(m[1]);
        if (rest.length < end) break;
        rs.push(JSON.parse(rest.subarray(start, end).toString("utf8")) as (typeof rs)[number]);
        rest = rest.subarray(end);
      }
      return rs;
    };
    try {
      child.stdin.write(frame("{bad json"));
      child.stdin.write(frame("[1,2]"));
      child.stdin.write(frame('{"jsonrpc":"2.0","id":5}'));
      child.stdin.write(frame('{"jsonrpc":"2.0","id":6,"method":7}'));
      child.stdin.write(frame('{"jsonrpc":"2.0","id":7,"result":"a stray response"}'));
      child.stdin.write(frame('{"jsonrpc":"2.0","id":8,"method":"shutdown"}'));
      // Waits for the last answer, not a fixed second: a server started on a loaded machine can
      // take longer than that to read its first message (the test failed then with "expected []").
      for (let i = 0; i < 500 && !responses().some((r) => r.id === 8); i++) await sleep(20);
      const rs = responses();
      expect(rs.map((r) => [r.id, r.error?.code ?? "ok"])).toEqual([
        [null, -32700],
        [null, -32600],
        [5, -32600],
        [6, -32600],
        [8, "ok"],
      ]);
      expect(rs[1]!.error!.message).toMatch(/batches are not supported/);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("never prints an API key, and logs go to stderr only", async () => {
    const secret = "sk-ant-test-SECRET-0123456789";
    proc = startBundle(["--log-level", "debug"]);
    // No Emacs capabilities: eval_form fails at once, after its audit line (which logs the arguments).
    await proc.connection.sendRequest("initialize", { clientInfo: { name: "bundle-test" }, configuration: { apiKey: secret, logLevel: "debug" } });
    const r = await proc.connection.sendRequest<{ success: boolean; error: string }>("tools/call", { name: "eval_form", arguments: { form: `(print "${secret}")` } });
    expect(r.error).toMatch(/No Emacs client/);
    await sleep(50);
    expect(proc.stderr()).toMatch(/initialized by bundle-test/);
    expect(proc.stderr()).toMatch(/audit cautious eval_form/);
    expect(proc.stderr()).not.toContain(secret);
  });

  it("exits when its stdin closes", async () => {
    proc = startBundle();
    await proc.connection.sendRequest("initialize", initParams);
    proc.child.stdin.end();
    expect(await proc.exited).not.toBeNull();
  });
});

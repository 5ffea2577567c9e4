// The bundle's loader (scripts/bundle-loader.js): the server compiled with V8's code cache, kept in
// $XDG_CACHE_HOME/sly-agent-q. The real bundle, copied alone into a directory (run as CommonJS, as the
// Emacs package runs it) or beside a package.json of "type": "module" (as npm and a checkout run it).

import { spawn, spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";
import { BUNDLE } from "./stdio-client.js";

let root: string;
let alone: string;
let asModule: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "agent-q-cache-"));
  alone = join(root, "alone", "sly-agent-q-server.js");
  asModule = join(root, "module", "sly-agent-q-server.js");
  mkdirSync(join(root, "alone"));
  mkdirSync(join(root, "module"));
  copyFileSync(BUNDLE, alone);
  copyFileSync(BUNDLE, asModule);
  writeFileSync(join(root, "module", "package.json"), JSON.stringify({ type: "module" }));
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

interface Start {
  tools: number;
  code: number | null;
  stderr: string;
}

/** Starts BUNDLE with ENV, answers initialize, shuts it down the way Emacs does; what it said. */
async function start(bundle: string, env: NodeJS.ProcessEnv, nodeArgs: string[] = []): Promise<Start> {
  const child = spawn(process.execPath, [...nodeArgs, bundle, "--stdio", "--log-level", "warn"], { cwd: root, env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
  connection.listen();
  const result = (await connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true }, configuration: {} })) as { tools: unknown[] };
  await connection.sendRequest("shutdown", null);
  await connection.sendNotification("exit", null);
  const code = await exited;
  connection.dispose();
  return { tools: result.tools.length, code, stderr };
}

/** The code caches in the cache directory CACHE. */
function caches(cache: string): string[] {
  const dir = join(cache, "sly-agent-q");
  return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".v8cache")).map((f) => join(dir, f)) : [];
}

describe("the code cache", () => {
  it("is written by the first start, readable by the user alone, and used as it is by the next", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const first = await start(alone, { XDG_CACHE_HOME: cache });
    expect(first).toMatchObject({ code: 0, stderr: "" });
    expect(first.tools).toBeGreaterThan(40);
    const [file] = caches(cache);
    expect(caches(cache)).toHaveLength(1);
    expect(statSync(file!).mode & 0o777).toBe(0o600);
    expect(statSync(join(cache, "sly-agent-q")).mode & 0o077).toBe(0);
    expect(statSync(file!).size).toBeGreaterThan(100_000);
    const before = statSync(file!);
    // V8 took the cache: the loader writes it again only when it was missing or refused.
    const second = await start(alone, { XDG_CACHE_HOME: cache });
    expect(second).toEqual(first);
    const after = statSync(file!);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
    // The same program run as an ES module is the same program: the same cache serves it.
    expect(await start(asModule, { XDG_CACHE_HOME: cache })).toEqual(first);
    expect(statSync(file!).ino).toBe(before.ino);
  }, 60_000);

  it("is replaced when damaged, and the server starts from a damaged or cut one all the same", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    await start(alone, { XDG_CACHE_HOME: cache });
    const [file] = caches(cache);
    const good = readFileSync(file!);
    const damaged = [Buffer.alloc(good.length, 0x5a), good.subarray(0, good.length >> 1), Buffer.alloc(0)];
    for (const bad of damaged) {
      writeFileSync(file!, bad);
      const s = await start(alone, { XDG_CACHE_HOME: cache });
      expect(s).toMatchObject({ code: 0, stderr: "" });
      expect(s.tools).toBeGreaterThan(40);
      expect(readFileSync(file!).length).toBeGreaterThan(100_000);
      expect(readFileSync(file!).equals(bad)).toBe(false);
    }
    // Nothing half-written is left beside it.
    expect(readdirSync(join(cache, "sly-agent-q"))).toEqual([file!.split("/").pop()]);
  }, 90_000);

  it("costs nothing but itself when the cache directory cannot be written", async () => {
    const cache = join(root, "not-a-directory");
    writeFileSync(cache, "a file where the cache directory would be");
    const s = await start(alone, { XDG_CACHE_HOME: cache });
    expect(s).toMatchObject({ code: 0, stderr: "" });
    expect(s.tools).toBeGreaterThan(40);
  }, 60_000);

  it("is written by a start that answered its first request, not by a run that printed its version", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const run = spawnSync(process.execPath, [alone, "--version"], { env: { ...process.env, XDG_CACHE_HOME: cache }, encoding: "utf8" });
    expect(run.stdout).toMatch(/^\d+\.\d+\.\d+/);
    expect(caches(cache)).toEqual([]);
    await start(alone, { XDG_CACHE_HOME: cache });
    expect(caches(cache)).toHaveLength(1);
  }, 30_000);

  it("is used on a Node without process.getBuiltinModule (before 20.16), as CommonJS and as an ES module", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const older = join(root, "older-node.cjs");
    writeFileSync(older, "delete process.getBuiltinModule;\n");
    const first = await start(alone, { XDG_CACHE_HOME: cache }, ["--require", older]);
    expect(first).toMatchObject({ code: 0, stderr: "" });
    expect(first.tools).toBeGreaterThan(40);
    const [file] = caches(cache);
    const before = statSync(file!);
    expect(await start(asModule, { XDG_CACHE_HOME: cache }, ["--require", older])).toEqual(first);
    expect(statSync(file!).ino).toBe(before.ino);
  }, 60_000);

  it("is taken only from a directory and a file no one else may write", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    await start(alone, { XDG_CACHE_HOME: cache });
    const [file] = caches(cache);
    // A file others may write (someone could have put code there): not run, replaced by one of ours.
    chmodSync(file!, 0o666);
    const planted = statSync(file!);
    await start(alone, { XDG_CACHE_HOME: cache });
    expect(statSync(file!).ino).not.toBe(planted.ino);
    expect(statSync(file!).mode & 0o777).toBe(0o600);
    // A directory others may write: neither read nor written (a damaged cache there stays as it is).
    chmodSync(join(cache, "sly-agent-q"), 0o777);
    writeFileSync(file!, "damaged");
    chmodSync(file!, 0o600);
    const s = await start(alone, { XDG_CACHE_HOME: cache });
    expect(s).toMatchObject({ code: 0, stderr: "" });
    expect(readFileSync(file!, "utf8")).toBe("damaged");
  }, 60_000);

  it("is neither read nor written under NODE_DISABLE_COMPILE_CACHE", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const s = await start(alone, { XDG_CACHE_HOME: cache, NODE_DISABLE_COMPILE_CACHE: "1" });
    expect(s).toMatchObject({ code: 0, stderr: "" });
    expect(existsSync(join(cache, "sly-agent-q"))).toBe(false);
  }, 30_000);

  it("removes an earlier version's cache a week old and leaves everything else in the directory alone", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const dir = join(cache, "sly-agent-q");
    // What the Lisp side keeps there (lisp-cl/load.lisp's compiled helpers), and an older server's cache.
    mkdirSync(join(dir, "sbcl-2.2.9-x86-64-ABC"), { recursive: true });
    writeFileSync(join(dir, "sbcl-2.2.9-x86-64-ABC", "helpers.fasl"), "fasl");
    writeFileSync(join(dir, "notes.v8cache.txt"), "not a cache");
    // Another version's cache goes once it is a week old; one in use beside this one is kept.
    const old = join(dir, "server-0123456789abcdef-11_3_244_8_node_38-x64-stdio.v8cache");
    const recent = join(dir, "server-fedcba9876543210-11_3_244_8_node_38-x64-stdio.v8cache");
    writeFileSync(old, "an older version's");
    writeFileSync(recent, "a version used beside this one");
    const eightDays = (Date.now() - 8 * 24 * 3600 * 1000) / 1000;
    utimesSync(old, eightDays, eightDays);
    await start(alone, { XDG_CACHE_HOME: cache });
    expect(existsSync(old)).toBe(false);
    expect(readFileSync(recent, "utf8")).toBe("a version used beside this one");
    expect(caches(cache)).toHaveLength(2);
    expect(readFileSync(join(dir, "sbcl-2.2.9-x86-64-ABC", "helpers.fasl"), "utf8")).toBe("fasl");
    expect(readFileSync(join(dir, "notes.v8cache.txt"), "utf8")).toBe("not a cache");
  }, 30_000);
});

/** Starts BUNDLE with ENV, answers initialize, then serves MCP (the MCP SDK: the deferred program, scripts/build.mjs) and ends; how it went. */
async function startUsingDeferred(bundle: string, env: NodeJS.ProcessEnv): Promise<{ url: string; code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [bundle, "--stdio", "--log-level", "warn"], { cwd: root, env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
  connection.listen();
  await connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true }, configuration: {} });
  const { url } = (await connection.sendRequest("mcp/start", { stateFile: join(root, `mcp-deferred-${process.pid}.json`) })) as { url: string };
  // The deferred program's cache is done right after the request that first needed it.
  await new Promise((r) => setTimeout(r, 200));
  await connection.sendRequest("mcp/stop", null);
  await connection.sendRequest("shutdown", null);
  await connection.sendNotification("exit", null);
  const code = await exited;
  connection.dispose();
  return { url, code, stderr };
}

describe("the code cache of the deferred program (the SDKs a start does not load)", () => {
  it("is not decompressed by a start, nor is node:crypto loaded (each waits for the first request that needs it)", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const listed = join(root, `modules-${process.pid}.json`);
    // Node's own list of the built-in modules it loaded, as the server exits after answering initialize.
    const preload = join(root, "list-modules.cjs");
    writeFileSync(preload, `process.on("exit", () => require("node:fs").writeFileSync(${JSON.stringify(listed)}, JSON.stringify(process.moduleLoadList)));\n`);
    for (let i = 0; i < 2; i++) expect(await start(alone, { XDG_CACHE_HOME: cache }, ["--require", preload])).toMatchObject({ code: 0, stderr: "" });
    const loaded = JSON.parse(readFileSync(listed, "utf8")) as string[];
    expect(loaded).toContain("NativeModule net");
    expect(loaded.filter((m) => /^NativeModule (crypto|internal\/crypto\/hash|child_process|http)$/.test(m))).toEqual([]);
    expect(caches(cache).map((f) => f.endsWith("-stdio.v8cache"))).toEqual([true]);
  }, 60_000);

  it("is written by the first request that needs it, used by the next start, and replaced when damaged or after a crash", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    await start(alone, { XDG_CACHE_HOME: cache });
    expect(caches(cache)).toHaveLength(1);
    const first = await startUsingDeferred(alone, { XDG_CACHE_HOME: cache });
    expect(first).toMatchObject({ code: 0, stderr: "" });
    expect(first.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
    const file = caches(cache).find((f) => f.endsWith("-stdio-deferred.v8cache"));
    expect(caches(cache)).toHaveLength(2);
    expect(statSync(file!).mode & 0o777).toBe(0o600);
    expect(statSync(file!).size).toBeGreaterThan(50_000);
    const before = statSync(file!);
    expect(await startUsingDeferred(alone, { XDG_CACHE_HOME: cache })).toMatchObject({ code: 0, stderr: "" });
    const after = statSync(file!);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
    // Damaged: one byte of V8's data (the hash sees it), or cut short.
    const good = readFileSync(file!);
    const flipped = Buffer.from(good);
    flipped[good.length >> 1] = flipped[good.length >> 1]! ^ 0xff;
    for (const bad of [flipped, good.subarray(0, good.length >> 1)]) {
      writeFileSync(file!, bad, { mode: 0o600 });
      expect(await startUsingDeferred(alone, { XDG_CACHE_HOME: cache })).toMatchObject({ code: 0, stderr: "" });
      expect(readFileSync(file!).equals(bad)).toBe(false);
      expect(readFileSync(file!).length).toBeGreaterThan(50_000);
    }
    // The mark of a start that used it and died on the way: not used again, written afresh.
    const dayAgo = (Date.now() - 24 * 3600 * 1000) / 1000;
    utimesSync(file!, dayAgo, dayAgo);
    const trial = `${file}.${spawnSync(process.execPath, ["-e", ""]).pid}.trial`;
    writeFileSync(trial, "");
    expect(await startUsingDeferred(alone, { XDG_CACHE_HOME: cache })).toMatchObject({ code: 0, stderr: "" });
    expect(existsSync(trial)).toBe(false);
    expect(statSync(file!).mtimeMs).toBeGreaterThan(Date.now() - 3600 * 1000);
    expect(readdirSync(join(cache, "sly-agent-q")).sort()).toEqual(caches(cache).map((f) => f.split("/").pop()).sort());
  }, 120_000);
});

/** Starts BUNDLE in CWD with ENV; whether it answered initialize within 15 s, and how it ended (a start that may crash or hang). */
async function tryStart(bundle: string, env: NodeJS.ProcessEnv, cwd = root): Promise<{ ok: boolean; signal: string | null }> {
  const child = spawn(process.execPath, [bundle, "--stdio", "--log-level", "warn"], { cwd, env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "ignore"] });
  let signal: string | null = null;
  const exited = new Promise<void>((resolve) => child.on("exit", (_c, s) => ((signal = s), resolve())));
  const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
  connection.listen();
  const answered = connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true }, configuration: {} }).then(
    () => true,
    () => false,
  );
  const ok = await Promise.race([answered, exited.then(() => false), new Promise<boolean>((r) => setTimeout(() => r(false), 15_000))]);
  if (ok) {
    // As Emacs ends it: the cache is written after the answer, before the exit.
    await connection.sendRequest("shutdown", null).catch(() => undefined);
    void connection.sendNotification("exit", null).catch(() => undefined);
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
  }
  child.kill("SIGKILL");
  await exited;
  connection.dispose();
  return { ok, signal };
}

/** The name the server's cache has (written by a start into a cache directory of its own). */
async function cacheName(): Promise<string> {
  const probe = mkdtempSync(join(root, "probe-"));
  await start(alone, { XDG_CACHE_HOME: probe });
  return caches(probe)[0]!.split("/").pop()!;
}

/** V8's code cache of another program of the same length as the bundle's (V8 checks the length only), which writes "ran" to MARKER. */
function plantedCache(marker: string): Buffer {
  const script = `
    const fs = require("node:fs"), vm = require("node:vm");
    const text = fs.readFileSync(process.argv[1], "latin1");
    const mark = "/*" + "PROGRAM\\n";
    const real = text.slice(text.indexOf(mark) + mark.length, text.lastIndexOf("\\n*/"));
    let evil = "(function (exports, require, module, __filename, __dirname) {require('node:fs').writeFileSync(" + JSON.stringify(process.argv[2]) + ", 'ran');";
    evil += " ".repeat(real.length - evil.length - 3) + "\\n})";
    process.stdout.write(new vm.Script(evil, { filename: process.argv[1] }).createCachedData().toString("base64"));`;
  const r = spawnSync(process.execPath, ["-e", script, alone, marker], { encoding: "utf8", maxBuffer: 64 << 20 });
  expect(r.status, r.stderr).toBe(0);
  return Buffer.from(r.stdout, "base64");
}

describe("the code cache, damaged or attacked", () => {
  it("does not stop a start when one byte of it is damaged, and is replaced (V8 does not check a cache's data)", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    expect((await tryStart(alone, { XDG_CACHE_HOME: cache })).ok).toBe(true);
    const [file] = caches(cache);
    const good = readFileSync(file!);
    for (const offset of [24, 40, 64, 80, good.length >> 1, good.length - 14_000]) {
      const bad = Buffer.from(good);
      bad[offset] = bad[offset]! ^ 0xff;
      writeFileSync(file!, bad, { mode: 0o600 });
      const s = await tryStart(alone, { XDG_CACHE_HOME: cache });
      expect({ offset, ok: s.ok, signal: s.signal }).toEqual({ offset, ok: true, signal: null });
      expect(readFileSync(file!).equals(bad)).toBe(false);
    }
  }, 180_000);

  it("is not used again after a start that used it never finished (a crash the hash cannot see)", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    await start(alone, { XDG_CACHE_HOME: cache });
    const [file] = caches(cache);
    // Dated a day back: a cache written again is dated now (its inode number may come back).
    const dayAgo = (Date.now() - 24 * 3600 * 1000) / 1000;
    utimesSync(file!, dayAgo, dayAgo);
    // The mark of a start that used the cache and died on the way (its process is gone).
    const dead = spawnSync(process.execPath, ["-e", ""]).pid;
    const trial = `${file}.${dead}.trial`;
    writeFileSync(trial, "");
    expect((await tryStart(alone, { XDG_CACHE_HOME: cache })).ok).toBe(true);
    expect(existsSync(trial)).toBe(false);
    expect(statSync(file!).mtimeMs).toBeGreaterThan(Date.now() - 3600 * 1000);
    // A start that used it and finished leaves no mark behind, nor does a run that printed its version.
    await start(alone, { XDG_CACHE_HOME: cache });
    spawnSync(process.execPath, [alone, "--version"], { env: { ...process.env, XDG_CACHE_HOME: cache } });
    expect(readdirSync(join(cache, "sly-agent-q"))).toEqual([file!.split("/").pop()]);
  }, 90_000);

  it("is kept when a client kills the server right after its first answer (the start was done)", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    await start(alone, { XDG_CACHE_HOME: cache });
    const [file] = caches(cache);
    const before = statSync(file!);
    for (let i = 0; i < 3; i++) {
      const child = spawn(process.execPath, [alone, "--stdio"], { cwd: root, env: { ...process.env, XDG_CACHE_HOME: cache }, stdio: ["pipe", "pipe", "ignore"] });
      const exited = new Promise((r) => child.on("exit", r));
      const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
      connection.listen();
      await connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true }, configuration: {} });
      child.kill("SIGKILL");
      await exited;
      connection.dispose();
    }
    expect(readdirSync(join(cache, "sly-agent-q"))).toEqual([file!.split("/").pop()]);
    await start(alone, { XDG_CACHE_HOME: cache });
    const after = statSync(file!);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
  }, 60_000);

  it("of the MCP stdio shim is written when its client kills it as soon as tools/list is answered", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const stateFile = join(root, `mcp-${process.pid}.json`);
    // The server the shim forwards to (its own cache elsewhere), with its MCP server started.
    const child = spawn(process.execPath, [alone, "--stdio", "--log-level", "warn"], { cwd: root, env: { ...process.env, XDG_CACHE_HOME: mkdtempSync(join(root, "xdg-")) }, stdio: ["pipe", "pipe", "ignore"] });
    const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
    connection.listen();
    await connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true }, configuration: {} });
    await connection.sendRequest("mcp/start", { stateFile });
    try {
      // As Claude Code ends a session: the shim is killed the moment the answer is read.
      const shim = spawn(process.execPath, [alone, "--mcp-stdio", "--mcp-state", stateFile], { cwd: root, env: { ...process.env, XDG_CACHE_HOME: cache }, stdio: ["pipe", "pipe", "ignore"] });
      const exited = new Promise((r) => shim.on("exit", r));
      let out = "";
      const listed = new Promise<void>((resolve) =>
        shim.stdout.on("data", (d: Buffer) => {
          out += d.toString();
          if (out.includes('"id":2')) {
            shim.kill("SIGKILL");
            resolve();
          }
        }),
      );
      const send = (m: object) => shim.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", ...m })}\n`);
      send({ id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "test", version: "1" } } });
      send({ method: "notifications/initialized" });
      send({ id: 2, method: "tools/list", params: {} });
      await listed;
      await exited;
      expect(out).toContain('"name":"describe_symbol"');
      // The shim's cache and its deferred part's (the MCP SDK, which the shim's start needs).
      expect(caches(cache).map((f) => f.replace(/.*-x64-|.*-arm64-/, "")).sort()).toEqual(["mcp-stdio-deferred.v8cache", "mcp-stdio.v8cache"]);
    } finally {
      child.kill();
      connection.dispose();
    }
  }, 60_000);

  it("stops at most one start when damage passes the hash (a V8 bug): the next does not use it", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    await start(alone, { XDG_CACHE_HOME: cache });
    const [file] = caches(cache);
    const good = readFileSync(file!);
    // The file's layout (scripts/bundle-loader.js): MAGIC (8 bytes), CRC-32 of the name and data, data.
    expect(good.toString("latin1", 0, 8)).toBe("SAQV8C2\n");
    const name = file!.split("/").pop()!;
    // Offsets into V8's data (the header was 40 bytes long when these were found to crash V8).
    for (const offset of [80, 2000, good.length - 14_000]) {
      const data = Buffer.from(good.subarray(12));
      data[offset - 40] = data[offset - 40]! ^ 0xff;
      const hash = Buffer.alloc(4);
      hash.writeUInt32BE(crc32(data, crc32(name)));
      writeFileSync(file!, Buffer.concat([good.subarray(0, 8), hash, data]), { mode: 0o600 });
      await tryStart(alone, { XDG_CACHE_HOME: cache }); // crashes at 80 and near the end (SIGTRAP): V8 trusts the data
      const s = await tryStart(alone, { XDG_CACHE_HOME: cache });
      expect({ offset, ok: s.ok, signal: s.signal }).toEqual({ offset, ok: true, signal: null });
      expect((await tryStart(alone, { XDG_CACHE_HOME: cache })).ok).toBe(true);
    }
  }, 240_000);

  it("refuses a cache of another program of the same length, even a file of the user's in the user's directory", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const name = await cacheName();
    const marker = join(root, "ran-other-program");
    mkdirSync(join(cache, "sly-agent-q"), { mode: 0o700 });
    writeFileSync(join(cache, "sly-agent-q", name), plantedCache(marker), { mode: 0o600 });
    expect((await tryStart(alone, { XDG_CACHE_HOME: cache })).ok).toBe(true);
    expect(existsSync(marker)).toBe(false);
  }, 60_000);

  it("is not looked for relative to the working directory when HOME is empty", async () => {
    const project = mkdtempSync(join(root, "cloned-project-"));
    const marker = join(root, "ran-from-home");
    // What a repository could ship: .cache/sly-agent-q/<the cache's name>, checked out by the user.
    const name = await cacheName();
    mkdirSync(join(project, ".cache", "sly-agent-q"), { recursive: true });
    writeFileSync(join(project, ".cache", "sly-agent-q", name), plantedCache(marker), { mode: 0o644 });
    expect((await tryStart(alone, { HOME: "", XDG_CACHE_HOME: "" }, project)).ok).toBe(true);
    expect(existsSync(marker)).toBe(false);
  }, 60_000);

  it("is not read through a link to a directory of the user's that another user planted as the cache directory", async () => {
    if (process.getuid?.() !== 0) return; // needs chown to make the link another user's (CI runs as root)
    const shared = mkdtempSync(join(root, "shared-"));
    chmodSync(shared, 0o777); // XDG_CACHE_HOME on a directory others may write
    const marker = join(root, "ran-through-link");
    const name = await cacheName();
    // A directory of the user's holding a file of the user's with the attacker's content (a clone, a tarball).
    const clone = mkdtempSync(join(root, "clone-"));
    chmodSync(clone, 0o755);
    writeFileSync(join(clone, name), plantedCache(marker), { mode: 0o644 });
    symlinkSync(clone, join(shared, "sly-agent-q"));
    spawnSync("chown", ["-h", "12345:12345", join(shared, "sly-agent-q")]);
    expect((await tryStart(alone, { XDG_CACHE_HOME: shared })).ok).toBe(true);
    expect(existsSync(marker)).toBe(false);
  }, 60_000);

  it("is never written through a link another user put into a cache directory made after the start looked", async () => {
    if (process.getuid?.() !== 0) return; // plays two users: the victim (uid 23456) and the attacker (uid 12345)
    const shared = mkdtempSync(join(root, "sticky-"));
    chmodSync(shared, 0o1777); // like /tmp: XDG_CACHE_HOME or HOME=/tmp on a shared machine
    const home = mkdtempSync(join(root, "victim-"));
    chmodSync(root, 0o755);
    chmodSync(join(root, "alone"), 0o755);
    chmodSync(home, 0o755);
    const precious = join(home, ".bashrc");
    writeFileSync(precious, "export PATH=$PATH\n");
    spawnSync("chown", ["-R", "23456:23456", home]);
    const name = await cacheName();
    const child = spawn("setpriv", ["--reuid=23456", "--regid=23456", "--clear-groups", process.execPath, alone, "--stdio"], { env: { ...process.env, HOME: home, XDG_CACHE_HOME: shared }, stdio: ["pipe", "pipe", "ignore"] });
    const exited = new Promise((r) => child.on("exit", r));
    await new Promise((r) => setTimeout(r, 800)); // the loader has seen no sly-agent-q directory
    const dir = join(shared, "sly-agent-q");
    mkdirSync(dir, { mode: 0o777 });
    chmodSync(dir, 0o777);
    spawnSync("chown", ["12345:12345", dir]);
    // The temporary file's name as it was: the cache's, the server's pid, ".tmp".
    symlinkSync(precious, join(dir, `${name}.${child.pid}.tmp`));
    spawnSync("chown", ["-h", "12345:12345", join(dir, `${name}.${child.pid}.tmp`)]);
    const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
    connection.listen();
    await connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true }, configuration: {} });
    await new Promise((r) => setTimeout(r, 2_000));
    child.kill("SIGKILL");
    await exited;
    connection.dispose();
    expect(readFileSync(precious, "utf8")).toBe("export PATH=$PATH\n");
    expect(readdirSync(dir)).toEqual([`${name}.${child.pid}.tmp`]);
  }, 60_000);

  it("does not hang a start when a FIFO stands at its name, and is written in its place", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const name = await cacheName();
    mkdirSync(join(cache, "sly-agent-q"), { mode: 0o700 });
    const fifo = join(cache, "sly-agent-q", name);
    expect(spawnSync("mkfifo", ["-m", "600", fifo]).status).toBe(0);
    expect((await tryStart(alone, { XDG_CACHE_HOME: cache })).ok).toBe(true);
    expect(lstatSync(fifo).isFile()).toBe(true);
  }, 60_000);

  it("removes temporary files an hour old that a killed start left, and keeps newer ones", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const name = await cacheName();
    const dir = join(cache, "sly-agent-q");
    mkdirSync(dir, { mode: 0o700 });
    const old = join(dir, `${name}.4242.tmp`);
    const recent = join(dir, `${name}.0123456789abcdef.tmp`);
    writeFileSync(old, "half a cache");
    writeFileSync(recent, "a cache being written");
    const twoHours = (Date.now() - 2 * 3600 * 1000) / 1000;
    utimesSync(old, twoHours, twoHours);
    await start(alone, { XDG_CACHE_HOME: cache });
    expect(existsSync(old)).toBe(false);
    expect(readFileSync(recent, "utf8")).toBe("a cache being written");
  }, 60_000);
});

/** FILE's content as the loader writes a cache named NAME: MAGIC, the CRC-32 of the name and of DATA, DATA. */
function hashed(name: string, data: Buffer): Buffer {
  const check = Buffer.alloc(4);
  check.writeUInt32BE(crc32(data, crc32(name)));
  return Buffer.concat([Buffer.from("SAQV8C2\n", "latin1"), check, data]);
}

describe("the code cache's path", () => {
  it("is neither read nor written when anyone else may change the path to it (a parent they may write, as given or as it really is), and used under a sticky one", async () => {
    const name = await cacheName();
    const marker = join(root, "ran-under-shared-parent");
    // A cache of another program, hashed as the loader hashes: only the path's check keeps it from running.
    const planted = hashed(name, plantedCache(marker));
    const shared = mkdtempSync(join(root, "group-writable-"));
    const dir = join(shared, "sly-agent-q");
    mkdirSync(dir, { mode: 0o700 });
    writeFileSync(join(dir, name), planted, { mode: 0o600 });
    // The cache directory is the user's, but the group may swap it for a link (no sticky bit).
    chmodSync(shared, 0o770);
    expect((await tryStart(alone, { XDG_CACHE_HOME: shared })).ok).toBe(true);
    expect(existsSync(marker)).toBe(false);
    expect(readdirSync(dir)).toEqual([name]);
    expect(readFileSync(join(dir, name)).equals(planted)).toBe(true);
    // The path as given is the user's alone, the real one is not.
    const link = join(mkdtempSync(join(root, "own-")), "cache-link");
    symlinkSync(shared, link);
    expect((await tryStart(alone, { XDG_CACHE_HOME: link })).ok).toBe(true);
    expect(existsSync(marker)).toBe(false);
    expect(readdirSync(dir)).toEqual([name]);
    // Nor is a cache directory made there.
    const fresh = mkdtempSync(join(root, "group-writable-"));
    chmodSync(fresh, 0o775);
    expect(await start(alone, { XDG_CACHE_HOME: join(fresh, "below") })).toMatchObject({ code: 0, stderr: "" });
    expect(readdirSync(fresh)).toEqual([]);
    // The very same file, once the parent is the user's alone again, is read: the checks above could fail.
    chmodSync(shared, 0o700);
    await tryStart(alone, { XDG_CACHE_HOME: link });
    expect(existsSync(marker)).toBe(true);
    // Sticky and world-writable (as /tmp): others may add names there, not replace the user's: used.
    const sticky = mkdtempSync(join(root, "sticky-"));
    chmodSync(sticky, 0o1777);
    const first = await start(alone, { XDG_CACHE_HOME: sticky });
    expect(first).toMatchObject({ code: 0, stderr: "" });
    const [file] = caches(sticky);
    const before = statSync(file!);
    expect(await start(alone, { XDG_CACHE_HOME: sticky })).toEqual(first);
    const after = statSync(file!);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
  }, 120_000);
});

describe("the code cache on a full disk", () => {
  /** A preload: fs.writeSync into a cache's temporary file writes at most LIMIT bytes a call; with FULL, the call after the first fails as a full disk does. */
  function shortWrites(limit: number, full: boolean): string {
    const preload = join(root, `short-writes-${limit}-${full}.cjs`);
    writeFileSync(
      preload,
      `const fs = require("node:fs");
const open = fs.openSync, write = fs.writeSync, close = fs.closeSync;
const tmps = new Map();
fs.openSync = function (p, ...a) { const fd = open.call(this, p, ...a); if (/\\.v8cache\\.[0-9a-f]+\\.tmp$/.test(String(p))) tmps.set(fd, 0); return fd; };
fs.closeSync = function (fd) { tmps.delete(fd); return close.call(this, fd); };
fs.writeSync = function (fd, buf, ...a) {
  if (!tmps.has(fd) || !Buffer.isBuffer(buf)) return write.call(this, fd, buf, ...a);
  const calls = tmps.get(fd) + 1;
  tmps.set(fd, calls);
  if (${full} && calls > 1) throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC", errno: -28, syscall: "write" });
  const offset = a[0] ?? 0, length = a[1] ?? buf.length - offset, position = a[2] ?? null;
  return write.call(this, fd, buf, offset, Math.min(length, ${limit}), position);
};
`,
    );
    return preload;
  }

  it("leaves no cache and no temporary file when the disk fills as the cache is written, and the server answers", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    const preload = shortWrites(4096, true);
    const s = await start(alone, { XDG_CACHE_HOME: cache }, ["--require", preload]);
    expect(s).toMatchObject({ code: 0, stderr: "" });
    expect(s.tools).toBeGreaterThan(40);
    expect(readdirSync(join(cache, "sly-agent-q"))).toEqual([]);
  }, 60_000);

  it("is written whole when each write takes only part of it, and used by the next start", async () => {
    const cache = mkdtempSync(join(root, "xdg-"));
    expect(await start(alone, { XDG_CACHE_HOME: cache }, ["--require", shortWrites(65536, false)])).toMatchObject({ code: 0, stderr: "" });
    const [file] = caches(cache);
    expect(readdirSync(join(cache, "sly-agent-q"))).toEqual([file!.split("/").pop()]);
    expect(statSync(file!).size).toBeGreaterThan(100_000);
    const before = statSync(file!);
    expect(await start(alone, { XDG_CACHE_HOME: cache })).toMatchObject({ code: 0, stderr: "" });
    const after = statSync(file!);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
  }, 60_000);
});

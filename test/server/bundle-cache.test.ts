// The bundle's loader (scripts/bundle-loader.js): the server compiled with V8's code cache, kept in
// $XDG_CACHE_HOME/sly-agent-q. The real bundle, copied alone into a directory (run as CommonJS, as the
// Emacs package runs it) or beside a package.json of "type": "module" (as npm and a checkout run it).

import { spawn, spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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

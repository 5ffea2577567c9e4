// The conversation store's record types are one table (server/agent/store/records.ts) the compiler
// checks for completeness: a copy of the real table with one entry taken out does not compile, the
// same copy whole does. And a line whose type names no entry of the table, even one an object has by
// inheritance ("constructor", "__proto__"), is skipped like any type this server does not know.

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConversation, STORE_VERSION } from "../../server/agent/conversation-store.js";

const root = join(__dirname, "../..");
const storeDir = join(root, "server/agent/store");

/** Type checks TEXT, a copy of records.ts whose imports now point at the store's real files. */
function typeCheck(dir: string, name: string, text: string): { ok: boolean; output: string } {
  const copy = text.replace(/from "\.\/([a-z-]+)\.js"/g, (_m, file: string) => `from ${JSON.stringify(join(storeDir, `${file}.js`))}`).replace(/from "\.\.\/\.\.\/([a-z/-]+)\.js"/g, (_m, file: string) => `from ${JSON.stringify(join(root, "server", `${file}.js`))}`);
  expect(copy).not.toMatch(/from "\./);
  const sub = join(dir, name);
  mkdirSync(sub, { recursive: true });
  writeFileSync(join(sub, "records.ts"), copy);
  const base = JSON.parse(readFileSync(join(root, "tsconfig.json"), "utf8")) as { compilerOptions: Record<string, unknown> };
  writeFileSync(join(sub, "tsconfig.json"), JSON.stringify({ compilerOptions: { ...base.compilerOptions, typeRoots: [join(root, "node_modules/@types")] }, files: ["records.ts"] }));
  try {
    const output = execFileSync(join(root, "node_modules/.bin/tsc"), ["--noEmit", "-p", sub], { cwd: sub, encoding: "utf8" });
    return { ok: true, output };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    return { ok: false, output: `${e.stdout ?? ""}${e.stderr ?? ""}` };
  }
}

describe("the store's record table", () => {
  let dir: string;
  const table = readFileSync(join(storeDir, "records.ts"), "utf8");
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "saq-records-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("does not compile with a record type's entry missing, and compiles whole", () => {
    const entry = /\n  title: \{\n[\s\S]*?\n  \},/;
    expect(table).toMatch(entry);
    const missing = typeCheck(dir, "missing", table.replace(entry, ""));
    expect(missing.ok, missing.output).toBe(false);
    expect(missing.output).toMatch(/Property 'title' is missing/);
    const whole = typeCheck(dir, "whole", table);
    expect(whole.output).toBe("");
    expect(whole.ok).toBe(true);
  }, 120_000);

  it("skips a line whose type is no entry of its own, an inherited name included", () => {
    const lines = [
      { v: STORE_VERSION, type: "header", id: "c", created: "2026-01-01T00:00:00Z" },
      { v: STORE_VERSION, type: "message", at: "a", message: { role: "user", content: [{ type: "text", text: "hi" }] } },
      { v: STORE_VERSION, type: "constructor", at: "b" },
      { v: STORE_VERSION, type: "__proto__", at: "c" },
      { v: STORE_VERSION, type: "toString", at: "d" },
      { v: STORE_VERSION, type: "a-later-kind", at: "e" },
    ];
    const stored = parseConversation("f.jsonl", `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`);
    expect(stored.messages).toEqual([{ role: "user", content: [{ type: "text", text: "hi" }] }]);
    expect(stored.updated).toBe("e");
  });
});

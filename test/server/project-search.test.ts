// search_project and find_files on real trees made here: the same results whether ripgrep lists the
// files or the server's own walk does (.gitignore files, negations, .git/info/exclude, the user's
// global ignore), Lisp forms named, binary, huge and non-UTF-8 files handled, paging, bad input.

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor } from "../../server/tools/executor.js";
import { findOnPath, listProjectFiles } from "../../server/tools/project/files.js";
import { formatSearch, searchProject } from "../../server/tools/project/search.js";

const rg = findOnPath("rg");
const base = mkdtempSync(join(tmpdir(), "agent-q-search-"));
const home = join(base, "home");
const root = join(base, "project");
let savedHome: string | undefined;
let savedXdg: string | undefined;

function put(rel: string, content: string | Buffer) {
  const file = join(root, rel);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, content);
}

beforeAll(() => {
  // The user's global ignore, found through their git configuration as git and ripgrep find it.
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, ".gitconfig"), `[core]\n\texcludesfile = ${join(home, "global-ignore")}\n`);
  writeFileSync(join(home, "global-ignore"), "*.swp\n");
  savedHome = process.env.HOME;
  savedXdg = process.env.XDG_CONFIG_HOME;
  process.env.HOME = home;
  process.env.XDG_CONFIG_HOME = join(home, ".config");
  execFileSync("git", ["init", "-q", root]);
  put(".gitignore", "*.fasl\n/build/\nlogs\n!keep.fasl\ndoc/**/*.tmp\n");
  put(".git/info/exclude", "local-notes.txt\n");
  put("src/parser.lisp", ";;; parser\n(in-package :app)\n\n(defun parse-input (line)\n  (let ((x (standard-optimize-settings)))\n    x))\n\n(defmacro with-parse ((var) &body body)\n  `(let ((,var (parse-input \"\")))\n     ,@body))\n");
  put("src/util.lisp", "(defun helper ()\n  (standard-optimize-settings))\n;; parse-input-like is another symbol\n");
  put("src/sub/.gitignore", "generated.lisp\n");
  put("src/sub/generated.lisp", "(standard-optimize-settings)\n");
  put("src/sub/kept.lisp", "(defvar *x* 'standard-optimize-settings)\n");
  put("out.fasl", "standard-optimize-settings\n");
  put("keep.fasl", "standard-optimize-settings\n");
  put("build/a.lisp", "standard-optimize-settings\n");
  put("logs/today.txt", "standard-optimize-settings\n");
  put("doc/x/y.tmp", "standard-optimize-settings\n");
  put("doc/readme.md", "Use STANDARD-OPTIMIZE-SETTINGS everywhere.\n");
  put("local-notes.txt", "standard-optimize-settings\n");
  put("editor.swp", "standard-optimize-settings\n");
  put(".github/ci.yml", "run: standard-optimize-settings\n");
  put("image.bin", Buffer.concat([Buffer.from("standard-optimize-settings\0\0\0"), Buffer.alloc(100)]));
  put("latin.lisp", Buffer.from("(defun caf\xe9 () 'standard-optimize-settings)\n", "latin1"));
  put("huge.txt", `${"x".repeat(5 * 1024 * 1024)}\nstandard-optimize-settings\n`);
  put("long-line.lisp", `(defparameter *long* "${"y".repeat(1024 * 1024)}standard-optimize-settings${"z".repeat(1000)}")\n`);
  put(".authinfo", "machine standard-optimize-settings password secret\n");
  // A link to a file and to a directory outside the project: never followed.
  writeFileSync(join(base, "outside.lisp"), "standard-optimize-settings OUTSIDE\n");
  mkdirSync(join(base, "outside-dir"));
  writeFileSync(join(base, "outside-dir", "o.lisp"), "standard-optimize-settings OUTSIDE-DIR\n");
  symlinkSync(join(base, "outside.lisp"), join(root, "link.lisp"));
  symlinkSync(join(base, "outside-dir"), join(root, "linked-dir"));
});

afterAll(() => {
  process.env.HOME = savedHome;
  if (savedXdg === undefined) delete process.env.XDG_CONFIG_HOME;
  else process.env.XDG_CONFIG_HOME = savedXdg;
});

const EXPECTED_FILES = [
  ".github/ci.yml",
  ".gitignore",
  "doc/readme.md",
  "huge.txt",
  "image.bin",
  "keep.fasl",
  "latin.lisp",
  "long-line.lisp",
  "src/parser.lisp",
  "src/sub/.gitignore",
  "src/sub/kept.lisp",
  "src/util.lisp",
];

const listers: [string, string | null][] = [["the server's own walk", null]];
if (rg) listers.unshift(["ripgrep", rg]);

describe.each(listers)("listed by %s", (_name, ripgrep) => {
  it("lists what the ignore rules keep, never a link, never a credentials file", async () => {
    const listing = await listProjectFiles(root, { ripgrep, deadline: Date.now() + 10_000 });
    expect(listing.files).toEqual(EXPECTED_FILES);
    expect(listing.by).toBe(ripgrep ? "ripgrep" : "walk");
  });

  it("finds each matching line with its neighbours and the Lisp form it is in", async () => {
    const r = await searchProject(root, { pattern: "standard-optimize-settings", ripgrep });
    expect(r.matches.map((m) => `${m.file}:${m.line}:${m.column}`)).toEqual([
      ".github/ci.yml:1:6",
      "doc/readme.md:1:5",
      "keep.fasl:1:1",
      "latin.lisp:1:17",
      "long-line.lisp:1:1048599",
      "src/parser.lisp:5:13",
      "src/sub/kept.lisp:1:14",
      "src/util.lisp:2:4",
    ]);
    const parser = r.matches.find((m) => m.file === "src/parser.lisp")!;
    expect(parser.form).toEqual({ label: "(defun parse-input", line: 4 });
    expect(parser.before).toBe("(defun parse-input (line)");
    expect(parser.after).toBe("    x))");
    expect(r.binary).toEqual(["image.bin"]);
    expect(r.tooLarge).toEqual(["huge.txt"]);
    expect(r.latin1).toEqual(["latin.lisp"]);
    // The megabyte line is shown cut around its match.
    const long = r.matches.find((m) => m.file === "long-line.lisp")!;
    expect(long.text.length).toBeLessThan(400);
    expect(long.text).toContain("standard-optimize-settings");
    const text = formatSearch(r, ["src/util.lisp"]);
    expect(text).toContain("src/parser.lisp:5:13 in (defun parse-input (line 4)");
    expect(text).toContain("Skipped: 1 binary (image.bin), 1 over 4 MB (huge.txt), 1 private, holding credentials by sly-agent-q-private-file-regexps (.authinfo).");
    expect(text).toContain("Not UTF-8, read as Latin-1: latin.lisp.");
    expect(text).toMatch(/buffers visiting src\/util.lisp have changes not saved; their files on disk were searched/);
    expect(text).not.toContain("OUTSIDE");
    expect(text).not.toContain("secret");
  });

  it("pages, filters by glob, matches whole symbols and case as asked", async () => {
    const page = await searchProject(root, { pattern: "standard-optimize-settings", ripgrep, maxResults: 3, offset: 2 });
    expect(page.matches.map((m) => m.file)).toEqual(["keep.fasl", "latin.lisp", "long-line.lisp"]);
    expect(page.matchingLines).toBe(8);
    expect(formatSearch(page)).toContain("Shown: 3-5; 3 more: call again with offset 5.");
    const lisp = await searchProject(root, { pattern: "standard-optimize-settings", ripgrep, glob: "src/**/*.lisp" });
    expect(lisp.matches.map((m) => m.file)).toEqual(["src/parser.lisp", "src/sub/kept.lisp", "src/util.lisp"]);
    const word = await searchProject(root, { pattern: "parse-input", ripgrep, wholeWord: true, glob: "*.lisp" });
    expect(word.matches.map((m) => `${m.file}:${m.line}`)).toEqual(["src/parser.lisp:4", "src/parser.lisp:9"]);
    const sensitive = await searchProject(root, { pattern: "STANDARD", ripgrep });
    expect(sensitive.matches.map((m) => m.file)).toEqual(["doc/readme.md"]);
    const insensitive = await searchProject(root, { pattern: "STANDARD-optimize", ripgrep, caseMode: "insensitive" });
    expect(insensitive.matchingLines).toBe(8);
    const literal = await searchProject(root, { pattern: "((x (standard", ripgrep, literal: true });
    expect(literal.matches.map((m) => `${m.file}:${m.line}`)).toEqual(["src/parser.lisp:5"]);
  });
});

describe("bad input", () => {
  it("an invalid regexp is a clear error, and literal text is the way out", async () => {
    await expect(searchProject(root, { pattern: "(defun", ripgrep: null })).rejects.toThrow(/Invalid regular expression "\(defun".*literal: true/);
  });

  it("an expression that backtracks without end is stopped, and the server goes on", async () => {
    put("redos.txt", `${"a".repeat(40)}!\n`);
    const started = Date.now();
    await expect(searchProject(root, { pattern: "^(a+)+$", ripgrep: null, timeMs: 1_000, glob: "redos.txt" })).rejects.toThrow(/took too long and was stopped/);
    expect(Date.now() - started).toBeLessThan(8_000);
  });

  it("a glob or a planted .gitignore built to backtrack costs no more than a plain one", async () => {
    const dir = join(base, "backtrack");
    const deep = join(dir, "a".repeat(200));
    mkdirSync(deep, { recursive: true });
    for (let i = 0; i < 200; i++) writeFileSync(join(deep, `${"a".repeat(200)}${i}`), "x\n");
    writeFileSync(join(dir, ".gitignore"), `${"*a".repeat(40)}*b\n${"**/a".repeat(20)}*b\n${" ".repeat(300_000)}x\n`);
    const started = Date.now();
    const listing = await listProjectFiles(dir, { ripgrep: null, deadline: Date.now() + 10_000 });
    expect(listing.files).toHaveLength(201);
    const r = await searchProject(dir, { pattern: "x", ripgrep: null, glob: `${"*a".repeat(40)}*b` });
    expect(r.filesListed).toBe(0);
    expect(Date.now() - started).toBeLessThan(5_000);
    await expect(searchProject(dir, { pattern: "x", glob: "{a,b}".repeat(10) })).rejects.toThrow(/Invalid glob .*more than 64 alternatives/);
  });

  it("a tree of 100,000 files is listed within bounds, and the answer says it is incomplete", async () => {
    const big = join(base, "big");
    for (let d = 0; d < 100; d++) {
      mkdirSync(join(big, `d${d}`), { recursive: true });
      for (let f = 0; f < 1000; f++) writeFileSync(join(big, `d${d}`, `f${f}.lisp`), "");
    }
    for (const ripgrep of [rg ?? null, null]) {
      const started = Date.now();
      const listing = await listProjectFiles(big, { ripgrep, deadline: Date.now() + 10_000 });
      expect(listing.files.length).toBeLessThanOrEqual(50_000);
      expect(listing.stopped).toMatch(/cut at 50000 files|ran out of time/);
      expect(Date.now() - started).toBeLessThan(15_000);
    }
  }, 120_000);
});

describe("through the executor", () => {
  function run(name: string, args: Record<string, unknown>) {
    const registry = createDefaultRegistry();
    const executor = new Executor({ registry, context: () => ({ projectRoot: root }) });
    return executor.execute({ id: "c", name, arguments: args });
  }

  it("search_project answers with the matches, the same text without ripgrep", async () => {
    const withRg = await run("search_project", { pattern: "standard-optimize-settings", glob: "*.lisp" });
    process.env.SLY_AGENT_Q_SEARCH_WITHOUT_RG = "1";
    try {
      const without = await run("search_project", { pattern: "standard-optimize-settings", glob: "*.lisp" });
      expect(without.content).toBe(withRg.content);
    } finally {
      delete process.env.SLY_AGENT_Q_SEARCH_WITHOUT_RG;
    }
    expect(withRg.success).toBe(true);
    expect(withRg.content).toContain("src/util.lisp:2:4 in (defun helper (line 1)");
  });

  it("find_files lists by glob, newest first or by name; a glob matching nothing says so", async () => {
    utimesSync(join(root, "src/util.lisp"), new Date(), new Date(Date.now() + 60_000));
    const newest = await run("find_files", { glob: "**/*.lisp" });
    const names = newest.content.split("\n").slice(1).map((l) => l.split("  ")[0]);
    expect(names[0]).toBe("src/util.lisp");
    expect([...names].sort()).toEqual(["latin.lisp", "long-line.lisp", "src/parser.lisp", "src/sub/kept.lisp", "src/util.lisp"]);
    expect(newest.content.split("\n")[0]).toBe("5 files match **/*.lisp (newest first); shown 1-5.");
    const byName = await run("find_files", { glob: "src/**/*.lisp", sort: "name" });
    expect(byName.content.split("\n").slice(1).map((l) => l.split("  ")[0])).toEqual(["src/parser.lisp", "src/sub/kept.lisp", "src/util.lisp"]);
    const none = await run("search_project", { pattern: "defsystem", glob: "**/*.asd" });
    expect(none.success).toBe(true);
    expect(none.content).toBe("No project file matches the glob **/*.asd (files .gitignore leaves out are not searched), so nothing was searched.");
    const asd = await run("find_files", { glob: "**/*.asd" });
    expect(asd.success).toBe(true);
    expect(asd.content).toMatch(/^No project file matches \*\*\/\*.asd/);
  });
});

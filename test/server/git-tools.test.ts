// The read-only git tools on real repositories made here: status, diff (working tree, staged, against
// a ref, one file), log (project, file, line range), blame, show; bounded output; a project that is no
// repository and a missing git say so clearly.

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor } from "../../server/tools/executor.js";

const base = mkdtempSync(join(tmpdir(), "agent-q-git-"));
const root = join(base, "repo");
const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=Ada", "-c", "user.email=ada@example.org", ...args], { cwd: root, encoding: "utf8" });

beforeAll(() => {
  mkdirSync(root);
  git("init", "-q", "-b", "main");
  writeFileSync(join(root, "app.lisp"), "(defun f (x)\n  x)\n\n(defun g ()\n  1)\n");
  writeFileSync(join(root, "README"), "Hello\n");
  git("add", ".");
  git("commit", "-qm", "First: f and g");
  writeFileSync(join(root, "app.lisp"), "(defun f (x)\n  (1+ x))\n\n(defun g ()\n  1)\n");
  git("commit", "-qam", "Second: f increments");
  git("tag", "v1");
  writeFileSync(join(root, "app.lisp"), "(defun f (x)\n  (1+ x))\n\n(defun g ()\n  2)\n");
  writeFileSync(join(root, "README"), "Hello, world\n");
  git("add", "README");
  writeFileSync(join(root, "new.lisp"), "(print 1)\n");
});

function run(name: string, args: Record<string, unknown> = {}, projectRoot = root) {
  const executor = new Executor({ registry: createDefaultRegistry(), context: () => ({ projectRoot }) });
  return executor.execute({ id: "c", name, arguments: args });
}

describe("git tools", () => {
  it("git_status shows the branch, changed, staged and untracked files, and writes nothing", async () => {
    // A file whose times changed since it was staged: a status that refreshes the index would write it.
    execFileSync("touch", ["-d", "2001-01-01", join(root, "README")]);
    const index = readFileSync(join(root, ".git", "index"));
    const r = await run("git_status");
    expect(readFileSync(join(root, ".git", "index")).equals(index)).toBe(true);
    expect(r.success).toBe(true);
    expect(r.content).toContain("## main");
    expect(r.content).toContain(" M app.lisp");
    expect(r.content).toContain("M  README");
    expect(r.content).toContain("?? new.lisp");
  });

  it("git_diff: the working tree, the staged changes, against a ref, one file", async () => {
    const work = await run("git_diff");
    expect(work.content).toContain("-  1)\n+  2)");
    expect(work.content).not.toContain("Hello, world");
    const staged = await run("git_diff", { staged: true });
    expect(staged.content).toContain("+Hello, world");
    expect(staged.content).not.toContain("+  2)");
    const against = await run("git_diff", { ref: "HEAD~1", path: "app.lisp" });
    expect(against.content).toContain("-  x)\n+  (1+ x))");
    expect(against.content).not.toContain("README");
    const none = await run("git_diff", { path: "new.lisp" });
    expect(none.content).toMatch(/^No differences/);
  });

  it("git_diff cuts at max_lines and says how many were left out", async () => {
    const r = await run("git_diff", { max_lines: 3 });
    expect(r.content.split("\n").length).toBe(4);
    expect(r.content).toMatch(/\[\.\.\. \d+ more lines not shown\. Give path for one file, or max_lines\.\]$/);
  });

  it("git_log of the project, of a file, of a line range", async () => {
    const all = await run("git_log");
    expect(all.content).toMatch(/commit [0-9a-f]+ \d{4}-\d\d-\d\d Ada\n    Second: f increments\ncommit [0-9a-f]+ \S+ Ada\n    First: f and g/);
    const readme = await run("git_log", { path: "README" });
    expect(readme.content).toContain("First: f and g");
    expect(readme.content).not.toContain("Second");
    const lines = await run("git_log", { path: "app.lisp", start_line: 2, end_line: 2 });
    expect(lines.content).toContain("Second: f increments");
    expect(lines.content).toContain("+  (1+ x))");
    const g = await run("git_log", { path: "app.lisp", start_line: 4, end_line: 5, max_count: 5 });
    expect(g.content).not.toContain("Second");
  });

  it("git_blame of a line range, git_show of a commit", async () => {
    const blame = await run("git_blame", { path: "app.lisp", start_line: 1, end_line: 2 });
    expect(blame.content).toMatch(/Ada \d{4}-\d\d-\d\d 1\) \(defun f \(x\)/);
    expect(blame.content).toMatch(/2\)   \(1\+ x\)\)/);
    expect(blame.content.trim().split("\n")).toHaveLength(2);
    const show = await run("git_show", { ref: "v1" });
    expect(show.content).toContain("Second: f increments");
    expect(show.content).toContain("app.lisp | 2 +-");
    expect(show.content).toContain("+  (1+ x))");
  });

  it("a ref that names nothing, a line range without a file: clear errors", async () => {
    const r = await run("git_show", { ref: "no-such-branch" });
    expect(r.success).toBe(false);
    expect(r.content).toContain('"no-such-branch" names no commit in this repository.');
    const l = await run("git_log", { start_line: 1 });
    expect(l.content).toContain("A line range needs path");
  });

  it("a project in a directory of a larger repository sees only its own part of it", async () => {
    const top = join(base, "mono");
    mkdirSync(join(top, "proj"), { recursive: true });
    execFileSync("git", ["init", "-q", top]);
    writeFileSync(join(top, "other-team.txt"), "NOT-THE-PROJECT\n");
    writeFileSync(join(top, "proj", "a.lisp"), "(defun a ())\n");
    execFileSync("git", ["-c", "user.name=Ada", "-c", "user.email=ada@example.org", "-C", top, "add", "."]);
    execFileSync("git", ["-c", "user.name=Ada", "-c", "user.email=ada@example.org", "-C", top, "commit", "-qm", "both"]);
    writeFileSync(join(top, "other-team.txt"), "CHANGED-ELSEWHERE\n");
    const proj = join(top, "proj");
    for (const [tool, args] of [["git_show", {}], ["git_diff", {}], ["git_status", {}], ["git_log", {}]] as const) {
      const r = await run(tool, args, proj);
      expect(r.success, r.content).toBe(true);
      expect(r.content).not.toMatch(/other-team|NOT-THE-PROJECT|CHANGED-ELSEWHERE/);
    }
    expect((await run("git_show", {}, proj)).content).toContain("+(defun a ())");
    expect((await run("git_diff", { path: "../other-team.txt" }, proj)).content).toContain("outside the project root");
  });

  it("git_status of a clean tree says nothing changed", async () => {
    const clean = join(base, "clean");
    mkdirSync(clean);
    execFileSync("git", ["init", "-q", "-b", "main", clean]);
    const r = await run("git_status", {}, clean);
    expect(r.content).toBe(`git status of ${realpathSync(clean)}:\n## No commits yet on main\nNothing changed: no modified, staged or untracked files.`);
  });

  it("a project that is no repository, and no git on PATH, say so", async () => {
    const plain = join(base, "plain");
    mkdirSync(plain);
    const r = await run("git_status", {}, plain);
    expect(r.success).toBe(false);
    expect(r.content).toContain("is not inside a git repository");
    const saved = process.env.PATH;
    process.env.PATH = join(base, "empty-bin");
    try {
      const n = await run("git_status");
      expect(n.success).toBe(false);
      expect(n.content).toContain("git is not installed here");
    } finally {
      process.env.PATH = saved;
    }
  });

  it("git hung (its index a FIFO nobody writes) is stopped at its timeout with a clear answer", async () => {
    const hung = join(base, "hung");
    mkdirSync(hung);
    execFileSync("git", ["init", "-q", hung]);
    execFileSync("mkfifo", [join(hung, ".git", "index")]);
    const started = Date.now();
    const r = await run("git_status", {}, hung);
    expect(r.success).toBe(false);
    expect(r.content).toMatch(/git did not finish within 15 s and was stopped/);
    expect(Date.now() - started).toBeLessThan(25_000);
  }, 40_000);
});

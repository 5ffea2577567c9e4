// Read-only git for the model: status, diff, log, blame and show, with arguments taken from structured
// fields and never from a command line. Every run goes through runGit, the one choke point:
// - refs are checked (no leading "-") and resolved to a commit's hash (rev-parse --verify --end-of-options),
//   and only the hash reaches the command; paths are confined to the project root, links resolved, and
//   given after "--" as literal pathspecs (GIT_LITERAL_PATHSPECS), never read as options or magic;
// - git runs with no system or global configuration, no pager, no terminal prompt, no optional locks,
//   and with overrides of every key of the repository's own configuration that names a program to run
//   (a cloned repository's .git/config is the attacker's): core.fsmonitor, core.hooksPath, core.pager,
//   diff.external, log.showSignature, and each filter.*.clean/smudge/process and diff.*.textconv/command
//   the repository declares; diff, log, show and blame also get --no-ext-diff and --no-textconv;
// - GIT_DIR and GIT_WORK_TREE are set to the repository found above the root, so that a core.worktree
//   in its configuration cannot point git at another tree;
// - each run has a timeout and a bound on its output.

import { lstatSync, realpathSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { ToolError } from "../tool.js";
import { loadChildProcess } from "../../lazy-builtins.js";
import { isPrivatePath } from "./files.js";

const GIT_TIMEOUT_MS = 15_000;
/** Bytes of a git command's output read at most; the rest is cut (and said). */
const MAX_GIT_OUTPUT = 4 * 1024 * 1024;
export const DEFAULT_MAX_LINES = 400;
export const MAX_MAX_LINES = 5_000;

/** Configuration that could run a program, overridden at every run whatever the repository says. */
const FIXED_OVERRIDES: [string, string][] = [
  ["core.fsmonitor", "false"],
  ["core.hooksPath", "/dev/null"],
  ["core.pager", "cat"],
  ["core.attributesFile", "/dev/null"],
  ["diff.external", ""],
  ["log.showSignature", "false"],
  ["color.ui", "false"],
  ["submodule.recurse", "false"],
  ["core.untrackedCache", "false"],
];
// Keys naming a program per driver: the repository may declare any driver name.
const DRIVER_PROGRAMS = "^(filter|diff|merge)\\..+\\.(clean|smudge|process|textconv|command|driver)$";

export interface Repo {
  /** The project root, a true name: git runs there and paths are relative to it. */
  root: string;
  /** The directory holding .git. */
  top: string;
  env: NodeJS.ProcessEnv;
}

/** The git repository holding ROOT (a true name), with the environment every run uses. */
export async function openRepo(root: string): Promise<Repo> {
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
  const base = baseEnv(top, FIXED_OVERRIDES);
  const drivers = await run(root, base, ["config", "--name-only", "--get-regexp", DRIVER_PROGRAMS], { allowStatus: [1] });
  const keys = drivers.text.split("\n").filter((k) => k !== "").slice(0, 500);
  return { root, top, env: baseEnv(top, [...FIXED_OVERRIDES, ...keys.map((k): [string, string] => [k, ""])]) };
}

function baseEnv(top: string, overrides: [string, string][]): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? "/nonexistent",
    LC_ALL: "C",
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_DIR: join(top, ".git"),
    GIT_WORK_TREE: top,
    GIT_PAGER: "cat",
    PAGER: "cat",
    GIT_TERMINAL_PROMPT: "0",
    GIT_OPTIONAL_LOCKS: "0",
    GIT_LITERAL_PATHSPECS: "1",
    GIT_CONFIG_COUNT: String(overrides.length),
  };
  // Given as environment pairs, not -c KEY=VALUE: a driver's name may hold "=".
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
        const e = err as Error & { killed?: boolean; code?: unknown };
        if (e.code === "ENOENT") return reject(new ToolError("git is not installed here (no git on PATH), so the version-control tools cannot run."));
        if (e.code === "ERR_CHILD_PROCESS_STDIO_MAXBUFFER") return resolvePromise({ text, cut: true });
        if (e.name === "AbortError") return reject(new ToolError("The git command was cancelled."));
        if (e.killed) return reject(new ToolError(`git did not finish within ${GIT_TIMEOUT_MS / 1000} s and was stopped (a lock held by another git, or a very large repository).`));
        if (typeof e.code === "number" && opts.allowStatus?.includes(e.code)) return resolvePromise({ text, cut: false });
        const why = stderr.toString("utf8").trim().split("\n").slice(0, 5).join("\n").slice(0, 1_000);
        reject(new ToolError(`git ${args[0]} failed: ${why || `status ${String(e.code)}`}`));
      },
    );
  }));
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
  if (isPrivatePath(rel)) throw new ToolError(`${path} holds credentials (sly-agent-q-private-file-regexps); the agent may not read it.`);
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
  const { text, cut } = await runGit(repo, [...args, "--", path], signal);
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
  return limitLines(text, lineLimit(a.max_lines), cut, "Give path for one file's change, or max_lines.");
}

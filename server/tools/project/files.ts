// The project's files as search_project and find_files see them: every regular file under the root that
// the ignore rules keep (.gitignore files from the root down, .git/info/exclude, the user's global git
// ignore), hidden files included, .git never. Listed by ripgrep (`rg --files`) when it is on PATH, else by
// a walk of our own that reads the same rules; either way a symbolic link is never followed (nor listed),
// files holding credentials are left out, and the list is bounded in count and time.

// node:fs's promises, read where used: node:fs/promises (with readline and the watchers) loaded at the
// first use, not at every server start.
import { accessSync, constants, promises as fsp, readFileSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, join } from "node:path";
import { ToolError, type PrivateFileRule } from "../tool.js";
import { loadChildProcess } from "../../lazy-builtins.js";
import { IgnoreRules, parseIgnoreFile } from "./globs.js";
import { BUILT_IN_PRIVATE_FILES } from "./private-files.js";

/** At most this many files are listed: a tree larger than that is searched in part, and says so. */
export const MAX_LISTED_FILES = 50_000;
/** Ignore files larger than this are not read (a planted huge .gitignore must not stall the walk). */
const MAX_IGNORE_FILE_BYTES = 1_000_000;


export interface Listing {
  /** Paths relative to the root, sorted. */
  files: string[];
  /** Why the list is incomplete, if it is. */
  stopped?: string;
  /** Which lister made it. */
  by: "ripgrep" | "walk";
  /** Files of credentials left out (private-files.ts), sorted. */
  private: string[];
}

export interface ListOptions {
  /** ripgrep's executable, or null for the server's own walk; found on PATH when undefined. */
  ripgrep?: string | null;
  signal?: AbortSignal;
  /** When the listing gives up (ms since the epoch). */
  deadline: number;
  maxFiles?: number;
  /** The rule for files of credentials (the built-in names when not given). */
  privateFiles?: PrivateFileRule;
}

/** The executable NAME on PATH, or undefined. */
export function findOnPath(name: string, path = process.env.PATH ?? ""): string | undefined {
  for (const dir of path.split(delimiter)) {
    if (dir === "") continue;
    const file = join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/** The project root as a true name; refused when it is the file system's root or does not exist. */
export function realRoot(root: string): string {
  let real: string;
  try {
    real = realpathSync(root);
  } catch {
    throw new ToolError(`The project root ${root} does not exist.`);
  }
  if (real === "/") throw new ToolError("The project root is /, which would open the whole file system; the user should visit a file of the project or set sly-agent-q-project-root.");
  return real;
}

export async function listProjectFiles(root: string, opts: ListOptions): Promise<Listing> {
  const rg = opts.ripgrep === undefined ? findOnPath("rg") : opts.ripgrep;
  const max = opts.maxFiles ?? MAX_LISTED_FILES;
  const rule = opts.privateFiles ?? BUILT_IN_PRIVATE_FILES;
  rule.check();
  const listing = rg ? await listWithRipgrep(rg, root, opts, max) : await walk(root, opts, max);
  const kept: string[] = [];
  for (const f of listing.files) (rule.isPrivate(root, f) ? listing.private : kept).push(f);
  listing.files = kept;
  return listing;
}

/** The environment ripgrep runs with: no configuration file of its own (RIPGREP_CONFIG_PATH could add
 *  options), the home directory and XDG_CONFIG_HOME it finds the user's global git ignore through. */
function ripgrepEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? homedir(), LC_ALL: "C" };
  if (process.env.XDG_CONFIG_HOME) env.XDG_CONFIG_HOME = process.env.XDG_CONFIG_HOME;
  return env;
}

// Ignore files from the root down only (--no-ignore-parent), .gitignore even outside a repository
// (--no-require-git), not ripgrep's own .ignore files (--no-ignore-dot): the rules the walk reads too.
const RG_LIST_ARGS = ["--no-config", "--files", "--hidden", "--no-require-git", "--no-ignore-parent", "--no-ignore-dot", "--glob", "!.git", "--no-messages", "--null"];

function listWithRipgrep(rg: string, root: string, opts: ListOptions, max: number): Promise<Listing> {
  return loadChildProcess().then(({ execFile }) => new Promise<Listing>((resolve, reject) => {
    const timeout = Math.max(1, opts.deadline - Date.now());
    // Bounded: 200 bytes a name for the most files listed; more is cut and said.
    const maxBuffer = max * 200;
    execFile(rg, RG_LIST_ARGS, { cwd: root, env: ripgrepEnv(), timeout, killSignal: "SIGKILL", maxBuffer, encoding: "buffer", signal: opts.signal }, (err, stdout) => {
      const out = stdout.toString("utf8");
      const names = out.split("\0").filter((n) => n !== "").map((n) => n.replace(/^\.\//, ""));
      let stopped: string | undefined;
      if (err) {
        const e = err as Error & { killed?: boolean; code?: unknown };
        if (e.code === "ERR_CHILD_PROCESS_STDIO_MAXBUFFER") {
          names.pop();
          stopped = `the listing was cut at ${names.length} files`;
        } else if (e.killed || e.name === "AbortError") {
          if (opts.signal?.aborted) return reject(new ToolError("The search was cancelled."));
          names.pop();
          stopped = `the listing ran out of time after ${names.length} files`;
        } else if (e.code !== 1) {
          // Status 1: no files at all. Anything else is ripgrep failing; the walk is tried instead.
          return walk(root, opts, max).then(resolve, reject);
        }
      }
      names.sort();
      if (names.length > max) {
        stopped = `the listing was cut at ${max} files`;
        names.length = max;
      }
      resolve({ files: names, by: "ripgrep", private: [], ...(stopped ? { stopped } : {}) });
    });
  }));
}

/** The user's global git ignore file: core.excludesFile from their git configuration, else git's default. */
export function globalIgnoreFile(): string | undefined {
  const home = process.env.HOME ?? homedir();
  const xdg = process.env.XDG_CONFIG_HOME || join(home, ".config");
  for (const config of [join(xdg, "git", "config"), join(home, ".gitconfig")].reverse()) {
    let text: string;
    try {
      text = readFileSync(config, "utf8");
    } catch {
      continue;
    }
    const m = /^\s*excludesfile\s*=\s*(.+?)\s*$/im.exec(text);
    if (m) {
      const value = m[1]!.replace(/^"(.*)"$/, "$1");
      return value.startsWith("~/") ? join(home, value.slice(2)) : value;
    }
  }
  return join(xdg, "git", "ignore");
}

async function readIgnore(file: string): Promise<ReturnType<typeof parseIgnoreFile>> {
  try {
    const st = await fsp.lstat(file);
    if (!st.isFile() || st.size > MAX_IGNORE_FILE_BYTES) return [];
    return parseIgnoreFile(await fsp.readFile(file, "utf8"));
  } catch {
    return [];
  }
}

async function walk(root: string, opts: ListOptions, max: number): Promise<Listing> {
  const base = new IgnoreRules();
  const global = globalIgnoreFile();
  if (global) base.add("", await readIgnore(global));
  base.add("", await readIgnore(join(root, ".git", "info", "exclude")));
  const files: string[] = [];
  let stopped: string | undefined;
  const pending: { dir: string; rules: IgnoreRules }[] = [{ dir: "", rules: base }];
  while (pending.length > 0) {
    if (opts.signal?.aborted) throw new ToolError("The search was cancelled.");
    if (Date.now() > opts.deadline) {
      stopped = `the listing ran out of time after ${files.length} files`;
      break;
    }
    const { dir, rules: outer } = pending.pop()!;
    const abs = dir === "" ? root : join(root, dir);
    const rules = outer.with(dir, await readIgnore(join(abs, ".gitignore")));
    let entries;
    try {
      entries = await fsp.readdir(abs, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const e of entries) {
      if (e.name === ".git") continue;
      const rel = dir === "" ? e.name : `${dir}/${e.name}`;
      // Links are never followed: a link inside the project may lead anywhere.
      if (e.isDirectory()) {
        if (!rules.ignored(rel, true)) pending.push({ dir: rel, rules });
      } else if (e.isFile()) {
        if (!rules.ignored(rel, false)) files.push(rel);
      }
    }
    if (files.length > max) {
      stopped = `the listing was cut at ${max} files`;
      break;
    }
  }
  files.sort();
  if (files.length > max) files.length = max;
  return { files, by: "walk", private: [], ...(stopped ? { stopped } : {}) };
}

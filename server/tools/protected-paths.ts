// Files whose writing hands someone else control: Git's hooks and config, the files Emacs, direnv,
// the Lisp image and the agents read on their own at start (and run or obey), the user's Emacs init.
// A write to one always asks, saying why, whatever rule or "always allow" covers the tool (policy.ts);
// only a rule naming the protected path itself allows it. Decided on the path as it resolves (links
// followed, `~` read as the home directory as Emacs reads it), never on its spelling.

import { lstatSync, readFileSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";

/** A write that must ask: the path it resolves to (relative to the root when inside it), the name
 *  that made it protected, and why. */
export interface ProtectedWrite {
  path: string;
  name: string;
  why: string;
}

const LISP_INIT = "a Lisp init file: the Lisp image loads and runs it when it starts";
const INSTRUCTIONS = "the agent reads it as its instructions on its own";

/** Names protected wherever they are in the path, and why. */
const BY_NAME: Readonly<Record<string, string>> = {
  ".git": "Git's own files: its hooks run and its config is obeyed at the next git command",
  ".dir-locals.el": "Emacs applies its variables (some run code) to every file under it",
  ".dir-locals-2.el": "Emacs applies its variables (some run code) to every file under it",
  ".envrc": "direnv runs it in your shell when you enter the directory",
  ".mcp.json": "it names the MCP servers (programs) that agents start",
  "AGENT-Q.md": INSTRUCTIONS,
  "AGENTS.md": INSTRUCTIONS,
  ".sbclrc": LISP_INIT,
  ".eclrc": LISP_INIT,
  ".clisprc.lisp": LISP_INIT,
  ".ccl-init.lisp": LISP_INIT,
  ".abclrc": LISP_INIT,
  ".clinit.cl": LISP_INIT,
};

const BY_LOWER_NAME = new Map(Object.entries(BY_NAME).map(([name, why]) => [name.toLowerCase(), why]));

const FASLS = "compiled Lisp code: a Lisp image loads it, and runs it, in place of its source";
const HOOKS = "Git's hooks directory (core.hooksPath): its hooks run at the next git command";

/** Directories and files under the home directory that are protected whole, and why. */
function homeTrees(home: string, env: NodeJS.ProcessEnv): { path: string; why: string }[] {
  const config = env.XDG_CONFIG_HOME && isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : join(home, ".config");
  const cache = env.XDG_CACHE_HOME && isAbsolute(env.XDG_CACHE_HOME) ? env.XDG_CACHE_HOME : join(home, ".cache");
  const emacs = "your Emacs init: Emacs runs it when it starts";
  return [
    { path: join(config, "common-lisp"), why: "ASDF's configuration: it decides which code every Lisp image loads" },
    // ASDF's default output translations: every system's fasls, loaded instead of a source older than them.
    { path: join(cache, "common-lisp"), why: FASLS },
    { path: join(home, ".cache", "common-lisp"), why: FASLS },
    // Ours: lisp-cl/load.lisp's fasls and the server's own compiled code (scripts/bundle-loader.js).
    { path: join(cache, "sly-agent-q"), why: "the agent's own compiled code (its Lisp helpers' fasls, the server's code cache): loaded and run at their next start" },
    { path: join(home, ".cache", "sly-agent-q"), why: "the agent's own compiled code (its Lisp helpers' fasls, the server's code cache): loaded and run at their next start" },
    { path: join(home, ".emacs"), why: emacs },
    { path: join(home, ".emacs.el"), why: emacs },
    { path: join(home, ".emacs.elc"), why: emacs },
    { path: join(home, ".emacs.el.gz"), why: emacs },
    { path: join(home, ".emacs.gz"), why: emacs },
    { path: join(home, ".slynk.lisp"), why: "SLY's Lisp side loads it into the image when it starts" },
    { path: join(home, ".swank.lisp"), why: "SLIME's Lisp side loads it into the image when it starts" },
    { path: join(home, ".emacs.d"), why: emacs },
    { path: join(config, "emacs"), why: emacs },
  ];
}

/** The Lisp helpers' sources and their fallback fasl cache (lisp-cl/, next to the server's bundle),
 *  when the running server is the bundle of a package that has them. */
function packageLispTree(): { path: string; why: string }[] {
  const here = typeof __filename === "string" ? __filename : process.argv[1];
  if (!here) return [];
  for (let dir = dirname(here), i = 0; i < 4; dir = dirname(dir), i++) {
    try {
      if (lstatSync(join(dir, "lisp-cl", "load.lisp")).isFile()) {
        return [{ path: join(dir, "lisp-cl"), why: "the agent's Lisp helpers and their fasls: loaded into your Lisp image at its next connection" }];
      }
    } catch {
      // Not this one.
    }
  }
  return [];
}

/** The value of core.hooksPath in the git config file FILE (Git's syntax, read minimally: the last
 *  `hooksPath` of a `[core]` section), or undefined. Git is never run: a hostile repository's config
 *  may name programs git would start. */
export function hooksPathIn(file: string): string | undefined {
  let text: string;
  try {
    if (!lstatSync(file).isFile()) return undefined;
    text = readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
  let inCore = false;
  let found: string | undefined;
  for (const raw of text.split(/\r?\n/u)) {
    const line = raw.trim();
    const section = /^\[\s*([A-Za-z0-9.-]+)\s*(?:"[^"]*")?\s*\]\s*(.*)$/u.exec(line);
    if (section) {
      inCore = section[1]!.toLowerCase() === "core" && !/"/u.test(line.slice(0, line.indexOf("]")));
      // A key may follow the header on its line: [core] hooksPath = x
      if (!inCore || !section[2]) continue;
    }
    if (!inCore) continue;
    const entry = /^(?:\[[^\]]*\]\s*)?hookspath\s*=\s*(.*)$/iu.exec(line);
    if (!entry) continue;
    let value = "";
    let quoted = false;
    const body = entry[1]!;
    for (let i = 0; i < body.length; i++) {
      const c = body[i]!;
      if (c === "\\" && i + 1 < body.length) {
        const n = body[++i]!;
        value += n === "n" ? "\n" : n === "t" ? "\t" : n;
      } else if (c === '"') {
        quoted = !quoted;
      } else if (!quoted && (c === "#" || c === ";")) {
        break;
      } else {
        value += c;
      }
    }
    found = value.trim();
  }
  return found === "" ? undefined : found;
}

/** The repository's git directory and common directory for a working tree at or above ROOT. */
function gitDirs(root: string): { gitDir: string; commonDir: string; workTree: string } | undefined {
  for (let dir = root, i = 0; i < 64; i++) {
    const dotGit = join(dir, ".git");
    try {
      const st = lstatSync(dotGit);
      let gitDir = dotGit;
      if (st.isFile()) {
        const m = /^gitdir:\s*(.+?)\s*$/mu.exec(readFileSync(dotGit, "utf8"));
        if (!m) return undefined;
        gitDir = resolve(dir, m[1]!);
      }
      let commonDir = gitDir;
      try {
        commonDir = resolve(gitDir, readFileSync(join(gitDir, "commondir"), "utf8").trim());
      } catch {
        // Not a linked working tree.
      }
      return { gitDir, commonDir, workTree: dir };
    } catch {
      // No .git here: the root may be a folder of the repository.
    }
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
  return undefined;
}

/** The hooks directory named by core.hooksPath (the repository's config, the worktree's, the user's
 *  global ones: the last that sets it wins, as git reads them in the other order), if any. */
function hooksTree(root: string, home: string, env: NodeJS.ProcessEnv): { path: string; why: string }[] {
  const repo = gitDirs(root);
  const config = env.XDG_CONFIG_HOME && isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : join(home, ".config");
  // Git's order: global (XDG, then ~/.gitconfig), then the repository's, then the worktree's; the last wins.
  const files = [join(config, "git", "config"), join(home, ".gitconfig"), ...(repo ? [join(repo.commonDir, "config"), join(repo.gitDir, "config.worktree")] : [])];
  let value: string | undefined;
  for (const f of files) value = hooksPathIn(f) ?? value;
  if (value === undefined) return [];
  const expanded = value === "~" || value.startsWith("~/") ? join(home, value.slice(1)) : value;
  // A relative hooksPath is relative to where hooks run: the top of the working tree.
  const path = resolve(repo?.workTree ?? root, expanded);
  return [{ path, why: HOOKS }];
}

/** PATH with its deepest existing ancestor's links resolved, the rest appended as it is. */
function trueName(path: string): string {
  let existing = path;
  const missing: string[] = [];
  for (;;) {
    try {
      return join(realpathSync(existing), ...missing);
    } catch {
      const parent = resolve(existing, "..");
      if (parent === existing) return path;
      missing.unshift(existing.slice(parent.length + (parent.endsWith(sep) ? 0 : 1)));
      existing = parent;
    }
  }
}

// A file system that ignores case (macOS's, Windows's) or default ignorable characters (HFS+ drops
// U+200C) opens .G\u200cIT as .git: names are compared as such a file system reads them.
const folded = (path: string): string => path.replace(/\p{Default_Ignorable_Code_Point}/gu, "").toLowerCase();

const inside = (dir: string, path: string): boolean => {
  const rel = relative(dir, path);
  return rel === "" || (!rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel));
};

/**
 * Whether a write to PATH (as a tool's argument gives it: relative to ROOT, absolute, or starting
 * with `~`) is a protected write, and why; undefined when it is not.
 */
export function protectedWrite(path: string, root: string | undefined, env: NodeJS.ProcessEnv = process.env): ProtectedWrite | undefined {
  if (typeof path !== "string" || path === "") return undefined;
  const home = env.HOME && isAbsolute(env.HOME) ? env.HOME : homedir();
  const given = path === "~" || path.startsWith("~/") ? join(home, path.slice(1)) : path;
  const base = root && isAbsolute(root) ? root : process.cwd();
  const lexical = resolve(base, given);
  const real = trueName(lexical);
  const realRoot = trueName(resolve(base));
  const shown = inside(realRoot, real) ? relative(realRoot, real) || "." : real;
  const trees = [...homeTrees(home, env), ...hooksTree(realRoot, home, env), ...packageLispTree()];
  // Both the path as written and as it resolves: a link into .git, or a link named like one.
  for (const candidate of [real, lexical]) {
    const within = inside(realRoot, candidate) ? relative(realRoot, candidate) : candidate;
    for (const part of within.split(sep)) {
      // Without regard to case: a file system that ignores it (macOS's) opens .GIT as .git.
      const why = BY_LOWER_NAME.get(folded(part));
      if (why) return { path: shown, name: part, why };
    }
    for (const tree of trees) {
      for (const t of new Set([tree.path, trueName(tree.path)])) {
        if (inside(folded(t), folded(candidate))) return { path: shown, name: t, why: tree.why };
      }
    }
  }
  return undefined;
}

// Files whose writing hands someone else control: Git's hooks and config, the files Emacs, direnv,
// the Lisp image and the agents read on their own at start (and run or obey), the user's Emacs init.
// A write to one always asks, saying why, whatever rule or "always allow" covers the tool (policy.ts);
// only a rule naming the protected path itself allows it. Decided on the path as it resolves (links
// followed, `~` read as the home directory as Emacs reads it), never on its spelling.

import { lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { environmentConfig, readGitConfig } from "./git-config.js";
import { INCLUDED, namedBySetting } from "./git-settings.js";

/** A write that must ask: the path it resolves to (relative to the root when inside it), the name
 *  that made it protected, and why. */
export interface ProtectedWrite {
  path: string;
  name: string;
  why: string;
}

const LISP_INIT = "a Lisp init file: the Lisp image loads and runs it when it starts";
const INSTRUCTIONS = "the agent reads it as its instructions on its own";
const OTHER_AGENT = "another agent (Claude Code, Cursor) reads it as its instructions on its own";

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
  // Other agents' and editors' files, obeyed or run when they open the project.
  "CLAUDE.md": OTHER_AGENT,
  "CLAUDE.local.md": OTHER_AGENT,
  ".claude": "Claude Code's project settings, commands and hooks: its hooks and commands run, its settings widen what it may do",
  ".cursorrules": OTHER_AGENT,
  ".cursor": "Cursor's project rules and settings: its agent obeys them, and may run the commands they name",
  // Git's files in the working tree that choose programs git runs.
  ".gitattributes": "Git's attributes: they choose the filter, diff and merge programs git runs on files",
  ".gitmodules": "it names the submodules git clones, fetches and updates (their URLs and update commands)",
};

/** Names protected when the directory holding them has the given name, and why. */
const BY_PARENT_AND_NAME: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  ".vscode": {
    "tasks.json": "VS Code's tasks: it runs their commands (some when the folder opens)",
    "launch.json": "VS Code's launch configurations: it runs the programs they name",
    "settings.json": "VS Code's workspace settings: they name programs it runs (terminal, linters, formatters)",
  },
  ".github": { "copilot-instructions.md": "GitHub Copilot reads it as its instructions on its own" },
};

const BY_LOWER_NAME = new Map(Object.entries(BY_NAME).map(([name, why]) => [name.toLowerCase(), why]));
const BY_LOWER_PARENT = new Map(Object.entries(BY_PARENT_AND_NAME).map(([parent, names]) => [parent.toLowerCase(), new Map(Object.entries(names).map(([n, why]) => [n.toLowerCase(), why]))]));

const GIT_USER = "your Git config, attributes and ignore files: git obeys them at every git command, and they may name programs it runs";
const GIT_DIR = "Git's own files (the git directory a `.git` file names): its hooks run and its config is obeyed at the next git command";

const FASLS = "compiled Lisp code: a Lisp image loads it, and runs it, in place of its source";

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
    // Git's own config for the user: it may name programs git runs (the project may be the home).
    { path: join(home, ".gitconfig"), why: GIT_USER },
    { path: join(config, "git"), why: GIT_USER },
    { path: join(home, ".config", "git"), why: GIT_USER },
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

/** The system's and the user's config files: /etc/gitconfig, $XDG_CONFIG_HOME/git/config, ~/.gitconfig,
 *  and $GIT_CONFIG_SYSTEM and $GIT_CONFIG_GLOBAL when set (read besides the usual ones: the user's
 *  shell, where git runs, may not set them as the server's environment does). */
function globalGitConfigs(home: string, env: NodeJS.ProcessEnv): string[] {
  const config = env.XDG_CONFIG_HOME && isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : join(home, ".config");
  const set = [env.GIT_CONFIG_SYSTEM, env.GIT_CONFIG_GLOBAL].filter((f): f is string => typeof f === "string" && isAbsolute(f));
  return ["/etc/gitconfig", ...set, join(config, "git", "config"), join(home, ".gitconfig")];
}

/**
 * What Git's config makes run, as protected trees: every program-running setting's program and the
 * project files its command line names (git-settings.ts), the paths of core.hooksPath and the like,
 * and every config file an include names. Every value any config file sets counts, not only the
 * one that wins: an include's condition or a later file may change which one does.
 */
function gitTrees(root: string, home: string, env: NodeJS.ProcessEnv): { path: string; why: string }[] {
  const repo = gitDirs(root);
  const files = [...globalGitConfigs(home, env), ...(repo ? [join(repo.commonDir, "config"), join(repo.gitDir, "config.worktree")] : [])];
  const read = readGitConfig(files, home, environmentConfig(env));
  const top = repo?.workTree ?? root;
  const trees: { path: string; why: string }[] = [];
  // A `.git` file may name a git directory anywhere, the working tree too: it is .git under another name.
  for (const dir of repo ? new Set([repo.gitDir, repo.commonDir]) : []) {
    if (!inside(dir, root)) trees.push({ path: dir, why: GIT_DIR });
  }
  for (const file of read.files) {
    // An include naming the project's folder or one above it names no file of its own.
    if (!files.includes(file) && !inside(resolve(file), root)) trees.push({ path: resolve(file), why: INCLUDED });
  }
  for (const e of read.entries) {
    for (const named of namedBySetting(e, { top, root, home, path: env.PATH ?? "" })) trees.push(named);
  }
  return trees;
}

/** Whether NAME (one component) is protected by its name, alone or as the folder of a protected name. */
const protectedName = (name: string): boolean => BY_LOWER_NAME.has(foldedName(name)) || BY_LOWER_PARENT.has(foldedName(name));

/** How many directory entries the search for links with a protected name looks at, at most. */
export const LINK_SCAN_LIMIT = 20000;
/** Folders the search for links does not enter: others' code and build output, not the project's. */
const UNSCANNED = new Set(["node_modules", ".git", ".hg", ".svn", ".deps", ".cache"]);

/**
 * The links with a protected name (`.vscode`, `AGENT-Q.md`, `src/.dir-locals.el`...) in the project
 * and its working tree, and where each leads: a repository may hold `.vscode` as a link to `cfg/`, and
 * then `cfg/tasks.json` is the tasks file VS Code runs. Searched breadth first, links to folders not
 * entered, at most LINK_SCAN_LIMIT entries (a link deeper in a larger tree is judged only when the
 * path written goes through it).
 */
function protectedLinks(root: string): { link: string; target: string }[] {
  const tops = new Set([root, gitDirs(root)?.workTree ?? root]);
  const links: { link: string; target: string }[] = [];
  const seen = new Set<string>();
  const queue = [...tops];
  let budget = LINK_SCAN_LIMIT;
  while (queue.length > 0 && budget > 0) {
    const dir = queue.shift()!;
    if (seen.has(dir)) continue;
    seen.add(dir);
    let entries: import("node:fs").Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const entry of entries) {
      if (--budget <= 0) break;
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!UNSCANNED.has(entry.name)) queue.push(path);
      } else if (entry.isSymbolicLink() && protectedName(entry.name)) {
        try {
          // A dangling link leads to the file a write would create.
          links.push({ link: path, target: trueName(resolve(dir, readlinkSync(path))) });
        } catch {
          // Gone meanwhile.
        }
      }
    }
  }
  return links;
}

/** PATH with its deepest existing ancestor's links resolved, the rest appended as it is; a dangling
 *  link on the way is followed to its target (a write through it creates that target). */
function trueName(path: string): string {
  let existing = path;
  let hops = 0;
  const missing: string[] = [];
  for (;;) {
    try {
      return join(realpathSync(existing), ...missing);
    } catch {
      let target: string | undefined;
      try {
        target = hops < 40 && lstatSync(existing).isSymbolicLink() ? readlinkSync(existing) : undefined;
      } catch {
        target = undefined;
      }
      if (target !== undefined) {
        hops++;
        existing = resolve(dirname(existing), target);
        continue;
      }
      const parent = resolve(existing, "..");
      if (parent === existing) return path;
      missing.unshift(existing.slice(parent.length + (parent.endsWith(sep) ? 0 : 1)));
      existing = parent;
    }
  }
}

// A file system that ignores case (macOS's, Windows's) or default ignorable characters (HFS+ drops
// U+200C) opens .G\u200cIT as .git, and Windows's drops a name's trailing dots and spaces (`.git.`):
// names are compared as such a file system reads them.
// Names are compared composed and compatibility-folded (NFKC: `ſ` is `s`, a decomposed `ó` the composed
// one, as APFS and HFS+ open them) and case-folded (upper then lower case: `ß` and `ss` alike).
const foldedName = (name: string): string => {
  const plain = name.normalize("NFKC").replace(/\p{Default_Ignorable_Code_Point}/gu, "").toUpperCase().toLowerCase().normalize("NFKC");
  const trimmed = plain.replace(/[. ]+$/u, "");
  // `.`, `..` and a name all dots stay what they are.
  return trimmed === "" ? plain : trimmed;
};
const folded = (path: string): string => path.split(sep).map(foldedName).join(sep);

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
  const trees = [...homeTrees(home, env), ...gitTrees(realRoot, home, env), ...packageLispTree()];
  // A link with a protected name leads to a file read under that name: the path through the link counts too.
  const throughLinks = protectedLinks(realRoot)
    .filter((l) => inside(folded(l.target), folded(real)))
    .map((l) => join(l.link, relative(l.target, real)));
  // Both the path as written and as it resolves: a link into .git, or a link named like one.
  for (const candidate of [real, lexical, ...throughLinks]) {
    const within = inside(realRoot, candidate) ? relative(realRoot, candidate) : candidate;
    const parts = within.split(sep);
    for (const [i, part] of parts.entries()) {
      // Without regard to case: a file system that ignores it (macOS's) opens .GIT as .git.
      const why = BY_LOWER_NAME.get(foldedName(part)) ?? (i > 0 ? BY_LOWER_PARENT.get(foldedName(parts[i - 1]!))?.get(foldedName(part)) : undefined);
      if (why) return { path: shown, name: i > 0 && !BY_LOWER_NAME.has(foldedName(part)) ? join(parts[i - 1]!, part) : part, why };
    }
    for (const tree of trees) {
      for (const t of new Set([tree.path, trueName(tree.path)])) {
        if (inside(folded(t), folded(candidate))) return { path: shown, name: t, why: tree.why };
      }
    }
  }
  return undefined;
}

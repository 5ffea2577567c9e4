// Files whose writing hands someone else control: Git's hooks and config, the files Emacs, direnv,
// the Lisp image and the agents read on their own at start (and run or obey), the user's Emacs init.
// A write to one always asks, saying why, whatever rule or "always allow" covers the tool (policy.ts);
// only a rule naming the protected path itself allows it. Decided on the path as it resolves (links
// followed, `~` read as the home directory as Emacs reads it), never on its spelling.

import { realpathSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join, relative, resolve, sep } from "node:path";

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

/** Directories and files under the home directory that are protected whole, and why. */
function homeTrees(home: string, env: NodeJS.ProcessEnv): { path: string; why: string }[] {
  const config = env.XDG_CONFIG_HOME && isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : join(home, ".config");
  const emacs = "your Emacs init: Emacs runs it when it starts";
  return [
    { path: join(config, "common-lisp"), why: "ASDF's configuration: it decides which code every Lisp image loads" },
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
  // Both the path as written and as it resolves: a link into .git, or a link named like one.
  for (const candidate of [real, lexical]) {
    const within = inside(realRoot, candidate) ? relative(realRoot, candidate) : candidate;
    for (const part of within.split(sep)) {
      // Without regard to case: a file system that ignores it (macOS's) opens .GIT as .git.
      const why = BY_LOWER_NAME.get(folded(part));
      if (why) return { path: shown, name: part, why };
    }
    for (const tree of homeTrees(home, env)) {
      for (const t of new Set([tree.path, trueName(tree.path)])) {
        if (inside(folded(t), folded(candidate))) return { path: shown, name: t, why: tree.why };
      }
    }
  }
  return undefined;
}

// Git's config files read as Git reads them, without running git (a hostile repository's config may
// name programs git would start): sections `[core]`, `[remote "origin"]` and the old `[branch.main]`,
// names without regard to case (a subsection's with it), quoted values with escapes, backslash
// continuation lines, `#` and `;` comments, and `[include]`/`[includeIf "..."]` files followed
// whatever their condition (a condition that holds later, or in another working tree, still counts).

import { readFileSync, realpathSync, statSync } from "node:fs";
import { userInfo } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";

/** One `name = value` of a config file: section and key lower-cased, the subsection as written. */
export interface GitConfigEntry {
  section: string;
  subsection: string | undefined;
  key: string;
  /** undefined for a key written alone (`[core] bare`), which Git reads as true. */
  value: string | undefined;
  /** The file it was read from. */
  file: string;
}

const isNameChar = (c: string | undefined): boolean => c !== undefined && /^[A-Za-z0-9-]$/u.test(c);

/** The entries of a config file's TEXT (read from FILE), in order. Lenient where Git would refuse
 *  the file (an unknown escape, a missing quote): what a broken file may name still counts. */
export function parseGitConfig(text: string, file: string): GitConfigEntry[] {
  const s = text.replace(/^\uFEFF/u, "").replace(/\r\n/gu, "\n");
  const entries: GitConfigEntry[] = [];
  let section: string | undefined;
  let subsection: string | undefined;
  let i = 0;
  const skipLine = (): void => {
    while (i < s.length && s[i] !== "\n") i++;
  };
  while (i < s.length) {
    const c = s[i]!;
    if (c === "\n" || c === " " || c === "\t" || c === "\f" || c === "\v" || c === "\r") {
      i++;
    } else if (c === "#" || c === ";") {
      skipLine();
    } else if (c === "[") {
      i++;
      let name = "";
      while (i < s.length && (isNameChar(s[i]) || s[i] === ".")) name += s[i++];
      subsection = undefined;
      while (s[i] === " " || s[i] === "\t") i++;
      if (s[i] === '"') {
        // [section "sub"]: the subsection keeps its case; \x is x.
        i++;
        let sub = "";
        while (i < s.length && s[i] !== '"' && s[i] !== "\n") {
          if (s[i] === "\\" && i + 1 < s.length && s[i + 1] !== "\n") i++;
          sub += s[i++];
        }
        if (s[i] === '"') i++;
        while (s[i] === " " || s[i] === "\t") i++;
        subsection = sub;
        section = name.toLowerCase();
      } else {
        // [section] or the old [section.sub], the whole name lower-cased.
        const lower = name.toLowerCase();
        const dot = lower.indexOf(".");
        section = dot < 0 ? lower : lower.slice(0, dot);
        subsection = dot < 0 ? undefined : lower.slice(dot + 1);
      }
      if (s[i] === "]") i++;
      else skipLine(); // A broken header: Git refuses the file; nothing more of this line is read.
    } else if (/[A-Za-z]/u.test(c)) {
      let key = "";
      while (isNameChar(s[i])) key += s[i++];
      while (s[i] === " " || s[i] === "\t") i++;
      let value: string | undefined;
      if (s[i] === "=") {
        i++;
        value = "";
        let quoted = false;
        let spaces = 0;
        let comment = false;
        while (i < s.length) {
          const ch = s[i++]!;
          // The line's end ends the value (inside a quote Git refuses the file; here the value ends).
          if (ch === "\n") break;
          if (comment) continue;
          if (!quoted && /\s/u.test(ch)) {
            if (value.length > 0) spaces++;
            continue;
          }
          if (!quoted && (ch === "#" || ch === ";")) {
            comment = true;
            continue;
          }
          value += " ".repeat(spaces);
          spaces = 0;
          if (ch === "\\") {
            const n = s[i++];
            if (n === undefined) break;
            if (n === "\n") continue; // A continuation line.
            value += n === "t" ? "\t" : n === "n" ? "\n" : n === "b" ? "\b" : n;
            continue;
          }
          if (ch === '"') {
            quoted = !quoted;
            continue;
          }
          value += ch;
        }
      } else {
        skipLine();
      }
      if (section !== undefined) entries.push({ section, subsection, key: key.toLowerCase(), value, file });
    } else {
      skipLine();
    }
  }
  return entries;
}

/** How deep includes are followed, as Git does (it stops with an error past it). */
export const MAX_INCLUDE_DEPTH = 10;

/** PATH as Git reads a pathname value: `~/` is the home directory, `~user/` that user's (from the
 *  password database, as Git reads it); `:(optional)` dropped. A `~user` of no known user stays as
 *  written (Git refuses it). */
export function expandGitPath(path: string, home: string): string {
  const p = path.startsWith(":(optional)") ? path.slice(":(optional)".length) : path;
  if (p === "~" || p.startsWith("~/")) return join(home, p.slice(1));
  const m = /^~([^/]+)(\/.*)?$/u.exec(p);
  const userHome = m ? homeOfUser(m[1]!) : undefined;
  return userHome !== undefined ? join(userHome, m?.[2] ?? "") : p;
}

/** The home directory of the user NAME in the password database, or undefined. */
export function homeOfUser(name: string): string | undefined {
  try {
    const me = userInfo();
    if (me.username === name && me.homedir) return me.homedir;
  } catch {
    // No entry for the current user: look it up as any other.
  }
  try {
    for (const line of readFileSync("/etc/passwd", "utf8").split("\n")) {
      const f = line.split(":");
      if (f[0] === name && f.length >= 6 && isAbsolute(f[5]!)) return f[5];
    }
  } catch {
    // No password file (not a Unix-like system): unknown.
  }
  return undefined;
}

/** An entry for NAME (`section.sub.key`) of VALUE, read from the environment variable FILE names. */
function environmentEntry(name: string, value: string, file: string): GitConfigEntry | undefined {
  const first = name.indexOf(".");
  const last = name.lastIndexOf(".");
  if (first < 0) return undefined;
  return {
    section: name.slice(0, first).toLowerCase(),
    subsection: last > first ? name.slice(first + 1, last) : undefined,
    key: name.slice(last + 1).toLowerCase(),
    value,
    file,
  };
}

/**
 * One single-quoted word of TEXT at START, as git's sq_quote writes it (a quote inside as `'\''`, a
 * `!` as `'\!'`): its text and where the rest starts; undefined when there is none.
 */
function singleQuoted(text: string, start: number): { word: string; end: number } | undefined {
  if (text[start] !== "'") return undefined;
  let word = "";
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] !== "'") {
      word += text[i];
      continue;
    }
    // Out of the quotes: `\'` or `\!` followed by a quote goes on with that character quoted.
    if (text[i + 1] === "\\" && (text[i + 2] === "'" || text[i + 2] === "!") && text[i + 3] === "'") {
      word += text[i + 2];
      i += 3;
      continue;
    }
    return { word, end: i + 1 };
  }
  return undefined;
}

/**
 * The settings of GIT_CONFIG_PARAMETERS (what `git -c` passes to the git programs it runs, and what a
 * user's environment may hold): `'key'='value'` words, or git's older `'key=value'`, apart by spaces.
 * Git refuses the whole variable when a word is malformed (and then runs nothing); the words read
 * before it are kept, which can only protect more.
 */
function parameterEntries(text: string): GitConfigEntry[] {
  const entries: GitConfigEntry[] = [];
  const file = "GIT_CONFIG_PARAMETERS";
  let at = 0;
  const space = (i: number): boolean => /\s/.test(text[i] ?? "");
  for (;;) {
    while (at < text.length && space(at)) at++;
    if (at >= text.length) return entries;
    const key = singleQuoted(text, at);
    if (!key) return entries;
    at = key.end;
    let entry: GitConfigEntry | undefined;
    if (text[at] === "=") {
      const value = singleQuoted(text, at + 1);
      entry = environmentEntry(key.word, value?.word ?? "", file);
      at = value ? value.end : at + 1;
    } else {
      const eq = key.word.indexOf("=");
      entry = eq < 0 ? environmentEntry(key.word, "", file) : environmentEntry(key.word.slice(0, eq), key.word.slice(eq + 1), file);
    }
    if (entry) entries.push(entry);
    if (at < text.length && !space(at)) return entries;
  }
}

/** The settings the environment gives git: GIT_CONFIG_PARAMETERS, then GIT_CONFIG_COUNT with
 *  GIT_CONFIG_KEY_n and GIT_CONFIG_VALUE_n, as entries of a file named after the variable. */
export function environmentConfig(env: NodeJS.ProcessEnv): GitConfigEntry[] {
  const entries = parameterEntries(env.GIT_CONFIG_PARAMETERS ?? "");
  const count = Number.parseInt(env.GIT_CONFIG_COUNT ?? "", 10);
  for (let n = 0; Number.isFinite(count) && n < Math.min(count, 10000); n++) {
    const name = env[`GIT_CONFIG_KEY_${n}`];
    if (typeof name !== "string") continue;
    const entry = environmentEntry(name, env[`GIT_CONFIG_VALUE_${n}`] ?? "", `GIT_CONFIG_KEY_${n}`);
    if (entry) entries.push(entry);
  }
  return entries;
}

export interface GitConfigRead {
  entries: GitConfigEntry[];
  /** Every file read or named by an include (existing or not), absolute. */
  files: string[];
}

/**
 * The entries of the config FILES and of every file they include (an include's entries where its
 * include is). A file missing or not regular adds nothing; one already read adds nothing more (a
 * cycle, or a file included twice, whose second reading would only repeat its entries) unless it is
 * reached less deep, where its own includes may still be followed; includes deeper than
 * MAX_INCLUDE_DEPTH are not followed.
 */
export function readGitConfig(files: readonly string[], home: string, extra: readonly GitConfigEntry[] = []): GitConfigRead {
  const entries: GitConfigEntry[] = [];
  const named = new Set<string>();
  const depthRead = new Map<string, number>();
  const read = (file: string, depth: number): void => {
    named.add(file);
    let real: string;
    let text: string;
    try {
      real = realpathSync(file);
      if (!statSync(real).isFile() || (depthRead.get(real) ?? Infinity) <= depth) return;
      text = readFileSync(real, "utf8");
    } catch {
      return;
    }
    depthRead.set(real, depth);
    for (const e of parseGitConfig(text, file)) {
      entries.push(e);
      if (e.key !== "path" || e.value === undefined || e.value === "" || (e.section !== "include" && e.section !== "includeif")) continue;
      if (depth >= MAX_INCLUDE_DEPTH) continue;
      const expanded = expandGitPath(e.value, home);
      if (isAbsolute(expanded)) {
        read(expanded, depth + 1);
        continue;
      }
      // Relative to the file that includes it: as it was named and, when that is a link, as it resolves.
      for (const dir of new Set([dirname(resolve(file)), dirname(real)])) read(resolve(dir, expanded), depth + 1);
    }
  };
  for (const f of files) read(f, 0);
  // Settings given otherwise (the environment's): their includes are followed as a file's.
  for (const e of extra) {
    entries.push(e);
    if (e.key !== "path" || !e.value || (e.section !== "include" && e.section !== "includeif")) continue;
    read(resolve(expandGitPath(e.value, home)), 1);
  }
  return { entries, files: [...named] };
}

// Git's config files read as Git reads them, without running git (a hostile repository's config may
// name programs git would start): sections `[core]`, `[remote "origin"]` and the old `[branch.main]`,
// names without regard to case (a subsection's with it), quoted values with escapes, backslash
// continuation lines, `#` and `;` comments, and `[include]`/`[includeIf "..."]` files followed
// whatever their condition (a condition that holds later, or in another working tree, still counts).

import { readFileSync, realpathSync, statSync } from "node:fs";
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

/** PATH as Git reads a pathname value: `~/` is the home directory; `:(optional)` dropped. */
export function expandGitPath(path: string, home: string): string {
  const p = path.startsWith(":(optional)") ? path.slice(":(optional)".length) : path;
  return p === "~" || p.startsWith("~/") ? join(home, p.slice(1)) : p;
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
export function readGitConfig(files: readonly string[], home: string): GitConfigRead {
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
  return { entries, files: [...named] };
}

// Globs and .gitignore rules as regular expressions over paths relative to a directory ("src/app.lisp",
// always "/"-separated). One reading of a glob for find_files, search_project's file filter and the
// ignore files of the search's own walk, so that the walk and ripgrep's agree on what a rule means.

/** The regular expression source of GLOB: `*` and `?` within a name, `**` across directories,
 *  `[...]` (`[!...]` negated), `{a,b}` alternatives when BRACES, `\x` the character x. */
export function globSource(glob: string, braces: boolean): string {
  let out = "";
  let i = 0;
  let depth = 0;
  while (i < glob.length) {
    const c = glob[i]!;
    if (c === "*" && glob[i + 1] === "*") {
      const atStart = i === 0 || glob[i - 1] === "/";
      const after = glob[i + 2];
      if (atStart && after === "/") {
        out += "(?:.*/)?";
        i += 3;
        continue;
      }
      if (atStart && after === undefined) {
        out += ".*";
        i += 2;
        continue;
      }
      out += "[^/]*";
      i += 2;
      continue;
    }
    if (c === "*") out += "[^/]*";
    else if (c === "?") out += "[^/]";
    else if (c === "\\" && i + 1 < glob.length) {
      out += escapeChar(glob[i + 1]!);
      i += 2;
      continue;
    } else if (c === "[") {
      const close = glob.indexOf("]", i + 2);
      if (close < 0) out += "\\[";
      else {
        let body = glob.slice(i + 1, close);
        const negated = body.startsWith("!") || body.startsWith("^");
        if (negated) body = body.slice(1);
        out += `[${negated ? "^/" : ""}${body.replace(/\\/g, "\\\\").replace(/\]/g, "\\]")}]`;
        i = close + 1;
        continue;
      }
    } else if (braces && c === "{") {
      out += "(?:";
      depth++;
    } else if (braces && c === "}" && depth > 0) {
      out += ")";
      depth--;
    } else if (braces && c === "," && depth > 0) out += "|";
    else out += escapeChar(c);
    i++;
  }
  return out + ")".repeat(depth);
}

function escapeChar(c: string): string {
  return /[.*+?^${}()|[\]\\/-]/.test(c) ? `\\${c}` : c;
}

/**
 * A glob the model gives: with a "/" it matches the whole relative path (`src/**\/*.lisp`), without one a
 * file's name at any depth (`*.asd`), as ripgrep's and git's globs do. Throws on an unusable glob.
 */
export function compileGlob(glob: string): (path: string) => boolean {
  const g = glob.replace(/^\.\//, "");
  const anchored = g.includes("/");
  const source = anchored ? globSource(g.replace(/^\//, ""), true) : globSource(g, true);
  const re = new RegExp(anchored ? `^${source}$` : `(?:^|/)${source}$`);
  return (path) => re.test(path);
}

/** One rule of an ignore file: a pattern relative to the file's directory. */
interface IgnoreRule {
  re: RegExp;
  negated: boolean;
  dirOnly: boolean;
}

/** The rules of one ignore file (.gitignore syntax), in order. */
export function parseIgnoreFile(text: string): IgnoreRule[] {
  const rules: IgnoreRule[] = [];
  for (const raw of text.split(/\r?\n/)) {
    let line = raw.replace(/(?<!\\)\s+$/, "");
    if (line === "" || line.startsWith("#")) continue;
    let negated = false;
    if (line.startsWith("!")) {
      negated = true;
      line = line.slice(1);
    } else if (line.startsWith("\\!") || line.startsWith("\\#")) line = line.slice(1);
    let dirOnly = false;
    if (line.endsWith("/")) {
      dirOnly = true;
      line = line.replace(/\/+$/, "");
    }
    if (line === "") continue;
    const anchored = line.includes("/");
    const body = globSource(line.replace(/^\//, ""), false);
    try {
      rules.push({ re: new RegExp(anchored ? `^${body}$` : `(?:^|/)${body}$`), negated, dirOnly });
    } catch {
      // A line git would not understand either matches nothing.
    }
  }
  return rules;
}

/** The ignore files that apply to a walk: each with the directory (relative to the walk's root, "" for
 *  the root itself) its patterns are relative to. Later sets take precedence, as deeper files do in git. */
export class IgnoreRules {
  private readonly sets: { dir: string; rules: IgnoreRule[] }[] = [];

  add(dir: string, rules: IgnoreRule[]): void {
    if (rules.length > 0) this.sets.push({ dir, rules });
  }

  /** Whether PATH (relative to the walk's root) is ignored; its parent directories were not. */
  ignored(path: string, isDir: boolean): boolean {
    let verdict = false;
    for (const set of this.sets) {
      if (set.dir !== "" && !path.startsWith(`${set.dir}/`)) continue;
      const local = set.dir === "" ? path : path.slice(set.dir.length + 1);
      for (const rule of set.rules) {
        if (rule.dirOnly && !isDir) continue;
        if (rule.re.test(local)) verdict = !rule.negated;
      }
    }
    return verdict;
  }

  /** The rules that apply below DIR: those of DIR's own ignore file join a copy. */
  with(dir: string, rules: IgnoreRule[]): IgnoreRules {
    const copy = new IgnoreRules();
    copy.sets.push(...this.sets);
    copy.add(dir, rules);
    return copy;
  }
}

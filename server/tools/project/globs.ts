// Globs and .gitignore rules over paths relative to a directory ("src/app.lisp", always "/"-separated).
// One reading of a glob for find_files, search_project's file filter and the ignore files of the search's
// own walk, so that the walk and ripgrep's agree on what a rule means. A glob is matched by a small
// automaton in time proportional to the path's length times the glob's, never by a backtracking regular
// expression: a glob from the model or a planted .gitignore (`*a*a*a*a*a*a*a*b`) cannot stall the server.

type Token =
  | { t: "char"; c: string }
  | { t: "one" } // ?: one character but "/"
  | { t: "star" } // *: any run without "/"
  | { t: "any" } // **: any run, "/" included
  | { t: "class"; negated: boolean; test: (c: string) => boolean };

/** A glob longer than this is refused: the automaton's time grows with it. */
const MAX_GLOB = 300;
/** Alternatives a glob may expand to ({a,b} and each leading or inner "**\/"). */
const MAX_ALTERNATIVES = 64;
/** Positions of the automata of all its alternatives together: a path's test costs this many steps per
 *  character at most (about a microsecond per path of a hundred characters), whatever the glob. */
const MAX_POSITIONS = 700;

export class GlobError extends Error {}

/** {a,b} expanded (nested too) into plain globs. */
function expandBraces(glob: string): string[] {
  let depth = 0;
  let open = -1;
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === "\\") i++;
    else if (c === "{") {
      if (depth++ === 0) open = i;
    } else if (c === "}" && depth > 0 && --depth === 0) {
      const parts: string[] = [];
      let start = open + 1;
      let d = 0;
      for (let j = open + 1; j < i; j++) {
        const cj = glob[j];
        if (cj === "\\") j++;
        else if (cj === "{") d++;
        else if (cj === "}") d--;
        else if (cj === "," && d === 0) {
          parts.push(glob.slice(start, j));
          start = j + 1;
        }
      }
      parts.push(glob.slice(start, i));
      const out: string[] = [];
      for (const p of parts) {
        for (const rest of expandBraces(glob.slice(0, open) + p + glob.slice(i + 1))) {
          out.push(rest);
          if (out.length > MAX_ALTERNATIVES) throw new GlobError(`it expands to more than ${MAX_ALTERNATIVES} alternatives`);
        }
      }
      return out;
    }
  }
  return [glob];
}

function parseClass(glob: string, i: number): { token: Token; end: number } | undefined {
  let j = i + 1;
  let negated = false;
  if (glob[j] === "!" || glob[j] === "^") {
    negated = true;
    j++;
  }
  const items: [string, string][] = [];
  let first = true;
  for (; j < glob.length; j++) {
    let c = glob[j]!;
    if (c === "]" && !first) {
      const test = (x: string) => items.some(([lo, hi]) => x >= lo && x <= hi);
      return { token: { t: "class", negated, test }, end: j + 1 };
    }
    first = false;
    if (c === "\\" && j + 1 < glob.length) c = glob[++j]!;
    if (glob[j + 1] === "-" && j + 2 < glob.length && glob[j + 2] !== "]") {
      let hi = glob[j + 2]!;
      j += 2;
      if (hi === "\\" && j + 1 < glob.length) hi = glob[++j]!;
      items.push([c, hi]);
    } else items.push([c, c]);
  }
  return undefined;
}

/** The alternatives (token lists) of one brace-free glob: each "**\/" at a component's start is either
 *  nothing or any run of directories. */
function tokenize(glob: string): Token[][] {
  let alternatives: Token[][] = [[]];
  const push = (tok: Token) => alternatives.forEach((a) => a.push(tok));
  for (let i = 0; i < glob.length; ) {
    const c = glob[i]!;
    if (c === "*" && glob[i + 1] === "*") {
      const atStart = i === 0 || glob[i - 1] === "/";
      const after = glob[i + 2];
      if (atStart && after === "/") {
        // Zero directories, or any run ending in "/".
        alternatives = alternatives.flatMap((a) => [[...a], [...a, { t: "any" } as Token, { t: "char", c: "/" } as Token]]);
        if (alternatives.length > MAX_ALTERNATIVES) throw new GlobError(`it has too many "**/"`);
        i += 3;
        continue;
      }
      push(atStart && after === undefined ? { t: "any" } : { t: "star" });
      i += 2;
      continue;
    }
    if (c === "*") push({ t: "star" });
    else if (c === "?") push({ t: "one" });
    else if (c === "\\" && i + 1 < glob.length) {
      push({ t: "char", c: glob[i + 1]! });
      i += 2;
      continue;
    } else if (c === "[") {
      const cls = parseClass(glob, i);
      if (cls) {
        push(cls.token);
        i = cls.end;
        continue;
      }
      push({ t: "char", c });
    } else push({ t: "char", c });
    i++;
  }
  return alternatives;
}

/** Whether TOKENS match the whole of PATH: the set of positions in TOKENS, advanced one character at a time. */
function runs(tokens: Token[], path: string): boolean {
  const n = tokens.length;
  let states = new Uint8Array(n + 1);
  let next = new Uint8Array(n + 1);
  const close = (s: Uint8Array) => {
    // A star may match nothing: its position reaches the next one.
    for (let i = 0; i < n; i++) if (s[i] && (tokens[i]!.t === "star" || tokens[i]!.t === "any")) s[i + 1] = 1;
  };
  states[0] = 1;
  close(states);
  for (const ch of path) {
    next.fill(0);
    let alive = false;
    for (let i = 0; i < n; i++) {
      if (!states[i]) continue;
      const tok = tokens[i]!;
      let to = -1;
      if (tok.t === "char") to = tok.c === ch ? i + 1 : -1;
      else if (tok.t === "one") to = ch !== "/" ? i + 1 : -1;
      else if (tok.t === "class") to = ch !== "/" && tok.test(ch) !== tok.negated ? i + 1 : -1;
      else if (tok.t === "star") to = ch !== "/" ? i : -1;
      else to = i;
      if (to >= 0) {
        next[to] = 1;
        alive = true;
      }
    }
    if (!alive) return false;
    close(next);
    [states, next] = [next, states];
  }
  return states[n] === 1;
}

/** A matcher of GLOB against whole paths; when ANYWHERE, also against every path's tail after a "/". */
function matcher(glob: string, braces: boolean, anywhere: boolean): (path: string) => boolean {
  if (glob.length > MAX_GLOB) throw new GlobError(`it is longer than ${MAX_GLOB} characters`);
  const alternatives = (braces ? expandBraces(glob) : [glob]).flatMap(tokenize);
  if (alternatives.length > MAX_ALTERNATIVES) throw new GlobError(`it expands to more than ${MAX_ALTERNATIVES} alternatives`);
  // Anywhere: any run of directories first, as "**/" would say.
  const lists = anywhere ? alternatives.flatMap((a) => [a, [{ t: "any" } as Token, { t: "char", c: "/" } as Token, ...a]]) : alternatives;
  const positions = lists.reduce((sum, tokens) => sum + tokens.length + 1, 0);
  if (positions > MAX_POSITIONS) throw new GlobError(`it is too complex (its alternatives, {a,b} and "**/" expanded, hold ${positions} wildcards and characters; at most ${MAX_POSITIONS}): give a simpler glob`);
  return (path) => lists.some((tokens) => runs(tokens, path));
}

/**
 * A glob the model gives: with a "/" it matches the whole relative path (`src/**\/*.lisp`), without one a
 * file's name at any depth (`*.asd`), as ripgrep's and git's globs do. Throws a GlobError on an unusable one.
 */
export function compileGlob(glob: string): (path: string) => boolean {
  const g = glob.replace(/^\.\//, "");
  const anchored = g.includes("/");
  return matcher(anchored ? g.replace(/^\//, "") : g, true, !anchored);
}

/** One rule of an ignore file: a pattern relative to the file's directory. */
interface IgnoreRule {
  matches: (path: string) => boolean;
  negated: boolean;
  dirOnly: boolean;
}

/** LINE without its trailing blanks, unless escaped ("a\\ "): a scan, not a regular expression, which
 *  would take quadratic time on a planted line of blanks. */
function trimTrailingBlanks(line: string): string {
  let end = line.length;
  while (end > 0 && /\s/.test(line[end - 1]!)) end--;
  if (end < line.length && end > 0 && line[end - 1] === "\\") end++;
  return line.slice(0, end);
}

/** The rules of one ignore file (.gitignore syntax), in order. */
export function parseIgnoreFile(text: string): IgnoreRule[] {
  const rules: IgnoreRule[] = [];
  for (const raw of text.split(/\r?\n/)) {
    let line = trimTrailingBlanks(raw);
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
    try {
      rules.push({ matches: matcher(line.replace(/^\//, ""), false, !anchored), negated, dirOnly });
    } catch {
      // A line too long or too complex is left out (git would read it; such a line is no real rule).
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
        if (rule.matches(local)) verdict = !rule.negated;
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

/**
 * The ITEMS that KEEP holds, tested a slice at a time: the event loop is given back every few
 * milliseconds (a cancellation, a timeout and other requests go on being served), and the work stops
 * at SIGNAL's abort.
 */
export async function filterYielding<T>(items: readonly T[], keep: (item: T) => boolean, signal?: AbortSignal): Promise<T[]> {
  const out: T[] = [];
  let slice = Date.now();
  for (let i = 0; i < items.length; i++) {
    if (keep(items[i]!)) out.push(items[i]!);
    if ((i & 63) === 63 && Date.now() - slice > 10) {
      await new Promise((resolve) => setImmediate(resolve));
      signal?.throwIfAborted();
      slice = Date.now();
    }
  }
  return out;
}

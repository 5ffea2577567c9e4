// Permission rules that name commands (PermissionRule.command): `make test*` allows `make test` and
// `make test FOO=1`, never `make test-evil`; `rm *` denies rm. Matched on the words of the command,
// never on its spelling as one string, and asymmetrically, so that a rule can only err on the side of
// asking:
// - allow: an argv command whose words are the rule's words, compared whole (an argv element holding a
//   space is one word, never two), with any further arguments only when the rule ends in `*`. A shell
//   line is allowed only by a rule without `*` whose text is that exact line: whether a line does
//   only what its first words say cannot be told from its spelling (`make test && rm -rf ~`).
// - deny and ask: the rule's program anywhere in the command, matching also by file name (`/bin/rm`,
//   `env rm`, `xargs rm`) and, for the program that runs, by the name of the true file it is
//   (`./del` linking to rm); its further words after it in their order, anything between them
//   (`git -C . push`, `make -C sub test`); in a shell line, the same among its words split at blanks
//   and operators. This errs towards denying (`git log --grep push` is caught by `git push*`). They cannot see a program reached another way (a script, `sh -c`
//   with the name built at run time): the approval each command asks for is the fence, not them.

import { basename } from "node:path";

/** What a call runs, as rules see it (the tool's ToolSpec.command). */
export type CommandTarget = { kind: "argv"; argv: string[]; program?: string } | { kind: "shell"; line: string };

export interface CommandPattern {
  /** The rule's text, trimmed: what a shell line must be to be allowed. */
  text: string;
  words: string[];
  /** Ends in `*`: any further arguments. */
  rest: boolean;
}

/** The words of a rule's command, shell-quoting understood; throws an Error saying what is wrong. */
export function parseCommandPattern(source: string): CommandPattern {
  const text = source.trim();
  const words: string[] = [];
  let word: string | undefined;
  let rest = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (rest) throw new Error("a * may stand only at the end (for any further arguments)");
    if (/\s/u.test(c)) {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1);
      if (end < 0) throw new Error("a ' is not closed");
      word = (word ?? "") + text.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      let j = i + 1;
      let s = "";
      for (; j < text.length && text[j] !== '"'; j++) s += text[j] === "\\" && j + 1 < text.length ? text[++j] : text[j];
      if (j >= text.length) throw new Error('a " is not closed');
      word = (word ?? "") + s;
      i = j;
    } else if (c === "\\") {
      if (i + 1 >= text.length) throw new Error("a \\ ends the command");
      word = (word ?? "") + text[++i];
    } else if (c === "*") {
      if (word !== undefined && word !== "") words.push(word);
      word = undefined;
      rest = true;
    } else {
      word = (word ?? "") + c;
    }
  }
  if (word !== undefined) words.push(word);
  if (words.length === 0) throw new Error("it names no program");
  return { text, words, rest };
}

/** Whether WORDS are PATTERN's words (and only those, unless it ends in `*`). */
function exactPrefix(p: CommandPattern, words: readonly string[]): boolean {
  if (words.length < p.words.length || (!p.rest && words.length !== p.words.length)) return false;
  return p.words.every((w, i) => words[i] === w);
}

/**
 * Whether PATTERN's program occurs anywhere in WORDS (also by file name, and as PROGRAM, the true file
 * the first word runs) with the pattern's further words after it in their order, other words (options,
 * `git -C dir push`) between them allowed.
 */
function occursIn(p: CommandPattern, words: readonly string[], program?: string): boolean {
  const first = p.words[0]!;
  const names = (w: string, i: number): boolean =>
    w === first || (!first.includes("/") && (basename(w) === first || (i === 0 && program !== undefined && basename(program) === first)));
  for (let i = 0; i < words.length; i++) {
    if (!names(words[i]!, i)) continue;
    let k = 1;
    for (let j = i + 1; j < words.length && k < p.words.length; j++) if (words[j] === p.words[k]) k++;
    if (k === p.words.length) return true;
  }
  return false;
}

/** A shell line's words for deny and ask: split at blanks and operators, quotes taken away. */
export function shellWords(line: string): string[] {
  return line
    .split(/[\s;&|()<>`]+|\$\(/u)
    .map((w) => w.replace(/["'\\{}]/gu, ""))
    .filter((w) => w !== "");
}

/** Whether a rule with action ALLOWS (else it denies or asks) and command PATTERN matches TARGET. */
export function commandMatches(p: CommandPattern, target: CommandTarget, allows: boolean): boolean {
  if (target.kind === "argv") return allows ? exactPrefix(p, target.argv) : occursIn(p, target.argv, target.program);
  if (allows) return !p.rest && p.text === target.line.trim();
  return occursIn(p, shellWords(target.line));
}

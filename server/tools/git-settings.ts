// Git's settings that make git run a program, and the project files each names: a write to one of
// them is a program the user's next git command runs (protected-paths.ts). A command's value is read
// as the shell reads it: each simple command's program (a bare name found in PATH, so protected only
// where PATH leads into the project) and every other word that names a file (`sh tools/st.sh` runs
// tools/st.sh). Words that cannot name a file of their own (options, `$VAR`, `%A`) are skipped, and so
// is any path holding the whole project (`cd .`), which would make every write ask.

import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { expandGitPath, type GitConfigEntry } from "./git-config.js";

export const INCLUDED = "a Git config file included by another (include.path): git obeys its settings, which may name programs it runs";

const HOOKS = "Git's hooks directory (core.hooksPath): its hooks run at the next git command";

type Kind = "command" | "path" | "hooks" | "alias" | "helper";

/** What kind of value a setting of Git's takes, when it names a program git runs or a file that
 *  chooses one; undefined for every other setting. */
function kindOf(e: GitConfigEntry): Kind | undefined {
  return listedKind(e) ?? commandByName(e.key);
}

function listedKind(e: GitConfigEntry): Kind | undefined {
  const { section, subsection: sub, key } = e;
  const plain = sub === undefined;
  switch (section) {
    case "core":
      if (!plain) return undefined;
      if (key === "hookspath") return "hooks";
      if (key === "attributesfile") return "path";
      return ["fsmonitor", "sshcommand", "pager", "editor", "askpass", "gitproxy"].includes(key) ? "command" : undefined;
    case "sequence":
      return plain && key === "editor" ? "command" : undefined;
    case "pager":
      return plain ? "command" : undefined;
    case "alias":
      return "alias";
    case "filter":
      return !plain && ["clean", "smudge", "process"].includes(key) ? "command" : undefined;
    case "diff":
      if (plain) return key === "external" ? "command" : undefined;
      return key === "command" || key === "textconv" ? "command" : undefined;
    case "merge":
      return !plain && key === "driver" ? "command" : undefined;
    case "difftool":
    case "mergetool":
      return !plain && (key === "cmd" || key === "path") ? "command" : undefined;
    case "credential":
      return key === "helper" ? "helper" : undefined;
    case "gpg":
      if (key === "program") return "command";
      if (sub?.toLowerCase() === "ssh" && key === "allowedsignersfile") return "path";
      if (sub?.toLowerCase() === "ssh" && key === "defaultkeycommand") return "command";
      return commandByName(key);
    case "sendemail":
      return key === "smtpserver" ? "command" : commandByName(key); // smtpServer may be a program's path.
    case "browser":
    case "man":
      return !plain && key === "path" ? "command" : commandByName(key);
    case "web":
      return plain && key === "browser" ? "command" : commandByName(key);
    case "imap":
      return plain && key === "tunnel" ? "command" : commandByName(key);
    case "instaweb":
      return plain && key === "httpd" ? "command" : commandByName(key);
    default:
      return commandByName(key);
  }
}

// Beyond the settings listed: any key whose name says it runs a program (trailer.*.cmd,
// core.alternateRefsCommand, interactive.diffFilter, remote.*.uploadpack, uploadpack.packObjectsHook...)
// counts as a command, and so does any value starting with `!` (submodule.*.update). Over-reading
// a setting only makes a write ask; missing one lets a program be written unasked.
const COMMAND_KEY = /(?:cmd|command|program|helper|driver|editor|pager|textconv|filter|uploadpack|receivepack|sshcommand|hook|tunnel)$/u;
const commandByName = (key: string): Kind | undefined => (COMMAND_KEY.test(key) ? "command" : undefined);

/** The simple commands of a shell line, each as its words, quotes and escapes removed. */
export function shellCommands(line: string): string[][] {
  const commands: string[][] = [[]];
  let word: string | undefined;
  const end = (): void => {
    if (word !== undefined) commands[commands.length - 1]!.push(word);
    word = undefined;
  };
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (/\s/u.test(c) && c !== "\n") {
      end();
    } else if (";&|()`\n{}".includes(c)) {
      end();
      if (commands[commands.length - 1]!.length > 0) commands.push([]);
    } else if (c === "<" || c === ">") {
      end();
    } else if (c === "'") {
      const close = line.indexOf("'", i + 1);
      word = (word ?? "") + line.slice(i + 1, close < 0 ? line.length : close);
      i = close < 0 ? line.length : close;
    } else if (c === '"') {
      word ??= "";
      for (i++; i < line.length && line[i] !== '"'; i++) {
        if (line[i] === "\\" && i + 1 < line.length && '$`"\\\n'.includes(line[i + 1]!)) i++;
        word += line[i];
      }
    } else if (c === "\\") {
      word = (word ?? "") + (line[++i] ?? "");
    } else {
      word = (word ?? "") + c;
    }
  }
  end();
  return commands.filter((c) => c.length > 0);
}

export interface SettingContext {
  /** The top of the working tree, where git runs its programs and reads relative paths. */
  top: string;
  /** The project root (links resolved). */
  root: string;
  home: string;
  /** The PATH git finds bare program names in. */
  path: string;
}

const inside = (dir: string, path: string): boolean => {
  const rel = relative(dir, path);
  return rel === "" || (!rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel));
};

/** The project files the setting E names that git runs or obeys, and why. */
export function namedBySetting(e: GitConfigEntry, ctx: SettingContext): { path: string; why: string }[] {
  const kind = kindOf(e) ?? (e.value?.trimStart().startsWith("!") ? "alias" : undefined);
  if (kind === undefined || e.value === undefined || e.value.trim() === "") return [];
  const name = [e.section, ...(e.subsection !== undefined ? [e.subsection] : []), e.key].join(".");
  const why = `git runs the program its config names (${name}) at a git command`;
  const at = (word: string): string => resolve(ctx.top, expandGitPath(word, ctx.home));
  // A path holding the whole project would make every write ask: it names no file of its own.
  const named = (path: string, reason: string): { path: string; why: string }[] => (inside(path, ctx.root) ? [] : [{ path, why: reason }]);
  if (kind === "hooks") return [{ path: at(e.value), why: HOOKS }];
  if (kind === "path") return named(at(e.value), `git reads the file its config names (${name}), which decides what it runs or trusts`);
  let line = e.value.trimStart();
  let helper = false;
  if (line.startsWith("!")) line = line.slice(1);
  else if (kind === "alias") return []; // git's own subcommand, no program.
  else if (kind === "helper") {
    // `!cmd` is a shell line; an absolute path a program; a bare name `git credential-NAME`.
    helper = !isAbsolute(expandGitPath(line.trim(), ctx.home)) && !line.trim().startsWith("~");
  }
  const out: { path: string; why: string }[] = [];
  const pathDirs = ctx.path.split(":").map((d) => resolve(ctx.top, d === "" ? "." : d)).filter((d) => inside(ctx.root, d));
  const commandLine = (text: string, credential: boolean, depth: number): void => {
    for (const [n, words] of shellCommands(text).entries()) {
      let w = 0;
      while (w < words.length - 1 && /^[A-Za-z_][A-Za-z0-9_]*=/u.test(words[w]!)) w++; // VAR=value program
      const program = credential && n === 0 ? `git-credential-${words[w]}` : words[w]!;
      if (program.includes("/") || program.startsWith("~")) out.push(...named(at(program), why));
      else for (const dir of pathDirs) out.push({ path: join(dir, program), why });
      // cd's argument is where the rest runs, not a program; the other words may be a script it runs.
      if (program === "cd" || program === "pushd") continue;
      for (const arg of words.slice(w + 1)) {
        const value = arg.startsWith("-") ? arg.slice(arg.indexOf("=") + 1 || arg.length) : arg;
        if (value === "" || /[$%*?]/u.test(value)) continue;
        out.push(...named(at(value), why));
      }
    }
    // A quoted string, `$(...)` or backticks may be a line of its own the shell runs (`sh -c '...'`,
    // `echo "$(tools/p.sh)"`): read as one too.
    if (depth < 8) for (const inner of innerLines(text)) commandLine(inner, false, depth + 1);
  };
  commandLine(line, helper, 0);
  // And whatever the shell makes of it: every path-like piece of the whole value (a word holding a
  // `/`, a `.` or starting with `~`, split at quotes, expansions and operators) that lands inside
  // the project counts.
  for (const token of line.split(SHELL_PIECES)) {
    if (token === "" || token.startsWith("-") || !/[/.~]/u.test(token)) continue;
    const path = at(token);
    if (inside(ctx.root, path)) out.push(...named(path, why));
  }
  return out;
}

/** The texts inside LINE's quotes, `$(...)` and backticks, each a shell line of its own. */
export function innerLines(line: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === "\\") {
      i++;
    } else if (c === "'" || c === '"' || c === "`") {
      let j = i + 1;
      while (j < line.length && line[j] !== c) j += c !== "'" && line[j] === "\\" ? 2 : 1;
      out.push(line.slice(i + 1, Math.min(j, line.length)));
      i = j;
    } else if (c === "$" && line[i + 1] === "(") {
      let depth = 0;
      let j = i + 1;
      for (; j < line.length; j++) {
        if (line[j] === "(") depth++;
        else if (line[j] === ")" && --depth === 0) break;
      }
      out.push(line.slice(i + 2, Math.min(j, line.length)));
      i = j;
    }
  }
  return out;
}

/** What splits a shell line into pieces that may each name a file: blanks, quotes, expansions,
 *  operators, assignments and list separators. */
const SHELL_PIECES = /[\s'"$()`;|&<>{}=:,\\]+/u;

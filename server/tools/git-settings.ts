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
      return undefined;
    default:
      return undefined;
  }
}

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
  const kind = kindOf(e);
  if (kind === undefined || e.value === undefined || e.value.trim() === "") return [];
  const name = [e.section, ...(e.subsection !== undefined ? [e.subsection] : []), e.key].join(".");
  const why = `git runs the program its config names (${name}) at a git command`;
  const at = (word: string): string => resolve(ctx.top, expandGitPath(word, ctx.home));
  // A path holding the whole project would make every write ask: it names no file of its own.
  const named = (path: string, reason: string): { path: string; why: string }[] => (inside(path, ctx.root) ? [] : [{ path, why: reason }]);
  if (kind === "hooks") return [{ path: at(e.value), why: HOOKS }];
  if (kind === "path") return named(at(e.value), `git reads the file its config names (${name}), which decides what it runs or trusts`);
  let line = e.value;
  let helper = false;
  if (kind === "alias") {
    if (!line.startsWith("!")) return []; // git's own subcommand, no program.
    line = line.slice(1);
  } else if (kind === "helper") {
    // `!cmd` is a shell line; an absolute path a program; a bare name `git credential-NAME`.
    if (line.startsWith("!")) line = line.slice(1);
    else helper = !isAbsolute(expandGitPath(line.trim(), ctx.home)) && !line.trim().startsWith("~");
  }
  const out: { path: string; why: string }[] = [];
  const pathDirs = ctx.path.split(":").map((d) => resolve(ctx.top, d === "" ? "." : d)).filter((d) => inside(ctx.root, d));
  for (const [n, words] of shellCommands(line).entries()) {
    let w = 0;
    while (w < words.length - 1 && /^[A-Za-z_][A-Za-z0-9_]*=/u.test(words[w]!)) w++; // VAR=value program
    const program = helper && n === 0 ? `git-credential-${words[w]}` : words[w]!;
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
  return out;
}

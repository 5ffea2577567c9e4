// The project around the image: searching its files, finding files by name, and reading its version
// control. All run in the server (Node) on the files on disk, confined to the project root
// (server/tools/project/); none changes anything.

// node:fs's promises, read where used: node:fs/promises (with readline and the watchers) loaded at the
// first use, not at every server start.
import { promises as fsp } from "node:fs";
import { emacsTool } from "../handlers.js";
import { compileGlob, filterYielding } from "../project/globs.js";
import { listProjectFiles, realRoot } from "../project/files.js";
import { gitBlame, gitDiff, gitLog, gitShow, gitStatus, withRepo, type Repo } from "../project/git.js";
import { projectRoot } from "../project/root.js";
import { formatSearch, searchProject, MAX_MAX_RESULTS, SEARCH_TIME_MS } from "../project/search.js";
import { defineTool, ToolError, type ParamSpec, type Tool, type ToolContext } from "../tool.js";

const projectPath: ParamSpec = { type: "string", description: "File relative to the project root." };
const ref: ParamSpec = { type: "string", description: "A branch, tag or commit (HEAD~2, main, a hash)." };
const maxLines: ParamSpec = { type: "integer", description: "Most output lines (default 400).", minimum: 1 };
const startLine: ParamSpec = { type: "integer", description: "First line of the range.", minimum: 1 };
const endLine: ParamSpec = { type: "integer", description: "Last line of the range.", minimum: 1 };

async function root(ctx: ToolContext): Promise<string> {
  return realRoot(await projectRoot(ctx));
}

/**
 * The project files whose Emacs buffers have unsaved changes (Emacs's buffer_list, rows whose state says
 * "modified"), so that a search of the files on disk can say whose text it did not see. Empty without
 * Emacs or when it does not answer within a second: the search's answer does not wait on it.
 */
async function unsavedFiles(ctx: ToolContext): Promise<string[]> {
  if (!ctx.emacs) return [];
  const signal = AbortSignal.any([ctx.signal, AbortSignal.timeout(1_000)]);
  try {
    const listed = String(await emacsTool("buffer_list")({}, { ...ctx, signal, timeoutMs: 1_000 }));
    return listed
      .split("\n")
      .slice(1)
      .flatMap((row) => {
        const cells = row.split(" | ");
        if (cells.length < 5) return [];
        const file = cells.slice(1, -3).join(" | ");
        return file !== "-" && !file.startsWith("/") && /\bmodified\b/.test(cells[cells.length - 2]!) ? [file] : [];
      });
  } catch {
    return [];
  }
}

/** The search's ripgrep: found on PATH, unless SLY_AGENT_Q_SEARCH_WITHOUT_RG is set (the tests' way to run the server's own walk). */
function ripgrepChoice(): null | undefined {
  return process.env.SLY_AGENT_Q_SEARCH_WITHOUT_RG ? null : undefined;
}

async function searchHandler(a: Record<string, unknown>, ctx: ToolContext): Promise<string> {
  const dir = await root(ctx);
  // Asked of Emacs while the search runs; the answer waits for it at most a second.
  const unsaved = unsavedFiles(ctx);
  const result = await searchProject(dir, {
    pattern: String(a.pattern ?? ""),
    literal: a.literal === true,
    caseMode: a.case === "sensitive" || a.case === "insensitive" ? a.case : "smart",
    wholeWord: a.whole_word === true,
    ...(typeof a.glob === "string" && a.glob !== "" ? { glob: a.glob } : {}),
    ...(typeof a.max_results === "number" ? { maxResults: a.max_results } : {}),
    ...(typeof a.offset === "number" ? { offset: a.offset } : {}),
    ripgrep: ripgrepChoice(),
    privateFiles: ctx.privateFiles,
    signal: ctx.signal,
    timeMs: Math.min(SEARCH_TIME_MS, Math.max(1_000, ctx.timeoutMs - 5_000)),
  });
  return formatSearch(result, await unsaved);
}

const DEFAULT_FILES = 100;
const MAX_FILES = 1_000;

async function findFilesHandler(a: Record<string, unknown>, ctx: ToolContext): Promise<string> {
  const dir = await root(ctx);
  const glob = String(a.glob ?? "");
  if (glob.trim() === "") throw new ToolError("Give a glob, e.g. **/*.asd or src/**/*.lisp.");
  let match: (p: string) => boolean;
  try {
    match = compileGlob(glob);
  } catch (err) {
    throw new ToolError(`Invalid glob ${JSON.stringify(glob)}: ${(err as Error).message}`);
  }
  const listing = await listProjectFiles(dir, { ripgrep: ripgrepChoice(), privateFiles: ctx.privateFiles, signal: ctx.signal, deadline: Date.now() + Math.min(SEARCH_TIME_MS, ctx.timeoutMs / 2) });
  const names = await filterYielding(listing.files, match, ctx.signal);
  const max = Math.min(MAX_FILES, Math.max(1, typeof a.max_results === "number" ? Math.floor(a.max_results) : DEFAULT_FILES));
  const offset = Math.max(0, typeof a.offset === "number" ? Math.floor(a.offset) : 0);
  let rows: { name: string; mtime: number; size: number }[];
  if (a.sort === "name") {
    rows = names.slice(offset, offset + max).map((name) => ({ name, mtime: 0, size: -1 }));
    rows = await Promise.all(rows.map(async (r) => ({ ...r, ...(await stamp(dir, r.name)) })));
  } else {
    // Newest first needs every match's time; bounded by the listing's own bound.
    // A slice at a time, so that 50,000 matches never hold the event loop (nor open as many requests).
    rows = [];
    for (let i = 0; i < names.length; i += 256) {
      ctx.signal.throwIfAborted();
      rows.push(...(await Promise.all(names.slice(i, i + 256).map(async (name) => ({ name, ...(await stamp(dir, name)) })))));
    }
    rows.sort((x, y) => y.mtime - x.mtime || (x.name < y.name ? -1 : 1));
    rows = rows.slice(offset, offset + max);
  }
  const head = `${names.length} file${names.length === 1 ? "" : "s"} match ${glob}${a.sort === "name" ? " (by name)" : " (newest first)"}`;
  const secret = await filterYielding(listing.private, match, ctx.signal);
  const privateNote = secret.length > 0 ? `Left out: ${secret.length} private file${secret.length === 1 ? "" : "s"} holding credentials (sly-agent-q-private-file-regexps).` : "";
  if (names.length === 0) return `No project file matches ${glob} (files ignored by .gitignore are not listed).${listing.stopped ? ` Incomplete: ${listing.stopped}.` : ""}${privateNote ? ` ${privateNote}` : ""}`;
  const more = names.length - offset - rows.length;
  const lines = [
    `${head}; shown ${rows.length === 0 ? "none" : `${offset + 1}-${offset + rows.length}`}${more > 0 ? `; ${more} more: call again with offset ${offset + rows.length}` : ""}.`,
    ...(listing.stopped ? [`Incomplete: ${listing.stopped}.`] : []),
    ...(privateNote ? [privateNote] : []),
    ...rows.map((r) => `${r.name}  ${r.size >= 0 ? `${r.size} bytes, ` : ""}${r.mtime > 0 ? new Date(r.mtime).toISOString().replace(/\.\d+Z$/, "Z") : "?"}`),
  ];
  return lines.join("\n");
}

async function stamp(dir: string, name: string): Promise<{ mtime: number; size: number }> {
  try {
    const st = await fsp.lstat(`${dir}/${name}`);
    return { mtime: st.mtimeMs, size: st.size };
  } catch {
    return { mtime: 0, size: -1 };
  }
}

/** FN run in the repository of the project root, opened and closed around it. */
async function inRepo<T>(ctx: ToolContext, fn: (repo: Repo) => Promise<T>): Promise<T> {
  return withRepo(await root(ctx), fn, ctx.privateFiles);
}

export const projectTools: Tool[] = [
  defineTool({
    name: "search_project",
    description:
      "Search project files on disk (.gitignore respected): matching lines (file:line:column) with neighbours and enclosing Lisp form.",
    parameters: {
      pattern: { type: "string", description: "JavaScript regexp (text if literal)." },
      literal: { type: "boolean", description: "The pattern is plain text." },
      glob: { type: "string", description: "Only files matching (*.lisp, src/**/*.asd)." },
      case: { type: "string", enum: ["smart", "sensitive", "insensitive"], description: "smart (default): insensitive unless the pattern has a capital." },
      whole_word: { type: "boolean", description: "Not inside a longer symbol." },
      max_results: { type: "integer", description: `Most lines shown (default 50, at most ${MAX_MAX_RESULTS}).`, minimum: 1 },
      offset: { type: "integer", description: "Lines to skip (paging).", minimum: 0 },
    },
    required: ["pattern"],
    safety: "safe",
    categories: ["project"],
    runtime: "node",
    timeoutMs: 40_000,
    pagingHint: "Use offset and max_results, or a narrower glob.",
    handler: searchHandler,
  }),
  defineTool({
    name: "find_files",
    description: "Project files matching a glob (.gitignore respected), newest first or by name.",
    parameters: {
      glob: { type: "string", description: "Glob (src/**/*.lisp); one without a slash (*.asd) matches names at any depth." },
      sort: { type: "string", enum: ["newest", "name"], description: "newest (default) or name." },
      max_results: { type: "integer", description: `Most files shown (default ${DEFAULT_FILES}).`, minimum: 1 },
      offset: { type: "integer", description: "Files to skip (paging).", minimum: 0 },
    },
    required: ["glob"],
    safety: "safe",
    categories: ["project"],
    runtime: "node",
    timeoutMs: 40_000,
    handler: findFilesHandler,
  }),
  defineTool({
    name: "git_status",
    description: "git status of the project: branch, changed, staged and untracked files.",
    parameters: {},
    safety: "safe",
    categories: ["vcs"],
    runtime: "node",
    handler: async (_a, ctx) => inRepo(ctx, (r) => gitStatus(r, ctx.signal)),
  }),
  defineTool({
    name: "git_diff",
    description: "git diff: the working tree's changes, the staged ones, or against a ref; one file or all.",
    parameters: {
      path: projectPath,
      staged: { type: "boolean", description: "The staged changes (index against HEAD)." },
      ref: { ...ref, description: "Compare with this commit instead (HEAD~1, main)." },
      max_lines: maxLines,
    },
    safety: "safe",
    categories: ["vcs"],
    runtime: "node",
    handler: async (a, ctx) => inRepo(ctx, (r) => gitDiff(r, a, ctx.signal)),
  }),
  defineTool({
    name: "git_log",
    description: "git log of the project, of a file, or of a file's line range (with the changes to those lines).",
    parameters: { path: projectPath, start_line: startLine, end_line: endLine, ref: { ...ref, description: "Start from this commit (default HEAD)." }, max_count: { type: "integer", description: "Most commits (default 20).", minimum: 1 }, max_lines: maxLines },
    safety: "safe",
    categories: ["vcs"],
    runtime: "node",
    handler: async (a, ctx) => inRepo(ctx, (r) => gitLog(r, a, ctx.signal)),
  }),
  defineTool({
    name: "git_blame",
    description: "git blame of a file's line range: the commit, author and date of each line.",
    parameters: { path: projectPath, start_line: startLine, end_line: endLine, ref: { ...ref, description: "Blame as of this commit." } },
    required: ["path"],
    safety: "safe",
    categories: ["vcs"],
    runtime: "node",
    handler: async (a, ctx) => inRepo(ctx, (r) => gitBlame(r, a, ctx.signal)),
  }),
  defineTool({
    name: "git_show",
    description: "git show: a commit's message, files changed and patch.",
    parameters: { ref: { ...ref, description: "Commit (default HEAD)." }, path: { ...projectPath, description: "Only this file." }, max_lines: maxLines },
    safety: "safe",
    categories: ["vcs"],
    runtime: "node",
    handler: async (a, ctx) => inRepo(ctx, (r) => gitShow(r, a, ctx.signal)),
  }),
];

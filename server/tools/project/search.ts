// search_project: a regular expression (JavaScript's syntax) or a literal string over the project's files
// on disk (files.ts lists them, ripgrep or the server's own walk). The files are read and matched in a
// worker thread, so that a long search never holds up the server's messages and an expression that
// backtracks without end is stopped by terminating the worker. Each matching line comes with its
// neighbours and, in a Lisp file, the top-level form it falls in.

import { constants } from "node:fs";
import { ToolError, type PrivateFileRule } from "../tool.js";
import { compileGlob, filterYielding } from "./globs.js";
import { loadWorkerThreads } from "../../lazy-builtins.js";
import { listProjectFiles } from "./files.js";

/** Files larger than this are skipped (and counted): logs, dumps and images are not sources. */
export const MAX_SEARCH_FILE_BYTES = 4 * 1024 * 1024;
/** A shown line is cut to this many characters around its match (a minified or generated line). */
const MAX_SHOWN_LINE = 240;
export const DEFAULT_MAX_RESULTS = 50;
export const MAX_MAX_RESULTS = 500;
/** A search gives up after this long (ms), keeping what it found. */
export const SEARCH_TIME_MS = 20_000;

export interface SearchOptions {
  pattern: string;
  literal?: boolean;
  /** "smart" (the default): case-insensitive unless the pattern has an upper-case letter. */
  caseMode?: "sensitive" | "insensitive" | "smart";
  wholeWord?: boolean;
  glob?: string;
  maxResults?: number;
  offset?: number;
  /** ripgrep's executable, null for the server's own walk, undefined to look on PATH. */
  ripgrep?: string | null;
  /** The rule for files of credentials (the built-in names when not given). */
  privateFiles?: PrivateFileRule;
  signal?: AbortSignal;
  timeMs?: number;
}

export interface SearchMatch {
  file: string;
  line: number;
  column: number;
  before?: string;
  text: string;
  after?: string;
  /** The top-level form a Lisp file's match falls in: its first words and its line. */
  form?: { label: string; line: number };
}

export interface SearchResult {
  pattern: string;
  glob?: string;
  /** The files listed for the search (relative to the root), before the binary and size rules. */
  listed: readonly string[];
  flags: string;
  filesListed: number;
  filesSearched: number;
  matchingLines: number;
  matchingFiles: number;
  matches: SearchMatch[];
  offset: number;
  binary: string[];
  tooLarge: string[];
  latin1: string[];
  unreadable: string[];
  stopped?: string;
  listedBy: "ripgrep" | "walk";
  /** Files of credentials the search left out (in the glob, when one was given). */
  private: string[];
}

// What makes a Lisp symbol: whole_word means the match is not part of a longer one (parse in parse-input).
const SYMBOL_CHAR = "[\\w\\-*+/<>=!?%&$~^@.]";

/** The regular expression a search uses, or a ToolError saying why the pattern is not one. */
export function searchRegExp(o: Pick<SearchOptions, "pattern" | "literal" | "caseMode" | "wholeWord">): RegExp {
  if (typeof o.pattern !== "string" || o.pattern === "") throw new ToolError("The pattern is empty.");
  let source = o.literal ? o.pattern.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&") : o.pattern;
  if (o.wholeWord) source = `(?<!${SYMBOL_CHAR})(?:${source})(?!${SYMBOL_CHAR})`;
  const mode = o.caseMode ?? "smart";
  const insensitive = mode === "insensitive" || (mode === "smart" && !/[A-Z]/.test(o.literal ? o.pattern : o.pattern.replace(/\\./g, "")));
  try {
    return new RegExp(source, insensitive ? "i" : "");
  } catch (err) {
    throw new ToolError(`Invalid regular expression ${JSON.stringify(o.pattern)}: ${(err as Error).message}. Give literal: true to search for the text as it is.`);
  }
}

export async function searchProject(root: string, o: SearchOptions): Promise<SearchResult> {
  const re = searchRegExp(o);
  const timeMs = o.timeMs ?? SEARCH_TIME_MS;
  const deadline = Date.now() + timeMs;
  let inGlob: ((p: string) => boolean) | undefined;
  if (o.glob) {
    try {
      inGlob = compileGlob(o.glob);
    } catch (err) {
      throw new ToolError(`Invalid glob ${JSON.stringify(o.glob)}: ${(err as Error).message}`);
    }
  }
  const listing = await listProjectFiles(root, { ripgrep: o.ripgrep, privateFiles: o.privateFiles, signal: o.signal, deadline: deadline - timeMs / 2 });
  const files = inGlob ? await filterYielding(listing.files, inGlob, o.signal) : listing.files;
  const offset = Math.max(0, Math.floor(o.offset ?? 0));
  const max = Math.min(MAX_MAX_RESULTS, Math.max(1, Math.floor(o.maxResults ?? DEFAULT_MAX_RESULTS)));
  const input: WorkerInput = {
    root,
    files,
    source: re.source,
    flags: re.flags,
    offset,
    max,
    maxFileBytes: MAX_SEARCH_FILE_BYTES,
    maxShown: MAX_SHOWN_LINE,
    deadline,
    openFlags: constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK,
    // A file is first tested whole (multiline), and read line by line only when it matches: the same
    // lines, unless the pattern's own lookarounds could see past a line's end.
    wholeFileFirst: !/\(\?[=!<]/.test(o.pattern) || o.literal === true,
  };
  const found = await runInWorker(input, deadline + 2_000, o.signal);
  const stopped = [listing.stopped, found.stopped].filter((s): s is string => !!s).join("; ");
  return { pattern: o.pattern, ...(o.glob ? { glob: o.glob } : {}), listed: files, flags: re.flags, filesListed: files.length, ...found, offset, listedBy: listing.by, private: inGlob ? await filterYielding(listing.private, inGlob, o.signal) : listing.private, ...(stopped ? { stopped } : {}) };
}

interface WorkerInput {
  root: string;
  files: string[];
  source: string;
  flags: string;
  offset: number;
  max: number;
  maxFileBytes: number;
  maxShown: number;
  deadline: number;
  openFlags: number;
  wholeFileFirst: boolean;
}

type WorkerOutput = Omit<SearchResult, "pattern" | "glob" | "listed" | "flags" | "filesListed" | "offset" | "listedBy" | "private">;

function runInWorker(input: WorkerInput, hardDeadline: number, signal?: AbortSignal): Promise<WorkerOutput> {
  const code = `const { parentPort, workerData } = require("node:worker_threads");\nparentPort.postMessage((${matchFiles.toString()})(workerData, require("node:fs")));`;
  return loadWorkerThreads().then(({ Worker }) => new Promise<WorkerOutput>((resolve, reject) => {
    const worker = new Worker(code, { eval: true, workerData: input, resourceLimits: { maxOldGenerationSizeMb: 512 } });
    let settled = false;
    const finish = (f: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      void worker.terminate();
      f();
    };
    const timer = setTimeout(
      () => finish(() => reject(new ToolError("The search took too long and was stopped: the regular expression may backtrack without end on some line. Simplify it, or give literal: true or a narrower glob."))),
      Math.max(1, hardDeadline - Date.now()),
    );
    const onAbort = () => finish(() => reject(new ToolError("The search was cancelled.")));
    signal?.addEventListener("abort", onAbort);
    worker.on("message", (m: WorkerOutput) => finish(() => resolve(m)));
    worker.on("error", (err) => finish(() => reject(new ToolError(`The search failed: ${err.message}`))));
    worker.on("exit", (code) => finish(() => reject(new ToolError(`The search stopped (status ${code}) before it was done.`))));
  }));
}

/**
 * The worker's whole work, self-contained (it is sent to the worker as source text): reads each file
 * without following a link, skips the large and the binary, reads what is not UTF-8 as Latin-1, and
 * records the matching lines of the page asked for while counting all of them.
 */
function matchFiles(input: WorkerInput, fs: typeof import("node:fs")): WorkerOutput {
  const re = new RegExp(input.source, input.flags);
  const whole = new RegExp(input.source, `${input.flags}m`);
  const lispFile = /\.(lisp|lsp|cl|asd|el|ros)$/i;
  const out: WorkerOutput = { filesSearched: 0, matchingLines: 0, matchingFiles: 0, matches: [], binary: [], tooLarge: [], latin1: [], unreadable: [] };
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  const space = Buffer.alloc(input.maxFileBytes);
  const cut = (line: string, column: number): string => {
    if (line.length <= input.maxShown) return line;
    const start = Math.max(0, Math.min(column - Math.floor(input.maxShown / 3), line.length - input.maxShown));
    const end = start + input.maxShown;
    return `${start > 0 ? `[${start} characters]…` : ""}${line.slice(start, end)}${end < line.length ? `…[${line.length - end} characters]` : ""}`;
  };
  for (const rel of input.files) {
    if (Date.now() > input.deadline) {
      out.stopped = `the search ran out of time after ${out.filesSearched} files`;
      break;
    }
    let buf: Buffer;
    let fd: number | undefined;
    try {
      fd = fs.openSync(`${input.root}/${rel}`, input.openFlags);
      const st = fs.fstatSync(fd);
      if (!st.isFile()) continue;
      if (st.size > input.maxFileBytes) {
        out.tooLarge.push(rel);
        continue;
      }
      // Into one buffer reused for every file: a file that grew since its stat is read to its size then.
      let got = 0;
      for (let n = -1; n !== 0 && got < st.size; got += n) n = fs.readSync(fd, space, got, st.size - got, got);
      buf = space.subarray(0, got);
    } catch {
      out.unreadable.push(rel);
      continue;
    } finally {
      if (fd !== undefined) fs.closeSync(fd);
    }
    if (buf.subarray(0, 8000).includes(0)) {
      out.binary.push(rel);
      continue;
    }
    let text: string;
    try {
      text = utf8.decode(buf);
    } catch {
      text = buf.toString("latin1");
      out.latin1.push(rel);
    }
    out.filesSearched++;
    // Carriage returns are cut from each line below, which a whole-file test would not see.
    if (input.wholeFileFirst && !text.includes("\r") && !whole.test(text)) continue;
    const lines = text.split("\n");
    const lisp = lispFile.test(rel);
    let form: { label: string; line: number } | undefined;
    let matched = false;
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!.replace(/\r$/, "");
      if (lisp && line.startsWith("(")) {
        const head = /^\((\S+)(\s+[^\s()]+)?/.exec(line);
        form = { label: head ? `(${head[1]}${head[2] ?? ""}` : line.slice(0, 40), line: i + 1 };
      }
      const m = re.exec(line);
      if (!m) continue;
      matched = true;
      const n = out.matchingLines++;
      if (n < input.offset || n >= input.offset + input.max) continue;
      const column = m.index;
      const match: SearchMatch = { file: rel, line: i + 1, column: column + 1, text: cut(line, column) };
      if (i > 0) match.before = cut(lines[i - 1]!.replace(/\r$/, ""), column);
      if (i + 1 < lines.length && !(i + 2 === lines.length && lines[i + 1] === "")) match.after = cut(lines[i + 1]!.replace(/\r$/, ""), column);
      if (form && lisp) match.form = { ...form };
      out.matches.push(match);
    }
    if (matched) out.matchingFiles++;
  }
  return out;
}

/** Names, a few of them: "a.bin, b.bin and 3 more". */
function someNames(names: string[], n = 5): string {
  return names.length <= n ? names.join(", ") : `${names.slice(0, n).join(", ")} and ${names.length - n} more`;
}

/** The result as the model reads it. UNSAVED: project files whose Emacs buffer has unsaved changes
 *  (those among the files searched are named). */
export function formatSearch(r: SearchResult, unsaved: string[] = []): string {
  const lines: string[] = [];
  if (r.glob && r.filesListed === 0) {
    return `No project file matches the glob ${r.glob} (files .gitignore leaves out are not searched), so nothing was searched.${r.stopped ? ` Incomplete: ${r.stopped}.` : ""}`;
  }
  const listed = new Set(r.listed);
  unsaved = unsaved.filter((f) => listed.has(f));
  const how = `/${r.pattern}/${r.flags.includes("i") ? " (case-insensitive)" : ""}`;
  lines.push(`Searched ${r.filesSearched} of ${r.filesListed} project files on disk for ${how}: ${r.matchingLines} matching line${r.matchingLines === 1 ? "" : "s"} in ${r.matchingFiles} file${r.matchingFiles === 1 ? "" : "s"}.`);
  if (r.matches.length > 0) {
    const first = r.offset + 1;
    const last = r.offset + r.matches.length;
    const more = r.matchingLines - last;
    lines.push(`Shown: ${first}-${last}${more > 0 ? `; ${more} more: call again with offset ${last}` : ""}.`);
  } else if (r.matchingLines > 0) lines.push(`None shown: offset ${r.offset} is past the last of them.`);
  const skipped: string[] = [];
  if (r.binary.length) skipped.push(`${r.binary.length} binary (${someNames(r.binary)})`);
  if (r.tooLarge.length) skipped.push(`${r.tooLarge.length} over ${MAX_SEARCH_FILE_BYTES / 1024 / 1024} MB (${someNames(r.tooLarge)})`);
  if (r.unreadable.length) skipped.push(`${r.unreadable.length} unreadable (${someNames(r.unreadable)})`);
  if (r.private.length) skipped.push(`${r.private.length} private, holding credentials by sly-agent-q-private-file-regexps (${someNames(r.private)})`);
  if (skipped.length) lines.push(`Skipped: ${skipped.join(", ")}.`);
  if (r.latin1.length) lines.push(`Not UTF-8, read as Latin-1: ${someNames(r.latin1)}.`);
  if (r.stopped) lines.push(`Incomplete: ${r.stopped}; narrow the search with glob.`);
  if (unsaved.length) {
    lines.push(`Unsaved: the buffers visiting ${someNames(unsaved)} have changes not saved; their files on disk were searched, not the buffers' text (read_file reads the buffer).`);
  }
  for (const m of r.matches) {
    lines.push("");
    lines.push(`${m.file}:${m.line}:${m.column}${m.form ? ` in ${m.form.label} (line ${m.form.line})` : ""}`);
    if (m.before !== undefined) lines.push(`  ${m.line - 1}  ${m.before}`);
    lines.push(`> ${m.line}  ${m.text}`);
    if (m.after !== undefined) lines.push(`  ${m.line + 1}  ${m.after}`);
  }
  return lines.join("\n");
}

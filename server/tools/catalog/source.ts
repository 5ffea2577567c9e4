// The Lisp programmer's loop: where a definition lives, its source form, replacing it in its
// file (reviewed as a diff, then compiled from the file so that image and file agree), ASDF systems and
// their tests, and the backend's other cross-references. The image does the looking up and compiling
// (lisp-cl/source.lisp, systems.lisp, testing.lisp); Emacs makes the file edit, confined to the project.

import { realpathSync } from "node:fs";
import { isAbsolute, relative, resolve } from "node:path";
import { emacsTool, imageTool, inImage } from "../handlers.js";
import { pkg } from "./image.js";
import { projectRoot } from "../project/root.js";
import { defineTool, ToolError, type ParamSpec, type Tool, type ToolContext } from "../tool.js";


const symbol: ParamSpec = { type: "string", description: "Name, e.g. app::parse-input." };
const which: ParamSpec = { type: "string", description: "Which one, as find_definition labels it (when several)." };
const system: ParamSpec = { type: "string", description: "ASDF system name." };
const description: ParamSpec = { type: "string", description: "One line telling the user why." };
const acceptedHunks: ParamSpec = { type: "array", items: { type: "integer" }, description: "Set by the user's review; leave it out.", notOffered: true };

// Waits for the image twice (locating, compiling) and for Emacs's edit; the image's own timeout applies to each.
const EDIT_TIMEOUT_MS = 180_000;

/** Where the image found the definition an edit is about (lisp-cl/source.lisp, definition_edit). */
interface DefinitionPlan {
  file: string;
  line: number;
  label: string;
  old: string;
  /** The new text's #. forms (what follows each #.), read by the image without evaluating them. */
  readEval?: string[];
  /** Those of readEval the definition's form does not have: what a replacement adds. */
  readEvalNew?: string[];
}

const strings = (value: unknown): string[] => (Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : []);

function isPlan(value: unknown): value is DefinitionPlan {
  if (!value || typeof value !== "object") return false;
  const v = value as Record<string, unknown>;
  return typeof v.file === "string" && typeof v.line === "number" && typeof v.label === "string" && typeof v.old === "string";
}

const str = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined);

async function locate(name: unknown, text: unknown, args: Record<string, unknown>, ctx: ToolContext): Promise<DefinitionPlan> {
  const query: Record<string, unknown> = { symbol: name };
  if (text !== undefined) query.text = text;
  if (str(args.package)) query.package = args.package;
  if (str(args.definition)) query.definition = args.definition;
  let answer: unknown;
  try {
    answer = await imageTool("definition_edit")(query, ctx);
  } catch (err) {
    await explainMissedForm(err, ctx);
    throw err;
  }
  let plan: unknown;
  try {
    plan = JSON.parse(String(answer));
  } catch {
    throw new ToolError(`The image's answer locating ${String(name)} was not understood: ${String(answer).slice(0, 200)}`);
  }
  if (!isPlan(plan)) throw new ToolError(`The image's answer locating ${String(name)} lacks the file or the form.`);
  return plan;
}

/** An edit of a file: where (FILE, absolute), what Emacs's propose_file_edit gets, the form to compile,
 *  and the #. forms it brings that the file did not have there (each "#.FORM"), which compiling evaluates. */
interface FileEdit {
  file: string;
  label: string;
  change: Record<string, unknown>;
  form: string;
  readEval: string[];
}

/** The #. forms FORMS as written ("#." and what follows). */
const withSharpDot = (forms: string[]): string[] => forms.map((f) => `#.${f}`);

/**
 * What the approval of EDIT shows besides the diff: the #. forms it adds, labelled as what they are.
 * The same #. forms as the definition it replaces (a shared declaration such as cl-ppcre's
 * #.*standard-optimize-settings*) add nothing: the file's loading runs them already.
 */
function preview(edit: FileEdit, form: unknown): Record<string, unknown> {
  return {
    edit: edit.change,
    form,
    // Emacs's review says what these are (code run as the text is read), above the diff.
    ...(edit.readEval.length ? { read_time_evaluation: edit.readEval } : {}),
  };
}

type EditPlanner = (args: Record<string, unknown>, ctx: ToolContext) => Promise<FileEdit>;

const withDescription = (change: Record<string, unknown>, args: Record<string, unknown>) =>
  str(args.description) ? { ...change, description: args.description } : change;

/** The buffer with unsaved changes that the first line of Emacs's read_file answer names, if any. */
function unsavedBuffer(header: string): string | undefined {
  return /read from buffer (.*), which has unsaved changes/.exec(header)?.[1];
}

/**
 * Refuses, before the review, an edit of a file whose visiting buffer has unsaved changes: the edit would land
 * in the buffer, which is not saved over the user's work, and the form is compiled from the file, which would
 * not hold it. Saving is the user's call, so the answer says so and nothing is changed.
 * HEADER is the first line of Emacs's read_file answer, which names such a buffer.
 */
function refuseUnsaved(header: string, file: string): void {
  const buffer = unsavedBuffer(header);
  if (buffer) {
    throw new ToolError(
      `The buffer ${buffer} visiting ${file} has unsaved changes, so nothing was changed: the form is compiled ` +
        "from the file, and the edit would stay in the unsaved buffer. Ask the user to save (or revert) the buffer, then try again.",
    );
  }
}

/** refuseUnsaved for FILE, asking Emacs; without Emacs (or outside the project) propose_file_edit answers for itself. */
async function refuseUnsavedBuffer(file: string, ctx: ToolContext): Promise<void> {
  let read: string;
  try {
    read = String(await emacsTool("read_file")({ path: file, offset: 1, limit: 1 }, ctx));
  } catch {
    return;
  }
  const newline = read.indexOf("\n");
  refuseUnsaved(newline < 0 ? read : read.slice(0, newline), file);
}

// How the image says a definition's recorded place in its file holds another form (lisp-cl/source.lisp, locate-form).
const MISSED_FORM = /The form at (.+):\d+ is not the definition of (\S+) any more/;

/**
 * When the image did not find a definition's form where it recorded it, and the buffer visiting that file has
 * unsaved changes, says so instead: the definition was most likely compiled from that buffer (C-c C-c), whose
 * text the file does not hold yet. The image's advice, to load the file again, would put the file's older
 * definitions over the user's. Any other failure is left as it is.
 */
async function explainMissedForm(err: unknown, ctx: ToolContext): Promise<void> {
  const m = err instanceof Error ? MISSED_FORM.exec(err.message) : null;
  if (!m) return;
  const [, file, name] = m;
  let read: string;
  try {
    read = String(await emacsTool("read_file")({ path: file, offset: 1, limit: 1 }, ctx));
  } catch {
    return;
  }
  const buffer = unsavedBuffer(read.split("\n", 1)[0]);
  if (buffer) {
    throw new ToolError(
      `${name} is not where ${file} has it: the buffer ${buffer} visiting it has unsaved changes, and the image's ` +
        "definition was most likely compiled from that buffer's text, which the file does not hold yet. Nothing was changed. " +
        "Ask the user to save (or revert) the buffer, then try again.",
    );
  }
}

/** replace_definition: the definition's form, located by the image, gives way to new_text. */
const replaceEdit: EditPlanner = async (args, ctx) => {
  const form = String(args.new_text).trim();
  const plan = await locate(args.symbol, form, args, ctx);
  await refuseUnsavedBuffer(plan.file, ctx);
  return { file: plan.file, label: plan.label, form, readEval: withSharpDot(strings(plan.readEvalNew)), change: withDescription({ path: plan.file, old_text: plan.old, new_text: form }, args) };
};


/** The shortest end of TEXT (trailing blanks aside), from a line start, that occurs once in TEXT. */
function uniqueTail(text: string): string | undefined {
  const body = text.replace(/\s+$/, "");
  for (let start = body.lastIndexOf("\n") + 1; ; start = body.lastIndexOf("\n", start - 2) + 1) {
    const tail = body.slice(start);
    if (tail.trim() !== "" && text.indexOf(tail) === text.lastIndexOf(tail)) return tail;
    if (start === 0) return undefined;
  }
}

/** insert_form: after the form of the definition AFTER, or at the end of the file PATH. */
const insertEdit: EditPlanner = async (args, ctx) => {
  const form = String(args.text).trim();
  if (str(args.after)) {
    const plan = await locate(args.after, form, args, ctx);
    await refuseUnsavedBuffer(plan.file, ctx);
    return { file: plan.file, label: form.split("\n")[0], form, readEval: withSharpDot(strings(plan.readEval)), change: withDescription({ path: plan.file, old_text: plan.old, new_text: `${plan.old}\n\n${form}` }, args) };
  }
  const path = str(args.path);
  if (!path) throw new ToolError("Give after (the definition to insert after) or path (a project file to append to).");
  // The image checks the form (it does not read the file); Emacs reads the file as the user sees it.
  const checked = await imageTool("definition_edit")({ text: form }, ctx);
  let readEval: string[] = [];
  try {
    readEval = withSharpDot(strings((JSON.parse(String(checked)) as Record<string, unknown>).readEval));
  } catch {
    throw new ToolError(`The image's answer checking the form was not understood: ${String(checked).slice(0, 200)}`);
  }
  const file = isAbsolute(path) ? path : resolve(await projectRoot(ctx, "the file was not edited"), path);
  const read = String(await emacsTool("read_file")({ path: file }, ctx));
  const newline = read.indexOf("\n");
  const header = newline < 0 ? read : read.slice(0, newline);
  refuseUnsaved(header, file);
  if (/: empty file/.test(header)) return { file, label: form.split("\n")[0], form, readEval, change: withDescription({ path: file, new_content: `${form}\n` }, args) };
  const text = read.slice(newline + 1);
  if (/more lines?; call read_file/.test(text) || /was cut\.\]/.test(text)) {
    throw new ToolError(`${path} is too long to append to this way: use insert_form with after, or propose_file_edit.`);
  }
  const tail = uniqueTail(text);
  if (!tail) throw new ToolError(`The end of ${path} could not be told apart from the rest: use insert_form with after, or propose_file_edit.`);
  return { file, label: form.split("\n")[0], form, readEval, change: withDescription({ path: file, old_text: tail, new_text: `${tail}\n\n${form}` }, args) };
};

/** Applies the reviewed edit in Emacs, then compiles the new form from the file in the image. */
async function applyAndCompile(planner: EditPlanner, args: Record<string, unknown>, ctx: ToolContext): Promise<string> {
  const edit = await planner(args, ctx);
  // The file is found as the call runs: a protected one asks here, saying why.
  await ctx.confirmWrite?.(edit.file);
  const change = Array.isArray(args.accepted_hunks) ? { ...edit.change, accepted_hunks: args.accepted_hunks } : edit.change;
  const applied = String(await emacsTool("propose_file_edit")(change, ctx));
  if (!applied.startsWith("Applied all")) {
    return `${applied}\nThe form was not compiled: the file does not hold the whole edit (the image is unchanged).`;
  }
  try {
    const compiled = await imageTool("compile_file_form")({ path: edit.file, text: edit.form }, ctx);
    const ran = edit.readEval.length ? `\nIts new #. forms ran as it was read (read-time evaluation): ${edit.readEval.join(", ")}` : "";
    return `${applied}\n${String(compiled)}${ran}`;
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new ToolError(`${applied}\nBut compiling it failed: ${why}`);
  }
}

/** read_definition: the form as the image located it, or the text of the buffer visiting its file when that differs. */
async function readDefinition(args: Record<string, unknown>, ctx: ToolContext): Promise<string> {
  const plan = await locate(args.symbol, undefined, args, ctx);
  // A definition loaded from outside the project (a library's): the user's rule decides, at the executor.
  if (!(await insideProject(plan.file, ctx))) {
    if (!ctx.readOutside) throw new ToolError(`${plan.file} is outside the project root; nothing was read.`);
    await ctx.readOutside(plan.file);
  }
  const lines = plan.old.split("\n").length;
  const end = plan.line + lines - 1;
  const head = `${plan.label} in ${plan.file}:${plan.line}-${end}:\n`;
  try {
    const read = String(await emacsTool("read_file")({ path: plan.file, offset: plan.line, limit: lines }, ctx));
    const newline = read.indexOf("\n");
    const body = read.slice(newline + 1);
    if (/unsaved changes/.test(read.slice(0, newline)) && body.trimEnd() !== plan.old.trimEnd()) {
      return `${head}${plan.old}\n\nThe buffer visiting it has unsaved changes; its lines ${plan.line}-${end} read:\n${body}`;
    }
  } catch {
    // Outside the project, or no Emacs tools: the file's text is what there is.
  }
  return `${head}${plan.old}\n`;
}

/** Whether FILE (absolute) is inside the project root, links resolved; false when no root is known. */
async function insideProject(file: string, ctx: ToolContext): Promise<boolean> {
  let root: string;
  try {
    root = await projectRoot(ctx);
  } catch {
    return false;
  }
  const real = (p: string): string => {
    try {
      return realpathSync(p);
    } catch {
      return resolve(p);
    }
  };
  const rel = relative(real(root), real(file));
  return rel !== "" && !rel.startsWith("..") && !isAbsolute(rel);
}

/** list_systems: the systems under the project root are named unless another directory is given. */
async function listSystems(args: Record<string, unknown>, ctx: ToolContext): Promise<unknown> {
  const query = { ...args };
  if (!str(query.directory)) {
    try {
      query.directory = await projectRoot(ctx);
    } catch {
      // No project root known: the list alone.
    }
  }
  return imageTool("list_systems")(query, ctx);
}

export const sourceTools: Tool[] = [
  defineTool({
    name: "find_definition",
    description: "Where a symbol is defined in source: file, line, first line of each.",
    parameters: { symbol, package: pkg },
    required: ["symbol"],
    safety: "safe",
    categories: ["introspection", "navigation"],
    ...inImage("find_definition"),
  }),
  defineTool({
    name: "read_definition",
    description: "A definition's source form, from its file (or the buffer visiting it).",
    parameters: { symbol, package: pkg, definition: which },
    required: ["symbol"],
    safety: "safe",
    categories: ["introspection", "navigation"],
    runtime: "node",
    timeoutMs: EDIT_TIMEOUT_MS,
    handler: readDefinition,
  }),
  defineTool({
    name: "replace_definition",
    description:
      "Replace a definition's form in its file (reviewed as a diff), then compile it from there. New #. forms are shown to the user as read-time evaluation.",
    parameters: {
      symbol,
      new_text: { type: "string", description: "The complete new form." },
      package: pkg,
      definition: which,
      description,
      accepted_hunks: acceptedHunks,
    },
    required: ["symbol", "new_text"],
    safety: "dangerous",
    categories: ["diff", "filesystem", "evaluation"],
    runtime: "node",
    timeoutMs: EDIT_TIMEOUT_MS,
    review: "form",
    preview: async (args, ctx) => preview(await replaceEdit(args, ctx), args.new_text),
    handler: (args, ctx) => applyAndCompile(replaceEdit, args, ctx),
  }),
  defineTool({
    name: "insert_form",
    description: "Insert a new top-level form after a definition, or at a file's end (reviewed), then compile it.",
    parameters: {
      text: { type: "string", description: "The new form." },
      after: { type: "string", description: "Name of the definition to insert after." },
      path: { type: "string", description: "Or: the project file to append to." },
      package: pkg,
      definition: which,
      description,
      accepted_hunks: acceptedHunks,
    },
    required: ["text"],
    writesFile: "path",
    safety: "dangerous",
    categories: ["diff", "filesystem", "evaluation"],
    runtime: "node",
    timeoutMs: EDIT_TIMEOUT_MS,
    review: "form",
    preview: async (args, ctx) => preview(await insertEdit(args, ctx), args.text),
    handler: (args, ctx) => applyAndCompile(insertEdit, args, ctx),
  }),
  defineTool({
    name: "definition_edit",
    description: "Internal: check a new form's text and locate a definition's form.",
    parameters: { symbol, text: { type: "string", description: "The new form, to check." }, package: pkg, definition: which },
    safety: "safe",
    categories: ["introspection"],
    internal: true,
    ...inImage("definition_edit"),
  }),
  defineTool({
    name: "compile_file_form",
    description: "Internal: compile a form as it stands in a file, recording the file as its source.",
    parameters: {
      path: { type: "string", description: "Absolute file name." },
      text: { type: "string", description: "The form, as in the file." },
    },
    required: ["path", "text"],
    safety: "dangerous",
    categories: ["evaluation"],
    internal: true,
    ...inImage("compile_file_form"),
  }),
  defineTool({
    name: "xref",
    description: "Cross-references: who binds or sets a variable, methods specializing a class, a function's callees.",
    parameters: {
      kind: { type: "string", enum: ["binds", "sets", "specializes", "callees", "macroexpands"], description: "What to list." },
      name: { type: "string", description: "Variable, class, function or macro name." },
      package: pkg,
    },
    required: ["kind", "name"],
    safety: "safe",
    categories: ["introspection", "xref"],
    ...inImage("xref"),
  }),
  defineTool({
    name: "list_systems",
    description: "The ASDF systems the image knows, marking those under a directory.",
    parameters: { directory: { type: "string", description: "Absolute directory (default: the project root)." } },
    safety: "safe",
    categories: ["introspection", "systems"],
    ...inImage("list_systems"),
    handler: listSystems,
  }),
  defineTool({
    name: "system_info",
    description: "An ASDF system's file, dependencies and components.",
    parameters: { system },
    required: ["system"],
    safety: "safe",
    categories: ["introspection", "systems"],
    ...inImage("system_info"),
  }),
  defineTool({
    name: "load_system",
    description: "Load an ASDF system (Quicklisp when present); returns compiler warnings per file and form.",
    parameters: { system },
    required: ["system"],
    safety: "cautious",
    categories: ["execution", "evaluation", "systems"],
    ...inImage("load_system"),
  }),
  defineTool({
    name: "run_tests",
    description:
      "Run a system's tests, or one suite or test: the framework that ran (FiveAM, SB-RT/RT, Parachute, Rove, lisp-unit, or the system's own runner), its counts and failures; the test system's compiler warnings counted apart.",
    parameters: {
      system: { type: "string", description: "Run asdf:test-system on this system." },
      compile_log: { type: "boolean", description: "Also show the compiler's log of loading the test system." },
      suite: { type: "string", description: "Or run this suite." },
      test: { type: "string", description: "Or run this single test." },
      package: pkg,
    },
    safety: "cautious",
    categories: ["execution", "evaluation", "systems"],
    ...inImage("run_tests"),
  }),
];

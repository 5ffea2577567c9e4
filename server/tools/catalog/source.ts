// The Lisp programmer's loop (issue 12): where a definition lives, its source form, replacing it in its
// file (reviewed as a diff, then compiled from the file so that image and file agree), ASDF systems and
// their tests, and the backend's other cross-references. The image does the looking up and compiling
// (lisp-cl/source.lisp, systems.lisp, testing.lisp); Emacs makes the file edit, confined to the project.

import { emacsTool, imageTool } from "../handlers.js";
import { defineTool, ToolError, type ParamSpec, type Tool, type ToolContext } from "../tool.js";

const image = (name: string) => ({ runtime: "image" as const, implementation: name, handler: imageTool(name) });

const pkg: ParamSpec = { type: "string", description: "Package to read names in (default: the REPL's)." };
const symbol: ParamSpec = { type: "string", description: "The definition's name, e.g. my-app::parse-input." };
const which: ParamSpec = { type: "string", description: "Which definition, as find_definition labels it (when several)." };
const system: ParamSpec = { type: "string", description: "ASDF system name." };
const description: ParamSpec = { type: "string", description: "One line telling the user why." };
const acceptedHunks: ParamSpec = { type: "array", items: { type: "integer" }, description: "Set by the user's review; leave it out." };

// Waits for the image twice (locating, compiling) and for Emacs's edit; the image's own timeout applies to each.
const EDIT_TIMEOUT_MS = 180_000;

/** Where the image found the definition an edit is about (lisp-cl/source.lisp, definition_edit). */
interface DefinitionPlan {
  file: string;
  line: number;
  label: string;
  old: string;
}

function isPlan(value: unknown): value is DefinitionPlan {
  if (!value || typeof value !== "object") return false;
  const v = value as Record<string, unknown>;
  return typeof v.file === "string" && typeof v.line === "number" && typeof v.label === "string" && typeof v.old === "string";
}

const str = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined);

async function locate(name: unknown, text: unknown, args: Record<string, unknown>, ctx: ToolContext): Promise<DefinitionPlan> {
  const query: Record<string, unknown> = { symbol: name, text };
  if (str(args.package)) query.package = args.package;
  if (str(args.definition)) query.definition = args.definition;
  const answer = await imageTool("definition_edit")(query, ctx);
  let plan: unknown;
  try {
    plan = JSON.parse(String(answer));
  } catch {
    throw new ToolError(`The image's answer locating ${String(name)} was not understood: ${String(answer).slice(0, 200)}`);
  }
  if (!isPlan(plan)) throw new ToolError(`The image's answer locating ${String(name)} lacks the file or the form.`);
  return plan;
}

/** An edit of a definition's form: what replaces it (REPLACEMENT) and the form to compile afterwards (COMPILED). */
interface FormEdit {
  name: unknown;
  text: unknown;
  replacement: (plan: DefinitionPlan, text: string) => string;
}

async function proposal(edit: FormEdit, args: Record<string, unknown>, ctx: ToolContext) {
  const plan = await locate(edit.name, edit.text, args, ctx);
  const text = String(edit.text);
  const change: Record<string, unknown> = { path: plan.file, old_text: plan.old, new_text: edit.replacement(plan, text) };
  if (str(args.description)) change.description = args.description;
  return { plan, change };
}

/** Applies the reviewed edit in Emacs, then compiles the new form from the file in the image. */
async function applyAndCompile(edit: FormEdit, args: Record<string, unknown>, ctx: ToolContext): Promise<string> {
  const { plan, change } = await proposal(edit, args, ctx);
  if (Array.isArray(args.accepted_hunks)) change.accepted_hunks = args.accepted_hunks;
  const applied = String(await emacsTool("propose_file_edit")(change, ctx));
  if (!applied.startsWith("Applied all")) {
    return `${applied}\nThe form was not compiled: the file does not hold the whole edit (the image keeps ${plan.label} as it was).`;
  }
  try {
    const compiled = await imageTool("compile_file_form")({ path: plan.file, text: String(edit.text) }, ctx);
    return `${applied}\n${String(compiled)}`;
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new ToolError(`${applied}\nBut compiling it failed: ${why}`);
  }
}

const replaceEdit = (args: Record<string, unknown>): FormEdit => ({
  name: args.symbol,
  text: args.new_text,
  replacement: (_plan, text) => text,
});

const insertEdit = (args: Record<string, unknown>): FormEdit => ({
  name: args.after,
  text: args.text,
  replacement: (plan, text) => `${plan.old}\n\n${text}`,
});

export const sourceTools: Tool[] = [
  defineTool({
    name: "find_definition",
    description: "Where a symbol's definitions are in the source: file, line and first line of each.",
    parameters: { symbol, package: pkg },
    required: ["symbol"],
    safety: "safe",
    categories: ["introspection", "navigation"],
    ...image("find_definition"),
  }),
  defineTool({
    name: "read_definition",
    description: "The source form of a definition, read from its file.",
    parameters: { symbol, package: pkg, definition: which },
    required: ["symbol"],
    safety: "safe",
    categories: ["introspection", "navigation"],
    ...image("read_definition"),
  }),
  defineTool({
    name: "replace_definition",
    description: "Replace a definition's form in its file (reviewed as a diff), then compile it from the file.",
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
    preview: async (args, ctx) => ({ edit: (await proposal(replaceEdit(args), args, ctx)).change }),
    handler: (args, ctx) => applyAndCompile(replaceEdit(args), args, ctx),
  }),
  defineTool({
    name: "insert_form",
    description: "Insert a new top-level form after a definition in its file (reviewed), then compile it.",
    parameters: {
      after: { type: "string", description: "Name of the definition to insert after." },
      text: { type: "string", description: "The new form." },
      package: pkg,
      definition: which,
      description,
      accepted_hunks: acceptedHunks,
    },
    required: ["after", "text"],
    safety: "dangerous",
    categories: ["diff", "filesystem", "evaluation"],
    runtime: "node",
    timeoutMs: EDIT_TIMEOUT_MS,
    preview: async (args, ctx) => ({ edit: (await proposal(insertEdit(args), args, ctx)).change }),
    handler: (args, ctx) => applyAndCompile(insertEdit(args), args, ctx),
  }),
  defineTool({
    name: "definition_edit",
    description: "Internal: check a form's text and locate the definition it edits.",
    parameters: { symbol, text: { type: "string", description: "The new form." }, package: pkg, definition: which },
    required: ["symbol", "text"],
    safety: "safe",
    categories: ["introspection"],
    internal: true,
    ...image("definition_edit"),
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
    ...image("compile_file_form"),
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
    ...image("xref"),
  }),
  defineTool({
    name: "list_systems",
    description: "The ASDF systems the image knows, marking those under a directory.",
    parameters: { directory: { type: "string", description: "Absolute directory, e.g. the project root." } },
    safety: "safe",
    categories: ["introspection", "systems"],
    ...image("list_systems"),
  }),
  defineTool({
    name: "system_info",
    description: "An ASDF system's file, dependencies and components.",
    parameters: { system },
    required: ["system"],
    safety: "safe",
    categories: ["introspection", "systems"],
    ...image("system_info"),
  }),
  defineTool({
    name: "load_system",
    description: "Load an ASDF system (Quicklisp when present); returns compiler warnings per file and form.",
    parameters: { system },
    required: ["system"],
    safety: "cautious",
    categories: ["execution", "systems"],
    ...image("load_system"),
  }),
  defineTool({
    name: "run_tests",
    description: "Run a system's tests, or one suite or test (FiveAM, Parachute, Rove, lisp-unit): counts and failures.",
    parameters: {
      system: { type: "string", description: "Run asdf:test-system on this system." },
      suite: { type: "string", description: "Or run this suite." },
      test: { type: "string", description: "Or run this single test." },
      package: pkg,
    },
    safety: "cautious",
    categories: ["execution", "systems"],
    ...image("run_tests"),
  }),
];

// Tools that run inside the user's Lisp image (introspection and execution).
// Their work is done by lisp-cl/ helpers; see inImage and imageTool (handlers.ts).

import { inImage } from "../handlers.js";
import { defineTool, type ParamSpec, type Tool } from "../tool.js";

/** The package argument of the tools that read Lisp names. */
export const pkg: ParamSpec = {
  type: "string",
  description: "Package to read in (default: the REPL's).",
};
const symbolName = (what: string): ParamSpec => ({
  type: "string",
  description: `${what} name, read as Lisp (pkg::name ok).`,
});

// No per-tool timeout: the executor derives image tools' deadline from the configured image timeout
// (imageTimeoutMs), which the image itself enforces first.
export const imageTools: Tool[] = [
  defineTool({
    name: "describe_symbol",
    description:
      "What a symbol names in the image (function, macro, variable, class...): documentation, arglist, value, source.",
    parameters: { symbol: symbolName("Symbol"), package: pkg },
    required: ["symbol"],
    safety: "safe",
    categories: ["introspection"],
    ...inImage("describe_symbol"),
  }),
  defineTool({
    name: "apropos_search",
    description: "Find symbols whose names contain a substring, with their package and what they name.",
    parameters: {
      pattern: { type: "string", description: "Substring (case-insensitive)." },
      package: { type: "string", description: "Only this package (default: all)." },
    },
    required: ["pattern"],
    safety: "safe",
    categories: ["introspection"],
    ...inImage("apropos_search"),
  }),
  defineTool({
    name: "function_arglist",
    description: "The lambda list of a function, macro or generic function.",
    parameters: { function: symbolName("Function"), package: pkg },
    required: ["function"],
    safety: "safe",
    categories: ["introspection"],
    ...inImage("function_arglist"),
  }),
  defineTool({
    name: "who_calls",
    description: "Functions that call a function (xref data).",
    parameters: { function: symbolName("Function"), package: pkg },
    required: ["function"],
    safety: "safe",
    categories: ["introspection", "xref"],
    ...inImage("who_calls"),
  }),
  defineTool({
    name: "who_references",
    description: "Code that reads a global or special variable (xref data).",
    parameters: { variable: symbolName("Variable"), package: pkg },
    required: ["variable"],
    safety: "safe",
    categories: ["introspection", "xref"],
    ...inImage("who_references"),
  }),
  defineTool({
    name: "list_packages",
    description: "The image's packages with their nicknames and number of external symbols (the implementation's own last).",
    parameters: {
      pattern: { type: "string", description: "Only packages whose name or a nickname contains this (case-insensitive)." },
    },
    safety: "safe",
    categories: ["introspection", "packages"],
    ...inImage("list_packages"),
  }),
  defineTool({
    name: "list_package_symbols",
    description: "A package's symbols (external only by default) and what each names.",
    parameters: {
      package: { type: "string", description: "Package name." },
      include_internal: { type: "boolean", description: "Also internal symbols (default false)." },
    },
    required: ["package"],
    safety: "safe",
    categories: ["introspection", "packages"],
    ...inImage("list_package_symbols"),
  }),
  defineTool({
    name: "class_slots",
    description: "A class's slots, inherited too: initargs, initforms, types, accessors.",
    parameters: { class: symbolName("Class"), package: pkg },
    required: ["class"],
    safety: "safe",
    effect: "finalizes the class where it was not yet (the MOP methods of the image run)",
    categories: ["introspection", "clos"],
    ...inImage("class_slots"),
  }),
  defineTool({
    name: "class_hierarchy",
    description: "A class's precedence list and direct subclasses.",
    parameters: { class: symbolName("Class"), package: pkg },
    required: ["class"],
    safety: "safe",
    effect: "finalizes the class where it was not yet (the MOP methods of the image run)",
    categories: ["introspection", "clos"],
    ...inImage("class_hierarchy"),
  }),
  defineTool({
    name: "method_specializers",
    description: "A generic function's lambda list and methods, with qualifiers and specializers.",
    parameters: { generic_function: symbolName("Generic function"), package: pkg },
    required: ["generic_function"],
    safety: "safe",
    categories: ["introspection", "clos"],
    ...inImage("method_specializers"),
  }),
  defineTool({
    name: "macroexpand_form",
    description: "Macroexpand a form, unevaluated (macroexpand-1 unless full). #. is refused.",
    parameters: {
      form: { type: "string", description: "Lisp source text.", lisp: true },
      full: { type: "boolean", description: "Expand until the head is not a macro (default false)." },
      package: { type: "string", description: "Package to read in (default: the REPL's)." },
    },
    required: ["form"],
    safety: "safe",
    effect: "runs the macro functions of the image, and reading the form interns its symbols",
    categories: ["introspection"],
    ...inImage("macroexpand_form"),
  }),
  defineTool({
    name: "eval_form",
    description:
      "Evaluate forms in order in the image: the last one's values and the output; on error the condition, message and backtrace (no debugger). Times out.",
    parameters: {
      form: { type: "string", description: "Forms, as Lisp source text.", lisp: true },
      package: { type: "string", description: "Package to read and evaluate in (default: the REPL's)." },
    },
    required: ["form"],
    safety: "cautious",
    categories: ["execution", "evaluation"],
    ...inImage("eval_form"),
  }),
  defineTool({
    name: "eval_in_package",
    description: "Like eval_form, with *package* bound to package.",
    parameters: {
      form: { type: "string", description: "Forms, as Lisp source text.", lisp: true },
      package: { type: "string", description: "Package to read and evaluate in." },
    },
    required: ["form", "package"],
    safety: "cautious",
    categories: ["execution", "evaluation"],
    ...inImage("eval_in_package"),
  }),
  defineTool({
    name: "compile_form",
    description:
      "Compile and load definitions (defun, defmethod...) with the file compiler's checks: warnings and notes with their forms.",
    parameters: {
      form: { type: "string", description: "Top-level forms, as Lisp source text.", lisp: true },
      package: { type: "string", description: "Package to read and compile in (default: the REPL's)." },
    },
    required: ["form"],
    safety: "cautious",
    categories: ["execution", "evaluation"],
    ...inImage("compile_form"),
  }),
  defineTool({
    name: "get_last_error",
    description: "The last error of eval_form or compile_form: condition, message, form, backtrace.",
    parameters: {},
    safety: "safe",
    categories: ["execution"],
    ...inImage("get_last_error"),
  }),
  defineTool({
    name: "get_repl_history",
    description: "Recent evaluations by these tools, with form and result.",
    parameters: { limit: { type: "integer", description: "How many (default 10).", minimum: 1 } },
    safety: "safe",
    categories: ["execution"],
    ...inImage("get_repl_history"),
  }),
  defineTool({
    name: "get_compilation_notes",
    description: "Warnings and notes of the last compile_form.",
    parameters: {},
    safety: "safe",
    categories: ["execution"],
    ...inImage("get_compilation_notes"),
  }),
  defineTool({
    name: "image_changes",
    description:
      "Definitions in the image that differ from their files: compiled or evaluated without a file (compile_form, eval_form, the REPL, an unsaved buffer), or whose file changed since loading; each with where it came from and when. Lost at restart unless written to a file.",
    parameters: { package: { type: "string", description: "Only this package (default: every package but the Lisp's own)." } },
    safety: "safe",
    categories: ["introspection", "project"],
    ...inImage("image_changes"),
  }),
];

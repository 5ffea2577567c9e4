// Tools that run inside the user's Lisp image (seed 000: introspection and execution).
// Their work is done by lisp-cl/ helpers; see imageTool.

import { imageTool } from "../handlers.js";
import { defineTool, type ParamSpec, type Tool } from "../tool.js";

const pkg: ParamSpec = {
  type: "string",
  description: "Package to resolve names in. Defaults to the REPL's current package.",
};
const symbolName = (what: string): ParamSpec => ({
  type: "string",
  description: `${what} name, read as the reader would (case per readtable; pkg:name and pkg::name accepted).`,
});

// No per-tool timeout: the executor derives image tools' deadline from the configured image timeout
// (imageTimeoutMs), which the image itself enforces first.
const image = (name: string) => ({ runtime: "image" as const, implementation: name, handler: imageTool(name) });

export const imageTools: Tool[] = [
  defineTool({
    name: "describe_symbol",
    description:
      "Describe a symbol in the running image: what it names (function, macro, generic function, variable, class, special operator...), documentation, arglist, value and where it is defined.",
    parameters: { symbol: symbolName("Symbol"), package: pkg },
    required: ["symbol"],
    safety: "safe",
    categories: ["introspection"],
    ...image("describe_symbol"),
  }),
  defineTool({
    name: "apropos_search",
    description: "Find symbols whose names contain a substring; returns each with its package and what it names.",
    parameters: {
      pattern: { type: "string", description: "Substring to search for (case-insensitive)." },
      package: { type: "string", description: "Only search this package (optional; all packages otherwise)." },
    },
    required: ["pattern"],
    safety: "safe",
    categories: ["introspection"],
    ...image("apropos_search"),
  }),
  defineTool({
    name: "function_arglist",
    description: "Get the lambda list of a function, macro or generic function.",
    parameters: { function: symbolName("Function"), package: pkg },
    required: ["function"],
    safety: "safe",
    categories: ["introspection"],
    ...image("function_arglist"),
  }),
  defineTool({
    name: "who_calls",
    description: "List the functions that call a function, from the implementation's cross-reference data.",
    parameters: { function: symbolName("Function"), package: pkg },
    required: ["function"],
    safety: "safe",
    categories: ["introspection", "xref"],
    ...image("who_calls"),
  }),
  defineTool({
    name: "who_references",
    description: "List the code that reads a global or special variable, from the implementation's cross-reference data.",
    parameters: { variable: symbolName("Variable"), package: pkg },
    required: ["variable"],
    safety: "safe",
    categories: ["introspection", "xref"],
    ...image("who_references"),
  }),
  defineTool({
    name: "list_package_symbols",
    description: "List the symbols of a package (external only by default) with what each names.",
    parameters: {
      package: { type: "string", description: "Package name." },
      include_internal: { type: "boolean", description: "Also list internal symbols (default false)." },
    },
    required: ["package"],
    safety: "safe",
    categories: ["introspection", "packages"],
    ...image("list_package_symbols"),
  }),
  defineTool({
    name: "class_slots",
    description: "Show a class's slots (own and inherited) with initargs, initforms, types, readers and writers.",
    parameters: { class: symbolName("Class"), package: pkg },
    required: ["class"],
    safety: "safe",
    categories: ["introspection", "clos"],
    ...image("class_slots"),
  }),
  defineTool({
    name: "class_hierarchy",
    description: "Show a class's precedence list and its direct subclasses.",
    parameters: { class: symbolName("Class"), package: pkg },
    required: ["class"],
    safety: "safe",
    categories: ["introspection", "clos"],
    ...image("class_hierarchy"),
  }),
  defineTool({
    name: "method_specializers",
    description: "List a generic function's lambda list and its methods with their qualifiers and specializers.",
    parameters: { generic_function: symbolName("Generic function"), package: pkg },
    required: ["generic_function"],
    safety: "safe",
    categories: ["introspection", "clos"],
    ...image("method_specializers"),
  }),
  defineTool({
    name: "macroexpand_form",
    description: "Macroexpand a form without evaluating it (macroexpand-1 by default, fully with full=true). #. is refused.",
    parameters: {
      form: { type: "string", description: "The form, as Lisp source text." },
      full: { type: "boolean", description: "Expand repeatedly until the head is not a macro (default false)." },
      package: { type: "string", description: "Package to read the form in. Defaults to the REPL's current package." },
    },
    required: ["form"],
    safety: "safe",
    categories: ["introspection"],
    ...image("macroexpand_form"),
  }),
  defineTool({
    name: "eval_form",
    description:
      "Evaluate Lisp code in the running image: every form in the string, in order. Returns all values of the last form, printed output, and on error the condition type, message and backtrace (no debugger is entered). Times out.",
    parameters: {
      form: { type: "string", description: "One or more forms, as Lisp source text." },
      package: { type: "string", description: "Package to read and evaluate in. Defaults to the REPL's current package." },
    },
    required: ["form"],
    safety: "cautious",
    categories: ["execution", "evaluation"],
    ...image("eval_form"),
  }),
  defineTool({
    name: "eval_in_package",
    description: "Evaluate Lisp code with *package* bound to the given package; otherwise like eval_form.",
    parameters: {
      form: { type: "string", description: "One or more forms, as Lisp source text." },
      package: { type: "string", description: "Package to read and evaluate in." },
    },
    required: ["form", "package"],
    safety: "cautious",
    categories: ["execution", "evaluation"],
    ...image("eval_in_package"),
  }),
  defineTool({
    name: "compile_form",
    description:
      "Compile definitions (defun, defmethod, defclass...) with the file compiler's checks and load them. Returns warnings, style warnings and notes with the form each belongs to.",
    parameters: {
      form: { type: "string", description: "One or more top-level forms, as Lisp source text." },
      package: { type: "string", description: "Package to read and compile in. Defaults to the REPL's current package." },
    },
    required: ["form"],
    safety: "cautious",
    categories: ["execution", "evaluation"],
    ...image("compile_form"),
  }),
  defineTool({
    name: "get_last_error",
    description: "Show the last error from eval_form or compile_form: condition type, message, the form and a backtrace.",
    parameters: {},
    safety: "safe",
    categories: ["execution"],
    ...image("get_last_error"),
  }),
  defineTool({
    name: "get_repl_history",
    description: "Show recent evaluations made through these tools, each with its form and result.",
    parameters: { limit: { type: "integer", description: "How many recent entries (default 10).", minimum: 1 } },
    safety: "safe",
    categories: ["execution"],
    ...image("get_repl_history"),
  }),
  defineTool({
    name: "get_compilation_notes",
    description: "Show the warnings and notes from the most recent compile_form.",
    parameters: {},
    safety: "safe",
    categories: ["execution"],
    ...image("get_compilation_notes"),
  }),
];

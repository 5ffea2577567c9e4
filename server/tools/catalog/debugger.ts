// Tools for the user's debugger and the running program: the debugger's state, locals,
// evaluation in a frame and restarts (answered by Emacs, which knows each debugger's thread and level:
// lisp-elisp/sly-agent-q-debugger.el), and threads, tracing, disassembly and profiling in the image
// (lisp-cl/threads.lisp, lisp-cl/trace.lisp). Descriptions stay terse: every tool costs prompt tokens.

import { emacsTool, inImage } from "../handlers.js";
import { defineTool, type ParamSpec, type Tool } from "../tool.js";

// Long enough for an evaluation in a frame under the image timeout's default.
const DEBUGGER_TIMEOUT_MS = 60_000;
const debuggerOp = (capability: string) => ({
  runtime: "emacs" as const,
  implementation: capability,
  handler: emacsTool(capability),
  timeoutMs: DEBUGGER_TIMEOUT_MS,
});

const thread: ParamSpec = { type: "integer", description: "Thread, as debugger_state names it (default: latest)." };
const frame: ParamSpec = { type: "integer", description: "Frame, as debugger_state lists it.", minimum: 0 };
const pkg: ParamSpec = { type: "string", description: "Package to read in (default: the REPL's)." };
const form: ParamSpec = { type: "string", description: "Forms, as source text.", lisp: true };

export const debuggerTools: Tool[] = [
  defineTool({
    name: "debugger_state",
    description: "The user's open debuggers: condition, restarts, frames with source locations.",
    parameters: { thread, frames: { type: "integer", description: "How many frames (default 15).", minimum: 1 } },
    safety: "safe",
    categories: ["debugger"],
    ...debuggerOp("debugger_state"),
  }),
  defineTool({
    name: "debugger_frame_locals",
    description: "A debugger frame's locals, printed bounded.",
    parameters: { frame, thread },
    required: ["frame"],
    safety: "safe",
    categories: ["debugger"],
    ...debuggerOp("debugger_frame_locals"),
  }),
  defineTool({
    name: "debugger_eval_in_frame",
    description: "Evaluate a form in a debugger frame's lexical environment.",
    parameters: { form: { type: "string", description: "One Lisp form.", lisp: true }, frame, thread },
    required: ["form", "frame"],
    review: "target",
    safety: "cautious",
    categories: ["debugger", "evaluation"],
    ...debuggerOp("debugger_eval_in_frame"),
  }),
  defineTool({
    name: "debugger_invoke_restart",
    description: "Invoke a restart of the user's debugger, as if the user chose it.",
    parameters: {
      restart: { type: "integer", description: "Restart number, as debugger_state lists it.", minimum: 0 },
      thread,
      level: { type: "integer", description: "Expected debugger level; refused if it differs." },
    },
    required: ["restart"],
    review: "target",
    safety: "dangerous",
    categories: ["debugger", "execution"],
    ...debuggerOp("debugger_invoke_restart"),
  }),
  defineTool({
    name: "debugger_inspect_local",
    description: "Inspect a debugger frame's local: class, slots or elements; gives an inspect id.",
    parameters: {
      frame,
      local: { type: "integer", description: "Local number, as debugger_frame_locals lists it.", minimum: 0 },
      thread,
    },
    required: ["frame", "local"],
    review: "target",
    safety: "safe",
    effect: "keeps the parts it shows under new inspect ids (the image keeps the last 50)",
    categories: ["debugger", "introspection"],
    ...debuggerOp("debugger_inspect_local"),
  }),
  defineTool({
    name: "inspect_value",
    description: "Inspect a value by inspect id (from eval results): class, slots or elements, paged.",
    parameters: {
      id: { type: "integer", description: "Inspect id." },
      part: { type: "integer", description: "Inspect this part instead (gives it an id).", minimum: 0 },
      offset: { type: "integer", description: "First part shown (default 0).", minimum: 0 },
      limit: { type: "integer", description: "Parts shown (default 20).", minimum: 1 },
    },
    required: ["id"],
    safety: "safe",
    effect: "keeps the parts it shows under new inspect ids (the image keeps the last 50)",
    categories: ["introspection"],
    ...inImage("inspect_value"),
  }),
  defineTool({
    name: "list_threads",
    description: "The image's threads with their ids, names and states.",
    parameters: {},
    safety: "safe",
    categories: ["threads"],
    ...inImage("list_threads"),
  }),
  defineTool({
    name: "interrupt_thread",
    description: "Interrupt a thread into the user's debugger.",
    parameters: { thread: { type: "integer", description: "Thread id, as list_threads gives it." } },
    required: ["thread"],
    safety: "dangerous",
    categories: ["threads", "execution"],
    ...inImage("interrupt_thread"),
  }),
  defineTool({
    name: "disassemble_function",
    description: "Disassemble a compiled function.",
    parameters: { function: { type: "string", description: "Function name." }, package: pkg },
    required: ["function"],
    safety: "safe",
    effect: "compiles a function that is not compiled yet (CLISP), which runs its macros",
    categories: ["introspection"],
    ...inImage("disassemble_function"),
  }),
  defineTool({
    name: "trace_eval",
    description: "Evaluate forms with functions traced; returns the calls with arguments and values. Untraced after unless keep.",
    parameters: {
      functions: { type: "array", items: { type: "string" }, description: "Function names to trace." },
      form,
      package: pkg,
      keep: { type: "boolean", description: "Leave them traced after, until untrace_functions." },
    },
    required: ["functions", "form"],
    safety: "cautious",
    categories: ["execution", "evaluation"],
    ...inImage("trace_eval"),
  }),
  defineTool({
    name: "untrace_functions",
    description: "Untrace what trace_eval left traced with keep.",
    parameters: {},
    safety: "safe",
    effect: "removes traces from the image",
    categories: ["execution"],
    ...inImage("untrace_functions"),
  }),
  defineTool({
    name: "profile_eval",
    description:
      "Run forms under a profiler: SBCL samples everything (statistical) unless packages are given; " +
      "otherwise, and on other Lisps, counts calls and time of the packages' functions (deterministic).",
    parameters: {
      form,
      package: pkg,
      packages: {
        type: "array",
        items: { type: "string" },
        description: "Packages whose functions to profile deterministically (default: the form's).",
      },
    },
    required: ["form"],
    safety: "cautious",
    categories: ["execution", "evaluation"],
    ...inImage("profile_eval"),
  }),
];

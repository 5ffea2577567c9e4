// The tool protocol: what a tool is, and the checks a definition must pass at load time.

import { REVIEW_KINDS } from "../protocol.js";
import type { CommandTarget } from "./command-rules.js";
import type { ApprovedTarget, BufferVisit, Change, EmacsCallKind, EmacsCallParamsByKind, ParamSpec, ParamType, ReviewKind, SafetyLevel, ToolRuntime } from "../protocol.js";

export type { EmacsCallKind, ParamSpec, ParamType, SafetyLevel, ToolRuntime } from "../protocol.js";
export const SAFETY_LEVELS: readonly SafetyLevel[] = ["safe", "cautious", "dangerous"];

export function safetyRank(level: SafetyLevel): number {
  return SAFETY_LEVELS.indexOf(level);
}

/** What a running handler may use. */
/** The rule for files of credentials (project/private-files.ts's PrivateFiles), as the tools ask it. */
export interface PrivateFileRule {
  /** Throws a ToolError when the rule cannot be applied. */
  check(): void;
  /** Whether REL, relative to the true root ROOT, is a file of credentials. */
  isPrivate(root: string, rel: string): boolean;
}

export interface ToolContext {
  /** The id of the call being run (the model's tool_use id). */
  callId: string;
  /** Aborted on timeout or cancellation: handlers pass it on to whatever they wait for. */
  signal: AbortSignal;
  /** Milliseconds this call may take in all. */
  timeoutMs: number;
  /** The way to Emacs (buffer and file tools, the image). Undefined when no client is attached. */
  emacs?: EmacsPort;
  /** The conversation whose turn runs the call (undefined for tools/call and MCP): Emacs and the
   *  image calls it makes go to that conversation's chat and its Lisp. */
  conversationId?: string;
  /** The REPL's current package, as Emacs last told us; the image helpers' default package. */
  currentPackage?: string;
  /** The project root the call's paths are relative to, as Emacs last told the server (its context,
   *  else its configuration); the Node-side project tools ask Emacs first (server/tools/project/root.ts). */
  projectRoot?: string;
  /** The user's rule for files of credentials (Configuration.privateFilePatterns), applied by the project tools. */
  privateFiles?: PrivateFileRule;
  /** The target the user approved, for a handler to have it checked where the call runs. */
  approved?: ApprovedTarget;
  /** The buffer a call that changes a buffer's text writes, and the file it visited when the write
   *  was judged: Emacs checks it again where the call runs (EmacsToolParams.visits). Set by the executor. */
  bufferVisit?: BufferVisit;
  /**
   * Before a handler reads PATH outside the project root (a loaded definition's source): the policy's
   * readOutsideProject rule decides, asking the user when it says ask. Throws a ToolError when the
   * read may not happen. Set by the executor.
   */
  readOutside?: (path: string) => Promise<void>;
  /**
   * Before a handler writes FILE it found only as it ran (a definition's file): a protected file
   * (protected-paths.ts) asks the user, saying why, unless a rule names it. Throws a ToolError when
   * the write may not happen. Set by the executor.
   */
  confirmWrite?: (file: string) => Promise<void>;
  /** Where a handler reports what call CALLID changed in files and buffers (kept for rewinding). */
  reportChanges?: (callId: string, changes: Change[]) => void;
  /**
   * Offers the tools of CATEGORY to the model for the rest of the conversation (a lean tool set);
   * returns the names added, or throws a ToolError saying why not. Absent: every tool is offered.
   */
  offerCategory?: (category: string) => string[];
  /** The user's settings for run_command: whether shell lines may run, and how long a command may take. */
  commands?: CommandSettings;
  /** Where a handler shows its output live (a command's last lines), at a rate it bounds itself;
   *  absent where nobody watches (tools/call, MCP). */
  output?: (tail: string, totalBytes: number) => void;
}

export interface CommandSettings {
  allowShell?: boolean;
  timeoutMs?: number;
}

/** Calls that wait for Emacs: answered asynchronously (see server/protocol.ts, emacs/call). */
export interface EmacsPort {
  call<K extends EmacsCallKind>(kind: K, params: EmacsCallParamsByKind[K], opts: { signal?: AbortSignal; timeoutMs?: number }): Promise<unknown>;
}

export type ToolHandler = (args: Record<string, unknown>, ctx: ToolContext) => Promise<unknown>;

export interface ToolSpec {
  name: string;
  description: string;
  parameters: Record<string, ParamSpec>;
  required?: readonly string[];
  safety: SafetyLevel;
  categories: readonly string[];
  runtime: ToolRuntime;
  handler: ToolHandler;
  /** The handler's name on the side the tool runs on (an Emacs capability, an image tool); none in Node.
   *  Checked against what Emacs and the image really implement (test/e2e: the catalog's consistency). */
  implementation?: string;
  /** Per-tool timeout; the executor's default applies when absent. */
  timeoutMs?: number;
  /** Another name for the same capability (read_file / file_read): offered to the model only on request. */
  aliasOf?: string;
  /** For an alias: its parameter names that differ from the primary's (file_path -> path), so that
   *  trust rules written against the primary's parameters also match the alias. For a primary: its
   *  hidden second names of its own parameters (search_text -> pattern). Either way the handler gets
   *  the primary names alone, and a call giving both names of one parameter is refused. */
  argumentNames?: Readonly<Record<string, string>>;
  /** Told to the model when a long result is cut, e.g. "use offset and limit". */
  pagingHint?: string;
  /** Never offered to the model: a step that other tools' handlers call (kept in the catalog so that
   *  the consistency tests see its handler). */
  internal?: boolean;
  /** Run before the user is asked: what the approval shows besides the arguments (e.g. the file edit
   *  the call will make), merged into the approval's arguments. A ToolError refuses the call before
   *  anyone is asked. Keys that are not parameters are dropped from an edited reply. */
  preview?: (args: Record<string, unknown>, ctx: ToolContext) => Promise<Record<string, unknown>>;
  /** What the approval is bound to besides what the preview shows, never shown (the content hash of
   *  the project's script a command runs): computed with the preview, and again just before the call
   *  runs; when it differs, nothing runs. */
  previewBinding?: (args: Record<string, unknown>, ctx: ToolContext) => Promise<string>;
  /** The parameter naming the file a call writes (write_file's path): a protected file there makes
   *  the call ask (protected-paths.ts). A handler that finds the file only as it runs asks through
   *  ToolContext.confirmWrite. */
  writesFile?: string;
  /** For a tool that runs a command: the command a call's arguments name (undefined when they name
   *  none), which permission rules with `command` match (server/tools/command-rules.ts); with
   *  PROJECTROOT, also the true file its program is, when it can be found. */
  command?: (args: Record<string, unknown>, projectRoot?: string) => CommandTarget | undefined;
  /** For a tool that runs a command: what besides the command itself an "always allow" is bound to
   *  (the true directory, the program it finds), resolved now against PROJECTROOT; undefined when it
   *  cannot be resolved, and then nothing is remembered or allowed by an earlier "always". */
  sessionScope?: (args: Record<string, unknown>, projectRoot: string | undefined) => string | undefined;
  /** Cancelled, the handler stops its work itself and answers with what it has (a command's output so
   *  far): the executor waits a few seconds for that answer before answering "cancelled" itself. */
  answersCancel?: boolean;
  /** The parameter naming the buffer whose text a call changes (buffer_edit's buffer_name; the call
   *  without it changes the user's last buffer): a buffer visiting a protected file makes the call ask,
   *  as a write to that file would, since the user's next save writes it there (Executor). */
  writesBuffer?: string;
  /** How the user reviews a call that asks (see ReviewKind in server/protocol.ts); "arguments" when absent. */
  review?: ReviewKind;
  /** What a safe tool changes besides answering (point moved, a trace removed, the user's macro functions
   *  run): its call never starts while the answer streams, so it runs only for an answer that came whole,
   *  once, alone, and after every call before it in the message (Executor.readsOnly). */
  effect?: string;
}

export interface Tool extends Readonly<Omit<ToolSpec, "required">> {
  readonly required: readonly string[];
  /** The JSON Schema of the parameters object. */
  readonly schema: JsonSchemaObject;
}

export interface JsonSchemaObject {
  type: "object";
  properties: Record<string, ParamSpec>;
  required: string[];
  additionalProperties: false;
}

/** A parameters schema as the model sees it (registry.ts, schemaForModel). */
export interface ModelSchema {
  type: "object";
  properties: Record<string, Omit<ParamSpec, "notOffered" | "lisp">>;
  required?: string[];
}

/** The parameters of TOOL that are Lisp source text (ParamSpec.lisp), in declaration order. */
export function lispParameters(tool: Pick<Tool, "parameters">): string[] {
  return Object.entries(tool.parameters).filter(([, spec]) => spec.lisp).map(([name]) => name);
}

/** A handler error whose message is meant for the model as it is (no "Tool error" wrapping). */
export class ToolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ToolError";
  }
}

/** A tool definition that breaks an invariant of the tool protocol. Thrown at load time. */
export class ToolDefinitionError extends Error {
  constructor(tool: string, problem: string) {
    super(`Invalid tool definition "${tool}": ${problem}`);
    this.name = "ToolDefinitionError";
  }
}

export const TOOL_NAME_PATTERN = /^[a-z][a-z0-9_]*$/;
const PARAM_TYPES: readonly ParamType[] = ["string", "boolean", "number", "integer", "object", "array"];

/** Checks a definition and freezes it into a Tool. Fails loudly, naming the tool. */
export function defineTool(spec: ToolSpec): Tool {
  const name = typeof spec.name === "string" && spec.name !== "" ? spec.name : String(spec.name);
  const fail = (problem: string): never => {
    throw new ToolDefinitionError(name, problem);
  };
  if (!TOOL_NAME_PATTERN.test(name)) fail(`name must be snake_case (${TOOL_NAME_PATTERN})`);
  if (typeof spec.description !== "string" || spec.description.trim() === "") fail("description is empty");
  if (!SAFETY_LEVELS.includes(spec.safety)) fail(`safety must be one of ${SAFETY_LEVELS.join(", ")}, got ${String(spec.safety)}`);
  if (typeof spec.handler !== "function") fail("handler must be a function");
  if (!Array.isArray(spec.categories)) fail("categories must be a list");
  if (spec.parameters === null || typeof spec.parameters !== "object" || Array.isArray(spec.parameters)) {
    fail("parameters must be an object of parameter specs");
  }
  for (const [param, p] of Object.entries(spec.parameters)) {
    if (!/^[a-z][a-z0-9_]*$/.test(param)) fail(`parameter "${param}" must be snake_case`);
    if (!p || !PARAM_TYPES.includes(p.type)) fail(`parameter "${param}" has unknown type ${String(p?.type)}`);
    if (typeof p.description !== "string" || p.description.trim() === "") fail(`parameter "${param}" has no description`);
    if (p.type === "array" && (!p.items || !PARAM_TYPES.includes(p.items.type))) fail(`array parameter "${param}" needs items with a type`);
  }
  const required = [...(spec.required ?? [])];
  for (const r of required) {
    if (!Object.prototype.hasOwnProperty.call(spec.parameters, r)) fail(`required parameter "${r}" is not among the parameters`);
  }
  for (const k of Object.keys(spec.argumentNames ?? {})) {
    if (!Object.prototype.hasOwnProperty.call(spec.parameters, k)) fail(`argumentNames renames "${k}", which is not among the parameters`);
  }
  if (spec.timeoutMs !== undefined && !(spec.timeoutMs > 0)) fail("timeoutMs must be positive");
  if (spec.review !== undefined && !REVIEW_KINDS.includes(spec.review)) fail(`review must be one of ${REVIEW_KINDS.join(", ")}`);
  // Emacs prepares a target or a diff only for what it runs itself; a form's edit is the server's preview.
  if ((spec.review === "target" || spec.review === "diff") && spec.runtime !== "emacs") fail(`review "${spec.review}" needs runtime emacs`);
  if (spec.review === "form" && !spec.preview) fail(`review "form" needs a preview that computes the edit`);
  if (spec.effect !== undefined && (typeof spec.effect !== "string" || spec.effect.trim() === "")) fail("effect, when given, says what the tool changes");
  const schema: JsonSchemaObject = {
    type: "object",
    properties: spec.parameters,
    required,
    additionalProperties: false,
  };
  return Object.freeze({ ...spec, name, required, categories: [...spec.categories], schema });
}

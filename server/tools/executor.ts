// The tool executor: one result per call, in order, with matching ids; arguments validated
// before anything runs; the policy decides (only offered tools run; rules and levels say run, ask or
// deny; cautious runs are audited); nothing a handler does escapes, and no known secret leaves in a
// result (this is the trust boundary's single enforcement point).

import type { Ajv, ErrorObject, ValidateFunction } from "ajv";
import { redact } from "../log.js";
import { errorMessage, formatResult, truncate } from "./format.js";
import { visitedFile } from "./handlers.js";
import { fromPrimaryArgs, ToolPolicy, toPrimaryArgs, type ApprovalReason, type PermissionRule } from "./policy.js";
import { protectedWrite } from "./protected-paths.js";
import { schemaForModel, type ToolRegistry } from "./registry.js";
import { ToolError, type SafetyLevel, type Tool, type ToolContext } from "./tool.js";
import { cutText, sentence } from "../text.js";

export interface ToolCall {
  id: string;
  name: string;
  /** An object, or a JSON string of one (as OpenAI-style endpoints send them). */
  arguments: unknown;
}

import { createHash } from "node:crypto";
import type { ApprovalDecision, ApprovedTarget, BufferVisit, ToolResult, ToolResultMetadata } from "../protocol.js";

export type { ApprovalDecision, ToolResult, ToolResultMetadata } from "../protocol.js";

export interface ApprovalRequest {
  callId: string;
  /** The caller's tags for this call (conversation and turn ids), passed through. */
  tags?: Record<string, string>;
  tool: Tool;
  arguments: Record<string, unknown>;
  safetyLevel: SafetyLevel;
  /** What made the call ask: the tool's level or a permission rule. */
  reason: ApprovalReason;
  /** The project root the call's paths were judged against: Emacs prepares the approval against it. */
  projectRoot?: string;
}

export type ApprovalFn = (request: ApprovalRequest, signal: AbortSignal) => Promise<ApprovalDecision>;

export type HookPhase = "before" | "after" | "error";
export interface HookEvent {
  phase: HookPhase;
  call: ToolCall;
  tool?: Tool;
  arguments?: Record<string, unknown>;
  safetyLevel: SafetyLevel | "unknown";
  result?: ToolResult;
  tags?: Record<string, string>;
}
export type ToolHook = (event: HookEvent) => unknown;

export interface AuditEntry {
  time: string;
  callId: string;
  tool: string;
  safetyLevel: SafetyLevel;
  arguments: Record<string, unknown>;
  decision: "auto" | "approved" | "session" | "modified";
}

export interface ExecutorOptions {
  registry: ToolRegistry;
  /** Asked before a dangerous tool runs. Absent: dangerous tools are denied. */
  approve?: ApprovalFn;
  /** What is offered and what runs, asks or is denied; a function is asked at each call, so that a
   *  configuration changed during a turn applies to its next call. Absent: every registered tool
   *  (aliases too) is offered, under safetyOverrides (a bare executor, as in unit tests and scripts). */
  policy?: ToolPolicy | (() => ToolPolicy);
  /** Levels per tool for a bare executor without a policy. */
  safetyOverrides?: Record<string, SafetyLevel>;
  defaultTimeoutMs?: number;
  /** The image's own limit per evaluation; image tools get it plus the helpers' load time plus a margin. */
  imageTimeoutMs?: number;
  imageLoadTimeoutMs?: number;
  maxResultChars?: number;
  audit?: (entry: AuditEntry) => void;
  hooks?: ToolHook[];
  /** What handlers get besides the call's own signal and timeout (the Emacs port, the current package). */
  context?: () => Pick<ToolContext, "emacs" | "currentPackage" | "projectRoot" | "commands" | "privateFiles" | "conversationId">;
}

export interface ExecuteOptions {
  /** Cancels waiting approvals and running handlers. */
  signal?: AbortSignal;
  /** Passed through to approval requests and hook events (e.g. conversationId, turnId). */
  tags?: Record<string, string>;
  /** Given each call's result once, as the call is answered, whichever stage answers it. */
  onResult?: (result: ToolResult) => void;
  /** Told as a call starts to run (every check passed, nothing more to ask; its handler is called
   *  next), and again when it goes on after an approval it asked for as it ran (readOutside). A text
   *  returned the first time refuses the run: the call is answered with it as an error. */
  onStart?: (call: ToolCall, ranArguments?: Record<string, unknown>) => string | undefined;
  /** Handed to handlers (ToolContext.offerCategory): the conversation's lean tool set. */
  offerCategory?: (category: string) => string[];
  /**
   * Awaited before the user is asked anything while the call runs (reading outside the project): a
   * call that started while the answer streamed asks only once the answer is complete and the call
   * announced; rejected when that answer is discarded, and then nothing is asked.
   */
  beforeAsking?: () => Promise<void>;
  /** Given a running call's output as it comes (a command's last lines, ToolContext.output). */
  onOutput?: (call: ToolCall, tail: string, totalBytes: number) => void;
}

/** A call that passed every check (Executor.admit): it may still have to ask, then it runs. */
export interface AdmittedCall {
  readonly call: ToolCall;
  readonly tool: Tool;
  readonly safety: SafetyLevel;
  /** The primary tool name, which "always allow" remembers. */
  readonly capability: string;
  readonly arguments: Record<string, unknown>;
  readonly decision: AuditEntry["decision"];
  /** Present while the user must be asked before the call runs (Executor.askApproval). */
  readonly ask?: ApprovalReason;
  /** What the user approved, checked again when the call runs: the digest of the server's preview
   *  (the edit it will make), and the target Emacs prepared, which Emacs checks where the call runs. */
  readonly bound?: { preview?: string; emacs?: ApprovedTarget };
  /** performance.now() when the call was admitted, or when its approval was given. */
  readonly started: number;
  /** How long the user took to answer, when asked: shown apart from the run time. */
  readonly approvalWaitMs?: number;
  /** Set when the user edited the arguments: the result says which ran. */
  readonly edited?: boolean;
  /** The protected file the user approved writing (its approval said why): not asked about again as it runs. */
  readonly protectedApproved?: string;
  /** The project root when the call was admitted: its paths are judged, approved and run against this
   *  one root, whatever the editor's root becomes meanwhile (Emacs binds it for the call). */
  readonly projectRoot?: string;
  /** Set when the call is answered; a later stage refuses it. */
  settled: boolean;
}

/** Where a call stands after a stage: answered (its result is final and reported) or admitted. */
export type CallStage = { kind: "answered"; result: ToolResult } | { kind: "admitted"; call: AdmittedCall };

interface SettleInfo {
  call: ToolCall;
  started: number;
  tool: Tool | undefined;
  safety: SafetyLevel | "unknown";
  approved: boolean;
  args: Record<string, unknown> | undefined;
  opts: ExecuteOptions;
  approvalWaitMs?: number;
  /** The arguments the user edited, which ran (or failed) in place of the model's. */
  ranArguments?: Record<string, unknown>;
}

const DEFAULT_TIMEOUT_MS = 30_000;
// Defaults of Emacs's sly-agent-q-image-timeout and sly-agent-q-helpers-load-timeout.
const DEFAULT_IMAGE_TIMEOUT_MS = 50_000;
const DEFAULT_IMAGE_LOAD_TIMEOUT_MS = 300_000;
// The image interrupts the evaluation at its limit and Emacs answers 5 s later at the latest:
// the executor waits longer, so the user gets the image's precise message, never ours.
const IMAGE_MARGIN_MS = 10_000;
const DEFAULT_MAX_RESULT_CHARS = 40_000;
const MAX_ERROR_CHARS = 4_000;
/** How long a tool that answers a cancel itself (Tool.answersCancel) may take to, once cancelled. */
const CANCEL_GRACE_MS = 5_000;

/** What a configuration sets on a running executor (Executor.configure). */
export type ExecutorSettings = Pick<ExecutorOptions, "policy" | "defaultTimeoutMs" | "imageTimeoutMs" | "imageLoadTimeoutMs" | "maxResultChars">;

export class Executor {
  private readonly options: ExecutorOptions;
  /** The schema compiler, loaded and made at the first call validated (evaluating Ajv's modules and
   *  making it, with its meta-schema, was a tenth of a start's own work) and shared with the executors
   *  withPolicy makes. */
  private compiler: { ajv?: Ajv } = {};
  private validators = new WeakMap<Tool, ValidateFunction>();
  /** Capabilities (primary tool names) the user said to always allow for this session. */
  sessionAllowed = new Set<string>();

  constructor(options: ExecutorOptions) {
    this.options = { ...options, hooks: [...(options.hooks ?? [])] };
  }

  /** The policy in force. */
  get policy(): ToolPolicy {
    const p = this.options.policy;
    if (typeof p === "function") return p();
    return p ?? new ToolPolicy(this.options.registry, { offerAliases: true, safetyOverrides: this.options.safetyOverrides });
  }

  /**
   * This executor under POLICY (a turn's configuration): hooks, session allowances and everything else
   * are shared, so the offered list and the check come from the same object. PROJECT_ROOT, when given,
   * is the root the turn's message named: its calls are judged against it (and carry it to Emacs).
   * TURN, when given, is the turn's own context: its conversation (its calls go to that conversation's
   * chat and Lisp in Emacs) and the package its message named (the REPL's of that chat's Lisp).
   */
  withPolicy(policy: ToolPolicy | (() => ToolPolicy), approve?: ApprovalFn, projectRoot?: string, turn?: { conversationId: string; currentPackage?: string }): Executor {
    const outer = this.options.context;
    const own = {
      ...(projectRoot !== undefined ? { projectRoot } : {}),
      ...(turn ? { conversationId: turn.conversationId } : {}),
      ...(turn?.currentPackage ? { currentPackage: turn.currentPackage } : {}),
    };
    const context = Object.keys(own).length > 0 && outer ? () => ({ ...outer(), ...own }) : outer;
    const scoped = new Executor({ ...this.options, policy, ...(approve ? { approve } : {}), ...(context ? { context } : {}) });
    scoped.options.hooks = this.options.hooks;
    scoped.compiler = this.compiler;
    scoped.validators = this.validators;
    scoped.sessionAllowed = this.sessionAllowed;
    return scoped;
  }

  /** Applies a new configuration's settings; calls admitted before keep running under what they had. */
  configure(settings: ExecutorSettings): void {
    Object.assign(this.options, settings);
  }

  /** The registered tool NAME (an alias too), or undefined. */
  tool(name: string): Tool | undefined {
    return this.options.registry.get(name);
  }

  /** Milliseconds a tool without a timeout of its own may take. */
  get defaultTimeoutMs(): number {
    return this.options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  addHook(hook: ToolHook): () => void {
    this.options.hooks!.push(hook);
    return () => {
      const i = this.options.hooks!.indexOf(hook);
      if (i >= 0) this.options.hooks!.splice(i, 1);
    };
  }

  effectiveSafety(tool: Tool): SafetyLevel {
    return this.policy.effectiveSafety(tool);
  }

  /**
   * Runs every call and answers each, in the model's order. Adjacent safe calls run concurrently;
   * anything else is a barrier, so that a safe call after an eval sees what the eval did.
   */
  async executeAll(calls: readonly unknown[], opts: ExecuteOptions = {}): Promise<ToolResult[]> {
    const results: ToolResult[] = new Array(calls.length);
    for (const [i, j] of this.batches(calls)) {
      const batch = await Promise.all(calls.slice(i, j).map((c) => this.execute(c, opts)));
      batch.forEach((r, k) => (results[i + k] = r));
    }
    return results;
  }

  /**
   * CALLS in the groups executeAll runs them in, as [start, end) index pairs: a run of adjacent calls
   * that only read (and never ask) runs concurrently; any other call is a group of its own.
   */
  batches(calls: readonly unknown[]): [number, number][] {
    const out: [number, number][] = [];
    let i = 0;
    while (i < calls.length) {
      let j = i;
      while (j < calls.length && this.readsOnly(calls[j])) j++;
      if (j === i) j = i + 1;
      out.push([i, j]);
      i = j;
    }
    return out;
  }

  /** Whether CALL only reads and runs without asking (an offered safe tool no rule covers). */
  isSafeCall(call: unknown): boolean {
    const name = (call as ToolCall | null)?.name;
    const tool = typeof name === "string" ? this.options.registry.get(name) : undefined;
    if (tool === undefined) return false;
    try {
      const policy = this.policy;
      return policy.isOffered(tool) && policy.runsUnasked(tool);
    } catch {
      return false; // execute() reports the problem
    }
  }

  /**
   * Whether CALL only reads: it runs unasked (isSafeCall), and its tool is declared safe with no effect
   * besides its answer (a tool the user's settings made safe may still change something). Such calls
   * start while the answer streams and run beside each other; any other call runs alone, in order.
   */
  readsOnly(call: unknown): boolean {
    const tool = this.options.registry.get((call as ToolCall | null)?.name ?? "");
    return tool !== undefined && tool.safety === "safe" && tool.effect === undefined && this.isSafeCall(call);
  }

  /**
   * Runs one call: admit, ask when the policy says so, run. Never throws, never rejects. The result
   * is also given to opts.onResult, once: each stage either answers the call or passes it on.
   */
  async execute(rawCall: unknown, opts: ExecuteOptions = {}): Promise<ToolResult> {
    let stage = this.admit(rawCall, opts);
    if (stage.kind === "admitted" && stage.call.ask) stage = await this.askApproval(stage.call, opts);
    return stage.kind === "answered" ? stage.result : this.run(stage.call, opts);
  }

  /**
   * The checks before anything runs or asks: the call's shape, the tool, whether it is offered, its
   * arguments, the permission rules. Answers the call (an error result) or admits it, saying whether
   * it must ask the user first. Never throws.
   */
  admit(rawCall: unknown, opts: ExecuteOptions = {}): CallStage {
    const started = performance.now();
    const call = normalizeCall(rawCall);
    let tool: Tool | undefined;
    let safety: SafetyLevel | "unknown" = "unknown";
    const answer = (message: string, args?: Record<string, unknown>): CallStage => ({
      kind: "answered",
      result: this.settle(undefined, { call, started, tool, safety, approved: false, args, opts }, message),
    });
    try {
      if (call.problem) return answer(call.problem);
      tool = this.options.registry.get(call.name);
      if (!tool) {
        const near = this.options.registry.closest(call.name);
        return answer(`Unknown tool "${clip(call.name)}". ${near.length ? `Closest tools: ${near.join(", ")}.` : "No tools are available."}`);
      }
      const policy = this.policy;
      if (!policy.isOffered(tool)) {
        const name = tool.name;
        tool = undefined; // reported as unknown, like a tool that does not exist
        return answer(policy.notAvailable(name));
      }
      safety = policy.effectiveSafety(tool);
      const capability = policy.primaryName(tool);
      const args = parseArguments(call.arguments);
      if (typeof args === "string") return answer(`Invalid arguments for ${tool.name}: ${args}`);
      const invalid = this.validate(tool, args);
      if (invalid) return answer(`Invalid arguments for ${tool.name}: ${invalid}`, args);

      const projectRoot = this.options.context?.().projectRoot;
      const verdict = policy.decide(tool, args, projectRoot);
      if (verdict.kind === "deny") return answer(deniedByRule(tool, verdict.rule), args);
      let decision: AuditEntry["decision"] = "auto";
      let ask: ApprovalReason | undefined;
      if (verdict.kind === "ask") {
        // "Always allow" answers the tool's level; a rule that asks always asks.
        const key = verdict.reason.kind === "level" ? policy.sessionKey(tool, args, projectRoot) : undefined;
        if (key !== undefined && this.sessionAllowed.has(key)) {
          decision = "session";
        } else {
          if (!this.options.approve) {
            return answer(`${tool.name} needs the user's approval and no approval is possible here, so it was not run.`, args);
          }
          ask = verdict.reason;
        }
      }
      const admitted: AdmittedCall = { call, tool, safety, capability, arguments: args, decision, ...(ask ? { ask } : {}), ...(projectRoot !== undefined ? { projectRoot } : {}), started, settled: false };
      return { kind: "admitted", call: admitted };
    } catch (err) {
      return answer(err instanceof ToolError ? err.message : `Tool ${call.name} failed: ${errorMessage(err)}`);
    }
  }

  /**
   * The approval step of an admitted call that asks: the user approves (maybe always, maybe with
   * edited arguments) and the call stays admitted, or the call is answered (denied, cancelled, the
   * approval failed). Never throws.
   */
  async askApproval(admitted: AdmittedCall, opts: ExecuteOptions = {}): Promise<CallStage> {
    this.assertOpen(admitted);
    const { tool, safety, capability, call } = admitted;
    let args = admitted.arguments;
    let approvalWaitMs: number | undefined;
    const answer = (message: string): CallStage => ({ kind: "answered", result: this.settle(admitted, { call, started: admitted.started, tool, safety, approved: false, args, opts, ...(approvalWaitMs !== undefined ? { approvalWaitMs } : {}) }, message) });
    try {
      const reason = admitted.ask;
      if (!reason) return { kind: "admitted", call: admitted };
      if (!this.options.approve) return answer(`${tool.name} needs the user's approval and no approval is possible here, so it was not run.`);
      const signal = opts.signal ?? new AbortController().signal;
      if (signal.aborted) return answer(`${tool.name} was cancelled before it ran.`);
      // The package a form is read in is part of what is approved: the REPL's may change meanwhile.
      const currentPackage = this.options.context?.().currentPackage;
      if (Object.prototype.hasOwnProperty.call(tool.parameters, "package") && args.package === undefined && currentPackage) {
        args = { ...args, package: currentPackage };
      }
      // Why a protected file asks is shown with the arguments, as what the call writes.
      let shown = reason.kind === "protected" ? { ...args, protected_file: `${reason.path}: ${reason.why}` } : args;
      let previewDigest: string | undefined;
      if (tool.preview) {
        try {
          const preview = await this.previewOf(tool, args, call.id, signal, admitted.projectRoot);
          shown = { ...args, ...preview.shown };
          previewDigest = preview.digest;
        } catch (err) {
          if (err instanceof ToolError && !signal.aborted) return answer(err.message);
          return answer(`${tool.name} could not be prepared for approval: ${sentence(errorMessage(err))} It was not run.`);
        }
      }
      let reply: ApprovalDecision;
      const asked = performance.now();
      try {
        reply = await this.options.approve({ callId: call.id, tags: opts.tags, tool, arguments: shown, safetyLevel: safety, reason, ...rootOf(admitted) }, signal);
        approvalWaitMs = Math.round((performance.now() - asked) * 100) / 100;
      } catch (err) {
        // Emacs refusing before asking (a path outside the root) says why itself: passed on as it is.
        if (err instanceof ToolError && !signal.aborted) return answer(err.message);
        return answer(`Approval for ${tool.name} failed: ${sentence(errorMessage(err))} The tool was not run.`);
      }
      let decision: AuditEntry["decision"];
      switch (reply?.decision) {
        case "approved":
          decision = "approved";
          if (reply.always) {
            const key = this.policy.sessionKey(tool, args, admitted.projectRoot);
            if (key !== undefined) this.sessionAllowed.add(key);
          }
          break;
        case "modified": {
          const raw = parseArguments(reply.arguments);
          // A field the approval only shows (a preview's command_line, program) is not an argument:
          // an edit of it would be dropped, and the unedited call run under the user's "edited".
          const shownOnly = typeof raw === "string" ? undefined : editedShownOnly(tool, raw, shown);
          if (shownOnly !== undefined) {
            return answer(`The user's edit changed ${shownOnly}, which is shown only (it follows from the arguments: ${Object.keys(tool.parameters).join(", ")}); edit those instead. ${tool.name} was not run.`);
          }
          const edited = declaredOnly(tool, raw);
          const bad = typeof edited === "string" ? edited : this.validate(tool, edited);
          if (bad || typeof edited === "string") return answer(`The user's edited arguments for ${tool.name} are invalid: ${sentence(bad ?? "")} The tool was not run.`);
          const again = this.policy.decide(tool, edited, admitted.projectRoot);
          if (again.kind === "deny") {
            args = edited;
            return answer(deniedByRule(tool, again.rule));
          }
          args = edited;
          decision = "modified";
          if (tool.preview) {
            try {
              previewDigest = (await this.previewOf(tool, args, call.id, signal, admitted.projectRoot)).digest;
            } catch (err) {
              return answer(err instanceof ToolError ? err.message : `${tool.name} could not be prepared: ${sentence(errorMessage(err))} It was not run.`);
            }
          }
          break;
        }
        case "denied":
          return answer(`The user denied ${tool.name}${reply.reason?.trim() ? `: ${sentence(reply.reason)}` : "."} It was not run.`);
        default:
          return answer(`Approval for ${tool.name} gave no decision, so it was not run.`);
      }
      const target = reply.decision === "approved" || reply.decision === "modified" ? reply.target : undefined;
      const bound = {
        ...(previewDigest !== undefined ? { preview: previewDigest } : {}),
        // Emacs checks its own preview's digest for a tool it runs itself; a tool the server prepares
        // (a preview of its own) is checked here, and its handler's calls into Emacs are other tools.
        ...(typeof target === "string" && tool.runtime === "emacs" && !tool.preview
          ? { emacs: { tool: capability, arguments: toPrimaryArgs(tool, reply.decision === "modified" ? args : shown), target } }
          : {}),
      };
      const { ask: _asked, ...rest } = admitted;
      admitted.settled = true; // passed on: the approved call below is the one that answers
      // The run's own time starts now: the wait for the user is reported apart.
      return {
        kind: "admitted",
        call: {
          ...rest,
          arguments: args,
          decision,
          bound,
          settled: false,
          started: performance.now(),
          ...(approvalWaitMs !== undefined ? { approvalWaitMs } : {}),
          ...(decision === "modified" ? { edited: true } : {}),
          ...(reason.kind === "protected" && decision === "approved" ? { protectedApproved: reason.path } : {}),
        },
      };
    } catch (err) {
      return answer(err instanceof ToolError ? err.message : `Tool ${call.name} failed: ${errorMessage(err)}`);
    }
  }

  /** Runs an admitted call that no longer needs to ask, and answers it. Never throws. */
  async run(admitted: AdmittedCall, opts: ExecuteOptions = {}): Promise<ToolResult> {
    this.assertOpen(admitted);
    const { call, tool, safety, started } = admitted;
    const args = admitted.arguments;
    let approved = false;
    const asked = {
      ...(admitted.approvalWaitMs !== undefined ? { approvalWaitMs: admitted.approvalWaitMs } : {}),
      ...(admitted.edited ? { ranArguments: args } : {}),
    };
    try {
      if (admitted.ask) return this.settle(admitted, { call, started, tool, safety, approved, args, opts, ...asked }, `${tool.name} was not run: it needs the user's approval first.`);
      if (admitted.bound?.preview !== undefined && tool.preview) {
        // What the call would change now must be what the user approved: else nothing runs.
        const now = await this.previewOf(tool, args, call.id, opts.signal ?? new AbortController().signal, admitted.projectRoot).then((p) => p.digest, (err: unknown) => errorMessage(err));
        if (now !== admitted.bound.preview) return this.settle(admitted, { call, started, tool, safety, approved, args, opts, ...asked }, targetChanged(tool));
      }
      const tellStarted = (): string | undefined => {
        try {
          return opts.onStart?.(call, admitted.edited ? args : undefined);
        } catch {
          // The caller's reporting must not keep the call from running.
          return undefined;
        }
      };
      // Its start is saved first: when it cannot be, the call does not run (Turn.callStarted).
      const refused = tellStarted();
      if (refused !== undefined) return this.settle(admitted, { call, started, tool, safety, approved, args, opts, ...asked }, refused);
      if (safety !== "safe") this.auditEntry(call.id, tool, safety, args, admitted.decision);
      approved = true;
      this.runHooks({ phase: "before", call, tool, arguments: args, safetyLevel: safety, tags: opts.tags });
      const value = await this.runHandler(tool, args, call.id, { ...opts, onApprovedWhileRunning: () => void tellStarted(), ...(admitted.protectedApproved !== undefined ? { protectedApproved: admitted.protectedApproved } : {}), projectRoot: admitted.projectRoot }, admitted.bound?.emacs);
      const content = truncate(redact(formatResult(value)), this.options.maxResultChars ?? DEFAULT_MAX_RESULT_CHARS, tool.pagingHint);
      return this.settle(admitted, { call, started, tool, safety, approved: true, args, opts, ...asked }, undefined, content);
    } catch (err) {
      const message = err instanceof ToolError ? err.message : `Tool ${call.name} failed: ${errorMessage(err)}`;
      // A handler's failure is reported without its arguments, as before the split.
      return this.settle(admitted, { call, started, tool, safety, approved, args: undefined, opts, ...asked }, message);
    }
  }

  /**
   * The one place a call is answered: builds its result (an error when ERROR is given), runs the
   * after or error hooks and gives the result to opts.onResult. ADMITTED, when given, is closed, so
   * that no later stage can answer it again.
   */
  private settle(admitted: AdmittedCall | undefined, s: SettleInfo, error?: string, content?: string): ToolResult {
    if (admitted) {
      this.assertOpen(admitted);
      admitted.settled = true;
    }
    const metadata: ToolResultMetadata = {
      executionTimeMs: Math.round((performance.now() - s.started) * 100) / 100,
      ...(s.approvalWaitMs !== undefined ? { approvalWaitMs: s.approvalWaitMs } : {}),
      ...(s.ranArguments ? { arguments: s.ranArguments } : {}),
      safetyLevel: s.safety,
      approved: s.approved,
    };
    let result: ToolResult;
    if (error !== undefined) {
      const e = truncate(redact(error), MAX_ERROR_CHARS);
      result = { id: s.call.id, name: s.call.name, success: false, content: `Error: ${e}`, error: e, metadata };
    } else {
      result = { id: s.call.id, name: s.tool!.name, success: true, content: content ?? "", metadata };
    }
    this.runHooks({ phase: error !== undefined ? "error" : "after", call: s.call, tool: s.tool, arguments: s.args, safetyLevel: s.safety, result, tags: s.opts.tags });
    try {
      s.opts.onResult?.(result);
    } catch {
      // The caller's reporting must not turn an answered call into a failed one.
    }
    return result;
  }

  private assertOpen(admitted: AdmittedCall): void {
    if (admitted.settled) throw new Error(`Tool call ${admitted.call.id} was already answered.`);
  }

  /** Returns undefined when ARGS fit the tool's schema, or a message naming each problem. */
  validate(tool: Tool, args: Record<string, unknown>): string | undefined {
    let validate = this.validators.get(tool);
    if (validate === undefined) {
      validate = (this.compiler.ajv ??= new (loadAjv())({ allErrors: true, strict: false })).compile(tool.schema) as ValidateFunction;
      this.validators.set(tool, validate);
    }
    if (!validate(args)) return describeSchemaErrors(validate.errors ?? [], tool);
    // Two names of one parameter (argumentNames): a rule reads one, the handler might use the other.
    const twice = Object.entries(tool.argumentNames ?? {}).filter(([other, primary]) => Object.prototype.hasOwnProperty.call(args, other) && Object.prototype.hasOwnProperty.call(args, primary));
    if (twice.length > 0) return twice.map(([other, primary]) => `give ${primary} or ${other}, not both (they are the same parameter)`).join("; ") + ".";
    return undefined;
  }

  /**
   * The policy's rule on reading a file outside the project root (readOutsideProject), applied when a
   * handler learns only as it runs that it would read PATH there (read_definition of a library's
   * definition): allowed, denied, or put to the user as an approval of its own. Throws a ToolError when
   * the read may not happen.
   */
  private async confirmReadOutside(tool: Tool, args: Record<string, unknown>, callId: string, path: string, signal: AbortSignal, tags?: Record<string, string>, beforeAsking?: () => Promise<void>, onApproved?: () => void, projectRoot?: string): Promise<void> {
    const action = this.policy.readOutsideProject();
    if (action === "allow") return;
    const refuse = (why: string): ToolError =>
      new ToolError(`${tool.name}: ${clip(path)} is outside the project root, and ${why}; nothing was read (the rule is readOutsideProject, in Emacs sly-agent-q-read-outside-project).`);
    if (action === "deny") throw refuse("reading there is denied");
    if (!this.options.approve) throw refuse("reading there needs the user's approval, which is not possible here");
    if (beforeAsking) {
      try {
        await beforeAsking();
      } catch {
        throw new ToolError(`${tool.name} was cancelled.`);
      }
    }
    if (signal.aborted) throw new ToolError(`${tool.name} was cancelled.`);
    const reply = await this.options.approve(
      { callId, tags, tool, arguments: { ...args, file_outside_the_project: path }, safetyLevel: this.policy.effectiveSafety(tool), reason: { kind: "outside", path }, ...(projectRoot !== undefined ? { projectRoot } : {}) },
      signal,
    );
    if (reply?.decision !== "approved") throw refuse(`the user did not allow it${reply?.decision === "denied" && reply.reason ? ` (${reply.reason})` : ""}`);
    // The call runs on: the user is told so (it waited for this approval).
    onApproved?.();
  }

  /**
   * A handler is about to write FILE, found as it ran (a definition's file): a protected file asks
   * the user, saying why, each time (no rule can name a file the call's arguments do not), unless the
   * call's own approval was about that very file. Throws a ToolError when the write may not happen.
   */
  private async confirmWrite(
    tool: Tool,
    args: Record<string, unknown>,
    callId: string,
    file: string,
    signal: AbortSignal,
    how: { tags?: Record<string, string>; beforeAsking?: () => Promise<void>; onApproved?: () => void; protectedApproved?: string; projectRoot: string | undefined; buffer?: boolean },
  ): Promise<void> {
    const guarded = protectedWrite(file, how.projectRoot);
    if (!guarded || guarded.path === how.protectedApproved) return;
    const refuse = (why: string): ToolError =>
      new ToolError(
        how.buffer
          ? `${tool.name}: the buffer visits ${clip(guarded.path)}, which is a protected file (${guarded.why}; the user's next save would write it there), and ${why}; the buffer was not changed.`
          : `${tool.name}: ${clip(guarded.path)} is a protected file (${guarded.why}), and ${why}; nothing was written.`,
      );
    if (!this.options.approve) throw refuse("writing it needs the user's approval, which is not possible here");
    if (how.beforeAsking) {
      try {
        await how.beforeAsking();
      } catch {
        throw new ToolError(`${tool.name} was cancelled.`);
      }
    }
    if (signal.aborted) throw new ToolError(`${tool.name} was cancelled.`);
    const reply = await this.options.approve(
      {
        callId,
        tags: how.tags,
        tool,
        arguments: { ...args, protected_file: `${guarded.path}: ${guarded.why}` },
        safetyLevel: this.policy.effectiveSafety(tool),
        reason: { kind: "protected", path: guarded.path, why: guarded.why },
        ...(how.projectRoot !== undefined ? { projectRoot: how.projectRoot } : {}),
      },
      signal,
    );
    if (reply?.decision !== "approved") throw refuse(`the user did not allow it${reply?.decision === "denied" && reply.reason ? ` (${reply.reason})` : ""}`);
    how.onApproved?.();
  }

  /**
   * A tool that changes a buffer's text (Tool.writesBuffer) into a buffer visiting a protected file
   * asks as a write to that file would (the user's next save writes it there): the buffer's file is
   * asked of Emacs, resolved against the call's root, and judged by confirmWrite, the check every
   * write found as it runs goes through.
   */
  private async confirmBufferWrite(tool: Tool, args: Record<string, unknown>, ctx: ToolContext, confirm: (file: string) => Promise<void>): Promise<{ args: Record<string, unknown>; visit?: BufferVisit }> {
    const primary = this.options.registry.get(this.policy.primaryName(tool)) ?? tool;
    if (primary.writesBuffer === undefined || !ctx.emacs) return { args };
    const primaryArgs = toPrimaryArgs(tool, args);
    const given = primaryArgs[primary.writesBuffer];
    const visited = await visitedFile(ctx, typeof given === "string" ? given : undefined);
    if (visited.file) await confirm(visited.file);
    // The buffer judged is the one written: "the user's last buffer" is named, so that a buffer the
    // user switched to meanwhile (perhaps visiting another protected file) is not the one changed.
    // And it is written only while it visits the file judged (Emacs checks where the call runs).
    return { args: fromPrimaryArgs(tool, { ...primaryArgs, [primary.writesBuffer]: visited.buffer }), visit: visited };
  }

  /** How long TOOL's handler may run before the executor stops it. */
  timeoutFor(tool: Tool): number {
    if (tool.timeoutMs !== undefined) return tool.timeoutMs;
    if (tool.runtime === "image") {
      // The first call of a connection loads the helpers before it evaluates.
      return (this.options.imageTimeoutMs ?? DEFAULT_IMAGE_TIMEOUT_MS) + (this.options.imageLoadTimeoutMs ?? DEFAULT_IMAGE_LOAD_TIMEOUT_MS) + IMAGE_MARGIN_MS;
    }
    return this.defaultTimeoutMs;
  }

  /** What TOOL's approval shows besides ARGS (Tool.preview), and its digest. */
  private async previewOf(tool: Tool, args: Record<string, unknown>, callId: string, signal: AbortSignal, projectRoot: string | undefined): Promise<{ shown: Record<string, unknown>; digest: string }> {
    const ctx: ToolContext = { callId, signal, timeoutMs: this.timeoutFor(tool), ...this.options.context?.(), ...(projectRoot !== undefined ? { projectRoot } : {}) };
    const shown = await tool.preview!(args, ctx);
    const hidden = tool.previewBinding ? await tool.previewBinding(args, ctx) : "";
    return { shown, digest: createHash("sha256").update(JSON.stringify(shown)).update("\0").update(hidden).digest("hex") };
  }

  private async runHandler(tool: Tool, args: Record<string, unknown>, callId: string, opts: ExecuteOptions & { onApprovedWhileRunning?: () => void; protectedApproved?: string; projectRoot?: string | undefined }, approved?: ApprovedTarget): Promise<unknown> {
    const { signal: outer, tags, offerCategory, beforeAsking, onApprovedWhileRunning, protectedApproved, onOutput, projectRoot } = opts;
    const timeoutMs = this.timeoutFor(tool);
    const controller = new AbortController();
    const onOuterAbort = () => controller.abort(new ToolError(`${tool.name} was cancelled.`));
    if (outer?.aborted) throw new ToolError(`${tool.name} was cancelled before it ran.`);
    outer?.addEventListener("abort", onOuterAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    let graceTimer: NodeJS.Timeout | undefined;
    const stopped = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const err = new ToolError(`${tool.name} timed out after ${timeoutMs} ms and was stopped.`);
        controller.abort(err);
      }, timeoutMs);
      controller.signal.addEventListener(
        "abort",
        () => {
          // A tool that answers a cancel itself (a command's output so far) is given a moment to.
          if (tool.answersCancel && outer?.aborted) graceTimer = setTimeout(() => reject(controller.signal.reason), CANCEL_GRACE_MS);
          else reject(controller.signal.reason);
        },
        { once: true },
      );
    });
    stopped.catch(() => undefined);
    try {
      const { projectRoot: _now, ...editor } = this.options.context?.() ?? {};
      const context: ToolContext = {
        ...editor,
        // The root the call was judged against, not the editor's latest: one root for the whole call.
        ...(projectRoot !== undefined ? { projectRoot } : {}),
        callId,
        signal: controller.signal,
        timeoutMs,
        ...(approved ? { approved } : {}),
        ...(offerCategory ? { offerCategory } : {}),
        ...(onOutput ? { output: (tail: string, totalBytes: number) => onOutput({ id: callId, name: tool.name, arguments: args }, tail, totalBytes) } : {}),
        readOutside: (path) => this.confirmReadOutside(tool, args, callId, path, controller.signal, tags, beforeAsking, onApprovedWhileRunning, projectRoot),
        confirmWrite: (file) => this.confirmWrite(tool, args, callId, file, controller.signal, { tags, beforeAsking, onApproved: onApprovedWhileRunning, protectedApproved, projectRoot }),
      };
      const confirmBuffer = (file: string) => this.confirmWrite(tool, args, callId, file, controller.signal, { tags, beforeAsking, onApproved: onApprovedWhileRunning, protectedApproved, projectRoot, buffer: true });
      const running = Promise.resolve().then(async () => {
        const judged = await this.confirmBufferWrite(tool, args, context, confirmBuffer);
        return tool.handler(judged.args, judged.visit ? { ...context, bufferVisit: judged.visit } : context);
      });
      running.catch(() => undefined);
      return await Promise.race([running, stopped]);
    } finally {
      clearTimeout(timer);
      clearTimeout(graceTimer);
      outer?.removeEventListener("abort", onOuterAbort);
      if (!controller.signal.aborted) controller.abort(new ToolError("finished"));
    }
  }

  private runHooks(event: HookEvent): void {
    for (const hook of this.options.hooks ?? []) {
      try {
        const r = hook(event);
        if (r && typeof (r as Promise<unknown>).catch === "function") (r as Promise<unknown>).catch(() => undefined);
      } catch {
        // A failing hook never breaks the call.
      }
    }
  }

  private auditEntry(callId: string, tool: Tool, safetyLevel: SafetyLevel, args: Record<string, unknown>, decision: AuditEntry["decision"]): void {
    try {
      this.options.audit?.({ time: new Date().toISOString(), callId, tool: tool.name, safetyLevel, arguments: args, decision });
    } catch {
      // Auditing must not stop the work it records.
    }
  }
}

interface NormalizedCall extends ToolCall {
  problem?: string;
}

/** The projectRoot field of an approval request for ADMITTED, when it has one. */
function rootOf(admitted: AdmittedCall): { projectRoot?: string } {
  return admitted.projectRoot !== undefined ? { projectRoot: admitted.projectRoot } : {};
}

function normalizeCall(raw: unknown): NormalizedCall {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    return { id: "", name: "", arguments: {}, problem: `A tool call must be an object with id, name and arguments; got ${clip(formatResult(raw))}.` };
  }
  const r = raw as Record<string, unknown>;
  const id = typeof r.id === "string" ? r.id : r.id === undefined || r.id === null ? "" : String(r.id);
  if (typeof r.name !== "string" || r.name === "") {
    return { id, name: typeof r.name === "string" ? r.name : "", arguments: r.arguments, problem: "The tool call has no tool name." };
  }
  return { id, name: r.name, arguments: r.arguments };
}

/** An object of arguments, or a message saying why there is none. */
function parseArguments(raw: unknown): Record<string, unknown> | string {
  let value = raw;
  if (value === undefined || value === null || value === "") return {};
  if (typeof value === "string") {
    try {
      value = JSON.parse(value);
    } catch (err) {
      return `the arguments are not valid JSON (${errorMessage(err)}). Send a JSON object.`;
    }
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return `the arguments must be a JSON object of named parameters, got ${Array.isArray(value) ? "an array" : typeof value}.`;
  }
  return value as Record<string, unknown>;
}

/**
 * Ajv's class, its modules evaluated at this first call. By require, synchronously (validation is part
 * of admitting a call): in the bundle (CommonJS) esbuild evaluates a bundled module where it is
 * required; the test runner gives every module of the source a require too.
 */
function loadAjv(): typeof Ajv {
  return (require("ajv") as typeof import("ajv")).Ajv;
}

function describeSchemaErrors(errors: ErrorObject[], tool: Tool): string {
  // The parameters the model was offered: the others are not its to pass.
  const expected = Object.keys(schemaForModel(tool).properties);
  const seen = new Set<string>();
  for (const e of errors) {
    const param = e.instancePath.replace(/^\//, "").replace(/\//g, ".");
    let msg: string;
    switch (e.keyword) {
      case "required":
        msg = `missing required parameter "${(e.params as { missingProperty: string }).missingProperty}"`;
        break;
      case "additionalProperties":
        msg = `unknown parameter "${clip((e.params as { additionalProperty: string }).additionalProperty)}" (parameters: ${expected.join(", ") || "none"})`;
        break;
      case "type":
        msg = `parameter "${param}" must be ${(e.params as { type: string }).type}`;
        break;
      default:
        msg = `parameter "${param}" ${e.message ?? "is invalid"}`;
    }
    seen.add(msg);
  }
  return [...seen].join("; ") + ".";
}

/** The error of an approved call whose target changed while the approval waited. */
export function targetChanged(tool: Tool): string {
  return `${tool.name} was not run: what it acts on changed while the approval waited, so it is no longer what the user approved. Look again and ask again.`;
}

function deniedByRule(tool: Tool, rule: PermissionRule): string {
  const what = [rule.tool && `tool ${rule.tool}`, rule.category && `category ${rule.category}`, rule.argument && `${rule.argument} matching /${rule.pattern}/`, rule.command && `command ${rule.command}`].filter(Boolean).join(", ");
  return `${tool.name} was denied by a permission rule of the user (deny ${what || "everything"}); it was not run.`;
}

function clip(s: string, n = 80): string {
  return s.length > n ? `${cutText(s, n)}...` : s;
}

/** For a tool whose approval shows more than its arguments (Tool.preview): the reply's parameters only. */
function declaredOnly<T>(tool: Tool, edited: T): T {
  if (!tool.preview || typeof edited !== "object" || edited === null || Array.isArray(edited)) return edited;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(edited)) if (Object.prototype.hasOwnProperty.call(tool.parameters, k)) out[k] = v;
  return out as T;
}

/** The first field of EDITED that TOOL's approval only showed (no parameter) and the user changed. */
function editedShownOnly(tool: Tool, edited: Record<string, unknown>, shown: Record<string, unknown>): string | undefined {
  if (!tool.preview) return undefined;
  for (const [k, v] of Object.entries(edited)) {
    if (Object.prototype.hasOwnProperty.call(tool.parameters, k)) continue;
    if (JSON.stringify(v) !== JSON.stringify(shown[k])) return k;
  }
  return undefined;
}

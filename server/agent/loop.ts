// The agent loop ("Enhanced Agent Loop"): one streamed LLM request per step; the tool calls
// that stream carried are all executed and answered in one message of results; repeat until the
// model answers without tools, the step limit, the turn's time limit, a cancellation or an error.
// Whatever ends the turn, the conversation's history is left in a state both APIs accept.
//
// The turn is a state machine (after gptel-fsm): turn-states.ts declares the states and the
// transitions table; driveTurn below runs one handler per live state, each returning the next state.

import type { StopReason, ToolChoice, TurnFailureKind, TurnState, Usage } from "../protocol.js";
import { ProviderError, StreamIdleError, isAbortError } from "../llm/errors.js";
import { redact } from "../log.js";
import { costOf, modelInfo } from "../llm/models.js";
import { addUsage, answerText, emptyUsage, type ChatResponse, type LLMProvider, type StreamHandlers, type StreamedToolCall, type ThinkingRequest, type ToolDefinition } from "../llm/provider.js";
import { thinkingForRequest } from "../llm/thinking.js";
import { describeForModel, schemaForModel } from "../tools/registry.js";
import type { AdmittedCall, ExecuteOptions, Executor, ToolCall, ToolResult } from "../tools/executor.js";
import type { SafetyLevel, Tool } from "../tools/tool.js";
import { estimateTokens, fitToBudget, type Conversation } from "./conversation.js";
import { historyProblems } from "./history-rules.js";
import { checkTransition, INITIAL_TURN_STATE, isTerminal, type LiveTurnState, type TerminalTurnState } from "./turn-states.js";

export interface RetryPolicy {
  /** Retries after the first attempt, for errors a retry may cure (429, 5xx, overloaded, network). */
  maxRetries: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxRetries: 3, baseDelayMs: 1000, maxDelayMs: 20_000 };
export const DEFAULT_MAX_STEPS = 25;
export const DEFAULT_TURN_TIMEOUT_MS = 15 * 60_000;

export interface TurnSettings {
  provider: LLMProvider;
  model: string;
  system: string;
  tools: readonly Tool[];
  /** Applies to the first request of the turn; later steps use auto, or the model could never stop. */
  toolChoice: ToolChoice;
  maxTokens: number;
  temperature?: number;
  /** Tool steps per turn. */
  maxSteps: number;
  turnTimeoutMs: number;
  retry: RetryPolicy;
  /** Overrides the models table (tests, unusual local models). */
  contextWindow?: number;
  /** The level in force under the user's settings, so a tool's description says truly whether it asks. */
  safetyOf?: (tool: Tool) => SafetyLevel;
  /** False: no call starts before the whole answer came (Configuration.startToolsEarly). */
  startToolsEarly?: boolean;
  /** A lean tool set (tool-set.ts): what it offers now, read before each request; add_tools extends it. */
  toolSet?: { current(): readonly Tool[]; offer(category: string): string[] };
  /** How the turn's requests ask the model to think (thinking.ts's thinkingForTurn): one setting per turn. */
  thinking?: ThinkingRequest;
}

export interface TurnEvents {
  textDelta(text: string): void;
  /** A piece of the model's reasoning as it streams (REDACTED: encrypted, no text), shown apart. */
  thinkingDelta?(text: string, redacted: boolean): void;
  /** A notice for the user about the turn (shown in the chat, outside the folded thinking). */
  notice?(text: string): void;
  /** The answer's text has all been given (textDelta), just before the answer goes into the history. */
  textDone?(): void;
  /** Before the call runs or asks for approval; RUNNING when it started while the answer streamed. */
  toolCall(call: StreamedToolCall, safetyLevel: SafetyLevel | "unknown", running: boolean): void;
  /** An announced call starts to run; until then it waits for the calls before it, or for approval. */
  toolStarted?(call: ToolCall): void;
  /** A running call's output so far (its last bytes), as ToolContext.output gives it. */
  toolOutput?(call: ToolCall, tail: string, totalBytes: number): void;
  /** Once per call, as each finishes. */
  toolResult(result: ToolResult): void;
  /** A failed request is about to be retried after DELAYMS. */
  retrying?(attempt: number, delayMs: number, reason: string): void;
  /** The turn entered STATE (turn-states.ts) from PREVIOUS (null: the turn starts). */
  state?(state: TurnState, previous: TurnState | null): void;
}

export interface TurnInput {
  conversation: Conversation;
  turnId: string;
  text: string;
  executor: Executor;
  settings: TurnSettings;
  events: TurnEvents;
  /** Aborted when the user cancels the turn. */
  signal: AbortSignal;
  /** Said to the model before the user's text: what changed in the editor since the system prompt was written. */
  note?: string;
}

interface OutcomeBase {
  steps: number;
  usage: Usage;
  costUsd: number;
  costNote?: string;
  model: string;
  /** LLM requests made, retries included. */
  llmRequests: number;
}

export type TurnOutcome =
  | (OutcomeBase & { status: "finished"; stopReason: StopReason; text: string })
  | (OutcomeBase & { status: "failed"; kind: TurnFailureKind; message: string });

const TIMEOUT = Symbol("turn timeout");

/** Runs one turn: the state machine of turn-states.ts, from requesting to finished, failed or cancelled. */
export async function runTurn(input: TurnInput): Promise<TurnOutcome> {
  const turn = new Turn(input);
  try {
    return await driveTurn(turn);
  } finally {
    turn.dispose();
  }
}

/**
 * Drives TURN through its states: each live state's handler does that state's work and returns the
 * next state, which must be in the transitions table (an illegal one throws); every transition is
 * reported (TurnEvents.state); a terminal state gives the outcome. A handler that throws ends the
 * turn as failed, or cancelled when the turn was.
 */
export async function driveTurn(turn: Turn): Promise<TurnOutcome> {
  let state: TurnState | null = null;
  let next: TurnState = INITIAL_TURN_STATE;
  for (;;) {
    checkTransition(state, next);
    turn.entered(next, state);
    state = next;
    if (isTerminal(state)) return turn.outcome(state);
    try {
      next = await TURN_HANDLERS[state](turn);
    } catch (err) {
      turn.closeStep();
      next = turn.fail(isAbortError(err) || turn.signal.aborted ? undefined : err);
    }
  }
}

/** One handler per live state (gptel's gptel-request--handlers): the state's work, then the next state. */
export const TURN_HANDLERS: Readonly<Record<LiveTurnState, (turn: Turn) => Promise<TurnState>>> = Object.freeze({
  /** Sends the request (retrying what a retry may cure) and waits for its first text or its whole answer. */
  requesting: async (t: Turn): Promise<TurnState> => {
    if (t.signal.aborted) return t.fail(undefined);
    t.refreshTools();
    // Old tool results give way first when the history no longer fits beside the answer's room.
    t.fitHistory();
    const firstText = t.startRequest();
    let first: ChatResponse | typeof FIRST_TEXT;
    try {
      first = await Promise.race([t.response!, firstText]);
    } catch (err) {
      // What of the answer reached the user stays in the history; the rest never came.
      t.showText();
      t.keepShownText();
      return t.fail(err);
    }
    // Text shown before the answer completes (however fast) means the turn streamed.
    return first === FIRST_TEXT || t.holdsText() ? "streaming" : t.answered(first);
  },

  /** Shows the answer's text as it arrives, until the answer is complete. */
  streaming: async (t: Turn): Promise<TurnState> => {
    t.showText();
    let response: ChatResponse;
    try {
      response = await t.response!;
    } catch (err) {
      t.keepShownText();
      return t.fail(err);
    }
    return t.answered(response);
  },

  /**
   * Runs the step's calls group by group (adjacent safe calls together); a call that must ask sends
   * the turn to awaiting-approval and is run here when it comes back approved. When every call is
   * answered, the results go into the history in one message.
   */
  "running-tools": async (t: Turn): Promise<TurnState> => {
    const step = t.step!;
    const opts = t.executeOptions();
    if (!step.announced) {
      step.announced = true;
      // A call that started while the answer streamed runs already: it started as its block ended.
      step.calls.forEach((call, k) => t.events.toolCall(call.streamed, safetyOf(t.executor, call.name), step.early[k] !== undefined));
      t.showTextAfterCalls();
      step.announceEarly?.();
    }
    if (step.approved) {
      const { index, call } = step.approved;
      step.approved = undefined;
      step.results[index] = await t.executor.run(call, opts);
    }
    while (step.group < step.groups.length) {
      const [i, j] = step.groups[step.group++]!;
      // Calls that started while the answer streamed are awaited, and reported now, after their announcement.
      const runOne = (k: number): Promise<ToolResult> => {
        const early = step.early[k];
        return early ? early.then((r) => (opts.onResult?.(r), r)) : t.executor.execute(step.calls[k]!, opts);
      };
      if (j - i > 1 || step.early[i]) {
        const batch = await Promise.all(Array.from({ length: j - i }, (_, k) => runOne(i + k)));
        batch.forEach((r, k) => (step.results[i + k] = r));
        continue;
      }
      const stage = t.executor.admit(step.calls[i], opts);
      if (stage.kind === "answered") {
        step.results[i] = stage.result;
      } else if (stage.call.ask && !t.signal.aborted) {
        step.asking = { index: i, call: stage.call };
        return "awaiting-approval";
      } else if (stage.call.ask) {
        // The turn is stopping: answered as not run, without asking.
        const answered = await t.executor.askApproval(stage.call, opts);
        step.results[i] = answered.kind === "answered" ? answered.result : await t.executor.run(answered.call, opts);
      } else {
        step.results[i] = await t.executor.run(stage.call, opts);
      }
    }
    return t.endStep();
  },

  /** Asks the user about one call; approved or not (or cancelled), the step goes on. */
  "awaiting-approval": async (t: Turn): Promise<TurnState> => {
    const step = t.step!;
    const { index, call } = step.asking!;
    step.asking = undefined;
    const stage = await t.executor.askApproval(call, t.executeOptions());
    if (stage.kind === "answered") step.results[index] = stage.result;
    else step.approved = { index, call: stage.call };
    return "running-tools";
  },
});

const FIRST_TEXT = Symbol("first text");

/** The safe calls of one attempt at an answer that started while it streamed. */
interface EarlyCalls {
  /** Stops them: aborted with the turn, or when the attempt is discarded. */
  controller: AbortController;
  onAbort: () => void;
  started: Map<string, { call: StreamedToolCall; result: Promise<ToolResult>; controller: AbortController }>;
  /** False once a call that may not start early was seen: no later call starts early either. */
  open: boolean;
  /** What they await before asking the user anything (ExecuteOptions.beforeAsking): resolved once the
   *  complete answer's calls are announced, rejected when the attempt is discarded. */
  announced: Promise<void>;
  announce: () => void;
  refuse: () => void;
}

/** A call of the step: what the executor runs, and what chat/toolCall announces. */
interface StepCall extends ToolCall {
  /** The call as the model streamed it. */
  streamed: StreamedToolCall;
}

/** The step under way: the calls of one answer and their results. */
interface Step {
  calls: StepCall[];
  /** Whether the calls were announced (TurnEvents.toolCall), which running-tools does first. */
  announced: boolean;
  /** Lets the calls that started early ask the user, once the calls are announced. */
  announceEarly?: () => void;
  /** By the calls' index; a hole is a call not answered (yet). */
  results: (ToolResult | undefined)[];
  /** By the calls' index: the result of a call that started while the answer streamed (safe calls only). */
  early: (Promise<ToolResult> | undefined)[];
  /** Executor.batches(calls), and the next one to run. */
  groups: [number, number][];
  group: number;
  /** The call awaiting-approval asks about. */
  asking?: { index: number; call: AdmittedCall };
  /** The call the user approved, which running-tools runs first. */
  approved?: { index: number; call: AdmittedCall };
}

/** The tool definitions a turn under SETTINGS sends the model. */
export function toolDefinitions(settings: Pick<TurnSettings, "tools" | "safetyOf">): ToolDefinition[] {
  return settings.tools.map((t) => ({ name: t.name, description: describeForModel(t, settings.safetyOf?.(t)), inputSchema: schemaForModel(t) }));
}

/**
 * Tokens the history may take in a request under SETTINGS: the context window less the fixed prefix
 * (the system prompt and TOOLS, the tool definitions) and the room kept for the answer.
 */
export function historyRoom(settings: TurnSettings, tools: readonly ToolDefinition[] = toolDefinitions(settings)): number {
  const window = settings.contextWindow ?? modelInfo(settings.model).contextWindow;
  return window - settings.maxTokens - estimateTokens(settings.system) - estimateTokens(JSON.stringify(tools));
}

/** What a turn knows as it goes from state to state: the handlers' shared context. */
export class Turn {
  readonly conversation: Conversation;
  readonly settings: TurnSettings;
  readonly events: TurnEvents;
  readonly executor: Executor;
  /** Aborted by the user's cancellation or the turn's time limit. */
  readonly signal: AbortSignal;
  readonly tags: Record<string, string>;
  /** The tool definitions the requests carry (refreshTools). */
  tools: ToolDefinition[];
  /** Tokens the history may take (historyRoom). */
  historyRoom: number;
  /** How many tools tools was made from: a lean set only grows. */
  private toolCount: number;

  usage = emptyUsage();
  steps = 0;
  llmRequests = 0;
  /** An answer's thinking could not be kept whole: the rest of the turn goes without thinking. */
  thinkingOff = false;
  /** The request under way: its answer, once the stream is complete. */
  response?: Promise<ChatResponse>;
  step?: Step;
  /** The last answer's text, which a step limit ends the turn with. */
  private lastText = "";
  private end?: { stopReason: StopReason; text: string };
  private failure?: { kind: TurnFailureKind; message: string };
  /** Text that arrived before streaming was entered; after that, text is shown as it arrives. */
  private heldText: string[] = [];
  /** The answer's text written after one of its calls, shown once the calls are announced. */
  private textAfterCalls: string[] = [];
  private live = false;
  /** The text of the answer under way that the user has seen. */
  private shownText = "";
  /** The answer under way's safe calls that started as their blocks ended (startEarly). */
  private early: EarlyCalls | undefined;
  private readonly controller = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private readonly onCancel: () => void;
  private readonly input: TurnInput;

  constructor(input: TurnInput) {
    this.input = input;
    const { conversation, settings, events, executor, turnId } = input;
    this.conversation = conversation;
    this.settings = settings;
    this.events = events;
    this.executor = executor;
    this.onCancel = () => this.controller.abort(input.signal.reason);
    if (input.signal.aborted) this.onCancel();
    input.signal.addEventListener("abort", this.onCancel, { once: true });
    this.timer = setTimeout(() => this.controller.abort(TIMEOUT), settings.turnTimeoutMs);
    this.signal = this.controller.signal;
    this.tags = { conversationId: conversation.id, turnId };
    this.tools = toolDefinitions(settings);
    this.toolCount = settings.tools.length;
    this.historyRoom = historyRoom(settings, this.tools);
    if (input.note) conversation.addUserText(input.note, true);
    conversation.addUserText(input.text);
  }

  dispose(): void {
    this.discardEarly();
    clearTimeout(this.timer);
    this.input.signal.removeEventListener("abort", this.onCancel);
  }

  /** The turn entered STATE from PREVIOUS. */
  entered(state: TurnState, previous: TurnState | null): void {
    try {
      this.events.state?.(state, previous);
    } catch {
      // Reporting a state must not change the turn.
    }
  }

  /** The tools a lean set offers now, when add_tools brought in more since the last request. */
  refreshTools(): void {
    const tools = this.settings.toolSet?.current();
    if (!tools || tools.length === this.toolCount) return;
    this.toolCount = tools.length;
    this.tools = toolDefinitions({ tools, safetyOf: this.settings.safetyOf });
    this.historyRoom = historyRoom(this.settings, this.tools);
  }

  fitHistory(): void {
    // Well under the trigger: the next steps then add to a history that stays as sent (the cache holds).
    const ids: string[] = [];
    const shortened = fitToBudget(this.conversation.messages, Math.floor(this.historyRoom * 0.9), Math.floor(this.historyRoom * 0.6), ids);
    if (shortened > 0) this.conversation.noteShortened(this.input.turnId, shortened, ids);
  }

  /** Starts the request (this.response); the promise returned resolves at its first text. */
  startRequest(): Promise<typeof FIRST_TEXT> {
    this.heldText = [];
    this.textAfterCalls = [];
    this.shownText = "";
    this.live = false;
    let sawText: () => void = () => undefined;
    const firstText = new Promise<typeof FIRST_TEXT>((resolve) => (sawText = () => resolve(FIRST_TEXT)));
    this.response = requestWithRetry(
      this,
      (delta, afterCall) => {
        // Text the answer wrote after a call waits for the calls' announcement: shown in the model's order.
        if (afterCall) return void this.textAfterCalls.push(delta);
        if (this.live) return this.showDelta(delta);
        this.heldText.push(delta);
        sawText();
      },
      (call) => this.startEarly(call),
    );
    // Awaited by requesting or streaming; never left unhandled.
    this.response.catch(() => undefined);
    return firstText;
  }

  holdsText(): boolean {
    return this.heldText.length > 0;
  }

  /** Shows the text held so far, and from now on each delta as it arrives. */
  showText(): void {
    this.live = true;
    const held = this.heldText;
    this.heldText = [];
    for (const delta of held) this.showDelta(delta);
  }

  /** Shows the text the answer wrote after its calls, once they are announced. */
  showTextAfterCalls(): void {
    const held = this.textAfterCalls;
    this.textAfterCalls = [];
    for (const delta of held) this.showDelta(delta);
    if (held.length > 0) this.events.textDone?.();
  }

  private showDelta(delta: string): void {
    this.shownText += delta;
    this.events.textDelta(delta);
  }

  /** A new attempt at the answer begins: whatever the last one started is discarded. */
  beginAttempt(): void {
    this.discardEarly();
    this.textAfterCalls = [];
    const controller = new AbortController();
    const onAbort = () => controller.abort(this.signal.reason);
    if (this.signal.aborted) onAbort();
    else this.signal.addEventListener("abort", onAbort, { once: true });
    let announce: () => void = () => undefined;
    let refuse: () => void = () => undefined;
    const announced = new Promise<void>((resolve, reject) => ((announce = resolve), (refuse = () => reject(new Error("discarded")))));
    announced.catch(() => undefined);
    this.early = { controller, onAbort, started: new Map(), open: true, announced, announce, refuse };
  }

  /**
   * CALL's block ended while the answer streams. A call that only reads (safe, offered, no rule asks)
   * starts now, as long as every call before it in the answer is one too: a call after one that may
   * change something must see what that one did, so it waits for the end of the answer like the rest.
   */
  private startEarly(call: StreamedToolCall): void {
    const early = this.early;
    if (!early?.open || early.controller.signal.aborted || this.settings.startToolsEarly === false) return;
    const toolCall: ToolCall = { id: call.id, name: call.name, arguments: call.input ?? call.rawArguments };
    if (!this.executor.readsOnly(toolCall)) {
      early.open = false;
      return;
    }
    // Should it need to ask the user as it runs, it waits until the whole answer came and it was announced.
    // Each its own stop, so that one the complete answer does not hold is stopped alone (takeEarly).
    const controller = new AbortController();
    const onAbort = () => controller.abort(early.controller.signal.reason);
    early.controller.signal.addEventListener("abort", onAbort, { once: true });
    const result = this.executor.execute(toolCall, { signal: controller.signal, tags: this.tags, beforeAsking: () => early.announced, onStart: (c, ranArguments) => this.callStarted(c, ranArguments) });
    result.finally(() => early.controller.signal.removeEventListener("abort", onAbort)).catch(() => undefined);
    early.started.get(call.id)?.controller.abort("discarded");
    early.started.set(call.id, { call, result, controller });
  }

  /** Stops and forgets what started early (a failed or cancelled stream, or a retry): none of it is reported. */
  discardEarly(): void {
    const early = this.early;
    if (!early) return;
    this.early = undefined;
    this.signal.removeEventListener("abort", early.onAbort);
    early.refuse();
    early.controller.abort("discarded");
  }

  /** The early results for CALLS of the complete answer, by index; what started and is not in it is stopped. */
  private takeEarly(calls: readonly StepCall[]): { taken: (Promise<ToolResult> | undefined)[]; announce?: () => void } {
    const early = this.early;
    this.early = undefined;
    if (!early) return { taken: [] };
    this.signal.removeEventListener("abort", early.onAbort);
    // Only the message's first calls, up to the first that may not start early under the settings in
    // force now: a call after a change must see what it did (a block streamed again under its index can
    // put a change before a read that started), and a rule set while the answer streamed applies.
    let open = true;
    const taken = calls.map((c) => {
      const e = early.started.get(c.id);
      open &&= this.executor.readsOnly({ id: c.id, name: c.name, arguments: c.arguments });
      // The same object the stream finished: what ran is exactly what the message holds.
      if (!open || e?.call !== c.streamed) return undefined;
      early.started.delete(c.id);
      return e.result;
    });
    // What started and is not the message's call (a block the stream sent again) is stopped and forgotten.
    for (const e of early.started.values()) e.controller.abort("discarded");
    // Tied to the turn again for the rest of its life (a cancellation while they run stops them).
    if (taken.some((r) => r !== undefined)) {
      if (this.signal.aborted) early.controller.abort(this.signal.reason);
      else this.signal.addEventListener("abort", early.onAbort, { once: true });
      return { taken, announce: early.announce };
    }
    early.refuse();
    early.controller.abort("discarded");
    return { taken };
  }

  /** An answer cut short (an error, a cancellation): the text the user saw goes into the history. */
  keepShownText(): void {
    this.discardEarly();
    const text = this.shownText;
    this.shownText = "";
    this.events.textDone?.();
    if (text.trim() !== "") this.conversation.addAssistant([{ type: "text", text }]);
  }

  /** A complete answer: the turn is finished, or its tool calls are the next step. */
  answered(response: ChatResponse): TurnState {
    this.response = undefined;
    this.usage = addUsage(this.usage, response.usage);
    this.events.textDone?.();
    this.conversation.addAssistant(response.content);
    const text = answerText(response.content);
    this.lastText = text;
    if (response.toolCalls.length === 0) {
      this.discardEarly();
      return this.finish(response.stopReason, text);
    }
    const calls: StepCall[] = response.toolCalls.map((c) => ({
      id: c.id,
      name: c.name,
      // Arguments that did not parse go to the executor as text, which answers with a JSON error the model can fix.
      arguments: c.input ?? c.rawArguments,
      streamed: c,
    }));
    const early = this.takeEarly(calls);
    this.step = { calls, results: new Array(calls.length), early: early.taken, groups: this.executor.batches(calls), group: 0, announced: false, ...(early.announce ? { announceEarly: early.announce } : {}) };
    return "running-tools";
  }

  /** How the step's calls run: this turn's signal and tags, each result reported once as it comes. */
  executeOptions(): ExecuteOptions {
    const toolSet = this.settings.toolSet;
    return {
      signal: this.signal,
      tags: this.tags,
      onResult: (r) => this.events.toolResult(r),
      onStart: (call, ranArguments) => this.callStarted(call, ranArguments),
      onOutput: (call, tail, totalBytes) => this.events.toolOutput?.(call, tail, totalBytes),
      ...(toolSet ? { offerCategory: (c: string) => toolSet.offer(c) } : {}),
    };
  }

  /**
   * CALL starts to run, or runs again after an approval it asked for as it ran: its start is saved
   * before it runs (a crash then leaves it "interrupted", never "not run"), and the user told once
   * it was announced (a call that starts while the answer streams is announced as running).
   */
  private callStarted(call: ToolCall, ranArguments?: Record<string, unknown>): string | undefined {
    if (!this.conversation.recordStarted(call.id, ranArguments)) {
      return `${call.name} was not run: this conversation's file can no longer be written, so its start could not be saved, and a resumed conversation would wrongly say it never ran. A new conversation is saved afresh.`;
    }
    if (this.step?.announced && this.step.calls.some((c) => c.id === call.id)) this.events.toolStarted?.(call);
    return undefined;
  }

  /** Every call is answered: the results go into the history, and the turn goes on unless it must stop. */
  endStep(): TurnState {
    this.closeStep();
    this.steps++;
    if (this.signal.aborted) return this.fail(undefined);
    if (this.steps >= this.settings.maxSteps) return this.finish("step_limit", this.lastText);
    return "requesting";
  }

  /** Puts the open step's results into the history: every call gets exactly one, an unanswered call an error. */
  closeStep(): void {
    const step = this.step;
    if (!step) return;
    this.step = undefined;
    this.conversation.addToolResults(step.results.filter((r): r is ToolResult => r !== undefined), this.interruption());
  }

  /** What stopped the turn, for the results of calls it left unanswered. */
  private interruption(): string {
    if (!this.signal.aborted) return "the turn stopped on an error";
    if (this.signal.reason === TIMEOUT) return "the turn took longer than its time limit";
    return this.signal.reason === "connection closed" ? "Emacs closed its connection to the server" : "the turn was cancelled";
  }

  finish(stopReason: StopReason, text: string): TurnState {
    this.end = { stopReason, text };
    return "finished";
  }

  /** Why the turn fails (the signal's reason first: cancelled or timed out); returns failed or cancelled. */
  fail(err: unknown): TurnState {
    this.failure = this.failureOf(err);
    return this.failure.kind === "cancelled" ? "cancelled" : "failed";
  }

  private failureOf(err: unknown): { kind: TurnFailureKind; message: string } {
    if (this.signal.aborted) {
      return this.signal.reason === TIMEOUT
        ? { kind: "timeout", message: `The turn took longer than ${Math.round(this.settings.turnTimeoutMs / 1000)} s and was stopped. Raise turnTimeoutMs, or ask for a smaller piece of work.` }
        : { kind: "cancelled", message: "The turn was cancelled." };
    }
    if (err instanceof ProviderError) return { kind: err.kind, message: err.message };
    return { kind: "internal", message: redact(`Internal error in the agent loop: ${(err as Error)?.message ?? String(err)}`) };
  }

  /** The outcome of a turn that ended in STATE. */
  outcome(state: TerminalTurnState): TurnOutcome {
    const cost = costOf(this.settings.model, this.usage);
    const base: OutcomeBase = { steps: this.steps, usage: this.usage, costUsd: cost.usd, ...(cost.note ? { costNote: cost.note } : {}), model: this.settings.model, llmRequests: this.llmRequests };
    if (state === "finished") {
      const end = this.end ?? { stopReason: "end_turn" as StopReason, text: this.lastText };
      return { ...base, status: "finished", stopReason: end.stopReason, text: end.text };
    }
    const failure = this.failure ?? this.failureOf(undefined);
    return { ...base, status: "failed", kind: failure.kind, message: failure.message };
  }
}

/** The turn's next LLM request, streamed; failures a retry may cure are retried while no text was shown. */
async function requestWithRetry(t: Turn, onText: StreamHandlers["onText"], onToolCall: (call: StreamedToolCall) => void): Promise<ChatResponse> {
  const { settings, events, signal } = t;
  const toolChoice: ToolChoice = t.steps === 0 ? settings.toolChoice : settings.toolChoice === "none" ? "none" : "auto";
  let idleRetried = false;
  // One thinking setting for the turn; a loop that began without thinking goes on without it.
  const thinking = t.thinkingOff ? undefined : thinkingForRequest(t.conversation.messages, settings.thinking);
  // A history no API accepts is never sent: the turn fails saying what is wrong with it.
  const problems = historyProblems(t.conversation.messages, true, thinking);
  if (problems.length > 0) {
    throw new ProviderError(
      "internal",
      `The conversation's history breaks the rules the model's API checks, so it was not sent: ${problems.slice(0, 3).join("; ")}${problems.length > 3 ? ` (and ${problems.length - 3} more)` : ""}. Rewind the conversation to an earlier turn or start a new one; please report this.`,
      false,
    );
  }
  for (let attempt = 0; ; attempt++) {
    let emitted = false;
    t.llmRequests++;
    t.beginAttempt();
    try {
      const response = await settings.provider.stream(
        {
          model: settings.model,
          system: settings.system,
          messages: t.conversation.messages,
          tools: t.tools,
          toolChoice,
          maxTokens: settings.maxTokens,
          ...(settings.temperature !== undefined ? { temperature: settings.temperature } : {}),
          ...(thinking ? { thinking } : {}),
        },
        {
          onText: (delta, afterCall) => {
            // Text held until the calls are announced has not reached the user yet.
            if (!afterCall) emitted = true;
            onText(delta, afterCall);
          },
          onToolCall,
          // Shown as it comes: a retry after it would show it twice, as for text.
          onThinking: (delta, redacted) => {
            emitted = true;
            events.thinkingDelta?.(delta, redacted === true);
          },
          onNotice: (text) => events.notice?.(text),
        },
        signal,
      );
      // The SDKs end an aborted stream quietly: an answer whose end marker came just before a cancellation
      // is cut like any other (none of its calls is announced, run or kept).
      if (signal.aborted) throw abortError();
      if (response.thinkingDropped) t.thinkingOff = true;
      return response;
    } catch (err) {
      // A stalled stream is retried once, and only when nothing of it was shown.
      if (err instanceof StreamIdleError && !signal.aborted) {
        if (emitted || idleRetried) throw err.final(emitted);
        idleRetried = true;
        events.retrying?.(attempt + 1, 0, err.message);
        continue;
      }
      // A retry after text reached the user would show it twice: only clean failures are retried.
      if (signal.aborted || !(err instanceof ProviderError) || !err.retryable || emitted || attempt >= settings.retry.maxRetries) throw err;
      const backoff = Math.min(settings.retry.maxDelayMs, err.retryAfterMs ?? settings.retry.baseDelayMs * 2 ** attempt);
      events.retrying?.(attempt + 1, backoff, err.message);
      await sleep(backoff, signal);
    }
  }
}

function abortError(): Error {
  const err = new Error("The answer was cut by a cancellation.");
  err.name = "AbortError";
  return err;
}

function safetyOf(executor: Executor, name: string): SafetyLevel | "unknown" {
  const tool = executor.tool(name);
  return tool ? executor.effectiveSafety(tool) : "unknown";
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

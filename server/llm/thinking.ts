// Whether and how a model is asked to think, per model and per turn. Anthropic's rules (the
// "Thinking", "Adaptive thinking" and "Extended thinking" pages of its documentation):
// - Claude Opus 4.7 and later, Mythos and the 5 family take adaptive thinking only ({type: "adaptive"},
//   steered by output_config.effort; a budget is refused with a 400), and omit the thinking text
//   unless display "summarized" is asked for;
// - Claude Opus 4.6 and Sonnet 4.6 take adaptive thinking (the budget form is deprecated there);
//   adaptive thinking thinks between tool calls by itself, no beta header;
// - older thinking models (Claude 4 to 4.5, Sonnet 3.7) take a fixed budget_tokens, at least 1024 and
//   below max_tokens; Claude 4 models think between calls only with the interleaved-thinking beta header;
// - with a budget, a tool choice that forces a call is refused, and so is any temperature with thinking;
// - one thinking configuration per assistant turn: a tool loop is one turn, so the setting applies
//   between turns (the loop takes it once per turn).
// OpenAI-compatible servers take a reasoning effort; their reasoning text is shown, not sent back.

import type { ModelThinking, ProviderName, ThinkingSetting, ToolChoice } from "../protocol.js";
import type { Message, ThinkingRequest } from "./provider.js";
import { isThinking } from "./provider.js";

export type ThinkingKind = "adaptive-only" | "adaptive" | "budget" | "none";

export interface ThinkingSupport {
  kind: ThinkingKind;
  /** A budget model that thinks between tool calls only with the interleaved-thinking beta header. */
  interleavedBeta?: boolean;
  /** The model omits the thinking text unless display "summarized" is asked for. */
  omitsDisplay?: boolean;
}

/** The beta header that lets a Claude 4 model with a thinking budget think between tool calls. */
export const INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14";

const EFFORTS = ["low", "medium", "high", "xhigh", "max"] as const;
type Effort = (typeof EFFORTS)[number];
const SETTINGS = new Set<string>(["off", "auto", ...EFFORTS]);
/** The API's least budget. */
const MIN_BUDGET = 1024;

/** How MODEL (an Anthropic model name, maybe with a vendor prefix or dots) thinks. */
export function thinkingSupport(model: string): ThinkingSupport {
  const name = model.toLowerCase().replace(/^[a-z0-9-]+\//, "").replace(/\./g, "-");
  if (/^claude-mythos/.test(name)) return { kind: "adaptive-only", omitsDisplay: true };
  if (/^claude-3-7-sonnet/.test(name)) return { kind: "budget" };
  const m = /^claude-(?:opus|sonnet|haiku|fable)-(\d+)(?:-(\d{1,2}))?(?:-|$)/.exec(name);
  if (!m) return { kind: "none" };
  const major = Number(m[1]);
  const minor = m[2] === undefined ? 0 : Number(m[2]);
  if (major >= 5 || (major === 4 && minor >= 7)) return { kind: "adaptive-only", omitsDisplay: true };
  if (major === 4 && minor === 6) return { kind: "adaptive" };
  if (major === 4) return { kind: "budget", interleavedBeta: true };
  return { kind: "none" };
}

/** OpenAI's own models that do not reason: OpenAI refuses a reasoning effort for them. */
const OPENAI_NOT_REASONING = /^(?:gpt-4|gpt-3\.5|chatgpt-4o)/;
/** OpenAI's reasoning models: they take a reasoning effort. */
const OPENAI_REASONING = /^(?:o\d|gpt-5|gpt-oss)/;

/**
 * Whether PROVIDER's MODEL can be asked to think, and how, in words for the user: what the menu says
 * before the thinking setting is changed, so that a setting that would not be sent is never set in silence.
 */
export function modelThinking(provider: ProviderName, model: string): ModelThinking {
  if (provider === "openai") {
    const name = model.toLowerCase().replace(/^[a-z0-9-]+\//, "");
    if (OPENAI_NOT_REASONING.test(name)) {
      return { model, thinks: "no", how: `${model} does not reason: OpenAI refuses a reasoning effort for it, so none is sent whatever sly-agent-q-thinking says. Choose a reasoning model (o3, o4-mini, gpt-5) to have it think.` };
    }
    if (OPENAI_REASONING.test(name)) return { model, thinks: "yes", how: `${model} reasons, with the effort you set (low, medium, high; auto sends none and lets the model choose).` };
    return {
      model,
      thinks: "if-set",
      how: `${model} is not one of OpenAI's reasoning models: an effort (low, medium, high) is sent only when you set one, and only a server whose model reasons takes it (others may refuse it); auto sends none. Reasoning text the server streams is shown either way.`,
    };
  }
  const support = thinkingSupport(model);
  switch (support.kind) {
    case "none":
      return { model, thinks: "no", how: `${model} does not think: the API takes no thinking setting for it, so none is sent whatever sly-agent-q-thinking says. Choose a Claude 4 model or later (or Sonnet 3.7) to have it think.` };
    case "adaptive-only":
      return { model, thinks: "yes", how: `${model} thinks adaptively, as much as an effort level (low to max) asks; it takes no budget (a budget in tokens is sent as auto).` };
    case "adaptive":
      return { model, thinks: "yes", how: `${model} thinks adaptively, as much as an effort level (low to max) asks, or within a budget in tokens you set.` };
    default:
      return { model, thinks: "yes", how: `${model} thinks within a budget: the tokens you set, or one an effort level picks (low 1024, medium a quarter of max tokens, high and above half).` };
  }
}

/** The user's setting for MODEL in SETTINGS: the longest key that is MODEL or a prefix of it ("*": any model). */
export function settingFor(settings: Readonly<Record<string, ThinkingSetting>> | undefined, model: string): ThinkingSetting | undefined {
  if (!settings) return undefined;
  let best: ThinkingSetting | undefined;
  let length = -1;
  for (const [key, value] of Object.entries(settings)) {
    const k = key === "*" ? "" : key;
    if (model.startsWith(k) && k.length > length) {
      best = value;
      length = k.length;
    }
  }
  return best;
}

/** What is wrong with the configuration's thinking settings (empty: nothing), each naming the key. */
export function thinkingProblems(settings: unknown): string[] {
  if (settings === undefined) return [];
  if (settings === null || typeof settings !== "object" || Array.isArray(settings)) return ["configuration.thinking must be an object of model name (or prefix, or \"*\") to setting"];
  return Object.entries(settings as Record<string, unknown>).flatMap(([k, v]) =>
    (typeof v === "string" && SETTINGS.has(v)) || (typeof v === "number" && Number.isInteger(v) && v >= MIN_BUDGET)
      ? []
      : [`configuration.thinking["${k}"] must be off, auto, low, medium, high, xhigh, max or a budget of at least ${MIN_BUDGET} tokens`],
  );
}

export interface TurnThinking {
  /** How every request of the turn asks the model to think; undefined: it is not asked. */
  request?: ThinkingRequest;
  /** Why thinking the user asked for is not sent this turn (said to the user once per turn). */
  note?: string;
}

/**
 * How a turn on PROVIDER's MODEL thinks under the user's SETTING (undefined: auto), given the turn's
 * max tokens, first tool choice and temperature: the mode each model's documentation recommends,
 * or nothing (with a note saying why and which setting to change) when the API would refuse it.
 */
export function thinkingForTurn(provider: ProviderName, model: string, setting: ThinkingSetting | undefined, turn: { maxTokens: number; toolChoice: ToolChoice; temperature?: number }): TurnThinking {
  const asked = setting ?? "auto";
  if (asked === "off") return {};
  if (provider === "openai") {
    if (modelThinking(provider, model).thinks === "no") {
      return asked === "auto" ? {} : { note: `${model} does not reason (OpenAI refuses a reasoning effort for it); the thinking setting for it is not sent.` };
    }
    // Only what the user set: compatible servers differ in the values they take.
    if (typeof asked === "string" && asked !== "auto") return { request: { mode: "reasoning-effort", effort: asked } };
    if (typeof asked === "number") return { note: `Thinking budgets are an Anthropic setting; OpenAI-compatible models take an effort level (low, medium, high) in sly-agent-q-thinking for ${model}.` };
    return {};
  }
  const support = thinkingSupport(model);
  if (support.kind === "none") {
    return asked === "auto" ? {} : { note: `${model} does not think (it takes no thinking setting); the thinking setting for it is not sent.` };
  }
  if (turn.temperature !== undefined) {
    return { note: `Thinking is off this turn: the API refuses a temperature together with thinking. Remove temperature from sly-agent-q-extra-configuration to let ${model} think, or set its thinking to off in sly-agent-q-thinking.` };
  }
  const effort = typeof asked === "string" && asked !== "auto" ? (asked as Effort) : undefined;
  if (support.kind === "adaptive-only" || (support.kind === "adaptive" && typeof asked !== "number")) {
    return { request: { mode: "adaptive", ...(effort ? { effort } : {}), ...(support.omitsDisplay ? { display: "summarized" as const } : {}) } };
  }
  // A budget: the number the user set, or one from the effort asked, below max_tokens.
  if (turn.maxTokens - 1 < MIN_BUDGET) {
    return { note: `Thinking is off: ${model} thinks with a budget of at least ${MIN_BUDGET} tokens below max tokens, and max tokens is ${turn.maxTokens}. Raise sly-agent-q-max-tokens to let it think.` };
  }
  const forced = turn.toolChoice === "any" || typeof turn.toolChoice === "object";
  if (forced) return { note: `Thinking is off this turn: ${model} cannot think with a budget when a tool call is forced.` };
  const wanted = typeof asked === "number" ? asked : effort === "low" ? MIN_BUDGET : effort === "medium" ? Math.floor(turn.maxTokens / 4) : Math.floor(turn.maxTokens / 2);
  const budgetTokens = Math.max(MIN_BUDGET, Math.min(wanted, turn.maxTokens - 1));
  return { request: { mode: "budget", budgetTokens, interleaved: support.interleavedBeta === true } };
}

/**
 * THINKING for the request that sends MESSAGES: with a budget, the API wants the assistant turn a
 * request's tool results continue to begin with thinking ("a final assistant message must start
 * with a thinking block"); when it did not (thinking was off when the turn began, or its thinking
 * could not be kept and the repair dropped it), the rest of the turn goes without thinking, as the
 * documentation says a turn keeps one configuration. Adaptive thinking may skip thinking: kept.
 */
export function thinkingForRequest(messages: readonly Message[], thinking: ThinkingRequest | undefined): ThinkingRequest | undefined {
  if (thinking?.mode !== "budget") return thinking;
  return openLoop(messages).every((m) => m.role === "assistant" && isThinking(m.content[0])) ? thinking : undefined;
}

/**
 * The answer that began the tool loop the last message of MESSAGES continues (none when it is the
 * user's own text): walking back over results and the calls they answer, to the answer that
 * followed the user's text. The API holds it to the turn's thinking configuration.
 */
export function openLoop(messages: readonly Message[]): Message[] {
  let first: Message | undefined;
  for (let i = messages.length - 1; i >= 1; i -= 2) {
    const user = messages[i];
    const answer = messages[i - 1];
    if (user?.role !== "user" || answer?.role !== "assistant" || !user.content.some((b) => b.type === "tool_result")) break;
    first = answer;
  }
  return first ? [first] : [];
}

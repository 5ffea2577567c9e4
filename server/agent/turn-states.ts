// The states of a turn and which state may follow which, after gptel's
// `gptel-request--transitions`: one frozen table, read by the loop (loop.ts drives a turn through it,
// one handler per state), by the chat/turnState notification, by doc/turn-states.md's diagram (a test
// compares the two) and by the tests. A transition the table does not list is a bug: it throws.

import type { TurnState } from "../protocol.js";

export type { TurnState } from "../protocol.js";

/** Every state, in the order of a typical turn. */
export const TURN_STATES: readonly TurnState[] = Object.freeze(["requesting", "streaming", "running-tools", "awaiting-approval", "finished", "failed", "cancelled"] as const);

/** The state a turn starts in (its chat/turnState says previous: null). */
export const INITIAL_TURN_STATE: TurnState = "requesting";

/** The states a turn ends in; nothing follows them. */
export type TerminalTurnState = "finished" | "failed" | "cancelled";
export type LiveTurnState = Exclude<TurnState, TerminalTurnState>;

/**
 * Which states may follow each state. Every live state may fail (an error, the turn's time limit) or
 * be cancelled; an answer with only tool calls goes from requesting to running-tools without
 * streaming; a call that needs the user's approval goes to awaiting-approval and back.
 */
export const TURN_TRANSITIONS: Readonly<Record<TurnState, readonly TurnState[]>> = Object.freeze({
  // Waiting for the answer's first text (retries included): text arrives, or the whole answer
  // (tool calls only, or empty) arrives, or the request fails.
  requesting: Object.freeze(["streaming", "running-tools", "finished", "failed", "cancelled"] as const),
  // Text is arriving: the answer ends with tool calls or without.
  streaming: Object.freeze(["running-tools", "finished", "failed", "cancelled"] as const),
  // The step's calls run: a call asks, or the step is done and the next request follows, or the step
  // limit ends the turn.
  "running-tools": Object.freeze(["awaiting-approval", "requesting", "finished", "failed", "cancelled"] as const),
  // One call waits for the user; whatever the answer (a cancellation too) the step goes on, which
  // answers every call before the turn can end.
  "awaiting-approval": Object.freeze(["running-tools", "failed", "cancelled"] as const),
  finished: Object.freeze([] as const),
  failed: Object.freeze([] as const),
  cancelled: Object.freeze([] as const),
});

export function isTerminal(state: TurnState): state is TerminalTurnState {
  return TURN_TRANSITIONS[state].length === 0;
}

export class IllegalTransitionError extends Error {
  constructor(
    readonly from: TurnState | null,
    readonly to: TurnState,
  ) {
    super(`Illegal turn transition ${from ?? "(start)"} -> ${to}${from ? `; ${from} may go to ${TURN_TRANSITIONS[from].join(", ") || "nothing"}` : `; a turn starts in ${INITIAL_TURN_STATE}`}.`);
    this.name = "IllegalTransitionError";
  }
}

/** Whether the table lets TO follow FROM (null: the turn has not started). */
export function isLegalTransition(from: TurnState | null, to: TurnState): boolean {
  if (from === null) return to === INITIAL_TURN_STATE;
  return (TURN_TRANSITIONS[from] ?? []).includes(to);
}

/** Throws IllegalTransitionError unless the table lets TO follow FROM. */
export function checkTransition(from: TurnState | null, to: TurnState): void {
  if (!isLegalTransition(from, to)) throw new IllegalTransitionError(from, to);
}

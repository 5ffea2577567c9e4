// Compaction: when a conversation's history nears the model's context window, or on the
// user's request, its older turns are replaced, for the model only, by a summary the model writes.
// The saved file and the chat keep every message; the file records where the summary applies.
//
// The cut is made where a turn starts (a user message with the user's text and no tool results), so
// that what is kept is valid on its own; the summary is put in front of that message, so roles still
// alternate. The turns to summarize are sent as one transcript in one user message: no tool
// definitions are needed, and both APIs accept it.

import type { Usage } from "../protocol.js";
import type { LLMProvider, Message, UserMessage } from "../llm/provider.js";
import { cutText } from "../text.js";

/** The turns kept whole by a compaction. */
export const KEEP_TURNS = 2;
/** Automatic compaction starts when the history passes this share of the room it has (loop.ts's historyRoom). */
export const AUTO_COMPACT_SHARE = 0.8;
/** How much of each tool result goes into the transcript the summary is written from. */
const RESULT_CHARS = 1500;

export const SUMMARY_PREFIX = "[Summary of the earlier part of this conversation, written when it was compacted]\n";

/** The index of the message where the last KEEP turns start, or undefined when there is nothing before it to compact. */
export function compactionPoint(messages: readonly Message[], keep = KEEP_TURNS): number | undefined {
  let seen = 0;
  for (let i = messages.length - 1; i > 0; i--) {
    const m = messages[i]!;
    if (m.role !== "user" || !m.content.some((b) => b.type === "text") || m.content.some((b) => b.type === "tool_result")) continue;
    if (++seen >= keep) return i;
  }
  return undefined;
}

/** MESSAGES from CUT on, the summary in front of the first (a user message, by compactionPoint). */
export function compactedHistory(messages: readonly Message[], cut: number, summary: string): Message[] {
  const tail = structuredClone(messages.slice(cut));
  const first = tail[0] as UserMessage | undefined;
  const block = { type: "text" as const, text: `${SUMMARY_PREFIX}${summary}` };
  if (first?.role === "user") first.content.unshift(block);
  else tail.unshift({ role: "user", content: [block] });
  return tail;
}

/** MESSAGES as a plain transcript, long tool results shortened. */
export function transcript(messages: readonly Message[]): string {
  const out: string[] = [];
  for (const m of messages) {
    for (const b of m.content) {
      if (b.type === "text") out.push(`${m.role === "user" ? "User" : "Assistant"}: ${b.text}`);
      else if (b.type === "tool_use") out.push(`Assistant called ${b.name} with ${JSON.stringify(b.input)}`);
      // The model's reasoning is not part of what happened: the summary is of the conversation.
      else if (b.type === "thinking" || b.type === "redacted_thinking") continue;
      else {
        const kept = cutText(b.content, RESULT_CHARS);
        const text = kept.length < b.content.length ? `${kept} [... ${b.content.length - kept.length} more characters]` : b.content;
        out.push(`Tool ${b.isError ? "error" : "result"}: ${text}`);
      }
    }
  }
  return out.join("\n\n");
}

const SYSTEM =
  "You summarize the earlier part of a conversation between a Common Lisp programmer and their coding agent, so that the agent can go on without it. " +
  "Keep what later turns may need: the user's goals and decisions, file paths, packages, symbol and function names, what was changed in files and in the Lisp image, errors met and how they were solved, and what is still open. " +
  "Be concise and factual; write plain text, no preamble.";

export interface Summary {
  text: string;
  usage: Usage;
  model: string;
}

/** Asks the model for the summary of MESSAGES. Rejects as the provider does (ProviderError, abort). */
export async function summarize(provider: LLMProvider, model: string, messages: readonly Message[], maxTokens: number, signal: AbortSignal): Promise<Summary> {
  const response = await provider.stream(
    {
      model,
      system: SYSTEM,
      messages: [{ role: "user", content: [{ type: "text", text: `The conversation so far:\n\n${transcript(messages)}\n\nWrite the summary now.` }] }],
      tools: [],
      toolChoice: "none",
      maxTokens,
    },
    { onText: () => undefined },
    signal,
  );
  const text = response.content
    .flatMap((b) => (b.type === "text" ? [b.text] : []))
    .join("")
    .trim();
  if (text === "") throw new Error("the model wrote an empty summary");
  return { text, usage: response.usage, model: response.model };
}

/** Whether a history of HISTORYTOKENS is near enough to filling ROOM (loop.ts's historyRoom) to compact. */
export function needsCompaction(historyTokens: number, room: number): boolean {
  return room > 0 && historyTokens > room * AUTO_COMPACT_SHARE;
}

// conversation/compact, and the automatic compaction at the start of a turn whose history nears the
// context window (compaction.ts has the how; this file runs it with the conversation's provider).

import { ResponseError, ErrorCodes as RpcErrorCodes } from "vscode-jsonrpc/node";
import { ErrorCodes, Requests, type Configuration, type ConversationCompactParams, type ConversationCompactResult } from "../protocol.js";
import { ProviderError } from "../llm/errors.js";
import { createProvider } from "../llm/factory.js";
import { costOf } from "../llm/models.js";
import { emptyUsage } from "../llm/provider.js";
import type { AgentServer } from "../rpc/server.js";
import { KEEP_TURNS, compactionPoint, needsCompaction, summarize } from "./compaction.js";
import { estimateMessages, type Conversation } from "./conversation.js";

const SUMMARY_MAX_TOKENS = 2048;

/** Compacts CONVERSATION now with CONFIG's provider and model; resolves with what it did. */
export async function compactConversation(conversation: Conversation, config: Configuration, env: NodeJS.ProcessEnv | undefined, signal: AbortSignal, keep = KEEP_TURNS): Promise<ConversationCompactResult> {
  const cut = compactionPoint(conversation.messages, keep);
  const tokens = estimateMessages(conversation.messages);
  if (cut === undefined) return { compacted: false, replacedMessages: 0, tokensBefore: tokens, tokensAfter: tokens, usage: emptyUsage(), costUsd: 0 };
  const resolved = createProvider(config, env);
  const summary = await summarize(resolved.provider, resolved.model, conversation.messages.slice(0, cut), Math.min(SUMMARY_MAX_TOKENS, config.maxTokens ?? SUMMARY_MAX_TOKENS), signal);
  const cost = costOf(summary.model, summary.usage);
  const { replaced, tokensBefore, tokensAfter } = conversation.compact(cut, summary.text);
  conversation.record(summary.usage, cost.usd, { turnId: "compaction", provider: resolved.name, model: summary.model });
  return { compacted: true, replacedMessages: replaced, tokensBefore, tokensAfter, usage: summary.usage, costUsd: cost.usd };
}

/**
 * Whether CONVERSATION's history nears ROOM (the tokens a request leaves it) at the start of a turn,
 * and has a turn before the last one to compact: the last turn and the one starting are kept whole.
 */
export function shouldCompact(conversation: Conversation, room: number): boolean {
  return needsCompaction(estimateMessages(conversation.messages), room) && compactionPoint(conversation.messages, AUTO_KEEP_TURNS) !== undefined;
}

/** Turns of the history kept whole by an automatic compaction (besides the turn starting). */
export const AUTO_KEEP_TURNS = KEEP_TURNS - 1;

/** Registers conversation/compact on SERVER, for the conversations of CONVERSATIONS. */
export function registerCompaction(server: AgentServer, conversations: Map<string, Conversation>, env: NodeJS.ProcessEnv | undefined): void {
  server.addRequest(Requests.conversationCompact, async (p: ConversationCompactParams): Promise<ConversationCompactResult> => {
    const c = typeof p?.conversationId === "string" ? conversations.get(p.conversationId) : undefined;
    if (!c) throw new ResponseError(ErrorCodes.unknownConversation, `No conversation ${String(p?.conversationId)} is open here.`);
    if (c.running) throw new ResponseError(ErrorCodes.turnRunning, "A turn is running in this conversation; compact it when the turn has ended.");
    const controller = new AbortController();
    // Held like a turn, so that no chat/send runs while the history is being replaced.
    c.running = { turnId: "compaction", controller };
    try {
      return await compactConversation(c, { ...server.configuration, ...c.configuration }, env, controller.signal);
    } catch (err) {
      const message = err instanceof ProviderError ? err.message : (err as Error).message;
      throw new ResponseError(RpcErrorCodes.InternalError, `The summary could not be written: ${message}`);
    } finally {
      c.running = undefined;
    }
  });
}

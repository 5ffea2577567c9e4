// The chat methods of the protocol on an AgentServer: chat/send starts a turn and answers at once,
// chat/cancel stops it, conversation/new, conversation/list and conversation/delete manage conversations; every turn
// reports through chat/* notifications (protocol.ts): chat/turnState at each transition of its state
// machine (turn-states.ts), and it ends with chat/turnFinished or chat/turnFailed.

import { randomUUID } from "node:crypto";
import { ResponseError, ErrorCodes as RpcErrorCodes, type NotificationType } from "vscode-jsonrpc/node";
import {
  ErrorCodes,
  Requests,
  ServerNotifications,
  type ChatCancelParams,
  type ChatCancelResult,
  type ChatSendParams,
  type ChatSendResult,
  type Configuration,
  type ConversationDeleteParams,
  type ConversationDeleteResult,
  type ConversationListResult,
  type ConversationNewParams,
  type ConversationNewResult,
  type TextDeltaParams,
  type ToolCallParams,
  type ToolChoice,
  type ToolResultParams,
  type TurnFailedParams,
  type TurnFinishedParams,
  type TurnStateParams,
} from "../protocol.js";
import { ProviderError } from "../llm/errors.js";
import { redact } from "../log.js";
import { createProvider, type ResolvedProvider } from "../llm/factory.js";
import { emptyUsage } from "../llm/provider.js";
import type { AgentServer } from "../rpc/server.js";
import type { ToolPolicy } from "../tools/policy.js";
import { Conversation } from "./conversation.js";
import { DEFAULT_MAX_STEPS, DEFAULT_RETRY, DEFAULT_TURN_TIMEOUT_MS, runTurn, type RetryPolicy, type TurnEvents, type TurnInput, type TurnOutcome } from "./loop.js";
import { TextBatcher } from "./text-batcher.js";
import { buildSystemPrompt } from "./system-prompt.js";
import { stripUndefined } from "../text.js";

export interface ChatOptions {
  retry?: Partial<RetryPolicy>;
  /** Overrides the models table's context window (tests). */
  contextWindow?: number;
  env?: NodeJS.ProcessEnv;
}

const DEFAULT_MAX_TOKENS = 8192;

export class ChatService {
  readonly conversations = new Map<string, Conversation>();
  private readonly retry: RetryPolicy;

  constructor(
    private readonly server: AgentServer,
    private readonly options: ChatOptions = {},
  ) {
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
  }

  register(): this {
    const s = this.server;
    s.addRequest(Requests.chatSend, (p: ChatSendParams) => this.send(p));
    s.addRequest(Requests.chatCancel, (p: ChatCancelParams) => this.cancel(p));
    s.addRequest(Requests.conversationNew, (p: ConversationNewParams): ConversationNewResult => ({ conversationId: this.create(p.configuration).id }));
    s.addRequest(Requests.conversationList, (): ConversationListResult => ({ conversations: [...this.conversations.values()].map((c) => c.summary()) }));
    s.addRequest(Requests.conversationDelete, (p: ConversationDeleteParams) => this.delete(p));
    s.connection.onClose(() => this.cancelAll());
    return this;
  }

  create(configuration: Configuration = {}): Conversation {
    const c = new Conversation(`c-${randomUUID()}`, { ...configuration });
    this.conversations.set(c.id, c);
    return c;
  }

  send(p: ChatSendParams): ChatSendResult {
    if (typeof p.text !== "string" || p.text.trim() === "") throw new ResponseError(RpcErrorCodes.InvalidParams, "chat/send needs a non-empty text.");
    if (p.toolChoice !== undefined && !validToolChoice(p.toolChoice)) {
      throw new ResponseError(RpcErrorCodes.InvalidParams, 'toolChoice must be "auto", "any", "none" or {"name": TOOL}.');
    }
    let conversation: Conversation;
    if (p.conversationId === undefined || p.conversationId === null) {
      conversation = this.create();
    } else {
      const found = this.conversations.get(p.conversationId);
      if (!found) throw new ResponseError(ErrorCodes.unknownConversation, `No conversation ${p.conversationId}; start one with conversation/new or omit conversationId.`);
      conversation = found;
    }
    if (conversation.running) {
      throw new ResponseError(ErrorCodes.turnRunning, `A turn (${conversation.running.turnId}) is still running in this conversation; wait for it or cancel it with chat/cancel.`);
    }
    const turnId = `t-${randomUUID()}`;
    const controller = new AbortController();
    conversation.running = { turnId, controller };
    conversation.turns++;
    // Started after the answer is on its way, so the client knows the turn id before any notification.
    setImmediate(() => {
      this.run(conversation, turnId, p, controller.signal)
        .catch((err: unknown) => {
          // run() reports every outcome itself; this is for a bug in it, so the client is not left waiting.
          this.server.logger.error(`turn ${turnId}: ${(err as Error)?.stack ?? String(err)}`);
          this.server.notify(ServerNotifications.turnFailed, {
            conversationId: conversation.id,
            turnId,
            kind: "internal",
            message: redact(`Internal error: ${(err as Error)?.message ?? String(err)}`),
            usage: emptyUsage(),
            costUsd: 0,
          } satisfies TurnFailedParams);
        })
        .finally(() => {
          conversation.running = undefined;
        });
    });
    return { conversationId: conversation.id, turnId };
  }

  cancel(p: ChatCancelParams): ChatCancelResult {
    for (const c of this.conversations.values()) {
      const r = c.running;
      if (!r) continue;
      if ((p.turnId !== undefined && r.turnId === p.turnId) || (p.turnId === undefined && p.conversationId === c.id)) {
        r.controller.abort("cancelled");
        return { cancelled: true };
      }
    }
    return { cancelled: false };
  }

  /** Forgets a conversation; its running turn, if any, is cancelled and still reports its end. */
  delete(p: ConversationDeleteParams): ConversationDeleteResult {
    if (typeof p?.conversationId !== "string") throw new ResponseError(RpcErrorCodes.InvalidParams, "conversation/delete needs a conversationId.");
    const c = this.conversations.get(p.conversationId);
    if (!c) return { deleted: false };
    c.running?.controller.abort("cancelled");
    this.conversations.delete(c.id);
    return { deleted: true };
  }

  cancelAll(): void {
    for (const c of this.conversations.values()) c.running?.controller.abort("connection closed");
  }

  /** Runs one turn of CONVERSATION and reports it, from its first state to chat/turnFinished or chat/turnFailed. */
  private async run(conversation: Conversation, turnId: string, p: ChatSendParams, signal: AbortSignal): Promise<void> {
    const ref = { conversationId: conversation.id, turnId };
    const text = new TextBatcher((t) => this.server.notify(ServerNotifications.textDelta, { ...ref, text: t } satisfies TextDeltaParams));
    // Every other notification of the turn first sends the text that came before it.
    const notify: TurnNotify = (type, params) => {
      text.flush();
      this.server.notify(type, params);
    };
    const prepared = this.prepare(conversation, p);
    if (typeof prepared === "string") {
      // Refused before it starts: the turn has no states.
      notify<TurnFailedParams>(ServerNotifications.turnFailed, { ...ref, kind: "config", message: prepared, usage: emptyUsage(), costUsd: 0 });
      return;
    }
    const outcome = await runTurn({ conversation, turnId, text: p.text, signal, ...prepared, events: this.turnEvents(ref, text, notify) });
    this.report(conversation, ref, outcome, notify);
  }

  /**
   * What a turn of CONVERSATION runs with under the configuration in force (the conversation's and
   * this message's overrides applied), or why it cannot start.
   */
  private prepare(conversation: Conversation, p: ChatSendParams): Pick<TurnInput, "executor" | "settings"> | string {
    const configNow = (): Configuration => ({ ...this.server.configuration, ...conversation.configuration, ...(p.model ? { model: p.model } : {}) });
    const config = configNow();
    const context = { ...this.server.context, ...stripUndefined(p.context ?? {}) };

    let resolved: ResolvedProvider;
    try {
      resolved = createProvider(config, this.options.env);
    } catch (err) {
      return err instanceof ProviderError ? err.message : String(err);
    }
    // The policy gives both the offered tools and the executor's check (issue 10); the check asks for
    // it again at each call, so that a change of configuration (a revoked permission) applies at once.
    let policy: ToolPolicy;
    try {
      policy = this.server.policyFor(config);
    } catch (err) {
      return (err as Error).message;
    }
    const tools = policy.offered();
    const system = buildSystemPrompt({
      tools,
      safetyOf: (t) => policy.effectiveSafety(t),
      currentPackage: context.currentPackage,
      projectRoot: context.projectRoot ?? config.projectRoot,
    });
    return {
      executor: this.server.executor.withPolicy(() => this.server.policyFor(configNow())),
      settings: {
        provider: resolved.provider,
        model: resolved.model,
        system,
        tools,
        safetyOf: (t) => policy.effectiveSafety(t),
        toolChoice: p.toolChoice ?? "auto",
        maxTokens: config.maxTokens ?? DEFAULT_MAX_TOKENS,
        ...(config.temperature !== undefined ? { temperature: config.temperature } : {}),
        maxSteps: config.maxSteps ?? DEFAULT_MAX_STEPS,
        turnTimeoutMs: config.turnTimeoutMs ?? DEFAULT_TURN_TIMEOUT_MS,
        retry: this.retry,
        ...(this.options.contextWindow ? { contextWindow: this.options.contextWindow } : {}),
      },
    };
  }

  /** The turn's events as chat/* notifications: its states, text, tool calls and results. */
  private turnEvents(ref: { conversationId: string; turnId: string }, text: TextBatcher, notify: TurnNotify): TurnEvents {
    return {
      state: (state, previous) => notify<TurnStateParams>(ServerNotifications.turnState, { ...ref, state, previous }),
      retrying: (attempt, delayMs, reason) => this.server.logger.warn(`turn ${ref.turnId}: retry ${attempt} in ${delayMs} ms after: ${reason}`),
      textDelta: (delta) => text.push(delta),
      toolCall: (call, safetyLevel) =>
        notify<ToolCallParams>(ServerNotifications.toolCall, { ...ref, callId: call.id, name: call.name, arguments: call.input ?? call.rawArguments, safetyLevel }),
      toolResult: (r) =>
        notify<ToolResultParams>(ServerNotifications.toolResult, {
          ...ref,
          callId: r.id,
          name: r.name,
          success: r.success,
          content: r.content,
          ...(r.error !== undefined ? { error: r.error } : {}),
          executionTimeMs: r.metadata.executionTimeMs,
          approved: r.metadata.approved,
        }),
    };
  }

  /** The turn's end: its usage added to the conversation's, then chat/turnFinished or chat/turnFailed. */
  private report(conversation: Conversation, ref: { conversationId: string; turnId: string }, outcome: TurnOutcome, notify: TurnNotify): void {
    conversation.record(outcome.usage, outcome.costUsd);
    if (outcome.status === "finished") {
      notify<TurnFinishedParams>(ServerNotifications.turnFinished, {
        ...ref,
        stopReason: outcome.stopReason,
        text: outcome.text,
        steps: outcome.steps,
        usage: outcome.usage,
        costUsd: outcome.costUsd,
        conversationUsage: { ...conversation.usage },
        conversationCostUsd: conversation.costUsd,
        model: outcome.model,
        ...(outcome.costNote ? { costNote: outcome.costNote } : {}),
      });
    } else {
      if (outcome.kind !== "cancelled") this.server.logger.warn(`turn ${ref.turnId} failed (${outcome.kind}): ${outcome.message}`);
      notify<TurnFailedParams>(ServerNotifications.turnFailed, { ...ref, kind: outcome.kind, message: outcome.message, usage: outcome.usage, costUsd: outcome.costUsd });
    }
  }
}

/** Sends one notification of a turn, after the text that came before it. */
type TurnNotify = <T>(type: NotificationType<T>, params: T) => void;

/** Registers the chat methods on SERVER. */
export function registerChatHandlers(server: AgentServer, options: ChatOptions = {}): ChatService {
  return new ChatService(server, options).register();
}

function validToolChoice(tc: unknown): tc is ToolChoice {
  if (tc === "auto" || tc === "any" || tc === "none") return true;
  return tc !== null && typeof tc === "object" && typeof (tc as { name?: unknown }).name === "string";
}

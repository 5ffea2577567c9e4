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
  type ChatTurnStatusParams,
  type ChatTurnStatusResult,
  type ChatSendResult,
  type CompactedParams,
  type Configuration,
  type ConversationDeleteParams,
  type ConversationDeleteResult,
  type ConversationListResult,
  type ConversationNewParams,
  type ConversationNewResult,
  type EditorContext,
  type NoticeParams,
  type ProjectInstructions,
  type PromptShowParams,
  type PromptShowResult,
  type TextDeltaParams,
  type ThinkingDeltaParams,
  type ToolCallParams,
  type ToolChoice,
  type ToolResultParams,
  type ToolStartedParams,
  type ToolOutputParams,
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
import type { Tool } from "../tools/tool.js";
import { Conversation } from "./conversation.js";
import { SavedConversations } from "./saved-conversations.js";
import { AUTO_KEEP_TURNS, compactConversation, registerCompaction, shouldCompact } from "./compact-handler.js";
import { DEFAULT_MAX_STEPS, DEFAULT_RETRY, DEFAULT_TURN_TIMEOUT_MS, historyRoom, runTurn, toolDefinitions, type RetryPolicy, type TurnEvents, type TurnInput, type TurnOutcome } from "./loop.js";
import { TextBatcher } from "./text-batcher.js";
import { changesImage, imageChangesNotice } from "./image-changes-notice.js";
import { buildSystemPrompt, instructionsNotice, promptForTurn, type KeptPrompt, type SystemPromptInput } from "./system-prompt.js";
import { categoriesAddedIn, isLean, LeanToolSet, moreToolsSection } from "./tool-set.js";
import { ADD_TOOLS } from "../tools/catalog/tool-set.js";
import { modelInfo } from "../llm/models.js";
import { settingFor, thinkingForTurn } from "../llm/thinking.js";
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
  /** Saving to and resuming from conversationDirectory. */
  readonly saved: SavedConversations;
  private readonly retry: RetryPolicy;
  /** What was already said about project files that were not read. */
  private readonly refusalsSaid = new Set<string>();

  constructor(
    private readonly server: AgentServer,
    private readonly options: ChatOptions = {},
  ) {
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.saved = new SavedConversations(server, this.conversations);
  }

  register(): this {
    const s = this.server;
    s.addRequest(Requests.chatSend, (p: ChatSendParams) => this.send(p));
    s.addRequest(Requests.chatCancel, (p: ChatCancelParams) => this.cancel(p));
    s.addRequest(Requests.chatTurnStatus, (p: ChatTurnStatusParams): ChatTurnStatusResult => ({
      running: this.conversations.get(p?.conversationId)?.running?.turnId === p?.turnId,
    }));
    s.addRequest(Requests.conversationNew, (p: ConversationNewParams): ConversationNewResult => {
      const { conversation, saveError } = this.start(p.configuration);
      return { conversationId: conversation.id, ...(saveError ? { saveError } : {}) };
    });
    s.addRequest(Requests.conversationList, (): ConversationListResult => ({ conversations: [...this.conversations.values()].map((c) => c.summary()) }));
    s.addRequest(Requests.conversationDelete, (p: ConversationDeleteParams) => this.delete(p));
    s.addRequest(Requests.promptShow, (p: PromptShowParams) => this.show(p));
    s.connection.onClose(() => this.cancelAll());
    this.saved.register();
    registerCompaction(s, this.conversations, this.options.env);
    return this;
  }

  create(configuration: Configuration = {}): Conversation {
    return this.start(configuration).conversation;
  }

  /**
   * A new conversation, saved as it happens when a conversationDirectory is configured, under
   * PROJECTROOT: the root of the chat that began it (each chat has its own), else the server's.
   */
  private start(configuration: Configuration = {}, projectRoot?: string): { conversation: Conversation; saveError?: string } {
    const c = new Conversation(`c-${randomUUID()}`, { ...configuration });
    this.conversations.set(c.id, c);
    const saveError = this.saved.startSaving(c, { ...this.server.configuration, ...configuration }, projectRoot);
    return { conversation: c, ...(saveError ? { saveError } : {}) };
  }

  send(p: ChatSendParams): ChatSendResult {
    if (typeof p.text !== "string" || p.text.trim() === "") throw new ResponseError(RpcErrorCodes.InvalidParams, "chat/send needs a non-empty text.");
    if (p.toolChoice !== undefined && !validToolChoice(p.toolChoice)) {
      throw new ResponseError(RpcErrorCodes.InvalidParams, 'toolChoice must be "auto", "any", "none" or {"name": TOOL}.');
    }
    let conversation: Conversation;
    let saveError: string | undefined;
    let repaired: string[] | undefined;
    if (p.conversationId === undefined || p.conversationId === null) {
      ({ conversation, saveError } = this.start({}, typeof p.context?.projectRoot === "string" ? p.context.projectRoot : undefined));
    } else {
      // One this server does not hold may be saved: the server restarted, or it is being resumed.
      ({ conversation, repaired } = this.saved.loadReporting(p.conversationId));
    }
    if (conversation.running) {
      throw new ResponseError(ErrorCodes.turnRunning, `A turn (${conversation.running.turnId}) is still running in this conversation; wait for it or cancel it with chat/cancel.`);
    }
    const turnId = `t-${randomUUID()}`;
    const controller = new AbortController();
    conversation.running = { turnId, controller };
    conversation.beginTurn(turnId);
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
    return { conversationId: conversation.id, turnId, ...(saveError ? { saveError } : {}), ...(repaired ? { repaired } : {}) };
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
    if (!c) {
      if (p.saved === true) this.saved.forget(p.conversationId, true);
      return { deleted: p.saved === true };
    }
    c.running?.controller.abort("cancelled");
    this.conversations.delete(c.id);
    this.saved.forget(c.id, p.saved === true);
    return { deleted: true };
  }

  cancelAll(): void {
    for (const c of this.conversations.values()) c.running?.controller.abort("connection closed");
  }

  /** Runs one turn of CONVERSATION and reports it, from its first state to chat/turnFinished or chat/turnFailed. */
  private async run(conversation: Conversation, turnId: string, p: ChatSendParams, signal: AbortSignal): Promise<void> {
    const ref = { conversationId: conversation.id, turnId };
    // What the user is shown is saved first: a crash then loses nothing they saw.
    const text = new TextBatcher((t) => {
      conversation.recordStreamed(t);
      this.server.notify(ServerNotifications.textDelta, { ...ref, text: t } satisfies TextDeltaParams);
    });
    // The model's reasoning, batched like the text; a redacted block is sent on its own.
    const thinking = new TextBatcher((t) => this.server.notify(ServerNotifications.thinkingDelta, { ...ref, text: t } satisfies ThinkingDeltaParams));
    // Every other notification of the turn first sends the text and reasoning that came before it.
    const notify: TurnNotify = (type, params) => {
      thinking.flush();
      text.flush();
      this.server.notify(type, params);
    };
    const prepared = this.prepare(conversation, p);
    if (typeof prepared === "string") {
      // Refused before it starts: the turn has no states.
      notify<TurnFailedParams>(ServerNotifications.turnFailed, { ...ref, kind: "config", message: prepared, usage: emptyUsage(), costUsd: 0 });
      return;
    }
    for (const notice of prepared.notices) notify<NoticeParams>(ServerNotifications.notice, { ...ref, text: notice });
    await this.compactIfNeeded(conversation, prepared.settings, ref, notify, signal);
    const events = this.turnEvents(conversation, ref, text, thinking, notify);
    // Whether a call changed the image: then its end says which definitions differ from their files.
    let changedImage = false;
    const toolResult = events.toolResult;
    events.toolResult = (r) => {
      if (r.success && changesImage(prepared.executor.tool(r.name))) changedImage = true;
      toolResult(r);
    };
    const outcome = await runTurn({ conversation, turnId, text: p.text, signal, ...prepared, events });
    if (changedImage && !(outcome.status !== "finished" && outcome.kind === "cancelled")) {
      const notice = await imageChangesNotice(prepared.executor, signal).catch(() => undefined);
      if (notice) notify<NoticeParams>(ServerNotifications.notice, { ...ref, ...notice });
    }
    this.report(conversation, ref, outcome, notify, prepared.settings.provider.name);
  }

  /**
   * Before a turn whose history nears the context window: older turns are summarized (compaction.ts).
   * When the summary cannot be written the turn goes on; old tool results still give way (fitToBudget).
   */
  private async compactIfNeeded(conversation: Conversation, settings: TurnInput["settings"], ref: { conversationId: string; turnId: string }, notify: TurnNotify, signal: AbortSignal): Promise<void> {
    if (!shouldCompact(conversation, historyRoom(settings))) return;
    const config: Configuration = { ...this.server.configuration, ...conversation.configuration, model: settings.model };
    try {
      const done = await compactConversation(conversation, config, this.options.env, signal, AUTO_KEEP_TURNS);
      if (done.compacted) {
        notify<CompactedParams>(ServerNotifications.compacted, { ...ref, replacedMessages: done.replacedMessages, tokensBefore: done.tokensBefore, tokensAfter: done.tokensAfter });
      }
    } catch (err) {
      this.server.logger.warn(`turn ${ref.turnId}: the history could not be compacted: ${redact((err as Error).message)}`);
    }
  }

  /**
   * What a turn of CONVERSATION runs with under the configuration in force (the conversation's and
   * this message's overrides applied), or why it cannot start.
   */
  private prepare(conversation: Conversation, p: ChatSendParams): (Pick<TurnInput, "executor" | "settings" | "note"> & { notices: string[] }) | string {
    const configNow = (): Configuration => ({ ...this.server.configuration, ...conversation.configuration, ...(p.model ? { model: p.model } : {}) });
    const config = configNow();
    const context = { ...this.server.context, ...stripUndefined(p.context ?? {}) };

    let resolved: ResolvedProvider;
    try {
      resolved = createProvider(config, this.options.env);
    } catch (err) {
      return err instanceof ProviderError ? err.message : String(err);
    }
    // The policy gives both the offered tools and the executor's check; the check asks for
    // it again at each call, so that a change of configuration (a revoked permission) applies at once.
    let policy: ToolPolicy;
    try {
      policy = this.server.policyFor(config);
    } catch (err) {
      return (err as Error).message;
    }
    const notices: string[] = [];
    let instructions: ProjectInstructions | undefined;
    const { tools, toolSet, promptInput } = this.toolsAndPrompt(conversation, config, context, config.model ?? resolved.model, policy, {
      // Said once per server, not at every turn while the file stays as it is.
      onRefused: (message) => {
        if (this.refusalsSaid.has(message)) return;
        this.refusalsSaid.add(message);
        notices.push(message);
      },
      onInstructions: (shown) => {
        instructions = shown;
      },
    });
    // A conversation read from its file writes its prompt as it was last sent: with the package it named then.
    const saved = conversation.savedPrompt;
    conversation.savedPrompt = undefined;
    const kept: KeptPrompt | undefined =
      conversation.prompt ?? (saved ? { text: buildSystemPrompt({ ...promptInput, currentPackage: saved.currentPackage }), currentPackage: saved.currentPackage } : undefined);
    const prompt = promptForTurn(promptInput, kept, conversation.messages);
    conversation.keepPrompt(prompt.kept);
    const system = prompt.kept.text;
    // Which instructions the model is sent, said at a conversation's first turn here and when they change.
    const told = instructions ? instructionsNotice(instructions) : undefined;
    if (told !== conversation.instructionsTold) {
      if (told !== undefined) notices.push(told);
      conversation.instructionsTold = told;
    }
    const maxTokens = config.maxTokens ?? DEFAULT_MAX_TOKENS;
    const toolChoice = p.toolChoice ?? "auto";
    const thinking = thinkingForTurn(resolved.name, resolved.model, settingFor(config.thinking, resolved.model), { maxTokens, toolChoice, ...(config.temperature !== undefined ? { temperature: config.temperature } : {}) });
    if (thinking.note) notices.push(thinking.note);
    return {
      notices,
      ...(prompt.note ? { note: prompt.note } : {}),
      // The root this message named (Emacs's when it was sent), the one its prompt states too.
      // Its calls carry the conversation (Emacs runs them for its chat, in that chat's Lisp) and the
      // package of that chat's REPL, not the last one any chat or Lisp told the server.
      executor: this.server.executor.withPolicy(() => this.server.policyFor(configNow()), undefined, context.projectRoot ?? config.projectRoot, {
        conversationId: conversation.id,
        ...(context.currentPackage ? { currentPackage: context.currentPackage } : {}),
      }),
      settings: {
        provider: resolved.provider,
        model: resolved.model,
        system,
        tools,
        ...(toolSet ? { toolSet } : {}),
        safetyOf: (t) => policy.effectiveSafety(t),
        toolChoice,
        maxTokens,
        ...(thinking.request ? { thinking: thinking.request } : {}),
        ...(config.temperature !== undefined ? { temperature: config.temperature } : {}),
        maxSteps: config.maxSteps ?? DEFAULT_MAX_STEPS,
        turnTimeoutMs: config.turnTimeoutMs ?? DEFAULT_TURN_TIMEOUT_MS,
        ...(config.startToolsEarly === false ? { startToolsEarly: false } : {}),
        retry: this.retry,
        ...((this.options.contextWindow ?? config.contextWindow) ? { contextWindow: this.options.contextWindow ?? config.contextWindow } : {}),
      },
    };
  }

  /** The tools a turn of CONVERSATION is offered under CONFIG and POLICY, and its system prompt's input. */
  private toolsAndPrompt(
    conversation: Conversation,
    config: Configuration,
    context: EditorContext,
    model: string,
    policy: ToolPolicy,
    told: Pick<SystemPromptInput, "onRefused" | "onInstructions">,
  ): { tools: Tool[]; toolSet: LeanToolSet | undefined; promptInput: SystemPromptInput } {
    const offered = policy.offered();
    // A small window gets a core set the model adds to (tool-set.ts); a large one every tool but add_tools.
    const contextWindow = this.options.contextWindow ?? config.contextWindow;
    const toolSet = isLean(contextWindow ?? modelInfo(model).contextWindow) ? new LeanToolSet(offered, (conversation.addedCategories ??= categoriesAddedIn(conversation.messages))) : undefined;
    const tools = toolSet ? toolSet.current() : offered.filter((t) => t.name !== ADD_TOOLS);
    const promptInput: SystemPromptInput = {
      ...told,
      // Every offered tool, so that the prompt stays the same as the model adds categories.
      tools: offered.filter((t) => t.name !== ADD_TOOLS),
      ...(toolSet ? { moreTools: moreToolsSection(offered) } : {}),
      safetyOf: (t) => policy.effectiveSafety(t),
      currentPackage: context.currentPackage,
      projectRoot: context.projectRoot ?? config.projectRoot,
    };
    return { tools, toolSet, promptInput };
  }

  /**
   * What the model is told (prompt/show): the system prompt a held conversation's requests last
   * carried (else the one its next turn, or a new conversation's first, would carry), the project
   * instructions in it, and the tool definitions as sent. Changes nothing.
   */
  private show(p: PromptShowParams): PromptShowResult {
    const held = p?.conversationId ? this.conversations.get(p.conversationId) : undefined;
    if (p?.conversationId && !held) throw new ResponseError(ErrorCodes.unknownConversation, `No conversation ${p.conversationId} is open in this server.`);
    const conversation = held ?? new Conversation("prompt-show");
    const config: Configuration = { ...this.server.configuration, ...conversation.configuration };
    const context = { ...this.server.context, ...stripUndefined(p?.context ?? {}) };
    let model = config.model;
    if (model === undefined) {
      try {
        model = createProvider(config, this.options.env).model;
      } catch {
        model = "";
      }
    }
    const policy = this.server.policyFor(config);
    let instructions: ProjectInstructions | undefined;
    const { tools, promptInput } = this.toolsAndPrompt(conversation, config, context, model, policy, { onInstructions: (shown) => (instructions = shown) });
    const fresh = buildSystemPrompt(promptInput);
    const sent = held?.prompt !== undefined;
    // The instructions' account is the fresh reading's: it is the sent one's too unless the file changed since.
    return {
      system: sent ? held!.prompt!.text : fresh,
      tools: toolDefinitions({ tools, safetyOf: (t) => policy.effectiveSafety(t) }).map((t) => ({ ...t, inputSchema: t.inputSchema as unknown as Record<string, unknown> })),
      ...(instructions ? { instructions } : {}),
      sent,
    };
  }

  /** The turn's events as chat/* notifications: its states, text, tool calls and results. */
  private turnEvents(conversation: Conversation, ref: { conversationId: string; turnId: string }, text: TextBatcher, thinking: TextBatcher, notify: TurnNotify): TurnEvents {
    return {
      state: (state, previous) => notify<TurnStateParams>(ServerNotifications.turnState, { ...ref, state, previous }),
      retrying: (attempt, delayMs, reason) => this.server.logger.warn(`turn ${ref.turnId}: retry ${attempt} in ${delayMs} ms after: ${reason}`),
      notice: (notice) => {
        text.flush();
        thinking.flush();
        notify<NoticeParams>(ServerNotifications.notice, { ...ref, text: notice });
      },
      thinkingDelta: (delta, redacted) => {
        text.flush();
        if (!redacted) return thinking.push(delta);
        thinking.flush();
        this.server.notify(ServerNotifications.thinkingDelta, { ...ref, text: "", redacted: true } satisfies ThinkingDeltaParams);
      },
      textDelta: (delta) => {
        thinking.flush();
        text.push(delta);
      },
      // Shown (and saved as streamed) before the answer's own message is saved, which then holds it.
      textDone: () => text.flush(),
      toolCall: (call, safetyLevel, running) =>
        notify<ToolCallParams>(ServerNotifications.toolCall, { ...ref, callId: call.id, name: call.name, arguments: call.input ?? call.rawArguments, safetyLevel, ...(running ? { running } : {}) }),
      toolStarted: (call) => notify<ToolStartedParams>(ServerNotifications.toolStarted, { ...ref, callId: call.id, name: call.name }),
      toolOutput: (call, tail, totalBytes) => this.server.notify(ServerNotifications.toolOutput, { ...ref, callId: call.id, tail, totalBytes } satisfies ToolOutputParams),
      toolResult: (r) => {
        // What the call changed in files and buffers is kept with the saved conversation, for rewinding.
        const changes = this.server.takeChanges(r.id);
        if (changes) conversation.recordChanges(ref.turnId, r.id, r.name, changes);
        conversation.recordResult(r.id, r.content, r.success, {
          executionTimeMs: r.metadata.executionTimeMs,
          ...(r.metadata.approvalWaitMs !== undefined ? { approvalWaitMs: r.metadata.approvalWaitMs } : {}),
          ...(r.metadata.arguments ? { arguments: r.metadata.arguments } : {}),
          safetyLevel: r.metadata.safetyLevel,
          approved: r.metadata.approved,
        });
        notify<ToolResultParams>(ServerNotifications.toolResult, {
          ...ref,
          callId: r.id,
          name: r.name,
          success: r.success,
          content: r.content,
          ...(r.error !== undefined ? { error: r.error } : {}),
          executionTimeMs: r.metadata.executionTimeMs,
          ...(r.metadata.approvalWaitMs !== undefined ? { approvalWaitMs: r.metadata.approvalWaitMs } : {}),
          ...(r.metadata.arguments ? { arguments: r.metadata.arguments } : {}),
          approved: r.metadata.approved,
        });
      },
    };
  }

  /** The turn's end: its usage added to the conversation's, then chat/turnFinished or chat/turnFailed. */
  private report(conversation: Conversation, ref: { conversationId: string; turnId: string }, outcome: TurnOutcome, notify: TurnNotify, provider: string): void {
    // How it ended is saved with it: a resumed chat shows the footer or the message it showed live.
    const end = outcome.status === "finished" ? { steps: outcome.steps, stopReason: outcome.stopReason } : { failed: { kind: outcome.kind, message: outcome.message } };
    conversation.record(outcome.usage, outcome.costUsd, { turnId: ref.turnId, provider, model: outcome.model, end });
    // Saving that stopped during the turn is told with its end, once.
    const saveError = conversation.unsavedReason;
    conversation.unsavedReason = undefined;
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
        ...(saveError ? { saveError } : {}),
      });
    } else {
      if (outcome.kind !== "cancelled") this.server.logger.warn(`turn ${ref.turnId} failed (${outcome.kind}): ${outcome.message}`);
      notify<TurnFailedParams>(ServerNotifications.turnFailed, { ...ref, kind: outcome.kind, message: outcome.message, usage: outcome.usage, costUsd: outcome.costUsd, ...(saveError ? { saveError } : {}) });
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

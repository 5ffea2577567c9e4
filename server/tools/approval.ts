// The one way a call asks Emacs for approval, for the chat's turns and for MCP's calls alike: the
// request carries the whole action (the primary tool's parameter names, the declared order), how it is
// reviewed, and what made it ask; an edited reply comes back under the same names.

import type { ApprovalDecision, EmacsApprovalParams } from "../protocol.js";
import type { ApprovalRequest } from "./executor.js";
import { fromPrimaryArgs, toPrimaryArgs } from "./policy.js";
import { lispParameters, type Tool } from "./tool.js";

/** Who asks besides the call itself: the chat's conversation and turn, or an MCP client. */
export type ApprovalOrigin = Pick<EmacsApprovalParams, "conversationId" | "turnId" | "client">;

/** The emacs/call "approval" params for REQUEST. */
export function approvalParams(request: ApprovalRequest, origin: ApprovalOrigin = {}): EmacsApprovalParams {
  const { tool } = request;
  return {
    callId: request.callId,
    tool: tool.name,
    arguments: toPrimaryArgs(tool, inDeclaredOrder(tool, request.arguments)),
    review: tool.review ?? "arguments",
    safetyLevel: request.safetyLevel,
    description: tool.description,
    capability: tool.aliasOf ?? tool.name,
    categories: [...tool.categories],
    reason: request.reason,
    ...(lispArguments(tool).length ? { lispArguments: lispArguments(tool) } : {}),
    ...(tool.command ? { alwaysCommand: true } : {}),
    ...(shownOnly(request).length ? { shownOnly: shownOnly(request) } : {}),
    ...(origin.conversationId ? { conversationId: origin.conversationId } : {}),
    ...(origin.turnId ? { turnId: origin.turnId } : {}),
    ...(origin.client ? { client: origin.client } : {}),
    ...(request.projectRoot !== undefined ? { projectRoot: request.projectRoot } : {}),
  };
}

/** The arguments REQUEST's approval shows that are no parameter of its tool (what its preview adds). */
function shownOnly(request: ApprovalRequest): string[] {
  const { tool } = request;
  if (!tool.preview) return [];
  return Object.keys(request.arguments).filter((k) => !Object.prototype.hasOwnProperty.call(tool.parameters, k));
}

/** The parameters of TOOL that hold Lisp source, under the primary tool's names as the arguments are sent. */
function lispArguments(tool: Tool): string[] {
  return Object.keys(toPrimaryArgs(tool, Object.fromEntries(lispParameters(tool).map((name) => [name, true]))));
}

/** Asks through SEND (the bridge's emacs/call "approval") and returns the decision, an edited reply's
 *  arguments under TOOL's own names again. */
export async function askApproval(request: ApprovalRequest, origin: ApprovalOrigin, send: (params: EmacsApprovalParams) => Promise<unknown>): Promise<ApprovalDecision> {
  const decision = (await send(approvalParams(request, origin))) as ApprovalDecision;
  return fromEmacs(request.tool, decision);
}

function fromEmacs(tool: Tool, decision: ApprovalDecision): ApprovalDecision {
  if (decision?.decision !== "modified" || !decision.arguments || typeof decision.arguments !== "object" || Array.isArray(decision.arguments)) return decision;
  return { ...decision, arguments: fromPrimaryArgs(tool, decision.arguments as Record<string, unknown>) };
}

/** ARGS with the tool's declared parameters first, in declaration order (not the model's order). */
function inDeclaredOrder(tool: Tool, args: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(tool.schema.properties)) if (Object.prototype.hasOwnProperty.call(args, k)) out[k] = args[k];
  for (const [k, v] of Object.entries(args)) if (!Object.prototype.hasOwnProperty.call(out, k)) out[k] = v;
  return out;
}

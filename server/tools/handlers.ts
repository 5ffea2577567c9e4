// Handler builders: a tool's work runs in Node, in Emacs (buffers, files) or in the Lisp image
// (through Emacs's SLY/SLIME connection). Declarations pick one of these; none is repeated per tool.

import type { Change, EmacsImageParams } from "../protocol.js";
import { ToolError, type ToolContext, type ToolHandler } from "./tool.js";

function requireEmacs(ctx: ToolContext) {
  if (!ctx.emacs) throw new ToolError("No Emacs client is attached to the server, so buffer, file and image tools cannot run.");
  return ctx.emacs;
}

/** Runs in Emacs: the Elisp dispatch table entry CAPABILITY gets ARGS (after MAPARGS). */
export function emacsTool(capability: string, mapArgs?: (args: Record<string, unknown>) => Record<string, unknown>): ToolHandler {
  return async (args, ctx) => {
    const emacs = requireEmacs(ctx);
    const result = await emacs.call(
      "tool",
      { tool: capability, arguments: mapArgs ? mapArgs(args) : args, ...(ctx.approved ? { approved: ctx.approved } : {}), ...(ctx.projectRoot ? { projectRoot: ctx.projectRoot } : {}), ...(ctx.bufferVisit ? { visits: ctx.bufferVisit } : {}), ...conversationOf(ctx) },
      { signal: ctx.signal, timeoutMs: ctx.timeoutMs },
    );
    const changes = result && typeof result === "object" && "changes" in result ? (result as { changes: unknown }).changes : undefined;
    if (Array.isArray(changes) && changes.length > 0) ctx.reportChanges?.(ctx.callId, changes as Change[]);
    return unwrapContent(result);
  };
}

/** The Emacs capability that names the file a buffer visits (the internal tool buffer_file). */
export const BUFFER_FILE = "buffer_file";

/**
 * The buffer named BUFFER (the user's last buffer when BUFFER is undefined), as Emacs finds it for a
 * write against the call's root: its name, and the file it visits (undefined: none). Emacs's refusals
 * (no such buffer, one the agent may not write) fail the call as the tool itself would.
 */
export async function visitedFile(ctx: ToolContext, buffer: string | undefined): Promise<{ buffer: string; file?: string }> {
  const answer = unwrapContent(await requireEmacs(ctx).call(
    "tool",
    { tool: BUFFER_FILE, arguments: buffer !== undefined ? { buffer } : {}, ...(ctx.projectRoot ? { projectRoot: ctx.projectRoot } : {}), ...conversationOf(ctx) },
    { signal: ctx.signal, timeoutMs: ctx.timeoutMs },
  ));
  let parsed: unknown;
  try {
    parsed = typeof answer === "string" ? JSON.parse(answer) : undefined;
  } catch {
    parsed = undefined;
  }
  const p = parsed as { buffer?: unknown; file?: unknown } | undefined;
  if (!p || typeof p.buffer !== "string") throw new ToolError(`Emacs did not say which buffer the call would change (${String(answer).slice(0, 200)}); nothing was changed.`);
  return { buffer: p.buffer, ...(typeof p.file === "string" && p.file !== "" ? { file: p.file } : {}) };
}

/** Runs in the Lisp image: lisp-cl/'s (sly-agent-q:call-tool NAME ARGS :package PKG). */
export function imageTool(name: string): ToolHandler {
  return async (args, ctx) => {
    const emacs = requireEmacs(ctx);
    const params: EmacsImageParams = { tool: name, arguments: args, ...(ctx.currentPackage ? { package: ctx.currentPackage } : {}), ...conversationOf(ctx), ...(ctx.callId ? { callId: ctx.callId } : {}) };
    const result = await emacs.call("image", params, { signal: ctx.signal, timeoutMs: ctx.timeoutMs });
    return unwrapContent(result);
  };
}

/** A tool's runtime, implementation and handler when it runs in the Lisp image as lisp-cl's tool NAME. */
export function inImage(name: string) {
  return { runtime: "image" as const, implementation: name, handler: imageTool(name) };
}

/** The conversationId of a call of a turn, for its emacs/call: Emacs runs it for that conversation's chat. */
function conversationOf(ctx: ToolContext): { conversationId?: string } {
  return ctx.conversationId ? { conversationId: ctx.conversationId } : {};
}

/** Emacs answers {content: string}; anything else is shown as it came. */
function unwrapContent(result: unknown): unknown {
  if (result && typeof result === "object" && "content" in result) return (result as { content: unknown }).content;
  return result;
}

/** Maps the parameter names of an alias onto those of the capability it shares. */
export function renameArgs(renames: Record<string, string>) {
  return (args: Record<string, unknown>): Record<string, unknown> => {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(args)) out[renames[k] ?? k] = v;
    return out;
  };
}

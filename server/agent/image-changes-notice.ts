// The line at the end of a turn that changed the image: how many definitions in the image now differ
// from their files (lisp-cl/image-changes.lisp), with image_changes' listing for the chat to show on
// request. A fix evaluated in the image and never written to a file is lost at the next restart.

import { randomUUID } from "node:crypto";
import type { Executor } from "../tools/executor.js";
import type { Tool } from "../tools/tool.js";

export const IMAGE_CHANGES = "image_changes";

/** How long the turn's end waits for the image's answer before it ends without the line. */
export const IMAGE_CHANGES_WAIT_MS = 10_000;

/** Whether a successful call of TOOL may have changed the image: the catalog's evaluating tools. */
export function changesImage(tool: Tool | undefined): boolean {
  return tool !== undefined && tool.categories.includes("evaluation");
}

/** The count image_changes' first line states, or undefined when it states none. */
export function changedCount(content: string): number | undefined {
  const m = /^(\d+) definitions? in the image differs? from (?:their files|its file)\b/.exec(content);
  if (m) return Number(m[1]);
  return /^No definition in the image differs from its file\b/.test(content) ? 0 : undefined;
}

/**
 * Asks the image once, under the executor's policy, which definitions differ from their files: the
 * notice's text and details when some do; undefined when none do, the tool would not run at once
 * (not offered, or a rule asks: nothing is ever asked of the user for this line), or the image does not answer in time.
 */
export async function imageChangesNotice(executor: Executor, signal: AbortSignal): Promise<{ text: string; details: string } | undefined> {
  const call = { id: `turn-end-${randomUUID()}`, name: IMAGE_CHANGES, arguments: {} };
  if (!executor.readsOnly(call)) return undefined;
  const result = await executor.execute(call, { signal: AbortSignal.any([signal, AbortSignal.timeout(IMAGE_CHANGES_WAIT_MS)]) });
  if (!result.success) return undefined;
  const count = changedCount(result.content);
  if (count === undefined || count === 0) return undefined;
  const text = count === 1 ? "1 definition in the image differs from its file" : `${count} definitions in the image differ from their files`;
  return { text, details: result.content };
}

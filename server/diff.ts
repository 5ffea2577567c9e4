// The hunks of a file edit, computed here rather than in Emacs: a line diff of a large file takes tens of
// milliseconds to seconds, and Emacs has one thread for the user's typing too. The review shows these hunks
// and the apply uses their line ranges, so what is accepted is exactly what is written.

import { createHash } from "node:crypto";
// node:fs's promises, read where used: node:fs/promises (with readline and the watchers) loaded at the
// first use, not at every server start.
import { promises as fsp } from "node:fs";
import { structuredPatch } from "diff";
import type { DiffHunk, DiffHunksParams } from "./protocol.js";

/** How long one diff may take before the edit is shown as one replacement of the whole text. */
const DIFF_TIMEOUT_MS = 2000;

/** The unified-diff range of COUNT lines from 0-based START (as GNU diff -u writes it). */
function range(start: number, count: number): string {
  if (count === 0) return `${start},0`;
  return count === 1 ? `${start + 1}` : `${start + 1},${count}`;
}

/** The lines of TEXT, each with its newline (only the last may lack one), as Emacs splits them. */
function splitLines(text: string): string[] {
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

/** One hunk replacing every line of OLD by every line of NEW: what is shown when the diff takes too long. */
function wholeHunk(old: string, neu: string): DiffHunk[] {
  const a = splitLines(old);
  const b = splitLines(neu);
  if (old === neu) return [];
  const body = (prefix: string, lines: string[]) =>
    lines.map((l) => (l.endsWith("\n") ? prefix + l : `${prefix}${l}\n\\ No newline at end of file\n`)).join("");
  return [
    {
      index: 1,
      oldStart: 0,
      oldEnd: a.length,
      newStart: 0,
      newEnd: b.length,
      changes: [[0, a.length, 0, b.length]],
      header: `@@ -${range(0, a.length)} +${range(0, b.length)} @@`,
      text: body("-", a) + body("+", b),
    },
  ];
}

/**
 * The hunks turning OLD into NEW with CONTEXT lines around each change. Line indexes are 0-based, ends
 * excluded; a hunk's range includes its context; `changes` are the changed regions inside it
 * ([oldStart, oldEnd, newStart, newEnd]), what applying a hunk replaces.
 */
export function diffHunks(old: string, neu: string, context = 3): DiffHunk[] {
  const patch = structuredPatch("a", "b", old, neu, undefined, undefined, {
    context: Math.max(0, Math.floor(context)),
    timeout: DIFF_TIMEOUT_MS,
  });
  if (!patch) return wholeHunk(old, neu);
  return patch.hunks.map((h, n) => {
    // A structured patch's starts are 1-based, even for a range of no lines (its text form says the line before).
    const oldStart = h.oldStart - 1;
    const newStart = h.newStart - 1;
    const changes: number[][] = [];
    let i = oldStart;
    let j = newStart;
    let open: number[] | undefined;
    let text = "";
    for (const line of h.lines) {
      const kind = line[0];
      if (kind === "\\") {
        text += `${line}\n`;
        continue;
      }
      text += `${line}\n`;
      if (kind === " ") {
        open = undefined;
        i++;
        j++;
        continue;
      }
      if (!open) {
        open = [i, i, j, j];
        changes.push(open);
      }
      if (kind === "-") open[1] = ++i;
      else open[3] = ++j;
    }
    return {
      index: n + 1,
      oldStart,
      oldEnd: oldStart + h.oldLines,
      newStart,
      newEnd: newStart + h.newLines,
      changes,
      header: `@@ -${range(oldStart, h.oldLines)} +${range(newStart, h.newLines)} @@`,
      text,
    };
  });
}

const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest("hex");

/**
 * The old and new texts of PARAMS: given, or (so that Emacs need not send a large file's texts) the old read
 * from `oldFile` and the new made from the waiting call's ARGUMENTS, each checked against the digest of the
 * text Emacs holds. Throws when they cannot be had or differ from Emacs's: Emacs then sends the texts.
 */
export async function diffTexts(params: DiffHunksParams, args: Record<string, unknown> | undefined): Promise<{ old: string; neu: string }> {
  if (typeof params.old === "string" && typeof params.new === "string") return { old: params.old, neu: params.new };
  if (!args || typeof params.oldFile !== "string") throw new Error("diff/hunks needs the texts, or a waiting call and the file");
  const edit = (typeof args.edit === "object" && args.edit !== null ? args.edit : args) as Record<string, unknown>;
  const old = await fsp.readFile(params.oldFile, "utf8");
  if (sha256(old) !== params.oldDigest) throw new Error("the file's text is not the one Emacs holds");
  let neu: string;
  if (typeof edit.new_content === "string") neu = edit.new_content;
  else if (typeof edit.old_text === "string" && typeof edit.new_text === "string" && old.includes(edit.old_text))
    neu = old.replace(edit.old_text, () => edit.new_text as string);
  else throw new Error("the call's arguments give no new text");
  if (sha256(neu) !== params.newDigest) throw new Error("the new text is not the one Emacs holds");
  return { old, neu };
}

// The hunks the server computes for Emacs's review of a file edit (server/diff.ts): the same as GNU
// diff -u, and their line ranges applied in any subset give the text they promise.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { diffHunks, diffTexts } from "../../server/diff.js";
import type { DiffHunk } from "../../server/protocol.js";

const lines = (text: string) => text.match(/[^\n]*\n|[^\n]+$/g) ?? [];

/** OLD with the hunks of HUNKS whose index is in ACCEPTED applied, by their ranges as Emacs applies them. */
function apply(old: string, neu: string, hunks: DiffHunk[], accepted: Set<number>): string {
  const a = lines(old);
  const b = lines(neu);
  let out = "";
  let i = 0;
  for (const h of hunks) {
    if (!accepted.has(h.index)) continue;
    for (const [os, oe, ns, ne] of h.changes) {
      out += a.slice(i, os).join("") + b.slice(ns, ne).join("");
      i = oe;
    }
  }
  return out + a.slice(i).join("");
}

const old30 = Array.from({ length: 30 }, (_, i) => `(line ${i + 1})\n`).join("");
const new30 = old30.replace("(line 2)\n", "").replace("(line 15)\n", "(line 15)\n(inserted after 15)\n").replace("(line 28)", "(line 28 changed)");

describe("diff/hunks", () => {
  it("gives three hunks of three changes far apart, with their ranges and text", () => {
    const hunks = diffHunks(old30, new30);
    expect(hunks.map((h) => h.header)).toEqual(["@@ -1,5 +1,4 @@", "@@ -13,6 +12,7 @@", "@@ -25,6 +25,6 @@"]);
    expect(hunks[0].text).toBe(" (line 1)\n-(line 2)\n (line 3)\n (line 4)\n (line 5)\n");
    expect(hunks[1]).toMatchObject({ index: 2, oldStart: 12, oldEnd: 18, newStart: 11, newEnd: 18, changes: [[15, 15, 14, 15]] });
    expect(apply(old30, new30, hunks, new Set([1, 2, 3]))).toBe(new30);
  });

  it("is the diff GNU diff -u gives", () => {
    const dir = mkdtempSync(join(tmpdir(), "saq-diff-"));
    try {
      writeFileSync(join(dir, "a"), old30);
      writeFileSync(join(dir, "b"), new30.replace(/\n$/, ""));
      let gnu = "";
      try {
        execFileSync("diff", ["-u", join(dir, "a"), join(dir, "b")], { encoding: "utf8" });
      } catch (e) {
        gnu = (e as { stdout: string }).stdout;
      }
      const ours = diffHunks(old30, new30.replace(/\n$/, "")).map((h) => `${h.header}\n${h.text}`).join("");
      expect(ours).toBe(gnu.split("\n").slice(2).join("\n"));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("handles a new file, a deleted text, no change and a last line without newline", () => {
    expect(diffHunks("", "x\ny\n")).toMatchObject([{ header: "@@ -0,0 +1,2 @@", oldStart: 0, oldEnd: 0, newStart: 0, newEnd: 2, text: "+x\n+y\n" }]);
    expect(diffHunks("x\n", "")).toMatchObject([{ header: "@@ -1 +0,0 @@", changes: [[0, 1, 0, 0]] }]);
    expect(diffHunks("same\n", "same\n")).toEqual([]);
    const h = diffHunks("a\nb", "a\nc");
    expect(h[0].text).toBe(" a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n");
    expect(apply("a\nb", "a\nc", h, new Set([1]))).toBe("a\nc");
  });

  it("applies any subset of the hunks of random edits to the text that subset promises", () => {
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
    for (let round = 0; round < 200; round++) {
      const a = Array.from({ length: rand(40) }, () => `l${rand(8)}\n`).join("") + (rand(4) === 0 ? "tail" : "");
      const b = Array.from({ length: rand(40) }, () => `l${rand(8)}\n`).join("") + (rand(4) === 0 ? "end" : "");
      for (const context of [0, 1, 3]) {
        const hunks = diffHunks(a, b, context);
        expect(apply(a, b, hunks, new Set(hunks.map((h) => h.index)))).toBe(b);
        expect(apply(a, b, hunks, new Set())).toBe(a);
        // Each hunk's own diff lines are what its range replaces.
        for (const h of hunks) {
          const minus = h.text.split("\n").filter((l) => l.startsWith("-") || l.startsWith(" ")).length;
          expect(minus).toBe(h.oldEnd - h.oldStart);
        }
      }
    }
  });

  it("diffs a 200 KB file with a change every 20th line into hunks of its changes", () => {
    const old = Array.from({ length: 4000 }, (_, i) => `(defun helper-${i} (x) (list x ${i * 7}))\n`).join("");
    const neu = old.replace(/^(\(defun helper-\d*[02468]0 .*)$/gm, "$1 ; edited");
    const hunks = diffHunks(old, neu, 0);
    expect(hunks.length).toBe(199);
    expect(apply(old, neu, hunks, new Set(hunks.map((h) => h.index)))).toBe(neu);
  });
});

describe("diff/hunks texts found by the server", () => {
  const sha = (t: string) => createHash("sha256").update(t, "utf8").digest("hex");

  it("reads the old text from the file and makes the new from the waiting call, checked by digest", async () => {
    const dir = mkdtempSync(join(tmpdir(), "saq-diff-"));
    try {
      const file = join(dir, "a.lisp");
      writeFileSync(file, old30);
      const got = await diffTexts({ callId: "c1", oldFile: file, oldDigest: sha(old30), newDigest: sha(new30) }, { path: "a.lisp", new_content: new30 });
      expect(got).toEqual({ old: old30, neu: new30 });
      const edited = old30.replace("(line 7)", "(line seven)");
      const byReplace = await diffTexts(
        { callId: "c2", oldFile: file, oldDigest: sha(old30), newDigest: sha(edited) },
        { edit: { path: "a.lisp", old_text: "(line 7)", new_text: "(line seven)" } },
      );
      expect(byReplace.neu).toBe(edited);
      // Texts that are not the ones Emacs holds are refused: Emacs then sends its own.
      await expect(diffTexts({ callId: "c1", oldFile: file, oldDigest: sha("other"), newDigest: sha(new30) }, { new_content: new30 })).rejects.toThrow(/not the one Emacs holds/);
      await expect(diffTexts({ callId: "c1", oldFile: file, oldDigest: sha(old30), newDigest: sha("x") }, { new_content: new30 })).rejects.toThrow(/not the one Emacs holds/);
      await expect(diffTexts({ callId: "c9", oldFile: file, oldDigest: sha(old30), newDigest: sha(new30) }, undefined)).rejects.toThrow();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

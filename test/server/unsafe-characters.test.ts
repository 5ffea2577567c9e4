// The characters text from outside never shows raw are listed once in Emacs
// (lisp-elisp/sly-agent-q-display.el, sly-agent-q-display--unsafe-characters) and described once in
// the server (server/text.ts, by Unicode property): the two must escape the same characters, less
// the ones only Emacs draws (its frame characters and their look-alikes). A character one side adds
// and the other lacks fails here, naming it.

import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { escapeUnsafe } from "../../server/text.js";

const root = join(__dirname, "../..");

/** Code points 0..0x10FFFF (surrogates left out) that IN holds, as "HEX" or "HEX-HEX" ranges. */
function ranges(inSet: (c: number) => boolean): string[] {
  const out: string[] = [];
  let start: number | undefined;
  for (let c = 0; c <= 0x110000; c++) {
    const inside = c < 0x110000 && !(c >= 0xd800 && c <= 0xdfff) && inSet(c);
    if (inside && start === undefined) start = c;
    else if (!inside && start !== undefined) {
      const hex = (n: number) => n.toString(16).toUpperCase();
      out.push(start === c - 1 ? hex(start) : `${hex(start)}-${hex(c - 1)}`);
      start = undefined;
    }
  }
  return out;
}

// Prints, per code point, "1" when Emacs escapes it in one line of text from outside and it is no
// frame character or look-alike, else "0".
const ELISP = `(progn
  (require 'sly-agent-q-display)
  (let ((frames (rx-to-string \`(any ,@sly-agent-q-display--frame-look-alikes) t))
        (out (make-string #x110000 ?0)))
    (dotimes (c #x110000)
      (unless (and (>= c #xD800) (<= c #xDFFF))
        (let ((s (string c)))
          (when (and (string-match-p sly-agent-q-display--unsafe-line s)
                     (not (string-match-p frames s)))
            (aset out c ?1)))))
    (princ out)))`;

describe("the unsafe characters", () => {
  it("are the same in Emacs's list and the server's, less Emacs's frame characters", () => {
    const emacs = spawnSync("emacs", ["--batch", "-Q", "-L", join(root, "lisp-elisp"), "--eval", ELISP], { encoding: "utf8", maxBuffer: 4 << 20, timeout: 120_000 });
    expect(emacs.status, emacs.stderr).toBe(0);
    const elisp = emacs.stdout;
    expect(elisp.length).toBe(0x110000);
    const server = (c: number) => escapeUnsafe(String.fromCodePoint(c)) !== String.fromCodePoint(c);
    const onlyEmacs = ranges((c) => elisp[c] === "1" && !server(c));
    const onlyServer = ranges((c) => elisp[c] !== "1" && server(c));
    expect({ onlyEmacs, onlyServer }).toEqual({ onlyEmacs: [], onlyServer: [] });
    // The comparison sees what matters: a bidi override, a tag character, ESC.
    for (const c of [0x202e, 0xe0041, 0x1b]) expect(elisp[c]).toBe("1");
  }, 180_000);
});

// The README's text captures of the chat come from the terminal suite's screens (make screens,
// scripts/readme-screens.mjs): each names a screen one test of test/tui keeps, and the main screens
// are all there. What the captures show is asserted by the terminal suite itself.

import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
// @ts-expect-error -- a plain ESM script without type declarations
import { fenced, screenNames, snapshotNames, withScreens } from "../../scripts/readme-screens.mjs";

const root = join(__dirname, "..", "..");
const readme = readFileSync(join(root, "README.md"), "utf8");
const tui = join(root, "test", "tui");
const kept = snapshotNames(
  readdirSync(tui)
    .filter((f) => f.endsWith("-test.el"))
    .map((f) => readFileSync(join(tui, f), "utf8")),
) as string[];

describe("README screens", () => {
  it("has the main screens: Markdown, an approval's Lisp form, a diff review, the debugger, a resumed conversation", () => {
    expect(screenNames(readme)).toEqual(
      expect.arrayContaining(["chat-markdown", "approval-lisp-form", "diff-review", "debugger-in-chat", "chat-resumed"]),
    );
  });

  it("names only screens the terminal suite keeps, each kept by one test", () => {
    for (const name of screenNames(readme) as string[]) {
      expect(kept.filter((k) => k === name), name).toHaveLength(1);
    }
  });

  it("holds a capture in each block", () => {
    const empty = (screenNames(readme) as string[]).filter((name) =>
      new RegExp(`<!-- screen ${name}\\b[^>]*-->\\n\`{3,}\\n\`{3,}\\n`).test(readme),
    );
    expect(empty).toEqual([]);
  });

  it("rewrites a block from its capture: blank runs one line, the fence longer than the capture's own", () => {
    const text = "a\n<!-- screen s1 (x) -->\n```\nold\n```\n<!-- /screen -->\nb\n<!-- screen s2 -->\n```\n```\n<!-- /screen -->\n";
    const out = withScreens(text, (name: string) =>
      name === "s1" ? "new  \n```lisp\n(car x)\n```\n>\n\n\n\n-UUU: mode line\n\n" : undefined,
    );
    expect(out).toBe(
      "a\n<!-- screen s1 (x) -->\n````\nnew\n```lisp\n(car x)\n```\n>\n\n-UUU: mode line\n````\n<!-- /screen -->\n" +
        "b\n<!-- screen s2 -->\n```\n```\n<!-- /screen -->\n",
    );
    expect(fenced("x")).toBe("```\nx\n```\n");
  });
});

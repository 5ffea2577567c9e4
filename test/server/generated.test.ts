// Every file derived from the declarations is the one `make generate` (scripts/generate.mjs) writes
// now from the built bundle: README's tool table, doc/architecture.md's protocol table, Emacs's
// protocol table. A catalog or protocol change without `make generate` fails here.

import { describe, expect, it } from "vitest";
// @ts-expect-error -- a plain ESM script without type declarations
import { generated } from "../../scripts/generate.mjs";

describe("generated files", () => {
  const files = generated() as [string, string, string][];

  it.each(files.map(([file, now, wanted]) => ({ file, now, wanted })))("$file is up to date", ({ now, wanted }) => {
    expect(now).toBe(wanted);
  });

  it("covers the README, the protocol doc and the Elisp table", () => {
    expect(files.map(([file]) => file)).toEqual(["README.md", "doc/architecture.md", "lisp-elisp/sly-agent-q-protocol-table.el"]);
  });
});

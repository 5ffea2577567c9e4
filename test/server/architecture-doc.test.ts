// doc/architecture.md's protocol table is generated from the protocol's description as data (what the
// bundle's --protocol prints); it must be current, and must show every method and emacs/call kind the
// server describes, each with its keys and note (so that a method the generator skipped, or a renamed
// key, shows here rather than vanishing from the table).

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { describeProtocol } from "../../server/protocol-description.js";
// @ts-expect-error -- a plain ESM script without type declarations
import { protocolTable, withTable } from "../../scripts/protocol-doc.mjs";

const root = join(__dirname, "../..");

describe("doc/architecture.md", () => {
  const protocol = describeProtocol();
  const table = protocolTable(protocol) as string;
  const row = (first: string) => table.split("\n").find((line) => line.startsWith(`| \`${first}\` |`));

  it("has a row for every method, with its direction, kind, keys and note", () => {
    for (const m of protocol.methods) {
      const line = row(m.method);
      expect(line, m.method).toBeDefined();
      expect(m.note.length, `${m.method} has a note`).toBeGreaterThan(10);
      expect(line).toContain(m.note);
      expect(line).toContain(` ${m.kind} `);
      for (const key of Object.keys(protocol.shapes[m.method].params ?? {})) expect(line, `${m.method} ${key}`).toContain(`\`${key}`);
    }
    for (const kind of protocol.emacsCallKinds) {
      for (const key of Object.keys(protocol.shapes[`emacs/call:${kind}`].result ?? {})) expect(row(kind), `${kind} ${key}`).toContain(`\`${key}`);
    }
  });

  it("follows the description: a renamed key changes the table", () => {
    const renamed = structuredClone(protocol);
    const { text, ...rest } = renamed.shapes["chat/send"].params as Record<string, string>;
    renamed.shapes["chat/send"].params = { ...rest, message: text };
    expect(row("chat/send")).toContain("`text`");
    expect((protocolTable(renamed) as string).split("\n").find((l) => l.startsWith("| `chat/send` |"))).toContain("`message`");
  });

  it("carries the table generated from the description now", () => {
    const doc = readFileSync(join(root, "doc/architecture.md"), "utf8");
    expect(withTable(doc, table)).toBe(doc);
  });
});

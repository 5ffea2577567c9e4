// doc/architecture.md's protocol table is generated from server/protocol.ts; it must be current, and
// the generator must see exactly the methods the server describes (so a declaration it cannot read
// fails here rather than vanishing from the table).

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { EMACS_CALL_KINDS } from "../../server/protocol.js";
import { describeProtocol } from "../../server/protocol-description.js";
// @ts-expect-error -- a plain ESM script without type declarations
import { emacsCallKinds, protocolMethods, protocolTable, withTable } from "../../scripts/protocol-doc.mjs";

const root = join(__dirname, "../..");

describe("doc/architecture.md", () => {
  it("lists every method of the protocol, with its direction and kind", () => {
    const generated = (protocolMethods() as { method: string; direction: string; kind: string }[]).map((m) => ({
      method: m.method,
      direction: m.direction.replace("Emacs → server", "emacs->server").replace("server → Emacs", "server->emacs"),
      kind: m.kind,
    }));
    expect(generated).toEqual(describeProtocol().methods);
    expect((emacsCallKinds() as { kind: string }[]).map((k) => k.kind)).toEqual([...EMACS_CALL_KINDS]);
  });

  it("carries the table generated from server/protocol.ts now", () => {
    const doc = readFileSync(join(root, "doc/architecture.md"), "utf8");
    expect(withTable(doc, protocolTable())).toBe(doc);
  });
});

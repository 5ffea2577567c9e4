// The protocol's description in shape (server/protocol-shapes.ts, printed by --protocol): it is
// protocol.ts's own (the compiler holds each shape against its type), the suites hold what both ends
// send against it (test/server/helpers.ts's tapProtocol, test/elisp's sly-agent-q-test-checking-protocol),
// and a key renamed in it fails the check of a real message on this end (the Elisp end's test is
// sly-agent-q-protocol-renamed-key-fails).

import { describe, expect, it } from "vitest";
import type { EmacsApprovalParams, InitializeParams } from "../../server/protocol.js";
import { checkMessage, describeProtocol, type MethodShape } from "../../server/protocol-description.js";

const shapes = describeProtocol().shapes;

/** SHAPES with KEY of NAME's PART renamed to KEY + "Renamed". */
function renamed(name: string, part: "params" | "result", key: string): Record<string, MethodShape> {
  const s = structuredClone(shapes);
  const fields = s[name]![part]!;
  const { [key]: field, ...rest } = fields;
  s[name]![part] = { ...rest, [`${key}Renamed`]: field! };
  return s;
}

describe("the protocol's shapes", () => {
  it("describe every method and each kind of emacs/call, params and result", () => {
    const { methods, emacsCallKinds } = describeProtocol();
    expect(Object.keys(shapes).sort()).toEqual([...methods.map((m) => m.method), ...emacsCallKinds.map((k) => `emacs/call:${k}`)].sort());
  });

  const send = { conversationId: "c1", text: "Hello" };
  const approval: EmacsApprovalParams = {
    callId: "t1", tool: "write_file", arguments: { path: "a", content: "b" }, review: "target", safetyLevel: "dangerous",
    description: "Write", capability: "write_file", categories: ["buffer"], reason: { kind: "level", level: "dangerous" },
  };
  const init: InitializeParams = { clientInfo: { name: "emacs" }, configuration: { model: "m", toolTimeoutMs: 5 } };

  it("accept real messages", () => {
    expect(checkMessage(shapes, "chat/send", "params", send)).toEqual([]);
    expect(checkMessage(shapes, "emacs/call", "params", { id: "e1", kind: "approval", params: approval })).toEqual([]);
    expect(checkMessage(shapes, "initialize", "params", init)).toEqual([]);
    expect(checkMessage(shapes, "emacs/call:tool", "result", { content: "ok", changes: [] })).toEqual([]);
  });

  it("refuse a renamed, missing, unknown or mistyped key, in the configuration too", () => {
    expect(checkMessage(shapes, "chat/send", "params", { conversationId: "c1", txt: "Hello" })).toEqual(["chat/send params: unknown key txt", "chat/send params: missing key text"]);
    expect(checkMessage(shapes, "chat/send", "params", { text: 5 })).toEqual(["chat/send params: text should be string, is 5"]);
    expect(checkMessage(shapes, "initialize", "params", { configuration: { modle: "m" } })).toEqual(["initialize params.configuration: unknown key modle"]);
    expect(checkMessage(shapes, "emacs/call", "params", { id: "e1", kind: "approval", params: { ...approval, review: undefined } })).toEqual(["emacs/call:approval params: missing key review"]);
  });

  it("fail the same real messages once a key is renamed in the description", () => {
    expect(checkMessage(renamed("chat/send", "params", "text"), "chat/send", "params", send)).toContain("chat/send params: unknown key text");
    expect(checkMessage(renamed("emacs/call:approval", "params", "capability"), "emacs/call", "params", { id: "e1", kind: "approval", params: approval })).toContain(
      "emacs/call:approval params: missing key capabilityRenamed",
    );
    expect(checkMessage(renamed("emacs/call:tool", "result", "content"), "emacs/call:tool", "result", { content: "ok" })).toContain("emacs/call:tool result: unknown key content");
  });
});

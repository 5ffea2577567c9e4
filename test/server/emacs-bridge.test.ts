import { describe, expect, it } from "vitest";
import type { EmacsApprovalParams } from "../../server/protocol.js";
import { EmacsBridge } from "../../server/rpc/emacs-bridge.js";

const noArgs = { arguments: {} };
const approval: EmacsApprovalParams = {
  callId: "c1",
  tool: "write_file",
  arguments: {},
  review: "target",
  safetyLevel: "dangerous",
  description: "",
  capability: "write_file",
  categories: [],
  reason: { kind: "level", level: "dangerous" },
};

function bridge() {
  const sent: { method: string; params: any }[] = [];
  const b = new EmacsBridge((type, params) => sent.push({ method: type.method, params }));
  return { b, sent };
}

describe("EmacsBridge", () => {
  it("matches replies to calls by id, whatever their order", async () => {
    const { b, sent } = bridge();
    const p1 = b.call("tool", { tool: "a", ...noArgs });
    const p2 = b.call("image", { tool: "b", ...noArgs });
    const [c1, c2] = sent.map((s) => s.params);
    expect(sent.map((s) => s.method)).toEqual(["emacs/call", "emacs/call"]);
    expect(c1.id).not.toBe(c2.id);
    b.handleReply({ id: c2.id, result: "two" });
    b.handleReply({ id: c1.id, error: { message: "one failed" } });
    await expect(p2).resolves.toBe("two");
    await expect(p1).rejects.toThrow("one failed");
    expect(b.inFlight).toBe(0);
  });

  it("times out, tells Emacs, and ignores the late reply", async () => {
    const { b, sent } = bridge();
    const p = b.call("image", { tool: "eval_form", ...noArgs }, { timeoutMs: 30 });
    await expect(p).rejects.toThrow(/did not answer the image call within 30 ms/);
    expect(sent[1]).toEqual({ method: "emacs/cancel", params: { id: sent[0]!.params.id, reason: "timeout" } });
    expect(b.handleReply({ id: sent[0]!.params.id, result: "late" })).toBe(false);
  });

  it("cancels through an AbortSignal", async () => {
    const { b, sent } = bridge();
    const ac = new AbortController();
    const p = b.call("approval", approval, { signal: ac.signal });
    ac.abort(new Error("turn cancelled"));
    await expect(p).rejects.toThrow("turn cancelled");
    expect(sent[1]!.method).toBe("emacs/cancel");
  });

  it("fails everything pending, and everything after, once closed", async () => {
    const { b } = bridge();
    const p = b.call("tool", { tool: "t", ...noArgs });
    b.close("Emacs went away");
    await expect(p).rejects.toThrow("Emacs went away");
    await expect(b.call("tool", { tool: "t", ...noArgs })).rejects.toThrow("Emacs went away");
  });

  it("gives an error reply without a message a clear one", async () => {
    const { b, sent } = bridge();
    const p = b.call("tool", { tool: "t", ...noArgs });
    b.handleReply({ id: sent[0]!.params.id, error: {} as never });
    await expect(p).rejects.toThrow(/without a message/);
  });
});

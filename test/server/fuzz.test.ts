// Randomized malformed input: a few thousand calls at the executor, and a stream of bad messages at
// the real bundle. Nothing may crash, and every call must be answered.

import { describe, expect, it } from "vitest";
import type { ToolsListResult } from "../../server/protocol.js";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor } from "../../server/tools/executor.js";
import { echo, testTool } from "./helpers.js";
import { frame, startBundle } from "./stdio-client.js";

/** A small deterministic PRNG so a failure can be replayed from its seed. */
function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomValue(r: () => number, depth = 0): unknown {
  const pick = Math.floor(r() * 12);
  switch (pick) {
    case 0: return null;
    case 1: return undefined;
    case 2: return Math.floor(r() * 1e6) - 5e5;
    case 3: return r() * 1e9;
    case 4: return r() < 0.5;
    case 5: return "x".repeat(Math.floor(r() * (r() < 0.05 ? 200_000 : 50)));
    case 6: return "{" + "\"a\":".repeat(Math.floor(r() * 5));
    case 7: return depth > 2 ? [] : Array.from({ length: Math.floor(r() * 4) }, () => randomValue(r, depth + 1));
    case 8: return depth > 2 ? {} : Object.fromEntries(Array.from({ length: Math.floor(r() * 4) }, (_, i) => [["symbol", "form", "path", "text", "n", `k${i}`][Math.floor(r() * 6)]!, randomValue(r, depth + 1)]));
    case 9: return JSON.stringify({ symbol: "car", extra: r() });
    case 10: return "\u0000\uffff\ud800";
    default: return NaN;
  }
}

const NAMES = ["describe_symbol", "eval_form", "write_file", "read_file", "safe_echo", "", "DESCRIBE_SYMBOL", "no_such_tool", "x".repeat(5000)];

function randomCall(r: () => number): unknown {
  const shape = Math.floor(r() * 10);
  if (shape === 0) return randomValue(r);
  const call: Record<string, unknown> = {};
  if (r() < 0.9) call.id = r() < 0.8 ? `call_${Math.floor(r() * 1e6)}` : randomValue(r);
  if (r() < 0.95) call.name = r() < 0.8 ? NAMES[Math.floor(r() * NAMES.length)] : randomValue(r);
  if (r() < 0.9) call.arguments = randomValue(r);
  return call;
}

describe("fuzzing", () => {
  it("the executor answers 3000 malformed calls, one result each, with the invariants", async () => {
    const registry = createDefaultRegistry();
    registry.register(testTool("safe_echo", echo));
    // No Emacs attached: emacs/image tools fail cleanly; no approval: dangerous tools are denied.
    const executor = new Executor({ registry, defaultTimeoutMs: 1000 });
    const r = rng(20261121);
    for (let batch = 0; batch < 60; batch++) {
      const calls = Array.from({ length: 50 }, () => randomCall(r));
      const results = await executor.executeAll(calls);
      expect(results).toHaveLength(calls.length);
      results.forEach((res, i) => {
        const c = calls[i] as { id?: unknown } | null;
        const expectedId = c && typeof c === "object" && !Array.isArray(c) && c.id !== undefined && c.id !== null ? String(c.id) : "";
        expect(res.id).toBe(expectedId);
        expect(typeof res.content).toBe("string");
        expect(res.success === (res.error === undefined)).toBe(true);
        if (res.name === "write_file") expect(res.success).toBe(false);
      });
    }
  });

  it("the bundled server survives a stream of bad messages and answers every request", async () => {
    const proc = startBundle();
    try {
      await proc.connection.sendRequest("initialize", { capabilities: { tools: true, image: true, approvals: false } });
      const r = rng(42);
      const pending: Promise<unknown>[] = [];
      for (let i = 0; i < 400; i++) {
        const kind = Math.floor(r() * 4);
        if (kind === 0) {
          proc.raw(frame(JSON.stringify(randomValue(r)) ?? "null"));
        } else if (kind === 1) {
          proc.raw(frame(`{"jsonrpc":"2.0","id":${i},"method":${JSON.stringify(String(randomValue(r)))},"params":${JSON.stringify(randomValue(r)) ?? "null"}}`));
        } else {
          // Requests through the real client must each get an answer (result or error), never silence.
          pending.push(
            proc.connection
              .sendRequest("tools/call", randomCall(r))
              .then((res) => ({ ok: res }))
              .catch((err: unknown) => ({ err })),
          );
        }
      }
      const answers = await Promise.all(pending);
      expect(answers).toHaveLength(pending.length);
      const list = await proc.connection.sendRequest<ToolsListResult>("tools/list", {});
      expect(list.tools.length).toBeGreaterThan(10);
      expect(proc.child.exitCode).toBeNull();
    } finally {
      proc.kill();
    }
  }, 60_000);
});

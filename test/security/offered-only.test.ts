// Attack class 1: a model calls tools that were not offered to it (above the ceiling, outside the
// categories, hidden aliases). Only offered tools may reach a handler; the rest get "not available"
// and are never put to the user.

import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startMockLLM, type MockLLM } from "../fixtures/mock-llm/server.mjs";
import type { Configuration } from "../../server/protocol.js";
import { mockConfig, runTurn, side, validArgs, type Side } from "./helpers.js";

let mock: MockLLM;
beforeAll(async () => {
  mock = await startMockLLM();
});
afterAll(async () => {
  await mock.close();
});
const open: Side[] = [];
afterEach(() => open.splice(0).forEach((s) => s.dispose()));

const settings: [string, Configuration][] = [
  ["ceiling safe", { maxSafetyLevel: "safe" }],
  ["ceiling cautious", { maxSafetyLevel: "cautious" }],
  ["ceiling dangerous", { maxSafetyLevel: "dangerous" }],
  ["categories introspection", { categories: ["introspection"] }],
  ["categories filesystem, ceiling cautious", { categories: ["filesystem"], maxSafetyLevel: "cautious" }],
];

describe("only offered tools run", () => {
  for (const [label, extra] of settings) {
    it(`a model calling every registered name reaches only the offered ones (${label})`, async () => {
      const s = side();
      open.push(s);
      const { tools: offered } = await s.init(mockConfig(mock, extra));
      const all = s.registry.list({ includeAliases: true });
      expect(all.length).toBeGreaterThan(offered.length);
      mock.setScript({
        steps: [
          { content: all.map((t) => ({ type: "tool_use" as const, name: t.name, input: validArgs(t) })) },
          { content: [{ type: "text", text: "done" }] },
        ],
      });
      const end = await runTurn(s);
      expect(end.method).toBe("chat/turnFinished");
      // What ran is exactly what was offered, each once.
      expect([...s.ran].sort()).toEqual([...offered].sort());
      // The server's own call at the turn's end is image_changes' line, and only when it is offered.
      for (const name of s.ranAtTurnEnd) {
        expect(name).toBe("image_changes");
        expect(offered).toContain(name);
      }
      // Approvals were asked only for offered tools.
      for (const a of s.approvals) expect(offered).toContain(a.tool);
      const results = s.notes.filter((n) => n.method === "chat/toolResult").map((n) => n.params);
      for (const t of all) {
        const r = results.find((x) => x.name === t.name);
        expect(r, t.name).toBeDefined();
        if (!offered.includes(t.name)) {
          expect(r.success).toBe(false);
          expect(r.error).toMatch(new RegExp(`^${t.name} is not available`));
        }
      }
    });
  }

  it("tools/call follows the same rule", async () => {
    const s = side();
    open.push(s);
    const { tools: offered } = await s.init(mockConfig(mock, { maxSafetyLevel: "safe" }));
    for (const t of s.registry.list({ includeAliases: true })) {
      const r = await s.call(t.name, validArgs(t));
      if (offered.includes(t.name)) expect(r.success, t.name).toBe(true);
      else expect(r.error, t.name).toMatch(/is not available/);
    }
    expect([...s.ran].sort()).toEqual([...offered].sort());
    expect(s.approvals).toEqual([]);
  });
});

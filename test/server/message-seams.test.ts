// The messages the model and the user read, joined from pieces (a user's reason, an error's own
// message, a schema complaint): each piece ends its sentence once, with one full stop and a space.

import { describe, expect, it } from "vitest";
import { toProviderError } from "../../server/llm/errors.js";
import { loadAnthropicSdk } from "../../server/llm/sdks.js";
import { Executor, type ApprovalDecision, type ApprovalFn } from "../../server/tools/executor.js";
import { ToolRegistry } from "../../server/tools/registry.js";
import { echo, testTool } from "./helpers.js";

// The SDK as a provider loads it at its first request: its error classes are known from then on.
const Anthropic = await loadAnthropicSdk();

/** The seams looked for: a double full stop (an ellipsis is fine), a stop after a space, "nil" or "undefined" filling a hole, a sentence run on without its stop. */
function expectClean(text: string) {
  expect(text).not.toMatch(/(^|[^.])\.\.(?!\.)/);
  expect(text).not.toMatch(/ \./);
  expect(text).not.toMatch(/\b(undefined|null|nil)\b/);
  expect(text).not.toMatch(/[a-z0-9"')] [A-Z][a-z]+ (was|is) not run/);
}

function executorAnswering(answer: ApprovalFn) {
  const registry = new ToolRegistry();
  registry.register(testTool("danger_echo", echo, "dangerous"));
  return new Executor({ registry, approve: answer });
}

async function run(answer: ApprovalFn) {
  const [r] = await executorAnswering(answer).executeAll([{ id: "1", name: "danger_echo", arguments: { text: "hi" } }]);
  return r!;
}

describe("message seams", () => {
  it("ends the user's denial reason with a full stop before 'It was not run.'", async () => {
    const r = await run(async (): Promise<ApprovalDecision> => ({ decision: "denied", reason: "use a temporary directory" }));
    expect(r.content).toBe("Error: The user denied danger_echo: use a temporary directory. It was not run.");
    expectClean(r.content);
  });

  it("keeps the user's own punctuation and ignores a blank reason", async () => {
    for (const [reason, expected] of [
      ["not that file.", "The user denied danger_echo: not that file. It was not run."],
      ["why would you?", "The user denied danger_echo: why would you? It was not run."],
      ["  ", "The user denied danger_echo. It was not run."],
      [undefined, "The user denied danger_echo. It was not run."],
    ] as const) {
      const r = await run(async (): Promise<ApprovalDecision> => (reason === undefined ? { decision: "denied" } : { decision: "denied", reason }));
      expect(r.error).toBe(expected);
    }
  });

  it("joins an approval failure and invalid edited arguments without a double full stop", async () => {
    const failed = await run(async () => {
      throw new Error("the approval window was closed.");
    });
    expect(failed.error).toBe("Approval for danger_echo failed: the approval window was closed. The tool was not run.");
    const edited = await run(async (): Promise<ApprovalDecision> => ({ decision: "modified", arguments: { text: 5 } }));
    expect(edited.error).toMatch(/^The user's edited arguments for danger_echo are invalid: parameter "text" must be string\. The tool was not run\.$/);
    expectClean(failed.content);
    expectClean(edited.content);
  });

  it("does not double the full stop of the SDK's connection message", () => {
    const ctx = { provider: "anthropic", baseUrl: "http://127.0.0.1:9", model: "m", keyHint: "ANTHROPIC_API_KEY" };
    const e = toProviderError(new Anthropic.APIConnectionError({ message: "Connection error." }), ctx);
    expect(e.message).toBe("Could not reach anthropic (http://127.0.0.1:9): Connection error. Check the network connection and the base URL setting.");
    expectClean(e.message);
    const odd = toProviderError(Anthropic.APIError.generate(418, { error: { message: "short and stout" } }, undefined, new Headers()), ctx);
    expect(odd.message).toBe("anthropic (http://127.0.0.1:9) answered 418: short and stout.");
  });
});

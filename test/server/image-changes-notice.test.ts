// The line at the end of a turn that changed the image (server/agent/image-changes-notice.ts): the
// real catalog and chat handlers, the image played by the test's answers to emacs/call (the real
// image is the e2e test's: e2e-project-search-diff-tests-and-image-changes).

import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startMockLLM, type MockLLM, type MockScript } from "../fixtures/mock-llm/server.mjs";
import { changedCount } from "../../server/agent/image-changes-notice.js";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { connectChat, type ChatHarness } from "./chat-harness.js";

let mock: MockLLM;
beforeAll(async () => {
  mock = await startMockLLM();
});
afterAll(async () => {
  await mock.close();
});
const open: ChatHarness[] = [];
afterEach(() => {
  open.splice(0).forEach((h) => h.dispose());
});

const LISTING = "2 definitions in the image differ from their files (40 definitions checked in 2 packages).\n\nNot as in any file (lost at the next restart unless written to one):\n  (DEFUN MY-APP::FOO)  compiled by compile_form at 10:00:00 (just now); its text was never written to a file\n";

/** A chat whose image answers each image call from ANSWERS by tool name; the calls it got are recorded. */
async function chat(answers: Record<string, string>, calls: string[], configuration: Record<string, unknown> = {}) {
  const h = await connectChat({
    configuration: { provider: "anthropic", apiKey: "sk-test", baseUrl: mock.url, model: "claude-sonnet-4-6", ...configuration },
    registry: createDefaultRegistry(),
    capabilities: { tools: true, image: true, approvals: false },
    onNote: (n, client) => {
      const p = n.params;
      if (n.method !== "emacs/call" || p.kind !== "image") return;
      calls.push(p.params.tool);
      void client.sendNotification("emacs/reply", { id: p.id, result: { content: answers[p.params.tool] ?? "ok" } });
    },
  });
  open.push(h);
  return h;
}

const script = (tool: string, input: Record<string, unknown>): MockScript => ({
  steps: [{ content: [{ type: "tool_use", name: tool, input }] }, { content: [{ type: "text", text: "Done." }] }],
});

describe("the turn's end after the image changed", () => {
  it("says how many definitions differ, with image_changes' listing, before the turn's end", async () => {
    mock.setScript(script("compile_form", { form: "(defun foo () 1)" }));
    const calls: string[] = [];
    const h = await chat({ compile_form: "Compiled and loaded 1 form.", image_changes: LISTING }, calls);
    const sent = await h.client.sendRequest<{ turnId: string }>("chat/send", { text: "Compile foo" });
    await h.ended(sent.turnId);
    expect(calls).toEqual(["compile_form", "image_changes"]);
    const methods = h.notes.filter((n) => n.method === "chat/notice" || n.method === "chat/turnFinished").map((n) => n.method);
    expect(methods).toEqual(["chat/notice", "chat/turnFinished"]);
    const notice = h.notes.find((n) => n.method === "chat/notice")!.params;
    expect(notice).toMatchObject({ turnId: sent.turnId, text: "2 definitions in the image differ from their files", details: LISTING });
    // Not a call of the model's: the model never sees it.
    expect(JSON.stringify(mock.requests().at(-1)!.body)).not.toContain("image_changes\",\"input");
  });

  it("says nothing after a turn that only read, or when no definition differs", async () => {
    mock.setScript(script("describe_symbol", { symbol: "foo" }));
    const calls: string[] = [];
    const h = await chat({ image_changes: LISTING }, calls);
    const sent = await h.client.sendRequest<{ turnId: string }>("chat/send", { text: "Describe foo" });
    await h.ended(sent.turnId);
    expect(calls).toEqual(["describe_symbol"]);
    mock.setScript(script("eval_form", { form: "(setf *x* 1)" }));
    const calls2: string[] = [];
    const h2 = await chat({ image_changes: "No definition in the image differs from its file (40 definitions checked in 2 packages).\n" }, calls2);
    const sent2 = await h2.client.sendRequest<{ turnId: string }>("chat/send", { text: "Set x" });
    await h2.ended(sent2.turnId);
    expect(calls2).toEqual(["eval_form", "image_changes"]);
    expect(h.notes.concat(h2.notes).some((n) => n.method === "chat/notice")).toBe(false);
  });

  it("never asks the user for it: a rule that asks before image_changes leaves the line out", async () => {
    mock.setScript(script("compile_form", { form: "(defun foo () 1)" }));
    const calls: string[] = [];
    const h = await chat({ image_changes: LISTING }, calls, { permissionRules: [{ tool: "image_changes", action: "ask" }] });
    const sent = await h.client.sendRequest<{ turnId: string }>("chat/send", { text: "Compile foo" });
    await h.ended(sent.turnId);
    expect(calls).toEqual(["compile_form"]);
    expect(h.notes.some((n) => n.method === "chat/notice" || (n.method === "emacs/call" && n.params.kind === "approval"))).toBe(false);
  });

  it("reads the count from image_changes' first line only", () => {
    expect(changedCount(LISTING)).toBe(2);
    expect(changedCount("1 definition in the image differs from its file (3 checked).")).toBe(1);
    expect(changedCount("No definition in the image differs from its file (3 checked).")).toBe(0);
    expect(changedCount("No definition in the image differs from its file as far as is known (3 checked).")).toBe(0);
    expect(changedCount("Error: 5 definitions in the image differ from their files")).toBeUndefined();
  });
});

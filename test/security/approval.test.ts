// Attack class 6: an approval prompt that hides what is approved. The question carries the whole
// action in the tool's declared order (not the model's), the capability, its categories and what made
// it ask; and when Emacs refuses a call before asking (an error reply), the model is told Emacs's
// reason as it is, not that the user denied.

import { afterEach, expect, it } from "vitest";
import { side, type Side } from "./helpers.js";

const open: Side[] = [];
afterEach(() => open.splice(0).forEach((s) => s.dispose()));

it("an approval request lists the arguments in the tool's order, with capability, categories and reason", async () => {
  const s = side();
  open.push(s);
  await s.init({ offerAliases: true, permissionRules: [{ action: "ask", tool: "read_file", argument: "path", pattern: "secret" }] });
  // The model puts a long content first, hoping the path is cut off.
  await s.call("file_write", { content: "x".repeat(5000), file_path: "x/../../../etc/passwd" });
  const a = s.approvals[0];
  expect(a).toMatchObject({ tool: "file_write", capability: "write_file", review: "target", categories: ["buffer", "filesystem"], safetyLevel: "dangerous", reason: { kind: "level", level: "dangerous" } });
  // Under the primary tool's names, so that Emacs prepares the review without knowing the alias.
  expect(Object.keys(a.arguments)).toEqual(["path", "content"]);
  expect(a.arguments.path).toBe("x/../../../etc/passwd");
  expect(a.arguments.content).toHaveLength(5000);
  expect(typeof a.description).toBe("string");
  expect(typeof a.callId).toBe("string");

  await s.call("read_file", { limit: 3, path: "secret.txt", offset: 1 });
  const b = s.approvals[1];
  expect(Object.keys(b.arguments)).toEqual(["path", "offset", "limit"]);
  expect(b).toMatchObject({ capability: "read_file", reason: { kind: "rule", rule: { action: "ask", tool: "read_file", argument: "path", pattern: "secret" } } });
});

it("an error reply to an approval fails the call with Emacs's message as it is", async () => {
  const s = side();
  open.push(s);
  await s.init({});
  const message = "x/../../etc/passwd is outside the project root /home/u/proj; it was not run.";
  s.answerApproval = () => ({ error: { message } });
  const r = await s.call("write_file", { path: "x/../../etc/passwd", content: "y" });
  expect(r.success).toBe(false);
  expect(r.error).toBe(message);
  expect(r.content).toBe(`Error: ${message}`);
  expect(s.ran).toEqual([]);
});

it("an edited reply for an alias, under the primary tool's names, runs with those arguments", async () => {
  const s = side();
  open.push(s);
  await s.init({ offerAliases: true });
  const toolCalls: unknown[] = [];
  s.answerCall = (call) => (toolCalls.push(call.params), { result: { content: "written" } });
  s.answerApproval = (a) => ({ result: { decision: "modified", arguments: { ...a.arguments, path: "notes/b.txt" } } });
  const r = await s.call("file_write", { file_path: "a.txt", content: "y" });
  expect(r.success).toBe(true);
  expect(s.approvals[0].arguments).toEqual({ path: "a.txt", content: "y" });
  // The edited path reached Emacs (the alias's file_path mapped back, then onto the primary's path).
  expect(toolCalls).toEqual([expect.objectContaining({ tool: "write_file", arguments: { path: "notes/b.txt", content: "y" } })]);
});

it("a rule on a parameter holds under its other name: search_in_buffer's buffer_name is its buffer, and both at once are refused", async () => {
  const s = side();
  open.push(s);
  await s.init({ permissionRules: [{ action: "deny", tool: "search_in_buffer", argument: "buffer", pattern: "secret" }] });
  const toolCalls: unknown[] = [];
  s.answerCall = (call) => (toolCalls.push(call.params), { result: { content: "1 match" } });
  // The hidden synonym of the denied parameter.
  const r = await s.call("search_in_buffer", { pattern: "password", buffer_name: "secret-notes" });
  expect(r.success).toBe(false);
  expect(r.error).toMatch(/denied by a permission rule/);
  // Both names with different values: the rule would see one and Emacs search the other.
  const both = await s.call("search_in_buffer", { pattern: "password", buffer: "notes", buffer_name: "secret-notes" });
  expect(both.success).toBe(false);
  expect(both.error).toMatch(/buffer_name.*buffer|buffer.*buffer_name/);
  expect(toolCalls).toEqual([]);
  // Allowed: Emacs gets the primary name alone.
  const ok = await s.call("search_in_buffer", { search_text: "password", buffer_name: "notes" });
  expect(ok.success).toBe(true);
  expect(toolCalls).toEqual([expect.objectContaining({ tool: "search_in_buffer", arguments: { pattern: "password", buffer: "notes" } })]);
});

it("a rule written on a parameter's other name holds as well", async () => {
  const s = side();
  open.push(s);
  await s.init({ permissionRules: [{ action: "deny", tool: "search_in_buffer", argument: "buffer_name", pattern: "secret" }] });
  const toolCalls: unknown[] = [];
  s.answerCall = (call) => (toolCalls.push(call.params), { result: { content: "1 match" } });
  for (const args of [{ pattern: "password", buffer_name: "secret-notes" }, { pattern: "password", buffer: "secret-notes" }]) {
    const r = await s.call("search_in_buffer", args);
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/denied by a permission rule/);
  }
  expect(toolCalls).toEqual([]);
});

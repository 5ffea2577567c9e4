// Attack: a hostile model changes what the user's program does next. Invoking a debugger restart and
// interrupting a thread are dangerous: asked every time (whatever the model sends), never run when
// denied or when no one can be asked; the approval carries the restart's number, thread and level.

import { afterEach, expect, it } from "vitest";
import { side, type Side } from "./helpers.js";

const open: Side[] = [];
afterEach(() => open.splice(0).forEach((s) => s.dispose()));

it("debugger_invoke_restart and interrupt_thread ask, and a denial runs nothing", async () => {
  const s = side();
  open.push(s);
  await s.init({});
  s.answerApproval = () => ({ result: { decision: "denied", reason: "no" } });
  const restart = await s.call("debugger_invoke_restart", { restart: 0, thread: 1, level: 1 });
  const interrupt = await s.call("interrupt_thread", { thread: 3 });
  expect(restart.success).toBe(false);
  expect(interrupt.success).toBe(false);
  expect(s.ran).toEqual([]);
  expect(s.approvals.map((a) => [a.tool, a.safetyLevel])).toEqual([
    ["debugger_invoke_restart", "dangerous"],
    ["interrupt_thread", "dangerous"],
  ]);
  expect(s.approvals[0].arguments).toEqual({ restart: 0, thread: 1, level: 1 });
});

it("without an approval UI the dangerous debugger tools never run; the read-only ones do", async () => {
  const s = side();
  open.push(s);
  await s.init({}, { approvals: false });
  await s.call("debugger_invoke_restart", { restart: 0 });
  await s.call("interrupt_thread", { thread: 3 });
  expect(s.ran).not.toContain("debugger_invoke_restart");
  expect(s.ran).not.toContain("interrupt_thread");
  await s.call("debugger_state", {});
  await s.call("debugger_frame_locals", { frame: 0 });
  expect(s.ran).toEqual(["debugger_state", "debugger_frame_locals"]);
});

it("a restart number that is not a non-negative integer never reaches Emacs", async () => {
  const s = side();
  open.push(s);
  await s.init({});
  for (const restart of [-1, 1.5, "0", null]) {
    const r = await s.call("debugger_invoke_restart", { restart });
    expect(r.success).toBe(false);
  }
  expect(s.approvals).toEqual([]);
  expect(s.ran).toEqual([]);
});

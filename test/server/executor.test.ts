import { describe, expect, it, vi } from "vitest";
import { shortenedResult } from "../../server/agent/conversation.js";
import { Executor, type ApprovalFn, type AuditEntry, type HookEvent, type ToolResult } from "../../server/tools/executor.js";
import { ToolRegistry } from "../../server/tools/registry.js";
import { boom, echo, sleep, testTool } from "./helpers.js";

function setup(opts: Partial<ConstructorParameters<typeof Executor>[0]> = {}) {
  const registry = new ToolRegistry();
  const ran: string[] = [];
  const track = (name: string, impl = echo) => async (args: Record<string, unknown>, ctx: Parameters<typeof echo>[1]) => {
    ran.push(name);
    return impl(args, ctx);
  };
  registry.register(testTool("safe_echo", track("safe_echo")));
  registry.register(testTool("cautious_echo", track("cautious_echo"), "cautious"));
  registry.register(testTool("danger_echo", track("danger_echo"), "dangerous"));
  registry.register(testTool("failing", boom));
  registry.register(testTool("throws_plain", async () => { throw new Error("plain failure"); }));
  registry.register(testTool("throws_nonerror", async () => { throw { weird: true }; }));
  registry.register(testTool("returns_undefined", async () => undefined));
  registry.register(testTool("returns_object", async () => ({ a: 1, b: [1, 2] })));
  registry.register(testTool("sync_throw", (() => { throw new Error("sync"); }) as never));
  registry.register(testTool("hangs", (_a, ctx) => new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(new Error("aborted inside")))), "safe", { timeoutMs: 50 }));
  registry.register(testTool("hangs_forever", () => new Promise(() => undefined), "safe", { timeoutMs: 50 }));
  registry.register(testTool("big", async () => "x".repeat(5000), "safe", { pagingHint: "Use offset and limit." }));
  const executor = new Executor({ registry, ...opts });
  return { registry, executor, ran };
}

function expectInvariants(calls: { id: string }[], results: ToolResult[]) {
  expect(results).toHaveLength(calls.length);
  results.forEach((r, i) => {
    expect(r.id).toBe(calls[i]!.id);
    expect(typeof r.content).toBe("string");
    expect(r.success === (r.error === undefined)).toBe(true);
    expect(typeof r.metadata.executionTimeMs).toBe("number");
  });
}

describe("executor", () => {
  it("runs a safe tool and formats its result", async () => {
    const { executor } = setup();
    const [r] = await executor.executeAll([{ id: "1", name: "safe_echo", arguments: { text: "hi" } }]);
    expect(r).toMatchObject({ id: "1", success: true, content: "echo:hi", metadata: { safetyLevel: "safe", approved: true } });
  });

  it("formats nil, objects and errors as strings", async () => {
    const { executor } = setup();
    const calls = ["returns_undefined", "returns_object", "failing", "throws_plain", "throws_nonerror", "sync_throw"].map((name, i) => ({ id: `c${i}`, name, arguments: {} }));
    const rs = await executor.executeAll(calls);
    expectInvariants(calls, rs);
    expect(rs[0]!.content).toBe("nil");
    expect(JSON.parse(rs[1]!.content)).toEqual({ a: 1, b: [1, 2] });
    expect(rs[2]).toMatchObject({ success: false, error: "boom happened" });
    expect(rs[3]!.error).toMatch(/throws_plain failed: plain failure/);
    expect(rs[4]!.error).toMatch(/weird/);
    expect(rs[5]!.error).toMatch(/sync/);
  });

  it("answers an unknown tool with the closest names", async () => {
    const { executor } = setup();
    const [r] = await executor.executeAll([{ id: "u", name: "safe_ech", arguments: {} }]);
    expect(r!.success).toBe(false);
    expect(r!.error).toMatch(/Unknown tool "safe_ech"/);
    expect(r!.error).toMatch(/safe_echo/);
    expect(r!.metadata.safetyLevel).toBe("unknown");
  });

  it("validates arguments before anything runs, naming the parameter", async () => {
    const { executor, ran } = setup();
    const calls = [
      { id: "a", name: "safe_echo", arguments: { text: 5 } },
      { id: "b", name: "safe_echo", arguments: { n: "seven" } },
      { id: "c", name: "safe_echo", arguments: { bogus: 1 } },
      { id: "d", name: "safe_echo", arguments: "{not json" },
      { id: "e", name: "safe_echo", arguments: "[1,2]" },
      { id: "f", name: "safe_echo", arguments: '{"text":"from string"}' },
    ];
    const rs = await executor.executeAll(calls);
    expectInvariants(calls, rs);
    expect(rs[0]!.error).toMatch(/parameter "text" must be string/);
    expect(rs[1]!.error).toMatch(/parameter "n" must be integer/);
    expect(rs[2]!.error).toMatch(/unknown parameter "bogus" \(parameters: text, n\)/);
    expect(rs[3]!.error).toMatch(/not valid JSON/);
    expect(rs[4]!.error).toMatch(/must be a JSON object/);
    expect(rs[5]).toMatchObject({ success: true, content: "echo:from string" });
    expect(ran).toEqual(["safe_echo"]);
  });

  it("reports a missing required parameter", async () => {
    const registry = new ToolRegistry();
    registry.register(testTool("needs_text", echo, "safe", { required: ["text"] }));
    const [r] = await new Executor({ registry }).executeAll([{ id: "x", name: "needs_text", arguments: {} }]);
    expect(r!.error).toMatch(/missing required parameter "text"/);
  });

  it("audits cautious tools and runs them", async () => {
    const audit: AuditEntry[] = [];
    const { executor, ran } = setup({ audit: (e) => audit.push(e) });
    const [r] = await executor.executeAll([{ id: "1", name: "cautious_echo", arguments: { text: "x" } }]);
    expect(r!.success).toBe(true);
    expect(ran).toEqual(["cautious_echo"]);
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ tool: "cautious_echo", safetyLevel: "cautious", decision: "auto", arguments: { text: "x" } });
  });

  it("never runs a dangerous tool without an approval function", async () => {
    const { executor, ran } = setup();
    const [r] = await executor.executeAll([{ id: "1", name: "danger_echo", arguments: {} }]);
    expect(r).toMatchObject({ success: false, metadata: { approved: false, safetyLevel: "dangerous" } });
    expect(r!.error).toMatch(/needs the user's approval/);
    expect(ran).toEqual([]);
  });

  it("times the run apart from the wait for approval, and reports the arguments that ran when edited", async () => {
    // The user takes 400 ms to answer; the tool itself takes next to nothing.
    const answers: Awaited<ReturnType<ApprovalFn>>[] = [{ decision: "approved" }, { decision: "modified", arguments: { text: "edited" } }];
    const approve: ApprovalFn = async () => { await sleep(400); return answers.shift()!; };
    const { executor } = setup({ approve });
    const [plain, edited] = await executor.executeAll([
      { id: "w1", name: "danger_echo", arguments: { text: "as asked" } },
      { id: "w2", name: "danger_echo", arguments: { text: "as asked" } },
    ]);
    for (const r of [plain!, edited!]) {
      expect(r.success).toBe(true);
      expect(r.metadata.approvalWaitMs).toBeGreaterThanOrEqual(390);
      expect(r.metadata.executionTimeMs).toBeLessThan(r.metadata.approvalWaitMs!);
    }
    expect(plain!.metadata.arguments).toBeUndefined();
    expect(edited!.content).toBe("echo:edited");
    expect(edited!.metadata.arguments).toEqual({ text: "edited" });
    // A call nobody was asked about has no wait.
    const [auto] = await executor.executeAll([{ id: "s1", name: "safe_echo", arguments: { text: "x" } }]);
    expect(auto!.metadata.approvalWaitMs).toBeUndefined();
  });

  it("asks the approval function: approved, denied with a reason, modified and revalidated", async () => {
    const answers: Awaited<ReturnType<ApprovalFn>>[] = [
      { decision: "approved" },
      { decision: "denied", reason: "not that file" },
      { decision: "modified", arguments: { text: "edited" } },
      { decision: "modified", arguments: { text: 42 } },
      { decision: "maybe" } as never,
    ];
    const asked: string[] = [];
    const approve: ApprovalFn = async (req) => {
      asked.push(`${req.tool.name}:${String(req.arguments.text)}`);
      return answers.shift()!;
    };
    const audit: AuditEntry[] = [];
    const { executor, ran } = setup({ approve, audit: (e) => audit.push(e) });
    const calls = [0, 1, 2, 3, 4].map((i) => ({ id: `d${i}`, name: "danger_echo", arguments: { text: `t${i}` } }));
    const rs = await executor.executeAll(calls);
    expectInvariants(calls, rs);
    expect(rs[0]).toMatchObject({ success: true, content: "echo:t0", metadata: { approved: true } });
    expect(rs[1]!.error).toMatch(/denied danger_echo: not that file/);
    expect(rs[1]!.metadata.approved).toBe(false);
    expect(rs[2]).toMatchObject({ success: true, content: "echo:edited" });
    expect(rs[3]!.error).toMatch(/edited arguments .* invalid: parameter "text" must be string/);
    expect(rs[4]!.error).toMatch(/no decision/);
    expect(ran).toEqual(["danger_echo", "danger_echo"]);
    expect(asked).toHaveLength(5);
    expect(audit.map((a) => a.decision)).toEqual(["approved", "modified"]);
  });

  it("treats an approval function that throws as a denial", async () => {
    const { executor, ran } = setup({ approve: async () => { throw new Error("ui broke"); } });
    const [r] = await executor.executeAll([{ id: "1", name: "danger_echo", arguments: {} }]);
    expect(r!.error).toMatch(/Approval for danger_echo failed: ui broke/);
    expect(ran).toEqual([]);
  });

  it("remembers 'always allow' for the session", async () => {
    const approve = vi.fn<ApprovalFn>(async () => ({ decision: "approved", always: true }));
    const { executor, ran } = setup({ approve });
    await executor.execute({ id: "1", name: "danger_echo", arguments: {} });
    await executor.execute({ id: "2", name: "danger_echo", arguments: {} });
    expect(approve).toHaveBeenCalledTimes(1);
    expect(ran).toEqual(["danger_echo", "danger_echo"]);
  });

  it("applies per-tool safety overrides both ways", async () => {
    const approve = vi.fn<ApprovalFn>(async () => ({ decision: "denied" }));
    const { executor, ran } = setup({ approve, safetyOverrides: { cautious_echo: "dangerous", danger_echo: "cautious" } });
    const rs = await executor.executeAll([
      { id: "1", name: "cautious_echo", arguments: {} },
      { id: "2", name: "danger_echo", arguments: {} },
    ]);
    expect(rs[0]!.success).toBe(false);
    expect(rs[0]!.metadata.safetyLevel).toBe("dangerous");
    expect(rs[1]!.success).toBe(true);
    expect(ran).toEqual(["danger_echo"]);
    expect(approve).toHaveBeenCalledTimes(1);
  });

  it("times out a hanging handler and tells it to stop", async () => {
    const { executor } = setup();
    const t0 = Date.now();
    const rs = await executor.executeAll([
      { id: "h1", name: "hangs", arguments: {} },
      { id: "h2", name: "hangs_forever", arguments: {} },
    ]);
    expect(rs[0]!.error).toMatch(/hangs timed out after 50 ms/);
    expect(rs[1]!.error).toMatch(/hangs_forever timed out after 50 ms/);
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it("cancels running and waiting calls through the signal", async () => {
    const registry = new ToolRegistry();
    let sawAbort = false;
    registry.register(testTool("slow", (_a, ctx) => new Promise((resolve) => {
      ctx.signal.addEventListener("abort", () => { sawAbort = true; resolve("late"); });
    }), "safe", { timeoutMs: 10_000 }));
    registry.register(testTool("needs_ok", echo, "dangerous"));
    const approve: ApprovalFn = (_req, signal) => new Promise((_, reject) => signal.addEventListener("abort", () => reject(new Error("approval cancelled"))));
    const executor = new Executor({ registry, approve });
    const ac = new AbortController();
    const pending = executor.executeAll([{ id: "s", name: "slow", arguments: {} }, { id: "n", name: "needs_ok", arguments: {} }], { signal: ac.signal });
    await sleep(30);
    ac.abort();
    const rs = await pending;
    expect(sawAbort).toBe(true);
    expect(rs[0]!.error).toMatch(/slow was cancelled/);
    expect(rs[1]!.success).toBe(false);
  });

  it("cuts long results with a marker saying how much was left and how to page", async () => {
    const { executor } = setup({ maxResultChars: 1000 });
    const [r] = await executor.executeAll([{ id: "b", name: "big", arguments: {} }]);
    expect(r!.success).toBe(true);
    expect(r!.content.startsWith("x".repeat(1000))).toBe(true);
    expect(r!.content).toMatch(/truncated: 4000 of 5000 characters left out\. Use offset and limit\./);
  });

  it("never cuts a result in the middle of a character (half a surrogate pair: the API refuses the request)", async () => {
    const { executor, registry } = setup({ maxResultChars: 1000 });
    registry.register(testTool("emoji_result", async () => `${"x".repeat(999)}😀${"y".repeat(100)}`));
    const [r] = await executor.executeAll([{ id: "e", name: "emoji_result", arguments: {} }]);
    expect(r!.content).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
    expect(r!.content.startsWith("x".repeat(999))).toBe(true);
    expect(r!.content).toMatch(/truncated: 102 of 1101 characters left out/);
    // An old result shortened to fit the context window is cut the same way.
    const old = shortenedResult(`${"x".repeat(299)}😀${"y".repeat(1000)}`);
    expect(old).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
    expect(old).toMatch(/shortened: 1002 of 1301 characters/);
  });

  it("runs hooks before, after and on error; a failing hook breaks nothing", async () => {
    const events: string[] = [];
    const hooks = [
      (e: HookEvent) => { events.push(`${e.phase}:${e.call.name}`); },
      () => { throw new Error("hook sync failure"); },
      async () => { throw new Error("hook async failure"); },
    ];
    const { executor } = setup({ hooks });
    const rs: ToolResult[] = [];
    for (const call of [
      { id: "1", name: "safe_echo", arguments: {} },
      { id: "2", name: "failing", arguments: {} },
      { id: "3", name: "nope", arguments: {} },
    ]) rs.push(await executor.execute(call));
    expect(rs.map((r) => r.success)).toEqual([true, false, false]);
    expect(events).toEqual(["before:safe_echo", "after:safe_echo", "before:failing", "error:failing", "error:nope"]);
  });

  it("runs adjacent safe calls concurrently but keeps the model's order, with cautious calls as barriers", async () => {
    const registry = new ToolRegistry();
    const log: string[] = [];
    const slowSafe = (ms: number) => async (args: Record<string, unknown>) => {
      log.push(`start ${String(args.text)}`);
      await sleep(ms);
      log.push(`end ${String(args.text)}`);
      return String(args.text);
    };
    registry.register(testTool("slow_safe", slowSafe(40)));
    registry.register(testTool("fast_safe", slowSafe(1)));
    registry.register(testTool("mutate", slowSafe(1), "cautious"));
    const executor = new Executor({ registry });
    const rs = await executor.executeAll([
      { id: "1", name: "slow_safe", arguments: { text: "a" } },
      { id: "2", name: "fast_safe", arguments: { text: "b" } },
      { id: "3", name: "mutate", arguments: { text: "c" } },
      { id: "4", name: "fast_safe", arguments: { text: "d" } },
    ]);
    expect(rs.map((r) => r.content)).toEqual(["a", "b", "c", "d"]);
    expect(log.slice(0, 2)).toEqual(["start a", "start b"]);
    expect(log.indexOf("start c")).toBeGreaterThan(log.indexOf("end a"));
    expect(log.indexOf("start d")).toBeGreaterThan(log.indexOf("end c"));
  });

  it("answers malformed calls instead of throwing", async () => {
    const { executor } = setup();
    const calls = [null, 42, "str", [], { id: 7, name: "safe_echo" }, { id: "n" }, { id: "e", name: "" }] as unknown[];
    const rs = await executor.executeAll(calls);
    expect(rs).toHaveLength(calls.length);
    expect(rs[4]).toMatchObject({ id: "7", success: true });
    for (const r of [rs[0], rs[1], rs[2], rs[3], rs[5], rs[6]]) expect(r!.success).toBe(false);
    expect(rs[5]!.error).toMatch(/no tool name/);
  });
});

describe("an approval binds the target", () => {
  it("runs nothing when what the server's preview shows changed while the approval waited", async () => {
    const registry = new ToolRegistry();
    let onDisk = "v1";
    const ran: string[] = [];
    registry.register(testTool("edit_thing", async () => { ran.push(onDisk); return "edited"; }, "dangerous", {
      preview: async () => ({ edit: `replace ${onDisk}` }),
    }));
    const approve: ApprovalFn = async (request) => {
      expect(request.arguments.edit).toBe("replace v1");
      onDisk = "v2"; // the file changed while the user read the diff
      return { decision: "approved" };
    };
    const [changed] = await new Executor({ registry, approve }).executeAll([{ id: "1", name: "edit_thing", arguments: {} }]);
    expect(changed).toMatchObject({ success: false });
    expect(changed!.error).toMatch(/changed while the approval waited/);
    expect(ran).toEqual([]);
    // Unchanged: it runs.
    const [same] = await new Executor({ registry, approve: async () => ({ decision: "approved" }) }).executeAll([{ id: "2", name: "edit_thing", arguments: {} }]);
    expect(same).toMatchObject({ success: true });
    expect(ran).toEqual(["v2"]);
  });

  it("reads a form in the package that was current when it was approved", async () => {
    const registry = new ToolRegistry();
    const seen: unknown[] = [];
    registry.register(testTool("eval_thing", async (args, ctx) => { seen.push(args.package ?? ctx.currentPackage); return "ok"; }, "dangerous", {
      parameters: { form: { type: "string", description: "A form." }, package: { type: "string", description: "A package." } },
    }));
    let current = "MY-APP";
    const approve: ApprovalFn = async (request) => {
      expect(request.arguments.package).toBe("MY-APP");
      current = "CL-USER"; // the user's REPL moved on meanwhile
      return { decision: "approved" };
    };
    const executor = new Executor({ registry, approve, context: () => ({ currentPackage: current }) });
    const [r] = await executor.executeAll([{ id: "1", name: "eval_thing", arguments: { form: "(delete-all)" } }]);
    expect(r).toMatchObject({ success: true });
    expect(seen).toEqual(["MY-APP"]);
  });
});

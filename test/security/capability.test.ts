// Attack class 2: trust keyed by spelling. Levels, category levels, the "evaluation" capability,
// permission rules and session allowances must follow the capability (the primary tool, its aliases,
// its categories), never the name the model happened to use.

import { afterEach, describe, expect, it } from "vitest";
import { startMockLLM } from "../fixtures/mock-llm/server.mjs";
import { ErrorCodes } from "../../server/protocol.js";
import { mockConfig, runTurn, side, validArgs, type Side } from "./helpers.js";

const open: Side[] = [];
afterEach(() => open.splice(0).forEach((s) => s.dispose()));
async function ready(configuration: Parameters<Side["init"]>[0]): Promise<Side> {
  const s = side();
  open.push(s);
  await s.init({ offerAliases: true, ...configuration });
  return s;
}

describe("trust by capability", () => {
  it("(a) an override on a tool covers its aliases", async () => {
    const s = await ready({ safetyOverrides: { read_file: "dangerous", write_file: "cautious" } });
    s.answerApproval = () => ({ result: { decision: "denied" } });
    const read = await s.call("file_read", { file_path: "a.lisp" });
    expect(read.success).toBe(false);
    expect(read.metadata.safetyLevel).toBe("dangerous");
    expect(s.approvals.map((a) => a.tool)).toEqual(["file_read"]);
    const write = await s.call("file_write", { file_path: "a.lisp", content: "x" });
    expect(write.success).toBe(true);
    expect(s.ran).toEqual(["file_write"]);
    expect(s.approvals).toHaveLength(1);
  });

  it("(b) a level per category applies to every tool of the category", async () => {
    const s = await ready({ categoryLevels: { filesystem: "dangerous" } });
    s.answerApproval = () => ({ result: { decision: "denied" } });
    for (const [name, args] of [["read_file", { path: "a" }], ["directory_list", {}], ["file_exists", { path: "a" }]] as const) {
      const r = await s.call(name, args);
      expect(r.success, name).toBe(false);
    }
    expect(s.approvals.map((a) => a.tool)).toEqual(["read_file", "directory_list", "file_exists"]);
    expect(s.ran).toEqual([]);
    const list = await s.client.sendRequest<any>("tools/list", {});
    expect(list.tools.find((t: any) => t.name === "read_file").effectiveSafetyLevel).toBe("dangerous");
    // A tool outside the category keeps its level.
    expect((await s.call("buffer_list", {})).success).toBe(true);
  });

  it("(c) one setting makes every tool that evaluates code in the image ask", async () => {
    const s = await ready({ categoryLevels: { evaluation: "dangerous" } });
    s.answerApproval = () => ({ result: { decision: "denied" } });
    // Internal steps are never offered nor run for a caller; the rest evaluate code in the image
    // (loading a system, running its tests, compiling an edited definition from its file, in a frame...).
    const evaluators = s.registry
      .list({ includeAliases: true })
      .filter((t) => t.categories.includes("evaluation") && !t.internal)
      .map((t) => t.name);
    expect(evaluators.sort()).toEqual([
      "compile_form",
      "debugger_eval_in_frame",
      "eval_form",
      "eval_in_package",
      "insert_form",
      "load_system",
      "profile_eval",
      "replace_definition",
      "run_tests",
      "trace_eval",
    ]);
    // Each with arguments its schema accepts, so that it is the level that stops it.
    const argsFor: Record<string, Record<string, unknown>> = {
      debugger_eval_in_frame: { form: "(+ 1 2)", frame: 0 },
      trace_eval: { functions: ["car"], form: "(+ 1 2)", package: "CL-USER" },
    };
    for (const name of evaluators) {
      const tool = s.registry.get(name)!;
      const args = argsFor[name] ?? ("form" in tool.parameters ? { form: "(+ 1 2)", package: "CL-USER" } : validArgs(tool));
      expect((await s.call(name, args)).success, name).toBe(false);
    }
    expect(s.approvals.map((a) => a.tool)).toEqual(evaluators);
    expect(s.ran).toEqual([]);
    expect((await s.call("describe_symbol", { symbol: "car" })).success).toBe(true);
  });

  describe("(d) permission rules", () => {
    const denyAsd = { action: "deny" as const, tool: "write_file", argument: "path", pattern: "\\.asd$" };

    it("a deny rule on an argument stops the tool and its alias, never asked, never run", async () => {
      const s = await ready({ permissionRules: [denyAsd] });
      const a = await s.call("write_file", { path: "my-app.asd", content: "(defsystem)" });
      const b = await s.call("file_write", { file_path: "sub/my-app.asd", content: "(defsystem)" });
      for (const r of [a, b]) {
        expect(r.success).toBe(false);
        expect(r.error).toMatch(/denied by a permission rule/);
      }
      expect(s.approvals).toEqual([]);
      expect(s.ran).toEqual([]);
      // Another path is not matched: the level decides (dangerous asks).
      expect((await s.call("write_file", { path: "my-app.lisp", content: "x" })).success).toBe(true);
      expect(s.approvals).toHaveLength(1);
      expect(s.ran).toEqual(["write_file"]);
    });

    it("allow runs without asking, ask asks, deny wins over ask and ask over allow", async () => {
      const s = await ready({
        categoryLevels: { evaluation: "dangerous" },
        permissionRules: [
          { action: "allow", tool: "eval_form", argument: "form", pattern: "^\\(describe" },
          { action: "ask", category: "introspection" },
          { action: "allow", tool: "describe_symbol" },
          { action: "deny", tool: "eval_form", argument: "form", pattern: "delete-file" },
        ],
      });
      expect((await s.call("eval_form", { form: "(describe 'car)" })).success).toBe(true);
      expect(s.approvals).toEqual([]);
      expect((await s.call("eval_form", { form: "(+ 1 2)" })).success).toBe(true);
      expect(s.approvals).toHaveLength(1);
      expect((await s.call("eval_form", { form: "(describe (delete-file \"x\"))" })).success).toBe(false);
      expect(s.approvals).toHaveLength(1);
      // describe_symbol is allowed by name but asked by its category: ask wins.
      expect((await s.call("describe_symbol", { symbol: "car" })).success).toBe(true);
      expect(s.approvals).toHaveLength(2);
      expect(s.ran).toEqual(["eval_form", "eval_form", "describe_symbol"]);
    });

    it("an unconditional deny removes the tool from the offer; a denied alias name is the primary", async () => {
      const s = side();
      open.push(s);
      const r = await s.init({ offerAliases: true, permissionRules: [{ action: "deny", tool: "file_write" }] });
      expect(r.tools).not.toContain("write_file");
      expect(r.tools).not.toContain("file_write");
      expect((await s.call("write_file", { path: "a", content: "b" })).error).toMatch(/not available/);
      expect(s.ran).toEqual([]);
    });

    it("a user's modified arguments are checked against the rules again", async () => {
      const s = await ready({ permissionRules: [denyAsd] });
      s.answerApproval = () => ({ result: { decision: "modified", arguments: { path: "x.asd", content: "y" } } });
      const r = await s.call("write_file", { path: "x.lisp", content: "y" });
      expect(r.success).toBe(false);
      expect(r.error).toMatch(/denied by a permission rule/);
      expect(s.ran).toEqual([]);
    });

    it("rejects an invalid rule at configuration time with a precise message, keeping the previous configuration", async () => {
      const s = side();
      open.push(s);
      await s.init({ permissionRules: [denyAsd] });
      const bad = [
        [{ action: "deny", tool: "write_file", argument: "path", pattern: "(" }, /permissionRules\[0\].*pattern.*regular expression/],
        [{ action: "forbid", tool: "write_file" }, /permissionRules\[0\].*action.*allow, ask or deny/],
        [{ action: "deny", tool: "no_such_tool" }, /permissionRules\[0\].*no_such_tool/],
        [{ action: "deny", tool: "write_file", argument: "pth", pattern: "x" }, /permissionRules\[0\].*"pth" is not a parameter of write_file/],
        // An Emacs regexp is not a JavaScript one.
        [{ action: "deny", tool: "write_file", argument: "path", pattern: "\\.asd\\'" }, /permissionRules\[0\].*not a valid JavaScript regular expression/],
      ] as const;
      for (const [rule, message] of bad) {
        await expect(s.configure({ permissionRules: [rule as never] })).rejects.toMatchObject({ code: ErrorCodes.invalidConfiguration, message: expect.stringMatching(message) });
      }
      await expect(s.configure({ categoryLevels: { evaluation: "yolo" as never } })).rejects.toMatchObject({ code: ErrorCodes.invalidConfiguration });
      // The rule of the last accepted configuration is still in force.
      expect((await s.call("write_file", { path: "a.asd", content: "x" })).error).toMatch(/denied by a permission rule/);
      expect(s.approvals).toEqual([]);
    });
  });

  it("(e) 'always allow for this session' is keyed by capability and never overrides a deny rule", async () => {
    const s = await ready({});
    s.answerApproval = () => ({ result: { decision: "approved", always: true } });
    expect((await s.call("file_write", { file_path: "a.lisp", content: "x" })).success).toBe(true);
    expect((await s.call("write_file", { path: "b.lisp", content: "x" })).success).toBe(true);
    expect(s.approvals).toHaveLength(1);
    await s.configure({ offerAliases: true, permissionRules: [{ action: "deny", tool: "write_file", argument: "path", pattern: "\\.asd$" }] });
    const denied = await s.call("write_file", { path: "c.asd", content: "x" });
    expect(denied.success).toBe(false);
    expect(s.ran).toEqual(["file_write", "write_file"]);
  });
});

describe("configuration replaces, never merges", () => {
  it("removing an override takes effect at once", async () => {
    const s = await ready({ safetyOverrides: { eval_form: "dangerous" } });
    s.answerApproval = () => ({ result: { decision: "denied" } });
    expect((await s.call("eval_form", { form: "1" })).success).toBe(false);
    expect(s.approvals).toHaveLength(1);
    await s.configure({ offerAliases: true });
    expect((await s.call("eval_form", { form: "1" })).success).toBe(true);
    expect(s.approvals).toHaveLength(1);
    expect(s.ran).toEqual(["eval_form"]);
  });
});

describe("a configuration change during a turn", () => {
  it("applies to the turn's next call", async () => {
    const mock = await startMockLLM({
      script: {
        steps: [
          { content: [{ type: "tool_use", name: "eval_form", input: { form: "(first)" } }] },
          { content: [{ type: "tool_use", name: "eval_form", input: { form: "(second)" } }] },
          { content: [{ type: "text", text: "done" }] },
        ],
      },
    });
    try {
      const s = side();
      open.push(s);
      const config = mockConfig(mock);
      await s.init(config);
      // While the first evaluation runs, the user adds a rule denying evaluation.
      s.answerCall = () => {
        void s.configure({ ...config, permissionRules: [{ action: "deny", category: "evaluation" }] });
        return { result: { content: "ok" } };
      };
      const end = await runTurn(s);
      expect(end.method).toBe("chat/turnFinished");
      expect(s.ran).toEqual(["eval_form"]);
      expect(s.ranAtTurnEnd).toEqual(["image_changes"]);
      const results = s.notes.filter((n) => n.method === "chat/toolResult").map((n) => n.params);
      expect(results.map((r) => r.success)).toEqual([true, false]);
      expect(results[1].error).toMatch(/not available/);
    } finally {
      await mock.close();
    }
  });
});

describe("what the model is told about approval", () => {
  it("follows the effective level, not the declared one", async () => {
    const mock = await startMockLLM({ script: { steps: [{ content: [{ type: "text", text: "ok" }] }] } });
    try {
      const s = side();
      open.push(s);
      await s.init({ ...mockConfig(mock), safetyOverrides: { write_file: "cautious" }, categoryLevels: { evaluation: "dangerous" } });
      await runTurn(s);
      const tools = (mock.requests()[0]!.body as { tools: { name: string; description: string }[] }).tools;
      const said = (name: string) => tools.find((t) => t.name === name)!.description;
      expect(said("write_file")).not.toMatch(/Requires the user's approval/);
      expect(said("eval_form")).toMatch(/Requires the user's approval/);
      expect(said("propose_file_edit")).toMatch(/Requires the user's approval/);
    } finally {
      await mock.close();
    }
  });
});

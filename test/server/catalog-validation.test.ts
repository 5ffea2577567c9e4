// A tool is declared once, in the catalog; Emacs's and the image's handlers take their arguments by
// name and do not check types again. So a call whose arguments do not fit the catalog must
// be refused here, with a message naming the parameter, and never reach Emacs or the image. (These
// are the checks test/elisp's tools test made of Emacs's own argument parsing before.)

import { describe, expect, it } from "vitest";
import { builtinTools, createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor } from "../../server/tools/executor.js";
import { ToolPolicy } from "../../server/tools/policy.js";
import type { EmacsPort, ParamSpec, ParamType } from "../../server/tools/tool.js";

function setup() {
  const registry = createDefaultRegistry();
  const reached: string[] = [];
  const emacs: EmacsPort = {
    call: async (kind, params) => {
      reached.push(`${kind}:${params.tool}`);
      return { content: "ran" };
    },
  };
  const executor = new Executor({
    registry,
    policy: new ToolPolicy(registry, { offerAliases: true }),
    approve: async () => ({ decision: "approved" }),
    context: () => ({ emacs }),
  });
  const run = async (name: string, args: Record<string, unknown>) => (await executor.execute({ id: "c", name, arguments: args })).content;
  return { run, reached };
}

describe("arguments are checked against the catalog before any handler runs", () => {
  it("refuses wrong types and missing parameters of Emacs tools with the parameter's name", async () => {
    const { run, reached } = setup();
    expect(await run("read_file", { path: 3 })).toMatch(/parameter "path" must be string/);
    expect(await run("read_file", {})).toMatch(/missing required parameter "path"/);
    expect(await run("read_file", { path: "a", offset: "2" })).toMatch(/parameter "offset" must be integer/);
    expect(await run("read_file", { path: "a", offset: 0 })).toMatch(/parameter "offset" must be >= 1/);
    expect(await run("file_write", { file_path: "a", content: "x", append: "yes" })).toMatch(/parameter "append" must be boolean/);
    expect(await run("buffer_edit", { buffer_name: "b", old_text: "x" })).toMatch(/missing required parameter "new_text"/);
    expect(await run("read_file", { path: "a", nonsense: 1 })).toMatch(/unknown parameter "nonsense"/);
    expect(reached).toEqual([]);
    // And a good call does reach Emacs, under its capability's name.
    expect(await run("file_read", { file_path: "a" })).toBe("ran");
    expect(reached).toEqual(["tool:read_file"]);
  });

  it("refuses wrong types of image tools before the image is asked", async () => {
    const { run, reached } = setup();
    expect(await run("describe_symbol", { symbol: 42 })).toMatch(/parameter "symbol" must be string/);
    expect(await run("get_repl_history", { limit: "5" })).toMatch(/parameter "limit" must be integer/);
    expect(await run("macroexpand_form", {})).toMatch(/missing required parameter "form"/);
    expect(reached).toEqual([]);
  });
});

// lisp-cl's define-tool takes the catalog's parameters by name and checks no types: the
// image refused these calls itself before (test/cl/tests.lisp asserted it); now the server must, and
// the image is never asked.
describe("image tools validate at the server", () => {
  // Internal steps (Tool.internal) are never offered, so a call of one is refused before validation.
  const imageTools = builtinTools.filter((tool) => tool.runtime === "image" && !tool.internal);

  it("refuses every call of an internal image tool, whatever its arguments", async () => {
    const { run, reached } = setup();
    const internal = builtinTools.filter((tool) => tool.internal);
    expect(internal.map((t) => t.name)).toEqual(expect.arrayContaining(["definition_edit", "compile_file_form"]));
    for (const tool of internal) expect(await run(tool.name, { path: "/etc/passwd", text: "(x)", symbol: "x" })).toMatch(/is not available/);
    expect(reached).toEqual([]);
  });

  it("refuses what the image's own argument checks used to refuse", async () => {
    const { run, reached } = setup();
    expect(await run("describe_symbol", {})).toMatch(/missing required parameter "symbol"/);
    expect(await run("eval_in_package", { form: "1" })).toMatch(/missing required parameter "package"/);
    expect(await run("describe_symbol", { symbol: "car", package: 7 })).toMatch(/parameter "package" must be string/);
    expect(await run("eval_form", { form: [1, 2, 3] })).toMatch(/parameter "form" must be string/);
    expect(await run("list_package_symbols", { package: "CL", include_internal: "maybe" })).toMatch(
      /parameter "include_internal" must be boolean/,
    );
    expect(await run("get_repl_history", { limit: "many" })).toMatch(/parameter "limit" must be integer/);
    expect(await run("get_repl_history", { limit: "3" })).toMatch(/parameter "limit" must be integer/);
    expect(await run("get_repl_history", { limit: 0 })).toMatch(/parameter "limit" must be >= 1/);
    expect(await run("get_repl_history", { limit: -3 })).toMatch(/parameter "limit" must be >= 1/);
    expect(await run("describe_symbol", { symbol: "car", bogus: 1 })).toMatch(/unknown parameter "bogus" \(parameters: symbol, package\)/);
    expect(await run("get_last_error", { unexpected: true })).toMatch(/unknown parameter "unexpected" \(parameters: none\)/);
    // Parameters the model is not offered are not named to it either.
    expect(await run("search_in_buffer", { pattern: "x", bogus: 1 })).toMatch(
      /unknown parameter "bogus" \(parameters: pattern, buffer, regex, all_matches, case_sensitive\)/,
    );
    expect(reached).toEqual([]);
  });

  it("refuses, for every image tool, each missing required parameter and each wrongly typed one", async () => {
    const { run, reached } = setup();
    const wrong: Record<ParamType, unknown> = { string: 42, boolean: "yes", integer: "1", number: "1", object: "{}", array: "[]" };
    const right: Record<ParamType, unknown> = { string: "x", boolean: true, integer: 1, number: 1, object: {}, array: [] };
    let checked = 0;
    for (const tool of imageTools) {
      const valid = Object.fromEntries(tool.required.map((p) => [p, right[tool.parameters[p].type]]));
      for (const p of tool.required) {
        const { [p]: _omitted, ...missing } = valid;
        expect(await run(tool.name, missing), `${tool.name} without ${p}`).toMatch(`missing required parameter "${p}"`);
        checked++;
      }
      for (const [p, spec] of Object.entries(tool.parameters)) {
        expect(await run(tool.name, { ...valid, [p]: wrong[spec.type] }), `${tool.name} with a wrong ${p}`).toMatch(
          `parameter "${p}" must be ${spec.type}`,
        );
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(imageTools.length);
    expect(reached).toEqual([]);
    // And a well-typed call of each does reach the image, by its implementation's name.
    const sample = (spec: ParamSpec): unknown => spec.enum?.[0] ?? right[spec.type];
    for (const tool of imageTools) {
      const valid = Object.fromEntries(tool.required.map((p) => [p, sample(tool.parameters[p])]));
      expect(await run(tool.name, valid)).toBe("ran");
    }
    // (list_systems asks Emacs for the project root first.)
    expect(reached.filter((r) => r.startsWith("image:"))).toEqual(imageTools.map((tool) => `image:${tool.implementation}`));
  });
});

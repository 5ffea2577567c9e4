import { describe, expect, it } from "vitest";
import { builtinTools, createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { describeForModel, schemaForModel, ToolRegistry } from "../../server/tools/registry.js";
import { defineTool, ToolDefinitionError, TOOL_NAME_PATTERN, type ToolSpec } from "../../server/tools/tool.js";
import { echo, testTool } from "./helpers.js";

const base: ToolSpec = {
  name: "ok_tool",
  description: "Fine.",
  parameters: { a: { type: "string", description: "A." } },
  required: ["a"],
  safety: "safe",
  categories: ["test"],
  runtime: "node",
  handler: echo,
};

describe("defineTool invariants", () => {
  it("accepts a valid definition and builds its JSON Schema", () => {
    const t = defineTool(base);
    expect(t.schema).toEqual({ type: "object", properties: base.parameters, required: ["a"], additionalProperties: false });
    expect(Object.isFrozen(t)).toBe(true);
  });

  it("shows the model a schema without what carries nothing for it", () => {
    const t = defineTool({
      ...base,
      parameters: { ...base.parameters, review: { type: "array", items: { type: "integer" }, description: "Set by the review.", notOffered: true } },
    });
    expect(schemaForModel(t)).toEqual({ type: "object", properties: base.parameters, required: ["a"] });
    expect(schemaForModel(defineTool({ ...base, required: [] }))).toEqual({ type: "object", properties: base.parameters });
    // What the server validates against is unchanged.
    expect(Object.keys(t.schema.properties)).toEqual(["a", "review"]);
    expect(t.schema.additionalProperties).toBe(false);
  });

  it("offers the model no parameter that the user's review sets, nor an alias of another", () => {
    const offered = builtinTools.flatMap((t) => Object.keys(schemaForModel(t).properties).map((p) => `${t.name}.${p}`));
    expect(offered.filter((p) => /accepted_hunks|search_in_buffer\.(buffer_name|search_text)$/.test(p))).toEqual([]);
    expect(offered).toContain("search_in_buffer.pattern");
  });

  const bad: [string, Partial<ToolSpec>, RegExp][] = [
    ["camelCase name", { name: "describeSymbol" }, /snake_case/],
    ["kebab name", { name: "describe-symbol" }, /snake_case/],
    ["leading digit", { name: "1tool" }, /snake_case/],
    ["empty name", { name: "" }, /snake_case/],
    ["empty description", { description: "  " }, /description is empty/],
    ["unknown safety", { safety: "risky" as never }, /safety must be one of/],
    ["required not in parameters", { required: ["a", "b"] }, /required parameter "b"/],
    ["param without description", { parameters: { a: { type: "string", description: "" } } }, /no description/],
    ["unknown param type", { parameters: { a: { type: "date" as never, description: "x" } } }, /unknown type/],
    ["array without items", { parameters: { a: { type: "array", description: "x" } } }, /needs items/],
    ["camelCase param", { parameters: { fileName: { type: "string", description: "x" } }, required: [] }, /snake_case/],
    ["no handler", { handler: undefined as never }, /handler/],
    ["bad timeout", { timeoutMs: 0 }, /timeoutMs/],
  ];
  for (const [what, change, message] of bad) {
    it(`fails loudly, naming the tool: ${what}`, () => {
      const spec = { ...base, ...change };
      expect(() => defineTool(spec)).toThrow(ToolDefinitionError);
      expect(() => defineTool(spec)).toThrow(message);
      expect(() => defineTool(spec)).toThrow(`"${spec.name}"`);
    });
  }
});

describe("registry", () => {
  it("registers idempotently, overwriting by name", () => {
    const r = new ToolRegistry();
    const a = testTool("alpha", echo);
    const a2 = testTool("alpha", echo, "cautious");
    r.register(a);
    r.register(a2);
    expect(r.size).toBe(1);
    expect(r.get("alpha")).toBe(a2);
    expect(r.get("nope")).toBeUndefined();
    expect(r.names()).toEqual(["alpha"]);
  });

  it("filters by max safety level and categories with AND logic", () => {
    const r = new ToolRegistry();
    r.register(testTool("s_intro", echo, "safe", { categories: ["introspection", "xref"] }));
    r.register(testTool("c_exec", echo, "cautious", { categories: ["execution"] }));
    r.register(testTool("d_file", echo, "dangerous", { categories: ["filesystem"] }));
    r.register(testTool("c_intro", echo, "cautious", { categories: ["introspection"] }));
    const names = (f: Parameters<ToolRegistry["list"]>[0]) => r.list(f).map((t) => t.name);
    expect(names({})).toEqual(["s_intro", "c_exec", "d_file", "c_intro"]);
    expect(names({ maxSafetyLevel: "safe" })).toEqual(["s_intro"]);
    expect(names({ maxSafetyLevel: "cautious" })).toEqual(["s_intro", "c_exec", "c_intro"]);
    expect(names({ maxSafetyLevel: "dangerous" })).toHaveLength(4);
    expect(names({ categories: ["xref", "filesystem"] })).toEqual(["s_intro", "d_file"]);
    expect(names({ maxSafetyLevel: "safe", categories: ["introspection"] })).toEqual(["s_intro"]);
    expect(names({ maxSafetyLevel: "cautious", categories: ["introspection"] })).toEqual(["s_intro", "c_intro"]);
  });

  it("describes a dangerous tool to the model with its approval note, and an object schema", () => {
    // The providers build both wire formats from these (the agent-loop tests check them on the wire).
    const t = testTool("alpha", echo, "dangerous");
    expect(t.schema.type).toBe("object");
    expect(describeForModel(t)).toMatch(/approval/);
    expect(describeForModel(testTool("beta", echo, "safe"))).not.toMatch(/approval/);
  });

  it("suggests the closest names", () => {
    const r = createDefaultRegistry();
    expect(r.closest("describe")[0]).toBe("describe_symbol");
    expect(r.closest("eval_from")[0]).toBe("eval_form");
  });
});

describe("the built-in catalog", () => {
  const r = createDefaultRegistry();
  const seed000 = [
    "describe_symbol", "apropos_search", "function_arglist", "who_calls", "who_references", "list_package_symbols",
    "class_slots", "class_hierarchy", "method_specializers", "macroexpand_form", "eval_form", "eval_in_package",
    "compile_form", "get_last_error", "get_repl_history", "get_compilation_notes",
    "read_file", "write_file", "read_buffer", "write_to_buffer", "search_in_buffer",
  ];
  const seed003 = [
    "buffer_append", "buffer_edit", "buffer_create", "buffer_save", "buffer_list", "buffer_get_content",
    "file_read", "file_write", "directory_list", "current_directory", "file_exists", "goto_line", "search_in_buffer",
  ];

  it("declares every tool of the seeds exactly once, plus propose_file_edit", () => {
    for (const name of [...seed000, ...seed003, "propose_file_edit"]) expect(r.get(name), name).toBeDefined();
    const names = builtinTools.map((t) => t.name);
    expect(new Set(names).size).toBe(names.length);
    for (const n of names) expect(n).toMatch(TOOL_NAME_PATTERN);
  });

  it("uses the seeds' safety levels", () => {
    const level = (n: string) => r.get(n)!.safety;
    for (const n of ["describe_symbol", "who_calls", "get_last_error", "read_file", "buffer_list", "file_exists"]) expect(level(n)).toBe("safe");
    for (const n of ["eval_form", "eval_in_package", "compile_form", "write_to_buffer", "buffer_edit", "buffer_append"]) expect(level(n)).toBe("cautious");
    for (const n of ["write_file", "file_write", "buffer_save", "propose_file_edit"]) expect(level(n)).toBe("dangerous");
  });

  it("offers each capability once by default; aliases on request", () => {
    const offered = r.list().map((t) => t.name);
    expect(offered).toContain("read_file");
    expect(offered).not.toContain("file_read");
    expect(offered).not.toContain("buffer_get_content");
    expect(r.list({ includeAliases: true }).map((t) => t.name)).toContain("file_read");
    for (const t of r.list({ includeAliases: true })) if (t.aliasOf) expect(r.get(t.aliasOf), t.name).toBeDefined();
  });

  it("gives every array parameter its items and every parameter a description", () => {
    for (const t of builtinTools) {
      for (const [p, spec] of Object.entries(t.schema.properties)) {
        expect(spec.description.length, `${t.name}.${p}`).toBeGreaterThan(3);
        if (spec.type === "array") expect(spec.items, `${t.name}.${p}`).toBeDefined();
      }
    }
  });
});

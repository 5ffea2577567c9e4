// A tool is declared once, in the catalog; Emacs's and the image's handlers take their arguments by
// name and do not check types again (issue 11). So a call whose arguments do not fit the catalog must
// be refused here, with a message naming the parameter, and never reach Emacs or the image. (These
// are the checks test/elisp's tools test made of Emacs's own argument parsing before.)

import { describe, expect, it } from "vitest";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor } from "../../server/tools/executor.js";
import { ToolPolicy } from "../../server/tools/policy.js";
import type { EmacsPort } from "../../server/tools/tool.js";

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

// The programmer's loop at the server: replace_definition and insert_form are located by the
// image, shown to the approval as the file edit they make, applied by Emacs's propose_file_edit with the
// user's accepted hunks, and compiled from the file; read_definition prefers the visiting buffer's text.
// Emacs and the image are faked here; test/e2e runs the same with the real ones.

import { describe, expect, it } from "vitest";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor, type ApprovalRequest } from "../../server/tools/executor.js";
import { ToolPolicy } from "../../server/tools/policy.js";
import type { ApprovalDecision } from "../../server/protocol.js";
import { ToolError, type EmacsPort } from "../../server/tools/tool.js";

const FILE = "/project/src/app.lisp";
const OLD = "(defun f (x)\n  x)";
const NEW = "(defun f (x)\n  (1+ x))";

interface Fake {
  calls: { kind: string; tool: string; arguments: Record<string, unknown> }[];
  answers: Record<string, (args: Record<string, unknown>) => unknown>;
}

function setup(approve: (request: ApprovalRequest) => ApprovalDecision = () => ({ decision: "approved" }), settings: ConstructorParameters<typeof ToolPolicy>[1] = {}) {
  const registry = createDefaultRegistry();
  const fake: Fake = {
    calls: [],
    answers: {
      "image:definition_edit": (args) =>
        args.symbol ? JSON.stringify({ file: FILE, line: 3, label: "(DEFUN F)", old: OLD }) : '{"checked":true}',
      "image:compile_file_form": () => `Compiled (defun f (x) from ${FILE}:3 into the image (its source is now that file).`,
      "tool:propose_file_edit": (args) => (Array.isArray(args.accepted_hunks) && args.accepted_hunks.length === 0 ? "No hunk was accepted; nothing was applied to src/app.lisp." : "Applied all 1 hunk to src/app.lisp."),
      "tool:read_file": () => `[src/app.lisp: lines 3-4 of 9]\n${OLD}\n`,
      "tool:current_directory": () => "Project root: /project/ (relative paths are resolved against it).",
    },
  };
  const emacs: EmacsPort = {
    call: async (kind, params) => {
      const p = params as { tool: string; arguments: Record<string, unknown> };
      fake.calls.push({ kind, tool: p.tool, arguments: p.arguments });
      const answer = fake.answers[`${kind}:${p.tool}`];
      if (!answer) throw new ToolError(`no fake for ${kind}:${p.tool}`);
      const value = answer(p.arguments);
      if (value instanceof Error) throw value;
      return { content: value };
    },
  };
  const asked: ApprovalRequest[] = [];
  const executor = new Executor({
    registry,
    policy: new ToolPolicy(registry, settings),
    approve: async (request) => {
      asked.push(request);
      return approve(request);
    },
    context: () => ({ emacs }),
  });
  const run = async (name: string, args: Record<string, unknown>) => executor.execute({ id: "c", name, arguments: args });
  const tools = () => fake.calls.map((c) => `${c.kind}:${c.tool}`);
  return { run, fake, asked, tools };
}

describe("replace_definition", () => {
  it("asks with the edit the image located, applies the accepted hunks, then compiles from the file", async () => {
    const { run, fake, asked, tools } = setup((request) => ({ decision: "modified", arguments: { ...request.arguments, accepted_hunks: [1] } }));
    const result = await run("replace_definition", { symbol: "f", new_text: NEW, description: "increment" });
    expect(result.success).toBe(true);
    expect(result.content).toMatch(/Applied all 1 hunk/);
    expect(result.content).toMatch(/Compiled/);
    expect(asked).toHaveLength(1);
    expect(asked[0].arguments.edit).toEqual({ path: FILE, old_text: OLD, new_text: NEW, description: "increment" });
    // Located (and the visiting buffer checked) for the approval, again for the edited arguments the user
    // approved, again just before it runs (the edit must still be the approved one), and by the handler itself.
    const locate = ["image:definition_edit", "tool:read_file"];
    expect(tools()).toEqual([...locate, ...locate, ...locate, ...locate, "tool:propose_file_edit", "image:compile_file_form"]);
    // The text is checked by the image when it locates the form.
    expect(fake.calls[0].arguments).toMatchObject({ symbol: "f", text: NEW });
    // The edit Emacs applies carries the user's hunks, never the preview's extra argument.
    expect(fake.calls[8].arguments).toEqual({ path: FILE, old_text: OLD, new_text: NEW, description: "increment", accepted_hunks: [1] });
    expect(fake.calls[9].arguments).toEqual({ path: FILE, text: NEW });
  });

  it("is refused before anyone is asked when the image refuses the text or the location", async () => {
    const { run, fake, asked, tools } = setup();
    fake.answers["image:definition_edit"] = () => new ToolError("The new text is refused: unbalanced parentheses.");
    const result = await run("replace_definition", { symbol: "f", new_text: "(defun f (x)" });
    expect(result.success).toBe(false);
    expect(result.content).toMatch(/unbalanced parentheses/);
    expect(asked).toHaveLength(0);
    expect(tools()).toEqual(["image:definition_edit"]);
  });

  it("does not compile when hunks were rejected", async () => {
    const { run, tools } = setup((request) => ({ decision: "modified", arguments: { ...request.arguments, accepted_hunks: [] } }));
    const result = await run("replace_definition", { symbol: "f", new_text: NEW });
    expect(result.content).toMatch(/not compiled/);
    expect(tools()).not.toContain("image:compile_file_form");
  });

  it("shows the #. forms the new text adds as read-time evaluation, and none when they are the old form's", async () => {
    const { run, fake, asked, tools } = setup(() => ({ decision: "denied", reason: "not that" }));
    const located = { file: FILE, line: 3, label: "(DEFUN F)", old: OLD };
    fake.answers["image:definition_edit"] = () => JSON.stringify({ ...located, readEval: ["*settings*", '(delete-file "x")'], readEvalNew: ['(delete-file "x")'] });
    const denied = await run("replace_definition", { symbol: "f", new_text: NEW });
    expect(denied.success).toBe(false);
    expect(asked[0].arguments.read_time_evaluation).toEqual(['#.(delete-file "x")']);
    // Denied: no edit reached Emacs, nothing was compiled.
    expect(tools()).toEqual(["image:definition_edit", "tool:read_file"]);
    // The same #. forms as the definition it replaces: nothing to show.
    fake.answers["image:definition_edit"] = () => JSON.stringify({ ...located, readEval: ["*settings*"], readEvalNew: [] });
    await run("replace_definition", { symbol: "f", new_text: NEW });
    expect(asked).toHaveLength(2);
    expect(asked[1].arguments).not.toHaveProperty("read_time_evaluation");
    // insert_form adds every #. form of its text.
    await run("insert_form", { after: "f", text: "(defun g () (declare #.*settings*) 2)" });
    expect(asked[2].arguments.read_time_evaluation).toEqual(["#.*settings*"]);
  });

  it("denied, changes nothing", async () => {
    const { run, tools } = setup(() => ({ decision: "denied", reason: "no" }));
    const result = await run("replace_definition", { symbol: "f", new_text: NEW });
    expect(result.success).toBe(false);
    expect(tools()).toEqual(["image:definition_edit", "tool:read_file"]);
  });

  it("is refused before anyone is asked when the file's buffer has unsaved changes, saying so", async () => {
    const { run, fake, asked, tools } = setup();
    fake.answers["tool:read_file"] = () => "[src/app.lisp: lines 1-1 of 9, read from buffer app.lisp, which has unsaved changes]\n(in-package :x)\n";
    for (const [name, args] of [["replace_definition", { symbol: "f", new_text: NEW }], ["insert_form", { after: "f", text: "(defun g () 2)" }], ["insert_form", { path: "src/app.lisp", text: "(defun g () 2)" }]] as const) {
      const result = await run(name, args);
      expect(result.success).toBe(false);
      expect(result.content).toMatch(/buffer app\.lisp visiting \/project\/src\/app\.lisp has unsaved changes, so nothing was changed.*save \(or revert\)/s);
    }
    expect(asked).toHaveLength(0);
    expect(tools()).not.toContain("tool:propose_file_edit");
    expect(tools()).not.toContain("image:compile_file_form");
  });

  it("names the unsaved buffer when the image does not find the form in the file (compiled from that buffer)", async () => {
    const moved = `The form at ${FILE}:42 is not the definition of X::H any more (no form reads there): the file changed since it was loaded. Load it again (load_system) or use find_definition, read_file and propose_file_edit.`;
    const { run, fake, asked, tools } = setup();
    fake.answers["image:definition_edit"] = (args) => (args.symbol ? new ToolError(moved) : '{"checked":true}');
    fake.answers["tool:read_file"] = () => "[src/app.lisp: lines 1-1 of 9, read from buffer app.lisp, which has unsaved changes]\n(in-package :x)\n";
    for (const [name, args] of [["replace_definition", { symbol: "h", new_text: NEW }], ["insert_form", { after: "h", text: "(defun g () 2)" }], ["read_definition", { symbol: "h" }]] as const) {
      const result = await run(name, args);
      expect(result.success).toBe(false);
      expect(result.content).toMatch(/X::H is not where \/project\/src\/app\.lisp has it: the buffer app\.lisp visiting it has unsaved changes/);
      expect(result.content).toMatch(/Nothing was changed\. Ask the user to save \(or revert\) the buffer, then try again/);
      // Loading the file again would put the file's older definitions over the ones compiled from the buffer.
      expect(result.content).not.toMatch(/load_system|Load it again/);
    }
    expect(asked).toHaveLength(0);
    expect(tools().filter((t) => t === "tool:read_file")).toHaveLength(3);
    // Saved, the image's own answer stands.
    fake.answers["tool:read_file"] = () => "[src/app.lisp: lines 1-1 of 9, read from buffer app.lisp]\n(in-package :x)\n";
    expect((await run("replace_definition", { symbol: "h", new_text: NEW })).content).toContain(moved);
    // Outside the project (Emacs refuses to read it), the same.
    fake.answers["tool:read_file"] = () => new ToolError("/elsewhere/app.lisp is outside the project root.");
    expect((await run("replace_definition", { symbol: "h", new_text: NEW })).content).toContain(moved);
  });

  it("reports a failed compilation with the applied edit", async () => {
    const { run, fake } = setup();
    fake.answers["image:compile_file_form"] = () => new ToolError("Compiling the form failed.");
    const result = await run("replace_definition", { symbol: "f", new_text: NEW });
    expect(result.success).toBe(false);
    expect(result.content).toMatch(/Applied all 1 hunk[\s\S]*But compiling it failed: Compiling the form failed/);
  });
});

describe("insert_form", () => {
  it("inserts after a definition's form", async () => {
    const { run, asked } = setup();
    const result = await run("insert_form", { after: "f", text: "(defun g () 2)" });
    expect(result.success).toBe(true);
    expect(asked[0].arguments.edit).toEqual({ path: FILE, old_text: OLD, new_text: `${OLD}\n\n(defun g () 2)` });
  });

  it("appends at the end of a project file, after its unique last lines", async () => {
    const { run, fake, asked } = setup();
    fake.answers["tool:read_file"] = () => "[src/b.lisp: lines 1-4 of 4]\n(in-package :x)\n\n(defun a () 1)\n  1)\n";
    const result = await run("insert_form", { path: "src/b.lisp", text: "(defun g () 2)" });
    expect(result.success).toBe(true);
    expect(asked[0].arguments.edit).toEqual({ path: "/project/src/b.lisp", old_text: "  1)", new_text: "  1)\n\n(defun g () 2)" });
    expect(fake.calls.at(-1)?.arguments).toEqual({ path: "/project/src/b.lisp", text: "(defun g () 2)" });
  });

  it("creates the content of an empty file", async () => {
    const { run, fake, asked } = setup();
    fake.answers["tool:read_file"] = () => "[src/c.lisp: empty file]";
    await run("insert_form", { path: "/project/src/c.lisp", text: "(defun g () 2)" });
    expect(asked[0].arguments.edit).toEqual({ path: "/project/src/c.lisp", new_content: "(defun g () 2)\n" });
  });

  it("needs after or path", async () => {
    const { run, asked } = setup();
    expect((await run("insert_form", { text: "(defun g () 2)" })).content).toMatch(/Give after/);
    expect(asked).toHaveLength(0);
  });
});

describe("read_definition", () => {
  it("gives the form from the file", async () => {
    const { run } = setup();
    const result = await run("read_definition", { symbol: "f" });
    expect(result.content).toBe(`(DEFUN F) in ${FILE}:3-4:\n${OLD}\n`);
  });

  it("shows the visiting buffer's text when it has unsaved changes there", async () => {
    const { run, fake } = setup();
    fake.answers["tool:read_file"] = () => "[src/app.lisp: lines 3-4 of 9, read from buffer app.lisp, which has unsaved changes]\n(defun f (x)\n  (* 2 x))\n";
    const result = await run("read_definition", { symbol: "f" });
    expect(result.content).toMatch(/unsaved changes; its lines 3-4 read:\n\(defun f \(x\)\n {2}\(\* 2 x\)\)/);
  });

  it("falls back to the file when Emacs cannot read it (outside the project)", async () => {
    const { run, fake } = setup();
    fake.answers["tool:read_file"] = () => new ToolError("outside the project root");
    expect((await run("read_definition", { symbol: "f" })).content).toBe(`(DEFUN F) in ${FILE}:3-4:\n${OLD}\n`);
  });
});

describe("read_definition outside the project root (readOutsideProject)", () => {
  const LIBRARY = "/elsewhere/lib/library.lisp";
  const outside = (fake: Fake) => {
    fake.answers["image:definition_edit"] = () => JSON.stringify({ file: LIBRARY, line: 1, label: "(DEFUN G)", old: "(defun g () :secret-library-text)" });
  };

  it("asks by default, naming the file; approved, it reads", async () => {
    const { run, fake, asked } = setup();
    outside(fake);
    const result = await run("read_definition", { symbol: "g" });
    expect(asked).toHaveLength(1);
    expect(asked[0].arguments).toMatchObject({ symbol: "g", file_outside_the_project: LIBRARY });
    expect(result.success).toBe(true);
    expect(result.content).toContain(":secret-library-text");
  });

  it("asks by default; denied, nothing of the file is given", async () => {
    const { run, fake, asked } = setup(() => ({ decision: "denied", reason: "not that" }));
    outside(fake);
    const result = await run("read_definition", { symbol: "g" });
    expect(asked).toHaveLength(1);
    expect(result.success).toBe(false);
    expect(result.content).toMatch(/library\.lisp is outside the project root, and the user did not allow it \(not that\)/);
    expect(result.content).not.toContain(":secret-library-text");
  });

  it("deny: refused without asking; allow: read without asking; inside the root: never asks", async () => {
    const denied = setup(undefined, { readOutsideProject: "deny" });
    outside(denied.fake);
    const d = await denied.run("read_definition", { symbol: "g" });
    expect(d.success).toBe(false);
    expect(d.content).toMatch(/outside the project root, and reading there is denied/);
    expect(d.content).not.toContain(":secret-library-text");
    expect(denied.asked).toHaveLength(0);

    const allowed = setup(undefined, { readOutsideProject: "allow" });
    outside(allowed.fake);
    expect((await allowed.run("read_definition", { symbol: "g" })).content).toContain(":secret-library-text");
    expect(allowed.asked).toHaveLength(0);

    const inside = setup(undefined, { readOutsideProject: "deny" });
    expect((await inside.run("read_definition", { symbol: "f" })).success).toBe(true);
    expect(inside.asked).toHaveLength(0);
  });

  it("a link inside the root to a file outside is outside", async () => {
    const { mkdtempSync, mkdirSync, symlinkSync, writeFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const base = mkdtempSync(join(tmpdir(), "saq-rd-"));
    mkdirSync(join(base, "root"));
    writeFileSync(join(base, "secret.lisp"), "(defun s () :x)\n");
    symlinkSync(join(base, "secret.lisp"), join(base, "root", "linked.lisp"));
    const { run, fake, asked } = setup(undefined, { readOutsideProject: "deny" });
    fake.answers["tool:current_directory"] = () => `Project root: ${join(base, "root")}/ (relative paths are resolved against it).`;
    fake.answers["image:definition_edit"] = () => JSON.stringify({ file: join(base, "root", "linked.lisp"), line: 1, label: "(DEFUN S)", old: "(defun s () :x)" });
    const r = await run("read_definition", { symbol: "s" });
    expect(r.success).toBe(false);
    expect(r.content).toMatch(/outside the project root/);
    expect(asked).toHaveLength(0);
  });

  it("an invalid rule is refused with the configuration", () => {
    expect(() => new ToolPolicy(createDefaultRegistry(), { readOutsideProject: "sometimes" as never })).toThrow(/readOutsideProject must be allow, ask or deny/);
  });
});

describe("list_systems", () => {
  it("names the systems under the project root unless told another directory", async () => {
    const { run, fake } = setup();
    fake.answers["image:list_systems"] = (args) => `under ${String(args.directory)}`;
    expect((await run("list_systems", {})).content).toBe("under /project/");
    expect((await run("list_systems", { directory: "/elsewhere/" })).content).toBe("under /elsewhere/");
  });
});

describe("internal steps", () => {
  it("are never offered nor run for the model", async () => {
    const { run, tools } = setup();
    const registry = createDefaultRegistry();
    const offered = new ToolPolicy(registry, {}).offered().map((t) => t.name);
    expect(offered).not.toContain("definition_edit");
    expect(offered).not.toContain("compile_file_form");
    expect((await run("compile_file_form", { path: "/etc/passwd", text: "(x)" })).success).toBe(false);
    expect(tools()).toEqual([]);
  });
});

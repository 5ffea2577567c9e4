// The image tools are declared once, in the catalog: lisp-cl's define-tool forms are only
// handlers, taking the catalog's parameters by name as &key (generic_function is GENERIC-FUNCTION).
// This reads lisp-cl/*.lisp and fails when the two disagree: a handler for a tool the catalog does not
// run in the image, an image tool without a handler, or a handler's keywords that are not the
// tool's parameters. (test/e2e's e2e-catalog-and-handlers-agree checks the names against a live image.)

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { builtinTools } from "../../server/tools/catalog/index.js";

const lispDir = fileURLToPath(new URL("../../lisp-cl", import.meta.url));

type Sexp = string | Sexp[];

/** Reads one s-expression of TEXT from START (after blanks and comments); returns it and its end. */
function readSexp(text: string, start: number): { value: Sexp; end: number } {
  let i = start;
  const skip = (): void => {
    for (;;) {
      while (i < text.length && /\s/.test(text[i])) i++;
      if (text[i] !== ";") return;
      while (i < text.length && text[i] !== "\n") i++;
    }
  };
  const read = (): Sexp => {
    skip();
    if (i >= text.length) throw new Error(`unexpected end of text reading from offset ${start}`);
    const c = text[i];
    if (c === "(") {
      i++;
      const items: Sexp[] = [];
      for (;;) {
        skip();
        if (text[i] === ")") {
          i++;
          return items;
        }
        items.push(read());
      }
    }
    if (c === ")") throw new Error(`unbalanced ")" at offset ${i}`);
    if (c === '"') {
      let j = i + 1;
      let s = "";
      while (j < text.length && text[j] !== '"') {
        if (text[j] === "\\") j++;
        s += text[j++];
      }
      i = j + 1;
      return JSON.stringify(s);
    }
    const m = /^[^\s()";]+/.exec(text.slice(i));
    if (!m) throw new Error(`cannot read at offset ${i}`);
    i += m[0].length;
    return m[0];
  };
  const value = read();
  return { value, end: i };
}

interface LispHandler {
  tool: string;
  file: string;
  /** The catalog names of the lambda list's keywords, in order (generic-function -> generic_function). */
  parameters: string[];
}

/** The define-tool forms at the top level of the .lisp files of DIR. */
function lispHandlers(dir: string): LispHandler[] {
  const handlers: LispHandler[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".lisp")).sort()) {
    const text = readFileSync(join(dir, file), "utf8");
    // Top-level forms start at the beginning of a line; the macro's docstring example does not.
    for (const m of text.matchAll(/^\(define-tool\s/gm)) {
      const { value } = readSexp(text, m.index);
      if (!Array.isArray(value) || typeof value[1] !== "string" || !value[1].startsWith('"')) {
        throw new Error(`${file}: a define-tool whose name is not a string`);
      }
      const tool = JSON.parse(value[1]) as string;
      const lambdaList = value[2];
      if (!Array.isArray(lambdaList)) throw new Error(`${file}: define-tool ${tool} has no lambda list`);
      if (lambdaList.length > 0 && (typeof lambdaList[0] !== "string" || lambdaList[0].toLowerCase() !== "&key")) {
        throw new Error(`${file}: define-tool ${tool}'s lambda list does not start with &key`);
      }
      const parameters = lambdaList.slice(1).map((p) => {
        const variable = Array.isArray(p) ? p[0] : p;
        if (typeof variable !== "string") throw new Error(`${file}: define-tool ${tool} has a strange parameter`);
        return variable.toLowerCase().replace(/-/g, "_");
      });
      handlers.push({ tool, file, parameters });
    }
  }
  return handlers;
}

/** What differs between the catalog's image tools and HANDLERS; empty when they agree. */
function disagreements(handlers: readonly LispHandler[]): string[] {
  const problems: string[] = [];
  const imageTools = builtinTools.filter((tool) => tool.runtime === "image");
  const byImplementation = new Map<string, typeof imageTools>();
  for (const tool of imageTools) {
    const name = tool.implementation ?? tool.name;
    byImplementation.set(name, [...(byImplementation.get(name) ?? []), tool]);
  }
  const seen = new Set<string>();
  for (const handler of handlers) {
    if (seen.has(handler.tool)) problems.push(`${handler.file}: a second define-tool "${handler.tool}"`);
    seen.add(handler.tool);
    const tools = byImplementation.get(handler.tool);
    if (!tools) {
      const elsewhere = builtinTools.find((tool) => tool.name === handler.tool || tool.implementation === handler.tool);
      problems.push(
        `${handler.file}: define-tool "${handler.tool}" has no image tool in the catalog` +
          (elsewhere ? ` (the catalog runs it in ${elsewhere.runtime})` : ""),
      );
      continue;
    }
    // Aliases may name a parameter differently; the primary's parameters are what the handler takes.
    const primary = tools.find((tool) => !tool.aliasOf) ?? tools[0];
    const declared = new Set(tools.flatMap((tool) => Object.keys(tool.parameters)));
    const untaken = Object.keys(primary.parameters).filter((p) => !handler.parameters.includes(p));
    const undeclared = handler.parameters.filter((p) => !declared.has(p));
    if (untaken.length > 0) problems.push(`${handler.file}: define-tool "${handler.tool}" does not take ${untaken.join(", ")}`);
    if (undeclared.length > 0) {
      problems.push(`${handler.file}: define-tool "${handler.tool}" takes ${undeclared.join(", ")}, which the catalog does not declare`);
    }
  }
  for (const name of byImplementation.keys()) {
    if (!seen.has(name)) problems.push(`the catalog's image tool "${name}" has no define-tool in lisp-cl/`);
  }
  return problems;
}

describe("the catalog's image tools and lisp-cl's define-tool handlers agree", () => {
  const handlers = lispHandlers(lispDir);

  it("finds every handler", () => {
    expect(handlers.length).toBeGreaterThanOrEqual(16);
    expect(handlers.find((h) => h.tool === "method_specializers")?.parameters).toEqual(["generic_function", "package"]);
    expect(handlers.find((h) => h.tool === "get_last_error")?.parameters).toEqual([]);
  });

  it("has one handler per image tool, taking exactly its parameters", () => {
    expect(disagreements(handlers)).toEqual([]);
  });

  it("notices a stray handler, a missing one and a keyword that differs", () => {
    const stray = handlers.concat([{ tool: "read_file", file: "x.lisp", parameters: ["path"] }]);
    expect(disagreements(stray)).toEqual([`x.lisp: define-tool "read_file" has no image tool in the catalog (the catalog runs it in emacs)`]);
    const missing = handlers.filter((h) => h.tool !== "eval_form");
    expect(disagreements(missing)).toEqual([`the catalog's image tool "eval_form" has no define-tool in lisp-cl/`]);
    const renamed = handlers.map((h) => (h.tool === "class_slots" ? { ...h, parameters: ["class_name", "package"] } : h));
    expect(disagreements(renamed)).toEqual([
      `${handlers.find((h) => h.tool === "class_slots")?.file}: define-tool "class_slots" does not take class`,
      `${handlers.find((h) => h.tool === "class_slots")?.file}: define-tool "class_slots" takes class_name, which the catalog does not declare`,
    ]);
  });

  it("reads lambda lists with defaults and comments", () => {
    const text = `;; x\n(define-tool "t" (&key (a-b 1) ; the a\n  c)\n  "doc \\"q\\" (" (list a-b c))`;
    const { value } = readSexp(text, text.indexOf("(define-tool"));
    expect(value).toEqual(["define-tool", '"t"', ["&key", ["a-b", "1"], "c"], '"doc \\"q\\" ("', ["list", "a-b", "c"]]);
  });
});

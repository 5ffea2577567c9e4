// lisp-cl/load.lisp loads the image helpers from one list of files, in order: a file left out of it
// would leave its tools undefined in the image (and test/cl's tool table short). The list must name
// every lisp-cl/*.lisp but load.lisp itself, each once, package.lisp first.

import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const lispDir = fileURLToPath(new URL("../../lisp-cl", import.meta.url));

export function loadList(text = readFileSync(`${lispDir}/load.lisp`, "utf8")): string[] {
  const m = /\(files '\(([^)]*)\)\)/.exec(text);
  if (!m) throw new Error("lisp-cl/load.lisp has no (files '(...)) list");
  return [...m[1]!.matchAll(/"([^"]+)"/g)].map((x) => x[1]!);
}

it("lisp-cl/load.lisp lists every lisp-cl file once, package.lisp first", () => {
  const files = loadList();
  const sources = readdirSync(lispDir).filter((f) => f.endsWith(".lisp") && f !== "load.lisp").map((f) => f.replace(/\.lisp$/, ""));
  expect([...files].sort()).toEqual(sources.sort());
  expect(new Set(files).size).toBe(files.length);
  expect(files[0]).toBe("package");
});

const readLisp = (f: string) => readFileSync(`${lispDir}/${f}.lisp`, "utf8");

/** FILE's code, lower case, without its strings and comments. */
function codeOf(text: string): string {
  return text.replace(/#\|[\s\S]*?\|#/g, "").replace(/"(?:\\.|[^"\\])*"/g, '""').replace(/;[^\n]*/g, "").toLowerCase();
}

const DEFINITION = /^\((?:defun|defmacro|define-condition|defstruct|defvar|defparameter)\s+\(?([^\s()]+)/gm;

/** Each definition (function, macro, condition, structure, special) of FILES, in load order, that a
 *  file loaded before it names: [user, name, definer]. */
export function forwardUses(files: string[], read = readLisp): [string, string, string][] {
  const code = new Map(files.map((f) => [f, codeOf(read(f))]));
  const definer = new Map<string, number>();
  files.forEach((f, i) => {
    for (const m of code.get(f)!.matchAll(DEFINITION)) if (!definer.has(m[1]!)) definer.set(m[1]!, i);
  });
  const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const out: [string, string, string][] = [];
  files.forEach((f, i) => {
    for (const [name, j] of definer) {
      if (j > i && new RegExp(`(?<![\\w*:-])${escape(name)}(?![\\w*-])`).test(code.get(f)!)) out.push([f, name, files[j]!]);
    }
  });
  return out;
}

/** The file of FILES that defines NAME. */
function definerOf(files: string[], name: string, read = readLisp): string | undefined {
  return files.find((f) => [...codeOf(read(f)).matchAll(DEFINITION)].some((m) => m[1] === name));
}

/** What files loaded before the guard against user code (the file of RUN-USER-CODE) or the tool
 *  errors (the file of TOOL-ERROR) use of them. */
function usedBeforeGuard(files: string[]): [string, string, string][] {
  const guard = definerOf(files, "run-user-code");
  const errors = definerOf(files, "tool-error");
  expect(guard).toBeDefined();
  expect(errors).toBeDefined();
  return forwardUses(files).filter(([, , definer]) => definer === guard || definer === errors);
}

it("loads the guard against user code and the tool errors before every file that uses them", () => {
  expect(usedBeforeGuard(loadList())).toEqual([]);
});

it("finds a file that uses the guard before it is loaded", () => {
  const late = loadList().filter((f) => f !== "guard").concat("guard");
  expect(usedBeforeGuard(late)).toContainEqual(["protocol", "call-guarding-user-code", "guard"]);
});

it("fails when a file is missing from the list", () => {
  const text = readFileSync(`${lispDir}/load.lisp`, "utf8").replace('"trace"', "");
  expect(loadList(text)).not.toContain("trace");
});

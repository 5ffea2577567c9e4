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

it("fails when a file is missing from the list", () => {
  const text = readFileSync(`${lispDir}/load.lisp`, "utf8").replace('"trace"', "");
  expect(loadList(text)).not.toContain("trace");
});

// The project tools through the real bundle (minified, its search worker included), once with ripgrep on
// PATH and once with a PATH that has git but no rg: the same answers. This test plays Emacs: it tells
// the project root and lists a buffer with unsaved changes, which the search's answer names.

import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { findOnPath } from "../../server/tools/project/files.js";
import { startBundle, type BundleProcess } from "./stdio-client.js";

const base = mkdtempSync(join(tmpdir(), "agent-q-bundle-search-"));
const root = join(base, "proj");
const noRgBin = join(base, "bin");
const started: BundleProcess[] = [];

beforeAll(() => {
  mkdirSync(join(root, "src"), { recursive: true });
  mkdirSync(noRgBin);
  symlinkSync(findOnPath("git")!, join(noRgBin, "git"));
  execFileSync("git", ["init", "-q", root]);
  writeFileSync(join(root, ".gitignore"), "*.fasl\n");
  writeFileSync(join(root, "src", "app.lisp"), "(in-package :app)\n\n(defun parse-input (s)\n  (string-trim \" \" s))\n");
  writeFileSync(join(root, "src", "app.fasl"), "parse-input\n");
  writeFileSync(join(root, "app.asd"), "(defsystem \"app\" :components ((:file \"src/app\")))\n");
});

afterAll(() => {
  for (const b of started) b.kill();
});

async function session(env: NodeJS.ProcessEnv) {
  const b = startBundle(["--stdio"], env);
  started.push(b);
  // Emacs's side: the root its file tools confine to, and a buffer with unsaved changes.
  b.connection.onNotification("emacs/call", (p: { id: string; kind: string; params: { tool: string } }) => {
    const content =
      p.params.tool === "current_directory"
        ? `Project root: ${root}/ (relative paths are resolved against it).`
        : p.params.tool === "buffer_list"
          ? "2 buffers (name | file | major mode | state | size in characters):\napp.lisp | src/app.lisp | lisp-mode | modified, user's buffer | 80\n*scratch* | - | lisp-interaction-mode | - | 0"
          : undefined;
    void b.connection.sendNotification("emacs/reply", content === undefined ? { id: p.id, error: "no such tool here" } : { id: p.id, result: { content } });
  });
  await b.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true, image: false, approvals: false }, configuration: {} });
  return (name: string, args: Record<string, unknown>) => b.connection.sendRequest("tools/call", { name, arguments: args }) as Promise<{ success: boolean; content: string }>;
}

it("search_project, find_files and git_status answer the same with and without rg on PATH", async () => {
  const withRg = await session({});
  const withoutRg = await session({ PATH: noRgBin });
  const calls: [string, Record<string, unknown>][] = [
    ["search_project", { pattern: "parse-input" }],
    ["search_project", { pattern: "(defun", literal: true, glob: "**/*.lisp" }],
    ["find_files", { glob: "*.asd", sort: "name" }],
    ["git_status", {}],
  ];
  for (const [name, args] of calls) {
    const a = await withRg(name, args);
    const b = await withoutRg(name, args);
    expect(a.success, a.content).toBe(true);
    expect(b.content).toBe(a.content);
  }
  const found = await withRg("search_project", { pattern: "parse-input" });
  expect(found.content).toContain("Searched 3 of 3 project files on disk for /parse-input/ (case-insensitive): 1 matching line in 1 file.");
  expect(found.content).toContain("src/app.lisp:3:8 in (defun parse-input (line 3)");
  expect(found.content).toContain("the buffers visiting src/app.lisp have changes not saved; their files on disk were searched, not the buffers' text");
  const bad = await withoutRg("search_project", { pattern: "(defun" });
  expect(bad.success).toBe(false);
  expect(bad.content).toContain("Invalid regular expression");
}, 60_000);

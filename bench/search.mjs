// Figure 11, search_project over a 10,000-file tree of Lisp sources, made here from the project's own
// lisp-cl/ forms (about 3 KB a file, in 100 directories, a .gitignore and some ignored files among them):
// the time of a tools/call through the bundled server with ripgrep on PATH (it lists the files) and with
// a PATH that has no rg (the server's own walk), and the server's resident memory after.
// `node bench/search.mjs` (rows to $BENCH_RESULTS, else stdout).

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { median, record, ROOT, rssMb, startServer } from "./lib.mjs";

const FILES = 10_000;
const RUNS = process.env.BENCH_QUICK ? 3 : 5;

function onPath(name) {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    try {
      execFileSync("test", ["-x", join(dir, name)]);
      return join(dir, name);
    } catch {}
  }
  return undefined;
}

/** The top-level forms of lisp-cl/'s files: real Lisp to fill the tree with. */
function forms() {
  const out = [];
  for (const f of readdirSync(join(ROOT, "lisp-cl")).filter((n) => n.endsWith(".lisp"))) {
    const text = readFileSync(join(ROOT, "lisp-cl", f), "utf8");
    out.push(...text.split(/\n(?=\()/).filter((s) => s.startsWith("(")));
  }
  return out;
}

function makeTree(dir) {
  const all = forms();
  let k = 0;
  writeFileSync(join(dir, ".gitignore"), "*.fasl\n");
  for (let d = 0; d < 100; d++) {
    mkdirSync(join(dir, `module-${d}`));
    for (let f = 0; f < FILES / 100; f++) {
      let body = `(in-package :bench-${d})\n\n`;
      while (body.length < 3000) body += `${all[k++ % all.length]}\n`;
      if (d === 77 && f === 7) body += "\n(defun the-needle-of-the-bench (x)\n  (list x))\n";
      writeFileSync(join(dir, `module-${d}`, `file-${f}.lisp`), body);
      if (f % 10 === 0) writeFileSync(join(dir, `module-${d}`, `file-${f}.fasl`), "the-needle-of-the-bench\n");
    }
  }
}

const base = mkdtempSync(join(tmpdir(), "agent-q-bench-search-"));
const tree = join(base, "tree");
mkdirSync(tree);
makeTree(tree);
const noRg = join(base, "bin");
mkdirSync(noRg);
const git = onPath("git");
if (git) symlinkSync(git, join(noRg, "git"));

async function measure(label, env, target) {
  const server = startServer({ env });
  await server.request("initialize", { clientInfo: { name: "bench" }, capabilities: {}, context: { projectRoot: tree } });
  const times = [];
  let answer = "";
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    const r = await server.request("tools/call", { name: "search_project", arguments: { pattern: "the-needle-of-the-bench" } });
    times.push(performance.now() - t0);
    answer = r.content;
  }
  const rss = rssMb(server.pid);
  await server.close();
  const ok = /Searched 10001 of 10001 project files on disk .*: 1 matching line in 1 file\./.test(answer);
  const m = median(times);
  record({
    figure: `11. search_project, ${FILES} Lisp files (${label})`,
    unit: "ms",
    samples: times,
    target: `<= ${target} ms`,
    ratio: m / target,
    pass: ok && m <= target,
    note: `${ok ? "found the one definition" : `WRONG ANSWER: ${answer.slice(0, 200)}`}; server RSS after: ${rss.toFixed(0)} MB`,
  });
}

try {
  await measure("no rg: the server's own walk", { PATH: noRg }, 3000);
  if (onPath("rg")) await measure("rg lists the files", {}, 1000);
  else record({ figure: `11. search_project, ${FILES} Lisp files (rg lists the files)`, unit: "ms", value: NaN, target: "<= 1000 ms", note: "rg is not on PATH here" });
} finally {
  rmSync(base, { recursive: true, force: true });
}

// Bundles the server into one file that runs with plain node and no node_modules.
//
// The file is a small loader followed by the program in a comment: the loader takes the program from
// its own source and compiles it with V8's code cache, kept in the user's cache directory
// (scripts/bundle-loader.js says how), so that a start after the first skips parsing and compiling most
// of it, on every Node version (vm.Script's cachedData; Node's module.enableCompileCache, from 22.1,
// cannot serve the file that calls it). Node's own loader skips a comment at little cost, where a
// string literal of the same size took longer to scan than the program takes to start from the cache.
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { build } from "esbuild";

const { outputFiles } = await build({
  entryPoints: ["server/main.ts"],
  write: false,
  bundle: true,
  platform: "node",
  target: "node20",
  // CommonJS: the loader runs it as a function of (exports, require, module, __filename, __dirname).
  format: "cjs",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  logLevel: "warning",
});
const program = outputFiles[0].text;
// The loader reads its file as Latin-1 (the fastest decoding): the program must be ASCII, as esbuild
// writes it except inside a regular expression literal (write \uXXXX there).
const nonAscii = /[^\x00-\x7f]/.exec(program);
if (nonAscii) throw new Error(`the bundled program has a non-ASCII character: ${JSON.stringify(program.slice(Math.max(0, nonAscii.index - 60), nonAscii.index + 10))}`);
// Inside the comment, every "*/" of the program is written as "*\x01/" (the program has no \x01; the loader undoes it).
if (program.includes("\x01")) throw new Error("the bundled program has a \\x01 character");
const loader = readFileSync(new URL("./bundle-loader.js", import.meta.url), "utf8");
const key = createHash("sha256").update(program).digest("hex").slice(0, 16);
// The shebang makes the bundle the npm package's `sly-agent-q-server` bin.
// The program goes wrapped as a CommonJS module's function into a comment in the body of programText
// (the loader takes it from there with Function.prototype.toString, without reading the file again).
const wrapped = `(function (exports, require, module, __filename, __dirname) {${program}\n})`;
const out = `#!/usr/bin/env node\n${loader.replace("__PROGRAM_KEY__", key)}\nfunction programText() {/*PROGRAM\n${wrapped.replaceAll("*/", "*\x01/")}\n*/}\n`;
// dist/ is not tracked: a fresh clone has none. Written aside and renamed, so that a server starting
// meanwhile reads the old bundle or the new one, never half of one. The aside name is this process's
// own: two builds at once (each `make run` builds; make test runs two suites at once) would otherwise
// write the same file and the second rename find it gone.
mkdirSync("dist", { recursive: true });
const aside = `dist/sly-agent-q-server.js.${process.pid}.tmp`;
writeFileSync(aside, out);
renameSync(aside, "dist/sly-agent-q-server.js");

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
import { isBuiltin } from "node:module";
import { resolve } from "node:path";
import { brotliCompressSync, constants as zlib } from "node:zlib";
import { build, transform } from "esbuild";

// The packages a start never evaluates (the providers' SDKs, the MCP SDK, Ajv: each loaded by the first
// request that needs it) go into a second program, the deferred one, which the loader decompresses and
// compiles, with a code cache of its own, when the first of them is required. Reading, decoding and
// deserializing their ~1 MB at every start was most of a start's own time.
const DEFERRED = ["@anthropic-ai/sdk", "openai", "ajv", "@modelcontextprotocol/sdk"];

const common = { write: false, bundle: true, platform: "node", target: "node20", format: "cjs", minify: true, sourcemap: false, legalComments: "none", logLevel: "warning" };
const core = await build({
  ...common,
  entryPoints: ["server/main.ts"],
  // CommonJS: the loader runs it as a function of (exports, require, module, __filename, __dirname).
  external: DEFERRED.flatMap((p) => [p, `${p}/*`]),
  metafile: true,
});
// What the program requires of the deferred packages, each name as the program spells it.
const deferredIds = [...new Set(Object.values(core.metafile.outputs).flatMap((o) => o.imports.filter((i) => i.external && !isBuiltin(i.path)).map((i) => i.path)))].sort();
// esbuild leaves an import() of an external package as it is, which vm.Script cannot run (it has no
// module loader): each becomes the program's require, as esbuild writes an import() of a bundled
// CommonJS module (the packages' CommonJS builds mark themselves __esModule: the same default export).
const program = core.outputFiles[0].text.replace(/\bimport\(("[^"]+")\)/g, (all, id) => (deferredIds.includes(JSON.parse(id)) ? `Promise.resolve().then(()=>require(${id}))` : all));
const leftImport = deferredIds.find((id) => program.includes(`import(${JSON.stringify(id)}`) || program.includes(`import('${id}'`));
if (leftImport) throw new Error(`the bundled program has an import() of ${leftImport} that vm.Script cannot run`);
const stray = deferredIds.filter((id) => !DEFERRED.some((p) => id === p || id.startsWith(`${p}/`)));
if (stray.length > 0) throw new Error(`the program requires packages it does not bundle: ${stray.join(", ")}`);
// The deferred program: a function from those names to the modules, each evaluated when first asked for.
const deferred = await build({
  ...common,
  stdin: {
    contents: `const modules = {${deferredIds.map((id) => `${JSON.stringify(id)}: () => require(${JSON.stringify(id)})`).join(", ")}};\nmodule.exports = (id) => modules[id]();\n`,
    resolveDir: ".",
    sourcefile: "deferred-modules.js",
  },
  // Each package as the program imported it (its ES module build, which esbuild bundled before the
  // split), not its CommonJS build, which is larger (nearly twice the bytes in all).
  plugins: [
    {
      name: "deferred-as-imported",
      setup(b) {
        b.onResolve({ filter: /.*/ }, (args) => {
          if (args.importer !== resolve("deferred-modules.js") || args.pluginData?.asImported) return undefined;
          return b.resolve(args.path, { kind: "import-statement", resolveDir: args.resolveDir, pluginData: { asImported: true } });
        });
      },
    },
  ],
  metafile: true,
});
const deferredProgram = deferred.outputFiles[0].text;
// A package in both would be two copies of it, each with its own classes and state.
const packages = (meta) => new Set(Object.keys(meta.inputs).flatMap((f) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(f)?.[1] ?? []));
const deferredPackages = packages(deferred.metafile);
const both = [...packages(core.metafile)].filter((p) => deferredPackages.has(p));
if (both.length > 0) throw new Error(`packages bundled in both the program and the deferred program: ${both.join(", ")}`);
// The loader reads its file as Latin-1 (the fastest decoding): the program must be ASCII, as esbuild
// writes it except inside a regular expression literal (write \uXXXX there).
const nonAscii = /[^\x00-\x7f]/.exec(program);
if (nonAscii) throw new Error(`the bundled program has a non-ASCII character: ${JSON.stringify(program.slice(Math.max(0, nonAscii.index - 60), nonAscii.index + 10))}`);
// Inside the comment the program must have no "*/": each one is in a string or template (the glob
// examples of the tool descriptions), written "*\/" there, the same text. esbuild printing both alike
// proves it: it writes a string's "\/" as "/", and a regular expression or a tagged template as it is.
// So the loader takes the program as it stands in the source Node compiled, with no copy to undo an
// escape (a third of a megabyte a start allocated and collected).
const safeProgram = program.replaceAll("*/", "*\\/");
const print = async (code) => (await transform(code, { minify: true, logLevel: "silent" })).code;
if (safeProgram !== program && (await print(safeProgram)) !== (await print(program))) throw new Error('a "*/" of the bundled program is not in a string or an untagged template: it cannot go into a comment');
const loader = readFileSync(new URL("./bundle-loader.js", import.meta.url), "utf8");
const key = createHash("sha256").update(program).update("\0").update(deferredProgram).digest("hex").slice(0, 16);
// The deferred program, wrapped as the program is, compressed (Brotli: a third of the bytes every start
// reads) and in Base64, which has no "*/", into a comment in the body of deferredText, before programText.
const deferredNonAscii = /[^\x00-\x7f]/.exec(deferredProgram);
if (deferredNonAscii) throw new Error(`the deferred program has a non-ASCII character: ${JSON.stringify(deferredProgram.slice(Math.max(0, deferredNonAscii.index - 60), deferredNonAscii.index + 10))}`);
const deferredWrapped = Buffer.from(`(function (exports, require, module, __filename, __dirname) {${deferredProgram}\n})`, "utf8");
const packed = brotliCompressSync(deferredWrapped, { params: { [zlib.BROTLI_PARAM_QUALITY]: 11, [zlib.BROTLI_PARAM_SIZE_HINT]: deferredWrapped.length } }).toString("base64");
// The shebang makes the bundle the npm package's `sly-agent-q-server` bin.
// The program goes wrapped as a CommonJS module's function into a comment in the body of programText
// (the loader takes it from there with Function.prototype.toString, without reading the file again).
const wrapped = `(function (exports, require, module, __filename, __dirname) {${safeProgram}\n})`;
const filledLoader = loader.replace("__PROGRAM_KEY__", key).replace('["__DEFERRED_IDS__"]', JSON.stringify(deferredIds)).replace('"__DEFERRED_LENGTH__"', String(deferredWrapped.length));
const out = `#!/usr/bin/env node\n${filledLoader}\nfunction deferredText() {/*DEFERRED\n${packed}\n*/}\nfunction programText() {/*PROGRAM\n${wrapped}\n*/}\n`;
// dist/ is not tracked: a fresh clone has none. Written aside and renamed, so that a server starting
// meanwhile reads the old bundle or the new one, never half of one. The aside name is this process's
// own: two builds at once (each `make run` builds; make test runs two suites at once) would otherwise
// write the same file and the second rename find it gone.
mkdirSync("dist", { recursive: true });
const aside = `dist/sly-agent-q-server.js.${process.pid}.tmp`;
writeFileSync(aside, out);
renameSync(aside, "dist/sly-agent-q-server.js");

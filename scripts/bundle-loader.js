// The bundle's loader: scripts/build.mjs puts the server's program (CommonJS, minified) in a comment at
// the end of this file and its hash into PROGRAM_KEY. It compiles the program with V8's code cache,
// kept in the user's cache directory ($XDG_CACHE_HOME/sly-agent-q, else ~/.cache/sly-agent-q): a start
// with the cache skips parsing and compiling what the first start compiled, which was most of a start's
// own time. The cache is written once per program, V8 version, architecture and way of running (the
// server, the MCP stdio shim), when the program's start is done, atomically, readable by the user
// alone. V8 refuses a cache of another program, V8 or flags; the program then runs compiled afresh and
// writes the cache again, and runs compiled afresh when the cache cannot be read or written.
// NODE_DISABLE_COMPILE_CACHE (Node's own switch for its cache) turns it off.
//
// This file is run as CommonJS (the bundle alone, or in the Emacs package) or as an ES module (under a
// package.json of "type": "module"): it has no import or export statement and no top-level await, and
// takes the built-in modules from whatever the Node at hand offers.

const PROGRAM_KEY = "__PROGRAM_KEY__";

function runProgram(fs, path, os, vm, nodeModule, self) {
  const filename = path.resolve(self);
  // The program: the comment that ends the file, its "*/" written "*\x01/" there.
  const text = fs.readFileSync(filename, "latin1");
  const mark = "/*" + "PROGRAM\n";
  const program = text.slice(text.indexOf(mark) + mark.length, text.lastIndexOf("\n*/")).replaceAll("*\x01/", "*/");
  const cacheDir = process.env.XDG_CACHE_HOME && path.isAbsolute(process.env.XDG_CACHE_HOME) ? process.env.XDG_CACHE_HOME : path.join(os.homedir(), ".cache");
  const dir = path.join(cacheDir, "sly-agent-q");
  // The cache is code this process runs: only from a directory and a file of this user's that no one
  // else may write. A directory that fails is neither read nor written; a file that fails is replaced.
  const ours = (st) => typeof process.getuid !== "function" || (st.uid === process.getuid() && (st.mode & 0o022) === 0);
  let useCache = !process.env.NODE_DISABLE_COMPILE_CACHE;
  if (useCache) {
    try {
      useCache = ours(fs.statSync(dir));
    } catch {
      // none yet: made 0700 when the cache is written
    }
  }
  // A cache per way of running: the MCP stdio shim's start compiles other functions than the server's.
  // V8's version names the cache (node:v8's cachedDataVersionTag, which covers the flags too, costs a
  // start more to load than it saves: a cache of other flags is refused and written again).
  const prefix = `server-${PROGRAM_KEY}-${process.versions.v8.replace(/[^0-9a-z]+/gi, "_")}-${process.arch}-`;
  const file = path.join(dir, `${prefix}${process.argv.includes("--mcp-stdio") ? "mcp-stdio" : "stdio"}.v8cache`);
  let cachedData;
  if (useCache) {
    let fd;
    try {
      fd = fs.openSync(file, "r");
      if (ours(fs.fstatSync(fd))) cachedData = fs.readFileSync(fd);
    } catch {
      cachedData = undefined; // none yet, or unreadable: compiled afresh
    } finally {
      if (fd !== undefined) fs.closeSync(fd);
    }
  }
  const script = new vm.Script(`(function (exports, require, module, __filename, __dirname) {${program}\n})`, { filename, cachedData });
  if (useCache && (cachedData === undefined || script.cachedDataRejected)) {
    // Written when the program says its start is done (server/start-done.ts): the cache then holds
    // the functions the start compiled too, not only the top level.
    const hook = Symbol.for("sly-agent-q.startDone");
    globalThis[hook] = () => {
      delete globalThis[hook];
      const tmp = `${file}.${process.pid}.tmp`;
      try {
        const data = script.createCachedData();
        fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
        fs.writeFileSync(tmp, data, { mode: 0o600 });
        fs.renameSync(tmp, file);
        // Other versions' caches go once a week old: two versions in use side by side (a package and a
        // checkout) do not throw each other's away at every start.
        const weekAgo = Date.now() - 7 * 24 * 3600 * 1000;
        for (const f of fs.readdirSync(dir)) {
          const other = path.join(dir, f);
          if (/^server-[0-9a-f]+-[\w-]+\.v8cache$/.test(f) && !f.startsWith(prefix) && fs.statSync(other).mtimeMs < weekAgo) fs.rmSync(other, { force: true });
        }
      } catch {
        try {
          fs.rmSync(tmp, { force: true });
        } catch {
          // nothing more to do: the next start compiles afresh
        }
      }
    };
  }
  const module = { exports: {} };
  script.runInThisContext()(module.exports, nodeModule.createRequire(filename), module, filename, path.dirname(filename));
}

// The file's own name: CommonJS has it; as an ES module this file is the program node was asked to run.
const self = typeof __filename === "string" ? __filename : process.argv[1];
if (typeof process.getBuiltinModule === "function") {
  const get = process.getBuiltinModule;
  runProgram(get("node:fs"), get("node:path"), get("node:os"), get("node:vm"), get("node:module"), self);
} else if (typeof require === "function") {
  runProgram(require("node:fs"), require("node:path"), require("node:os"), require("node:vm"), require("node:module"), self);
} else {
  // An ES module on a Node before 20.16: the built-ins come a moment later.
  Promise.all([import("node:fs"), import("node:path"), import("node:os"), import("node:vm"), import("node:module")]).then(([fs, path, os, vm, nodeModule]) =>
    runProgram(fs, path, os, vm, nodeModule, self),
  );
}

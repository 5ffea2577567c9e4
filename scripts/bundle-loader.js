// The bundle's loader: scripts/build.mjs puts the server's program (CommonJS, minified) in a comment at
// the end of this file and its hash into PROGRAM_KEY. It compiles the program with V8's code cache, kept in the user's cache
// directory ($XDG_CACHE_HOME/sly-agent-q, else ~/.cache/sly-agent-q): a start with the cache skips
// parsing and compiling what the last start compiled, which was most of a start's own time. The cache
// is written once per program and V8 (its version tag covers the V8 version and flags), atomically,
// readable by the user alone; V8 refuses a cache of another program or V8, and the program then runs
// compiled afresh, as it does when the cache cannot be read or written.
// NODE_DISABLE_COMPILE_CACHE (Node's own switch for its cache) turns it off.
//
// This file is run as CommonJS (the bundle alone, or in the Emacs package) or as an ES module (under a
// package.json of "type": "module"): it has no import or export statement and no top-level await, and
// takes the built-in modules from whatever the Node at hand offers.

const PROGRAM_KEY = "__PROGRAM_KEY__";

function runProgram(fs, path, os, v8, vm, nodeModule, self) {
  const filename = path.resolve(self);
  // The program: the comment that ends the file, its "*/" written "*\x01/" there.
  const text = fs.readFileSync(filename, "latin1");
  const mark = "/*" + "PROGRAM\n";
  const program = text.slice(text.indexOf(mark) + mark.length, text.lastIndexOf("\n*/")).replaceAll("*\x01/", "*/");
  const cacheDir = process.env.XDG_CACHE_HOME && path.isAbsolute(process.env.XDG_CACHE_HOME) ? process.env.XDG_CACHE_HOME : path.join(os.homedir(), ".cache");
  const dir = path.join(cacheDir, "sly-agent-q");
  const useCache = !process.env.NODE_DISABLE_COMPILE_CACHE;
  const file = path.join(dir, `server-${PROGRAM_KEY}-${v8.cachedDataVersionTag().toString(16)}.v8cache`);
  let cachedData;
  if (useCache) {
    try {
      cachedData = fs.readFileSync(file);
    } catch {
      cachedData = undefined; // none yet, or unreadable: compiled afresh
    }
  }
  const script = new vm.Script(`(function (exports, require, module, __filename, __dirname) {${program}\n})`, { filename, cachedData });
  if (useCache && (cachedData === undefined || script.cachedDataRejected)) {
    // Written once the start has compiled what it needs (the cache then holds those functions too):
    // a second after the start, or at exit when that comes first.
    let saved = false;
    const save = () => {
      if (saved) return;
      saved = true;
      const tmp = `${file}.${process.pid}.tmp`;
      try {
        const data = script.createCachedData();
        fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
        fs.writeFileSync(tmp, data, { mode: 0o600 });
        fs.renameSync(tmp, file);
        // The caches of earlier versions go: one program's cache is kept.
        for (const f of fs.readdirSync(dir)) {
          if (/^server-[0-9a-f]+-[0-9a-f]+\.v8cache$/.test(f) && path.join(dir, f) !== file) fs.rmSync(path.join(dir, f), { force: true });
        }
      } catch {
        try {
          fs.rmSync(tmp, { force: true });
        } catch {
          // nothing more to do: the next start compiles afresh
        }
      }
    };
    setTimeout(save, 1000).unref();
    process.once("exit", save);
  }
  const module = { exports: {} };
  script.runInThisContext()(module.exports, nodeModule.createRequire(filename), module, filename, path.dirname(filename));
}

// The file's own name: CommonJS has it; as an ES module this file is the program node was asked to run.
const self = typeof __filename === "string" ? __filename : process.argv[1];
if (typeof process.getBuiltinModule === "function") {
  const get = process.getBuiltinModule;
  runProgram(get("node:fs"), get("node:path"), get("node:os"), get("node:v8"), get("node:vm"), get("node:module"), self);
} else if (typeof require === "function") {
  runProgram(require("node:fs"), require("node:path"), require("node:os"), require("node:v8"), require("node:vm"), require("node:module"), self);
} else {
  // An ES module on a Node before 20.16: the built-ins come a moment later.
  Promise.all([import("node:fs"), import("node:path"), import("node:os"), import("node:v8"), import("node:vm"), import("node:module")]).then(([fs, path, os, v8, vm, nodeModule]) =>
    runProgram(fs, path, os, v8, vm, nodeModule, self),
  );
}

// The bundle's loader: scripts/build.mjs puts the server's program (CommonJS, minified) in a comment at
// the end of this file and its hash into PROGRAM_KEY. It compiles the program with V8's code cache,
// kept in the user's cache directory ($XDG_CACHE_HOME/sly-agent-q, else ~/.cache/sly-agent-q): a start
// with the cache skips parsing and compiling what the first start compiled, which was most of a start's
// own time. The cache is written once per program, V8 version, architecture and way of running (the
// server, the MCP stdio shim), when the program's start is done, atomically, readable by the user
// alone. V8 refuses a cache of another V8 or other flags; the loader's own hash refuses a damaged one
// or another program's (V8 checks only the source's length); the program then runs compiled afresh
// and writes the cache again, and runs compiled afresh when the cache cannot be read or written.
// NODE_DISABLE_COMPILE_CACHE (Node's own switch for its cache) turns it off. The packages a start never
// evaluates (the SDKs, Ajv) are a second program, Brotli-compressed in a comment of deferredText: it is
// decompressed and compiled, with a cache of its own under the same rules, when the program first
// requires one of them, so a start reads, decodes and deserializes less than half of what it did.
//
// This file is run as CommonJS (the bundle alone, or in the Emacs package) or as an ES module (under a
// package.json of "type": "module"): it has no import or export statement and no top-level await, and
// takes the built-in modules from whatever the Node at hand offers.

const PROGRAM_KEY = "__PROGRAM_KEY__";
// The names of the packages the program requires from the deferred program (scripts/build.mjs).
const DEFERRED_IDS = ["__DEFERRED_IDS__"];
// Its length, decompressed (ASCII, as the program): decompressed into one buffer of that size, no copy.
const DEFERRED_LENGTH = "__DEFERRED_LENGTH__";

// A cache file: MAGIC, then the CRC-32 of the cache's name (which holds PROGRAM_KEY) and of V8's data,
// then V8's data. V8 checks a cache's version, flags and source length but, in release builds, not its
// data: one damaged byte crashed every start. The check refuses a damaged file and another program's.
// A CRC-32 (node:zlib's, native; the first four bytes of a SHA-256 on a Node before 20.15, which has
// none): node:crypto, for the SHA-256 this was, cost a start 3-6 ms to load, and the program loads it
// only when it first needs it. Nothing here is a secret: whoever can write the file can write a hash.
const MAGIC = "SAQV8C2\n";
const HEADER = MAGIC.length + 4;
// A file, a directory or anything else at the cache's name larger than this is not a cache of ours.
const MAX_CACHE = 64 << 20;

function runProgram(fs, path, os, vm, requireFor, zlib, self) {
  const filename = path.resolve(self);
  const baseRequire = requireFor(filename);
  // node:crypto, loaded at its first use: by the loader (a cache's temporary name), by the program
  // (through the stand-in its require gives, below), by the deferred program (its own require).
  let crypto;
  const loadCrypto = () => (crypto ??= baseRequire("node:crypto"));
  // The program, wrapped as a CommonJS module's function: the comment in the body of programText,
  // which scripts/build.mjs declares at the end of this file (with no "*/" in it: see there). Taken
  // from the source Node compiled (Function.prototype.toString: a slice of it, not a copy), not read
  // from the file again: reading and decoding 1.3 MB a second time, and the copy the wrapper's
  // concatenation made, were a tenth of a start's own time on a loaded machine. It is also the very
  // text Node ran, whatever has been written at the file's name since.
  const text = programText.toString();
  const mark = "/*" + "PROGRAM\n";
  const program = text.slice(text.indexOf(mark) + mark.length, text.lastIndexOf("\n*/"));
  // Only an absolute directory: a relative one (or an empty HOME) would read code from the working directory.
  const xdg = process.env.XDG_CACHE_HOME;
  const home = os.homedir();
  const cacheDir = xdg && path.isAbsolute(xdg) ? xdg : home && path.isAbsolute(home) ? path.join(home, ".cache") : undefined;
  const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NONBLOCK, O_NOFOLLOW } = fs.constants;
  const nofollow = O_NOFOLLOW ?? 0;
  // The cache is code this process runs: only from a directory and a file of this user's that no one
  // else may write, never through a link (lstat, O_NOFOLLOW), and only while no one else can change
  // what the directory's path names (a TOCTOU: between the check and the open by path, whoever may
  // write a parent could swap the directory for a link, and the cache would be read from, or written
  // into, a directory of their choosing). Every directory above it, on the path as given and on the
  // real one, is root's or the user's (a link too: the owner of a link in /tmp may replace it) and
  // no one else may write it, unless it is sticky (/tmp: others may add names there, not replace
  // ours). With that, what was checked stays so. A directory that fails is neither read nor written
  // (checked again when writing: it may have come meanwhile); a file that fails is replaced.
  const uid = typeof process.getuid === "function" ? process.getuid() : undefined;
  const ours = (st) => uid === undefined || (st.uid === uid && (st.mode & 0o022) === 0);
  const steady = (st) => (st.uid === uid || st.uid === 0) && (st.isSymbolicLink() || (st.mode & 0o022) === 0 || (st.mode & 0o1000) !== 0);
  // P and the directories above it, by lstat (a handful of calls): false when one is not steady,
  // else whether one of them is a link.
  const steadyUp = (p) => {
    let link = false;
    for (let q = p; ; q = path.dirname(q)) {
      const st = fs.lstatSync(q);
      if (!steady(st)) return false;
      link ||= st.isSymbolicLink();
      if (path.dirname(q) === q) return { link };
    }
  };
  // Whether no one else can change what the path P names: as given, and as it really is.
  const steadyPath = (p) => {
    if (uid === undefined) return true;
    try {
      const given = steadyUp(p);
      return given !== false && (!given.link || steadyUp(fs.realpathSync.native(p)) !== false);
    } catch {
      return false;
    }
  };
  const dirIsOurs = () => {
    try {
      if (!steadyPath(path.dirname(dir))) return false;
      const st = fs.lstatSync(dir);
      return st.isDirectory() && ours(st);
    } catch {
      return false;
    }
  };
  // Whether the cache's directory may be made: the nearest directory there is above it is on a steady path.
  const mayMakeDir = () => {
    for (let q = path.dirname(dir); ; q = path.dirname(q)) {
      try {
        fs.lstatSync(q);
      } catch (e) {
        if (e.code === "ENOENT" && path.dirname(q) !== q) continue;
        return false;
      }
      return steadyPath(q);
    }
  };
  // unlinkSync, not rmSync: every name removed is a file's, and rmSync loads Node's rimraf (a few ms
  // of the start when the trial mark goes as the first answer is made).
  const remove = (f) => {
    try {
      fs.unlinkSync(f);
    } catch {
      // none there, or the next start tries again
    }
  };
  const dir = cacheDir === undefined ? undefined : path.join(cacheDir, "sly-agent-q");
  let useCache = !process.env.NODE_DISABLE_COMPILE_CACHE && dir !== undefined;
  let dirExists = false;
  if (useCache) {
    try {
      fs.lstatSync(dir);
      dirExists = true;
      useCache = dirIsOurs();
    } catch {
      // none yet: made 0700 when the cache is written, where the path to it is steady
    }
  }
  // A cache per way of running: the MCP stdio shim's start compiles other functions than the server's.
  // V8's version names the cache (node:v8's cachedDataVersionTag, which covers the flags too, costs a
  // start more to load than it saves: a cache of other flags is refused and written again).
  const prefix = `server-${PROGRAM_KEY}-${process.versions.v8.replace(/[^0-9a-z]+/gi, "_")}-${process.arch}-`;
  const way = process.argv.includes("--mcp-stdio") ? "mcp-stdio" : "stdio";
  // SOURCE compiled as the program of this way of running, or its deferred part (ROLE "-deferred"),
  // with the cache of that name when there is a good one; what to do when its start is done.
  const compile = (source, role) => {
    const base = `${prefix}${way}${role}.v8cache`;
    const file = useCache ? path.join(dir, base) : undefined;
    const digest = (data) => {
      const check = Buffer.alloc(4);
      if (typeof zlib.crc32 === "function") check.writeUInt32BE(zlib.crc32(data, zlib.crc32(base)));
      else loadCrypto().createHash("sha256").update(base).update(data).digest().copy(check, 0, 0, 4);
      return check;
    };
    let cachedData;
    let trial;
    if (useCache && dirExists) {
      // A start that used the cache leaves BASE.<pid>.trial until its start is done: one of a process
      // that is gone crashed or was killed on the way, perhaps by the cache (a V8 bug, damage the hash
      // missed). That cache is not used again: no cache can stop every start.
      let failed = false;
      try {
        for (const f of fs.readdirSync(dir)) {
          const m = f.startsWith(base) ? /^\.(\d+)\.trial$/.exec(f.slice(base.length)) : null;
          if (!m) continue;
          let alive = true;
          try {
            process.kill(Number(m[1]), 0);
          } catch (e) {
            alive = e.code !== "ESRCH";
          }
          if (!alive) {
            failed = true;
            remove(path.join(dir, f));
          }
        }
      } catch {
        failed = true;
      }
      if (failed) remove(file);
      else {
        // Non-blocking and not through a link: a FIFO or a link at the name does not hang or mislead the start.
        let fd;
        try {
          fd = fs.openSync(file, O_RDONLY | (O_NONBLOCK ?? 0) | nofollow);
          const st = fs.fstatSync(fd);
          if (st.isFile() && ours(st) && st.size > HEADER && st.size <= Math.min(MAX_CACHE, 4 * source.length + HEADER)) {
            const all = Buffer.alloc(st.size);
            let n = 0;
            while (n < all.length) {
              const r = fs.readSync(fd, all, n, all.length - n, n);
              if (r === 0) break;
              n += r;
            }
            const data = all.subarray(HEADER);
            if (n === all.length && all.toString("latin1", 0, MAGIC.length) === MAGIC && digest(data).equals(all.subarray(MAGIC.length, HEADER))) cachedData = data;
          }
        } catch {
          cachedData = undefined; // none yet, or unreadable: compiled afresh
        } finally {
          if (fd !== undefined) fs.closeSync(fd);
        }
        if (cachedData !== undefined) {
          trial = `${file}.${process.pid}.trial`;
          try {
            fs.closeSync(fs.openSync(trial, O_WRONLY | O_CREAT | O_EXCL | nofollow, 0o600));
          } catch {
            // no trial without its mark: compiled afresh
            cachedData = undefined;
            trial = undefined;
          }
        }
      }
    }
    let script;
    try {
      script = new vm.Script(source, { filename, cachedData });
    } catch (e) {
      if (trial !== undefined) remove(trial); // a compile that threw is no crash the cache caused
      throw e;
    }
    const write = useCache && (cachedData === undefined || script.cachedDataRejected);
    if (trial !== undefined) {
      // A run that ends well before its start is done (--version) passed its trial too.
      process.on("exit", (code) => {
        if (code === 0 && trial !== undefined) remove(trial);
      });
    }
    // The trial passed, the cache written when there was none: as the start's first answer is made.
    const done = (beforeAnswer) => {
      if (trial !== undefined) {
        remove(trial);
        trial = undefined;
      }
      if (!write) return;
      const writeNow = () => writeCache(fs, path, loadCrypto, script, dir, file, prefix, digest, mayMakeDir, dirIsOurs, remove, O_WRONLY | O_CREAT | O_EXCL | nofollow);
      // The server's: after the answer is written (the hook is called as it is being made), with what
      // the answer compiled. The MCP stdio shim's before its answer: a client may kill it as soon as it
      // has the answer, which left no cache at all (every start of the shim compiled afresh).
      if (beforeAnswer) writeNow();
      else setImmediate(writeNow);
    };
    return { script, done };
  };
  const main = compile(program, "");
  // The deferred program (scripts/build.mjs): the packages a start does not need, compressed in the
  // comment of deferredText, decompressed and compiled, with a cache of their own, when the program
  // first requires one of them. Its cache is done with the start's when the start needed it (the MCP
  // stdio shim), else right after the request that needed it first has run its first step.
  let deferred;
  let startIsDone = false;
  const loadDeferred = () => {
    if (deferred !== undefined) return deferred;
    const packed = deferredText.toString();
    const mark = "/*" + "DEFERRED\n";
    let part;
    const m = { exports: {} };
    try {
      const source = zlib.brotliDecompressSync(Buffer.from(packed.slice(packed.indexOf(mark) + mark.length, packed.lastIndexOf("\n*/")), "base64"), { chunkSize: DEFERRED_LENGTH + 1 }).toString("latin1");
      part = compile(source, "-deferred");
      part.script.runInThisContext()(m.exports, baseRequire, m, filename, path.dirname(filename));
    } catch (e) {
      // Said as what it is (the program's own packages), not as the failure of the request that
      // needed them (server/llm/errors.ts says that nothing was sent). The next require tries again.
      const err = new Error(`The server's bundled packages (the providers' SDKs, the MCP SDK, Ajv) could not be loaded: ${e?.message ?? String(e)}`, { cause: e });
      err.code = "ERR_SAQ_BUNDLED_PACKAGES";
      throw err;
    }
    deferred = m.exports;
    if (startIsDone) setImmediate(() => part.done(false));
    else deferredDone = part.done;
    return deferred;
  };
  let deferredDone;
  const deferredIds = new Set(DEFERRED_IDS);
  // node:crypto for the program: a stand-in that loads it at the first use of one of its members (the
  // program's modules and vscode-jsonrpc require it as they are evaluated, and use it later).
  const lazyCrypto = new Proxy(
    {},
    {
      get: (_, k) => loadCrypto()[k],
      has: (_, k) => k in loadCrypto(),
      ownKeys: () => Reflect.ownKeys(loadCrypto()),
      getOwnPropertyDescriptor: (_, k) => {
        const d = Reflect.getOwnPropertyDescriptor(loadCrypto(), k);
        return d && { ...d, configurable: true };
      },
    },
  );
  const programRequire = Object.assign((id) => (deferredIds.has(id) ? loadDeferred()(id) : id === "node:crypto" || id === "crypto" ? lazyCrypto : baseRequire(id)), {
    resolve: baseRequire.resolve,
    main: baseRequire.main,
    cache: baseRequire.cache,
  });
  if (useCache) {
    // Written when the program says its start is done (server/start-done.ts): the cache then holds
    // the functions the start compiled too, not only the top level.
    const hook = Symbol.for("sly-agent-q.startDone");
    globalThis[hook] = (beforeAnswer) => {
      delete globalThis[hook];
      startIsDone = true;
      main.done(beforeAnswer);
      if (deferredDone !== undefined) deferredDone(beforeAnswer);
    };
  }
  const module = { exports: {} };
  main.script.runInThisContext()(module.exports, programRequire, module, filename, path.dirname(filename));
}

function writeCache(fs, path, loadCrypto, script, dir, file, prefix, digest, mayMakeDir, dirIsOurs, remove, createFlags) {
  // Into a directory of this user's that no one else may write, on a path no one else can change,
  // checked now: another user may have made it (a shared XDG_CACHE_HOME) since the start looked. The
  // temporary file has a name no one can guess and is made afresh, never through a link, written
  // whole (a full disk writes fewer bytes and says nothing: that file is removed, never renamed in),
  // then renamed over the cache.
  let tmp;
  try {
    if (!mayMakeDir()) return;
    try {
      fs.mkdirSync(path.dirname(dir), { recursive: true, mode: 0o700 });
      fs.mkdirSync(dir, { mode: 0o700 });
    } catch {
      // there already (checked just below), or not to be made
    }
    if (!dirIsOurs()) return;
    const data = script.createCachedData();
    tmp = `${file}.${loadCrypto().randomBytes(8).toString("hex")}.tmp`;
    const fd = fs.openSync(tmp, createFlags, 0o600);
    try {
      const all = Buffer.concat([Buffer.from(MAGIC, "latin1"), digest(data), data]);
      for (let n = 0; n < all.length; ) {
        const w = fs.writeSync(fd, all, n, all.length - n, n);
        if (!(w > 0)) throw new Error("the cache could not be written whole");
        n += w;
      }
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
    tmp = undefined;
    // Other versions' caches go once a week old: two versions in use side by side (a package and a
    // checkout) do not throw each other's away at every start. What a killed process left on the way
    // (a temporary file, a trial's mark) goes once an hour old.
    const weekAgo = Date.now() - 7 * 24 * 3600 * 1000;
    const hourAgo = Date.now() - 3600 * 1000;
    for (const f of fs.readdirSync(dir)) {
      const other = path.join(dir, f);
      const stale = /^server-[0-9a-f]+-[\w-]+\.v8cache$/.test(f) && !f.startsWith(prefix) ? weekAgo : /^server-[0-9a-f]+-[\w-]+\.v8cache\.[0-9a-f]+\.(tmp|trial)$/.test(f) ? hourAgo : undefined;
      if (stale !== undefined && fs.lstatSync(other).mtimeMs < stale) remove(other);
    }
  } catch {
    if (tmp !== undefined) remove(tmp); // the next start compiles afresh
  }
}

// The file's own name: CommonJS has it; as an ES module this file is the program node was asked to run.
const self = typeof __filename === "string" ? __filename : process.argv[1];
// The program's require: as CommonJS, this file's own (the program's file is this file); as an ES
// module, one made for it by node:module, which a CommonJS start does not load (a millisecond of it).
const ownRequire = typeof require === "function" ? require : undefined;
if (typeof process.getBuiltinModule === "function") {
  const get = process.getBuiltinModule;
  const requireFor = ownRequire ? () => ownRequire : (f) => get("node:module").createRequire(f);
  runProgram(get("node:fs"), get("node:path"), get("node:os"), get("node:vm"), requireFor, get("node:zlib"), self);
} else if (ownRequire) {
  runProgram(require("node:fs"), require("node:path"), require("node:os"), require("node:vm"), () => ownRequire, require("node:zlib"), self);
} else {
  // An ES module on a Node before 20.16: the built-ins come a moment later.
  Promise.all([import("node:fs"), import("node:path"), import("node:os"), import("node:vm"), import("node:module"), import("node:zlib")]).then(([fs, path, os, vm, nodeModule, zlib]) =>
    runProgram(fs, path, os, vm, (f) => nodeModule.createRequire(f), zlib, self),
  );
}

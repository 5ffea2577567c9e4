// The bundle's loader (scripts/bundle-loader.js) keeps V8's code cache of the program and writes it when
// the program says its start is done: the cache then holds every function a start compiles, and a run
// that only prints its version writes none. Run from source (the tests import it), nobody listens.

const HOOK = Symbol.for("sly-agent-q.startDone");

/** Called once the first request a start is for has been answered (initialize; the shim's tools/list). */
export function startDone(): void {
  const hook = (globalThis as Record<symbol, unknown>)[HOOK];
  // After the answer is written: the cache is a few milliseconds' work the client need not wait for.
  if (typeof hook === "function") setImmediate(() => (hook as () => void)());
}

// The bundle's loader (scripts/bundle-loader.js) keeps V8's code cache of the program and writes it when
// the program says its start is done: the cache then holds every function a start compiles, and a run
// that only prints its version writes none. Run from source (the tests import it), nobody listens.

const HOOK = Symbol.for("sly-agent-q.startDone");

/** Called once the first request a start is for is being answered (initialize; the shim's tools/list). */
export function startDone(): void {
  const hook = (globalThis as Record<symbol, unknown>)[HOOK];
  // At once: the loader clears its trial mark now (a client may kill the process right after the
  // answer) and writes the cache after the answer, a few milliseconds' work the client need not wait
  // for. An MCP client that kills the shim right after tools/list may thus leave no cache: the next
  // start compiles afresh and tries again.
  if (typeof hook === "function") (hook as () => void)();
}

// The bundle's loader (scripts/bundle-loader.js) keeps V8's code cache of the program and writes it when
// the program says its start is done: the cache then holds every function a start compiles, and a run
// that only prints its version writes none. Run from source (the tests import it), nobody listens.

const HOOK = Symbol.for("sly-agent-q.startDone");

/**
 * Called once the first request a start is for is being answered (initialize; the shim's tools/list).
 * The loader clears its trial mark at once (a client may kill the process right after the answer) and
 * writes the cache, when there is none yet, after the answer (a few milliseconds' work the client need
 * not wait for, and the answer's own functions in it), or BEFORE-ANSWER before it: for the MCP stdio
 * shim, whose client may kill it as soon as it has the answer (it kept no cache then).
 */
export function startDone(beforeAnswer = false): void {
  const hook = (globalThis as Record<symbol, unknown>)[HOOK];
  if (typeof hook === "function") (hook as (beforeAnswer: boolean) => void)(beforeAnswer);
}

// Node's own modules that cost a start much to load and that only some tool calls need, loaded at the
// first call that needs them: node:child_process (it brings net and dgram) for rg and git, and
// node:worker_threads for search_project. In the bundle (CommonJS, compiled by scripts/bundle-loader.js
// through vm.Script, where import() has no loader and fails) by require; from source (ES modules, as
// the tests run it) by import().

type ChildProcess = typeof import("node:child_process");
type WorkerThreads = typeof import("node:worker_threads");

export function loadChildProcess(): Promise<ChildProcess> {
  return typeof require === "function" ? Promise.resolve(require("node:child_process") as ChildProcess) : import("node:child_process");
}

export function loadWorkerThreads(): Promise<WorkerThreads> {
  return typeof require === "function" ? Promise.resolve(require("node:worker_threads") as WorkerThreads) : import("node:worker_threads");
}

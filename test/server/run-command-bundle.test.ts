// run_command through the real bundle, this test playing Emacs (the project root, the approvals): the
// user's settings arrive through the configuration (shell lines, the timeout, a :command rule), the
// provider's key never reaches a command's environment, and a server told to exit stops the commands
// still running.

import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { startBundle, type BundleProcess } from "./stdio-client.js";

const root = mkdtempSync(join(tmpdir(), "agent-q-bundle-run-"));
const started: BundleProcess[] = [];
const KEY = "sk-ant-bundle-" + "K".repeat(32);

afterAll(() => {
  for (const b of started) b.kill();
});

interface Result {
  success: boolean;
  content: string;
}

async function session(configuration: Record<string, unknown>) {
  const b = startBundle(["--stdio"], { ANTHROPIC_API_KEY: KEY, SOME_SETTING: KEY });
  started.push(b);
  const approvals: Record<string, unknown>[] = [];
  b.connection.onNotification("emacs/call", (p: { id: string; kind: string; params: { tool: string; arguments: Record<string, unknown> } }) => {
    if (p.kind === "approval") {
      approvals.push(p.params.arguments);
      void b.connection.sendNotification("emacs/reply", { id: p.id, result: { decision: "approved" } });
      return;
    }
    const content = p.params.tool === "current_directory" ? `Project root: ${root}/ (relative paths are resolved against it).` : undefined;
    void b.connection.sendNotification("emacs/reply", content === undefined ? { id: p.id, error: "no such tool here" } : { id: p.id, result: { content } });
  });
  await b.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: { tools: true, image: false, approvals: true }, configuration });
  const call = (args: Record<string, unknown>) => b.connection.sendRequest("tools/call", { name: "run_command", arguments: args }) as Promise<Result>;
  return { b, call, approvals };
}

it("takes the user's settings from the configuration: shell lines, the timeout, a :command rule", async () => {
  const off = await session({});
  expect((await off.call({ shell: "echo hi" })).content).toContain("Shell lines are off");
  const { call, approvals } = await session({ allowShellCommands: true, commandTimeoutMs: 1_000, permissionRules: [{ action: "allow", tool: "run_command", command: "echo allowed*" }] });
  const allowed = await call({ argv: ["echo", "allowed", "word"] });
  expect(allowed.content).toContain("allowed word");
  expect(approvals).toHaveLength(0);
  const line = await call({ shell: "echo a | tr a b" });
  expect(line.content).toMatch(/\nb\n?$/);
  expect(approvals).toHaveLength(1);
  expect(approvals[0]).toMatchObject({ command_line: "sh -c 'echo a | tr a b'", directory: root });
  const t = Date.now();
  const slow = await call({ argv: ["sleep", "30"] });
  expect(Date.now() - t).toBeLessThan(10_000);
  expect(slow.content).toContain("timed out after 1 s");
});

it("refuses a rule whose command it cannot read, naming it", async () => {
  const b = startBundle(["--stdio"]);
  started.push(b);
  await expect(b.connection.sendRequest("initialize", { clientInfo: { name: "test" }, capabilities: {}, configuration: { permissionRules: [{ action: "allow", command: "make 'test" }] } })).rejects.toThrow(/permissionRules\[0\]: command "make 'test": a ' is not closed/);
});

it("the provider's key is in no command's environment, whatever the variable holding it", async () => {
  const { call } = await session({});
  await call({ argv: ["sh", "-c", "env > env-dump"] });
  const dump = readFileSync(join(root, "env-dump"), "utf8");
  expect(dump).not.toContain(KEY);
  expect(dump).not.toContain("ANTHROPIC_API_KEY");
  expect(dump).not.toContain("SOME_SETTING");
});

/** Starts a command that runs for ever in a fresh session; its pid, once it runs. */
async function runningCommand(call: (args: Record<string, unknown>) => Promise<Result>, name: string): Promise<number> {
  const pidFile = join(root, name);
  void call({ argv: ["sh", "-c", `echo $$ > ${pidFile}; exec sleep 300`] }).catch(() => undefined);
  const end = Date.now() + 10_000;
  while (!(existsSync(pidFile) && readFileSync(pidFile, "utf8").endsWith("\n")) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  const pid = Number(readFileSync(pidFile, "utf8"));
  expect(() => process.kill(pid, 0)).not.toThrow();
  return pid;
}

/** Whether PID no longer runs: gone, or a zombie left to an init that does not reap. */
async function stopped(pid: number): Promise<boolean> {
  const end = Date.now() + 5_000;
  for (;;) {
    let state = "gone";
    try {
      state = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^\S+ \(.*\) /, "").slice(0, 1);
    } catch {
      // Gone.
    }
    if (state === "gone" || state === "Z") return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
}

it("a server ended by SIGHUP (Emacs exiting), SIGTERM or its closed stdin stops the commands still running", async () => {
  for (const how of ["SIGHUP", "SIGTERM", "eof"] as const) {
    const { b, call } = await session({});
    const pid = await runningCommand(call, `running-${how}`);
    if (how === "eof") b.child.stdin.end();
    else b.child.kill(how);
    await b.exited;
    expect(await stopped(pid), how).toBe(true);
  }
});

it("a server told to exit stops the commands still running", async () => {
  const { b, call } = await session({});
  const pidFile = join(root, "running-pid");
  void call({ argv: ["sh", "-c", `echo $$ > ${pidFile}; exec sleep 300`] }).catch(() => undefined);
  const end = Date.now() + 10_000;
  while (!(existsSync(pidFile) && readFileSync(pidFile, "utf8").endsWith("\n")) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  const pid = Number(readFileSync(pidFile, "utf8"));
  expect(() => process.kill(pid, 0)).not.toThrow();
  await b.connection.sendRequest("shutdown", null).catch(() => undefined);
  await b.connection.sendNotification("exit", null).catch(() => undefined);
  await b.exited;
  await new Promise((r) => setTimeout(r, 200));
  // Gone, or a zombie left to an init that does not reap (as in some containers): not running.
  let state = "gone";
  try {
    state = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^\S+ \(.*\) /, "").slice(0, 1);
  } catch {
    // Gone.
  }
  expect(["gone", "Z"]).toContain(state);
});

// run_command with real processes: exit status and signals, no standard input, output bounded to its
// head and tail, live output at a bounded rate, the user's timeout, a forked daemon that holds the
// pipes, cancellation of the whole process group, shell lines only when the user allows them.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor, type ExecuteOptions } from "../../server/tools/executor.js";
import { approvalParams } from "../../server/tools/approval.js";
import type { CommandSettings } from "../../server/tools/tool.js";
import { commandDirectory, killLeftovers, quoteWord } from "../../server/tools/project/command.js";
import { CORE_TOOLS, LeanToolSet, moreToolsSection } from "../../server/agent/tool-set.js";

const root = mkdtempSync(join(tmpdir(), "agent-q-run-"));
mkdirSync(join(root, "sub"));

function executor(commands: CommandSettings = {}) {
  return new Executor({ registry: createDefaultRegistry(), approve: async () => ({ decision: "approved" }), context: () => ({ projectRoot: root, commands }) });
}

async function run(args: Record<string, unknown>, commands: CommandSettings = {}, opts: ExecuteOptions = {}) {
  return executor(commands).execute({ id: `c${Math.random()}`, name: "run_command", arguments: args }, opts);
}

/** Whether process PID is alive (not a zombie). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

async function gone(pid: number, ms = 3_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !alive(pid);
}

describe("run_command", () => {
  it("is not in the lean set of small windows, and comes with add_tools' category shell", () => {
    const all = createDefaultRegistry().list({ includeAliases: false });
    expect(CORE_TOOLS).not.toContain("run_command");
    const lean = new LeanToolSet(all, []);
    expect(lean.current().map((t) => t.name)).not.toContain("run_command");
    expect(lean.offer("shell")).toEqual(["run_command"]);
    expect(lean.current().map((t) => t.name)).toContain("run_command");
    expect(moreToolsSection(all)).toContain("- shell: run_command");
  });

  it("runs argv in the project root: output of both streams, exit status, the exact command", async () => {
    const r = await run({ argv: ["sh", "-c", "pwd; echo to-err >&2; exit 3"] });
    expect(r.success).toBe(true);
    expect(r.content).toContain("$ sh -c 'pwd; echo to-err >&2; exit 3'");
    expect(r.content).toContain("exit status 3");
    expect(r.content).toContain(`\n${root}\n`);
    expect(r.content).toContain("to-err");
  });

  it("runs in a subdirectory, and says the signal that killed a command", async () => {
    const r = await run({ argv: ["sh", "-c", "pwd; kill -9 $$"], directory: "sub" });
    expect(r.content).toContain(join(root, "sub"));
    expect(r.content).toMatch(/killed by signal SIGKILL/);
  });

  it("gives no standard input: cat ends at once", async () => {
    const t = Date.now();
    const r = await run({ argv: ["cat"] });
    expect(r.content).toContain("exit status 0");
    expect(Date.now() - t).toBeLessThan(5_000);
  });

  it("an argv element is one argument, never parsed by a shell", async () => {
    const marker = join(root, "never");
    const r = await run({ argv: ["echo", `x; touch ${marker}`, "$(touch never2)"] });
    expect(r.content).toContain(`x; touch ${marker} $(touch never2)`);
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(join(root, "never2"))).toBe(false);
  });

  it("a shell line is refused unless the user allows shells, and runs when they do", async () => {
    const off = await run({ shell: "echo a | tr a b > piped.txt" });
    expect(off.success).toBe(false);
    expect(off.content).toContain("sly-agent-q-allow-shell-commands");
    expect(existsSync(join(root, "piped.txt"))).toBe(false);
    const on = await run({ shell: "echo a | tr a b > piped.txt" }, { allowShell: true });
    expect(on.content).toContain("exit status 0");
    expect(readFileSync(join(root, "piped.txt"), "utf8")).toBe("b\n");
  });

  it("keeps the head and tail of a large output with the count of what was cut, and shows it live at a bounded rate", async () => {
    const updates: { tail: string; total: number; at: number }[] = [];
    const t = Date.now();
    const r = await run({ argv: ["sh", "-c", "seq 1 2000000"] }, {}, { onOutput: (_c, tail, total) => updates.push({ tail, total, at: Date.now() }) });
    const took = Date.now() - t;
    expect(r.content).toContain("exit status 0");
    expect(r.content.length).toBeLessThan(30_000);
    expect(r.content).toMatch(/\n1\n2\n3\n/);
    expect(r.content).toMatch(/\n2000000\n?$/);
    expect(r.content).toMatch(/\[\.\.\. \d+ bytes \(about \d+ lines\) of output cut here/);
    // At most about four updates a second, each a bounded tail; the last one has the end.
    expect(updates.length).toBeGreaterThan(0);
    expect(updates.length).toBeLessThanOrEqual(Math.ceil(took / 250) + 2);
    expect(Math.max(...updates.map((u) => u.tail.length))).toBeLessThanOrEqual(4_000);
    expect(updates.at(-1)!.tail).toMatch(/2000000\n$/);
    expect(updates.at(-1)!.total).toBe(14_888_896);
  }, 60_000);

  it("stops a command that never ends at the user's timeout, with the output so far", async () => {
    const t = Date.now();
    const r = await run({ argv: ["sh", "-c", "echo begun; exec sleep 300"] }, { timeoutMs: 1_000 });
    expect(Date.now() - t).toBeLessThan(6_000);
    expect(r.content).toContain("timed out after 1 s");
    expect(r.content).toContain("begun");
  });

  it("stops a command that prints for ever at the timeout, its answer bounded", async () => {
    const r = await run({ argv: ["yes", "forever"] }, { timeoutMs: 1_500 });
    expect(r.content).toContain("timed out");
    expect(r.content.length).toBeLessThan(30_000);
  }, 20_000);

  it("does not wait for a daemon that keeps the pipes open, and stops it", async () => {
    const t = Date.now();
    const r = await run({ argv: ["sh", "-c", "sleep 300 & echo daemon=$!; exit 0"] });
    expect(Date.now() - t).toBeLessThan(5_000);
    expect(r.content).toContain("exit status 0");
    expect(r.content).toContain("kept its output open");
    const pid = Number(/daemon=(\d+)/.exec(r.content)![1]);
    expect(await gone(pid)).toBe(true);
  });

  it("stops a daemon that left the process group (setsid) and closed the pipes", async () => {
    const r = await run({ argv: ["sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo daemon=$!"] });
    expect(r.content).toContain("exit status 0");
    const pid = Number(/daemon=(\d+)/.exec(r.content)![1]);
    expect(await gone(pid)).toBe(true);
  });

  it("cancel stops the whole process group at once", async () => {
    const controller = new AbortController();
    const pidFile = join(root, "pids");
    const started = run({ argv: ["sh", "-c", `echo before-the-cancel; sleep 300 & echo $! > ${pidFile}; echo $$ >> ${pidFile}; wait`] }, {}, { signal: controller.signal });
    const end = Date.now() + 5_000;
    while (!(existsSync(pidFile) && readFileSync(pidFile, "utf8").split("\n").length > 2) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    const pids = readFileSync(pidFile, "utf8").trim().split("\n").map(Number);
    expect(pids.every(alive)).toBe(true);
    const t = Date.now();
    controller.abort();
    const r = await started;
    expect(Date.now() - t).toBeLessThan(2_000);
    expect(r.success).toBe(false);
    expect(r.content).toContain("cancelled by the user");
    // The output so far is the answer's, as at a timeout.
    expect(r.content).toContain("before-the-cancel");
    for (const pid of pids) expect(await gone(pid)).toBe(true);
  });

  it("a program that is not there: a clear error", async () => {
    const r = await run({ argv: ["no-such-program-xyz"] });
    expect(r.success).toBe(false);
    expect(r.content).toContain('No program "no-such-program-xyz"');
  });

  it("each rendered argv element is read back by bash as exactly that element", () => {
    const words = ["plain", "a b", "it's", "", "x\ny", "\u202Eevil", "tab\there", "back\\slash", "esc\u001b[31m", "tag\u{E0041}", "$(touch no)", "*", "~", "é"];
    const line = words.map(quoteWord).join(" ");
    const out = execFileSync("bash", ["-c", `printf '%s\\0' ${line}`], { cwd: root }).toString("utf8");
    expect(out.split("\0").slice(0, -1)).toEqual(words);
    expect(existsSync(join(root, "no"))).toBe(false);
    expect(line).not.toMatch(/[\n\u202E\u001b]/u);
  });

  it("renders odd argv elements unambiguously in the approval", async () => {
    let shown: Record<string, unknown> = {};
    const ex = new Executor({
      registry: createDefaultRegistry(),
      approve: async (req) => {
        shown = req.arguments;
        return { decision: "denied" };
      },
      context: () => ({ projectRoot: root }),
    });
    await ex.execute({ id: "q", name: "run_command", arguments: { argv: ["echo", "a b", "it's", "", "x\ny", "\u202Eevil"] } });
    expect(shown.command_line).toBe("echo 'a b' 'it'\\''s' '' $'x\\ny' $'\\u202Eevil'");
    expect(shown.directory).toBe(root);
    expect(shown.program).toBe("/usr/bin/echo");
    writeFileSync(join(root, "unused"), "");
  });
  it("kills what a server killed with SIGKILL left running (its mark names a server gone), never another running server's", async () => {
    const { spawn, spawnSync } = await import("node:child_process");
    const dead = spawnSync("true").pid!;
    const orphan = spawn("sleep", ["300"], { env: { ...process.env, SLY_AGENT_Q_RUN: `${dead}-${"a".repeat(24)}` }, stdio: "ignore", detached: true });
    // A mark of a server that runs (here the test's parent, which is alive).
    const other = spawn("sleep", ["300"], { env: { ...process.env, SLY_AGENT_Q_RUN: `${process.ppid}-${"b".repeat(24)}` }, stdio: "ignore", detached: true });
    try {
      await new Promise((r) => setTimeout(r, 200));
      expect(alive(orphan.pid!) && alive(other.pid!)).toBe(true);
      const killed = killLeftovers();
      expect(killed).toContain(orphan.pid);
      expect(await gone(orphan.pid!)).toBe(true);
      expect(alive(other.pid!)).toBe(true);
    } finally {
      orphan.kill("SIGKILL");
      other.kill("SIGKILL");
    }
  });
  it("its approval names the arguments it only shows, which Emacs does not offer for editing", () => {
    const tool = createDefaultRegistry().get("run_command")!;
    const params = approvalParams({ callId: "a", tool, arguments: { argv: ["make"], command_line: "make", program: "/usr/bin/make", directory: root }, safetyLevel: "dangerous", reason: { kind: "level", level: "dangerous" } });
    expect(params.shownOnly).toEqual(["command_line", "program"]);
  });
});

describe("commandDirectory", () => {
  it("names the project root and where the directory leads when it is outside", () => {
    const outside = mkdtempSync(join(tmpdir(), "agent-q-other-"));
    let message = "";
    try {
      commandDirectory(root, outside);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toContain(`is outside the project root (${root})`);
    expect(message).toContain(`it is ${outside}`);
  });
});

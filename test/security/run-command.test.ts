// Attacks on run_command, as a hostile or confused model would make them: a command changed while its
// approval waits, rules smuggled past by spelling, secrets read from the environment, directories out
// of the root, commands that never end or leave a daemon behind. A marker file a command would create
// proves whether it ran: every attack checks the disk, not a flag.

import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { registerSecret } from "../../server/log.js";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { Executor, type ApprovalFn } from "../../server/tools/executor.js";
import { PolicyError, ToolPolicy, type PermissionRule } from "../../server/tools/policy.js";
import type { CommandSettings } from "../../server/tools/tool.js";

const base = mkdtempSync(join(tmpdir(), "agent-q-hostile-run-"));
const root = join(base, "project");
const elsewhere = join(base, "elsewhere");
mkdirSync(root);
mkdirSync(elsewhere);
mkdirSync(join(root, "a"));
mkdirSync(join(root, "b"));
symlinkSync(elsewhere, join(root, "out"));
symlinkSync(join(root, "a"), join(root, "link"));
writeFileSync(join(root, "Makefile"), "test:\n\ttouch made-test\ntest-evil:\n\ttouch made-evil\n");

const registry = createDefaultRegistry();

function setup(opts: { rules?: PermissionRule[]; approve?: ApprovalFn; commands?: CommandSettings; root?: () => string } = {}) {
  const asked: Record<string, unknown>[] = [];
  const approve: ApprovalFn =
    opts.approve ??
    (async (req) => {
      asked.push(req.arguments);
      return { decision: "approved" };
    });
  const policy = new ToolPolicy(registry, { permissionRules: opts.rules ?? [] });
  const executor = new Executor({ registry, policy, approve, context: () => ({ projectRoot: opts.root ? opts.root() : root, commands: opts.commands ?? {} }) });
  let n = 0;
  const run = (args: Record<string, unknown>) => executor.execute({ id: `x${n++}`, name: "run_command", arguments: args });
  return { executor, run, asked };
}

const fresh = (name: string) => {
  const p = join(root, name);
  if (existsSync(p)) unlinkSync(p);
  return p;
};

describe("run_command under attack", () => {
  it("asks by default, showing the exact command, the program and the true directory", async () => {
    const { run, asked } = setup();
    await run({ argv: ["touch", "x y"], directory: "link" });
    expect(asked).toHaveLength(1);
    expect(asked[0]).toMatchObject({ command_line: "touch 'x y'", directory: join(root, "a"), program: "/usr/bin/touch" });
    expect(existsSync(join(root, "a", "x y"))).toBe(true);
  });

  it("an approval is bound to the directory it showed: a link moved while it waits runs nothing", async () => {
    const marker = "bound-marker";
    symlinkSync(join(root, "a"), join(root, "moving"));
    const { run } = setup({
      approve: async () => {
        // The model (or anything) re-points the directory while the user reads the approval.
        unlinkSync(join(root, "moving"));
        symlinkSync(join(root, "b"), join(root, "moving"));
        return { decision: "approved" };
      },
    });
    const r = await run({ argv: ["touch", marker], directory: "moving" });
    expect(r.success).toBe(false);
    expect(r.content).toContain("changed while the approval waited");
    expect(existsSync(join(root, "a", marker))).toBe(false);
    expect(existsSync(join(root, "b", marker))).toBe(false);
  });

  it("an approval is bound to the project root it showed: a root changed while it waits never moves the command there", async () => {
    let current = root;
    const { run } = setup({
      root: () => current,
      approve: async () => {
        current = elsewhere;
        return { decision: "approved" };
      },
    });
    // One root a call (the executor captures it when the call is admitted): the command runs in the
    // root its approval showed, never in the one set while the user read it.
    await run({ argv: ["touch", "root-marker"] });
    expect(existsSync(join(elsewhere, "root-marker"))).toBe(false);
  });

  it("an approval is bound to the program it showed: one put earlier on PATH while it waits runs nothing", async () => {
    const bin = join(base, "bin");
    mkdirSync(bin, { recursive: true });
    const oldPath = process.env.PATH;
    process.env.PATH = `${bin}:${oldPath}`;
    try {
      const { run } = setup({
        approve: async () => {
          writeFileSync(join(bin, "true"), `#!/bin/sh\ntouch ${join(root, "path-marker")}\n`, { mode: 0o755 });
          return { decision: "approved" };
        },
      });
      const r = await run({ argv: ["true"] });
      expect(r.success).toBe(false);
      expect(existsSync(join(root, "path-marker"))).toBe(false);
    } finally {
      process.env.PATH = oldPath;
    }
  });

  it("a bare name found on PATH inside the project is refused: a planted ./make never passes for make", async () => {
    mkdirSync(join(root, "bin"), { recursive: true });
    writeFileSync(join(root, "bin", "make"), `#!/bin/sh\ntouch ${join(root, "planted-make")}\n`, { mode: 0o755 });
    const oldPath = process.env.PATH;
    process.env.PATH = `bin:${oldPath}`;
    try {
      const { run, asked } = setup({ rules: [{ action: "allow", tool: "run_command", command: "make test*" }] });
      const r = await run({ argv: ["make", "test"] });
      expect(r.success).toBe(false);
      expect(r.content).toContain("name the project's own program by its path, e.g. ./bin/make");
      expect(asked).toHaveLength(0);
      expect(existsSync(join(root, "planted-make"))).toBe(false);
      process.env.PATH = `${join(root, "bin")}:${oldPath}`;
      expect((await run({ argv: ["make", "test"] })).success).toBe(false);
      expect(existsSync(join(root, "planted-make"))).toBe(false);
    } finally {
      process.env.PATH = oldPath;
    }
  });

  it("a directory out of the root, by .. or by a link, is refused before anyone is asked", async () => {
    const { run, asked } = setup();
    for (const directory of ["..", "out", "../elsewhere", elsewhere, "a/../../elsewhere"]) {
      const r = await run({ argv: ["touch", "escaped"], directory });
      expect(r.success).toBe(false);
      expect(r.content).toMatch(/outside the project root|does not exist/);
    }
    expect(asked).toHaveLength(0);
    expect(existsSync(join(elsewhere, "escaped"))).toBe(false);
  });

  it("an allow rule `make test*` allows make test and its arguments, and no command smuggled past its words", async () => {
    const { run, asked } = setup({ rules: [{ action: "allow", tool: "run_command", command: "make test*" }], approve: async (req) => (asked.push(req.arguments), { decision: "denied" }), commands: { allowShell: true } });
    fresh("made-test");
    fresh("made-evil");
    const ok = await run({ argv: ["make", "test"] });
    expect(ok.content).toContain("exit status 0");
    expect(existsSync(join(root, "made-test"))).toBe(true);
    expect(asked).toHaveLength(0);
    fresh("made-test");
    const smuggled: Record<string, unknown>[] = [
      { argv: ["make", "test-evil"] },
      { argv: ["make", "test; touch made-evil"] },
      { argv: ["make test", "test-evil"] },
      { argv: ["./make", "test"] },
      { shell: "make test" + " && make test-evil" },
      { shell: "make test; touch made-evil" },
      { shell: "make test\ntouch made-evil" },
      { shell: "make test" },
    ];
    for (const args of smuggled) {
      const r = await run(args);
      // Asked (and denied by the user here), or refused before asking: never run unasked.
      expect(r.content).toMatch(/The user denied|No program/);
    }
    expect(asked).toHaveLength(smuggled.length - 2);
    expect(existsSync(join(root, "made-evil"))).toBe(false);
  });

  it("a shell line runs unasked only under a rule that is that exact line", async () => {
    const { run, asked } = setup({ rules: [{ action: "allow", tool: "run_command", command: "make test 2>&1 | tail -n 1" }], approve: async (req) => (asked.push(req.arguments), { decision: "denied" }), commands: { allowShell: true } });
    fresh("made-test");
    expect((await run({ shell: "make test 2>&1 | tail -n 1" })).content).toContain("exit status 0");
    expect(asked).toHaveLength(0);
    expect((await run({ shell: "make test 2>&1 | tail -n 1; touch made-evil" })).content).toContain("denied");
    expect(asked).toHaveLength(1);
    expect(existsSync(join(root, "made-evil"))).toBe(false);
  });

  it("a deny rule `rm *` catches rm by another path, behind a wrapper, and in a shell line", async () => {
    writeFileSync(join(root, "keep"), "x");
    const { run, asked } = setup({ rules: [{ action: "deny", command: "rm *" }, { action: "allow", category: "shell" }], commands: { allowShell: true } });
    for (const args of [{ argv: ["rm", "keep"] }, { argv: ["/bin/rm", "keep"] }, { argv: ["env", "rm", "keep"] }, { shell: "echo hi; rm keep" }, { shell: "true && (rm -f keep)" }]) {
      const r = await run(args);
      expect(r.content).toContain("denied by a permission rule");
    }
    expect(asked).toHaveLength(0);
    expect(existsSync(join(root, "keep"))).toBe(true);
    // A deny rule on commands does not take the tool away: other commands still run.
    expect((await run({ argv: ["true"] })).content).toContain("exit status 0");
  });

  it("an allow rule that is a pattern over run_command's arguments is refused, and never allows a command", () => {
    expect(() => new ToolPolicy(registry, { permissionRules: [{ action: "allow", tool: "run_command", argument: "argv", pattern: "make" }] })).toThrow(PolicyError);
    expect(() => new ToolPolicy(registry, { permissionRules: [{ action: "allow", tool: "read_file", command: "make*" }] })).toThrow(/runs no command/);
    expect(() => new ToolPolicy(registry, { permissionRules: [{ action: "allow", command: "make * test" }] })).toThrow(/only at the end/);
    const policy = new ToolPolicy(registry, { permissionRules: [{ action: "allow", category: "shell", argument: "argv", pattern: "make" }] });
    expect(policy.decide(registry.get("run_command")!, { argv: ["make", "test"] }).kind).toBe("ask");
  });

  it("\"always allow\" remembers the exact command, never every command", async () => {
    const asked: unknown[] = [];
    const { run } = setup({ approve: async (req) => (asked.push(req.arguments), { decision: "approved", always: true }) });
    await run({ argv: ["true"] });
    await run({ argv: ["true"] });
    expect(asked).toHaveLength(1);
    fresh("always-marker");
    await run({ argv: ["touch", "always-marker"] });
    expect(asked).toHaveLength(2);
  });

  it("no secret the product knows reaches the command's environment", async () => {
    const key = "sk-ant-test-" + "Z".repeat(30);
    registerSecret(key, "apiKey");
    process.env.INNOCENT_LOOKING = key;
    process.env.GITHUB_TOKEN = "ghp_" + "q".repeat(36);
    process.env.OPENAI_BASE_URL = "http://127.0.0.1:9/v1";
    process.env.DB_PASSWORD = "hunter2hunter2";
    try {
      const { run } = setup();
      // Written to disk by the command, so that the executor's redaction of results cannot hide a leak.
      await run({ argv: ["sh", "-c", "env > env-dump"] });
      const dump = readFileSync(join(root, "env-dump"), "utf8");
      expect(dump).not.toContain(key);
      expect(dump).not.toContain("INNOCENT_LOOKING");
      expect(dump).not.toContain("GITHUB_TOKEN");
      expect(dump).not.toContain("OPENAI_BASE_URL");
      expect(dump).not.toContain("hunter2");
      expect(dump).toMatch(/^PATH=/m);
      expect(dump).toMatch(/^SLY_AGENT_Q_RUN=\d+-[0-9a-f]{24}$/m);
    } finally {
      delete process.env.INNOCENT_LOOKING;
      delete process.env.GITHUB_TOKEN;
      delete process.env.OPENAI_BASE_URL;
      delete process.env.DB_PASSWORD;
    }
  });

  it("a secret the command prints itself is redacted in its result", async () => {
    const key = "sk-ant-printed-" + "Y".repeat(30);
    registerSecret(key, "apiKey");
    const { run } = setup();
    const r = await run({ argv: ["echo", key] });
    expect(r.content).not.toContain(key);
    expect(r.content).toContain("redacted");
  });

  it("a command that leaves a daemon in its group and one that escapes it: both are gone after the answer", async () => {
    const { run } = setup();
    const pidFile = fresh("daemon-pids");
    const t = Date.now();
    await run({ argv: ["sh", "-c", `sleep 600 & echo $! >> ${pidFile}; setsid sleep 600 >/dev/null 2>&1 </dev/null & echo $! >> ${pidFile}; exit 0`] });
    expect(Date.now() - t).toBeLessThan(5_000);
    const pids = readFileSync(pidFile, "utf8").trim().split("\n").map(Number);
    expect(pids).toHaveLength(2);
    await new Promise((r) => setTimeout(r, 300));
    for (const pid of pids) {
      const zombieOrGone = (() => {
        try {
          process.kill(pid, 0);
          return /^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
        } catch {
          return true;
        }
      })();
      expect(zombieOrGone).toBe(true);
    }
  });

  it("the tool runs nothing without an approval function (no way to ask)", async () => {
    const executor = new Executor({ registry, context: () => ({ projectRoot: root }) });
    const r = await executor.execute({ id: "n", name: "run_command", arguments: { argv: ["touch", "unasked"] } });
    expect(r.success).toBe(false);
    expect(existsSync(join(root, "unasked"))).toBe(false);
  });
  it("an edit of a shown-only field (command_line, program) is refused, never silently dropped", async () => {
    for (const field of ["command_line", "program"]) {
      const marker = fresh(`edit-shown-${field}`);
      const { run } = setup({ approve: async (req) => ({ decision: "modified", arguments: { ...req.arguments, [field]: "touch other" } }) });
      const r = await run({ argv: ["touch", marker] });
      expect(r.success).toBe(false);
      expect(r.content).toContain(`changed ${field}, which is shown only`);
      expect(existsSync(marker)).toBe(false);
    }
  });

  it("an edit of argv runs exactly the edited argv, and the rules judge it again", async () => {
    const original = fresh("edit-original");
    const edited = fresh("edit-edited");
    const { run } = setup({ approve: async (req) => ({ decision: "modified", arguments: { ...req.arguments, argv: ["touch", edited] } }) });
    const r = await run({ argv: ["touch", original] });
    expect(r.success).toBe(true);
    expect(existsSync(edited)).toBe(true);
    expect(existsSync(original)).toBe(false);
    writeFileSync(join(root, "keep-edit"), "x");
    const denied = setup({ rules: [{ action: "deny", command: "rm *" }], approve: async (req) => ({ decision: "modified", arguments: { ...req.arguments, argv: ["rm", "-f", "keep-edit"] } }) });
    const d = await denied.run({ argv: ["true"] });
    expect(d.content).toContain("denied by a permission rule");
    expect(existsSync(join(root, "keep-edit"))).toBe(true);
  });

  it("\"always allow\" is bound to the resolved directory and program: the same argv elsewhere asks", async () => {
    writeFileSync(join(root, "t.sh"), "#!/bin/sh\ntouch root-ran\n", { mode: 0o755 });
    writeFileSync(join(root, "a", "t.sh"), "#!/bin/sh\ntouch sub-ran\n", { mode: 0o755 });
    const asked: unknown[] = [];
    const { run } = setup({ approve: async (req) => (asked.push(req.arguments), { decision: "approved", always: true }) });
    await run({ argv: ["./t.sh"] });
    expect(asked).toHaveLength(1);
    await run({ argv: ["./t.sh"] });
    expect(asked).toHaveLength(1);
    await run({ argv: ["./t.sh"], directory: "a" });
    expect(asked).toHaveLength(2);
  });
  it("deny and ask rules see past options before the words they name, and a program behind a link by its true name", async () => {
    writeFileSync(join(root, "keep-rm"), "x");
    symlinkSync(realpathSync("/bin/rm"), join(root, "del"));
    const { run, asked } = setup({ rules: [{ action: "deny", command: "git push*" }, { action: "deny", command: "make test*" }, { action: "deny", command: "rm *" }] });
    for (const argv of [["git", "-C", ".", "push"], ["git", "-c", "x.y=1", "push", "origin"], ["make", "-C", "a", "test"], ["./del", "keep-rm"]]) {
      const r = await run({ argv });
      expect(r.content, argv.join(" ")).toContain("denied by a permission rule");
    }
    expect(asked).toHaveLength(0);
    expect(existsSync(join(root, "keep-rm"))).toBe(true);
    const policy = new ToolPolicy(registry, { permissionRules: [{ action: "allow", tool: "run_command" }, { action: "ask", command: "git push*" }] });
    expect(policy.decide(registry.get("run_command")!, { argv: ["git", "-C", ".", "push"] }, root)).toMatchObject({ kind: "ask", reason: { kind: "rule" } });
    expect(policy.decide(registry.get("run_command")!, { argv: ["git", "status"] }, root).kind).toBe("run");
  });
  it("an approval is bound to the text of the project's script it runs: changed while it waits, nothing runs", async () => {
    const script = join(root, "build.sh");
    writeFileSync(script, "#!/bin/sh\ntouch script-approved\n", { mode: 0o755 });
    fresh("script-approved");
    fresh("script-swapped");
    const { run } = setup({
      approve: async () => {
        writeFileSync(script, "#!/bin/sh\ntouch script-swapped\n", { mode: 0o755 });
        return { decision: "approved" };
      },
    });
    const r = await run({ argv: ["./build.sh"] });
    expect(r.success).toBe(false);
    expect(r.content).toContain("changed while the approval waited");
    expect(existsSync(join(root, "script-swapped"))).toBe(false);
    expect(existsSync(join(root, "script-approved"))).toBe(false);
    // Unchanged, it runs.
    const ok = await setup().run({ argv: ["./build.sh"] });
    expect(ok.content).toContain("exit status 0");
    expect(existsSync(join(root, "script-swapped"))).toBe(true);
  });
  it("variables that hold secrets by other names never reach a command: API keys, passwords, sessions, auth, URLs with a password", async () => {
    const secrets: Record<string, string> = {
      MISTRAL_APIKEY: "mistral-secret-value-1",
      MYSQL_PWD: "mysql-secret-value-2",
      SECRET_KEY_BASE: "rails-secret-value-3",
      DATABASE_URL: "postgres://app:db-secret-value-4@localhost/app",
      GITHUB_PAT: "github-secret-value-5",
      BW_SESSION: "bitwarden-secret-value-6",
      NPM_CONFIG__AUTH: "npm-secret-value-7",
      CLAUDE_CODE_OAUTH: "claude-secret-value-8",
    };
    const harmless: Record<string, string> = { PLAIN_URL: "https://example.invalid/path", GIT_AUTHOR_NAME: "someone-harmless", PATHS_HARMLESS: "kept-harmless" };
    Object.assign(process.env, secrets, harmless);
    try {
      await setup().run({ argv: ["sh", "-c", "env > env-dump-2"] });
      const dump = readFileSync(join(root, "env-dump-2"), "utf8");
      for (const [name, value] of Object.entries(secrets)) {
        expect(dump, name).not.toContain(value);
        expect(dump, name).not.toContain(`${name}=`);
      }
      for (const value of Object.values(harmless)) expect(dump).toContain(value);
      expect(dump).toMatch(/^PATH=/m);
    } finally {
      for (const name of [...Object.keys(secrets), ...Object.keys(harmless)]) delete process.env[name];
    }
  });
});



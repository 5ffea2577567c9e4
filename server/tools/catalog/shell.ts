// run_command: the project's own commands (make test, a build script, a linter), run by the server
// in the project root (server/tools/project/command.ts). Dangerous: it asks, showing the exact
// command, the program it runs and the true directory, and the approval is bound to them (the preview's
// digest is checked again just before it runs). Permission rules name commands by their words
// (PermissionRule.command, server/tools/command-rules.ts).

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { relative, sep } from "node:path";
import { realRoot } from "../project/files.js";
import { projectRoot } from "../project/root.js";
import {
  commandDirectory,
  commandEnvironment,
  commandTarget,
  DEFAULT_COMMAND_TIMEOUT_MS,
  describeEnd,
  newRunMark,
  renderCommand,
  resolveProgram,
  runProcess,
  type CommandTarget,
} from "../project/command.js";
import { defineTool, ToolError, type Tool, type ToolContext } from "../tool.js";

/** The output a cancelled command answers with (an error, bounded to some 4,000 characters in all). */
const CANCELLED_HEAD_BYTES = 1_000;
const CANCELLED_TAIL_BYTES = 2_000;

/** The longest timeout a user may set; the executor's own bound lies beyond it. */
const MAX_COMMAND_TIMEOUT_MS = 24 * 3600_000;

interface Prepared {
  /** The project root's true name. */
  root: string;
  target: CommandTarget;
  cwd: string;
  /** The executable that runs: the program argv[0] names, or the shell. */
  program: string;
  /** What is executed, argv[0] first. */
  argv: string[];
}

async function prepare(a: Record<string, unknown>, ctx: ToolContext): Promise<Prepared> {
  const target = commandTarget(a);
  if (target.kind === "shell" && ctx.commands?.allowShell !== true) {
    throw new ToolError("Shell lines are off (the user's sly-agent-q-allow-shell-commands): give argv, the program and its arguments as a list, without pipes or redirections. Nothing was run.");
  }
  const root = realRoot(await projectRoot(ctx, "nothing was run"));
  const cwd = commandDirectory(root, a.directory);
  if (target.kind === "shell") return { root, target, cwd, program: "/bin/sh", argv: ["sh", "-c", target.line] };
  const argv0 = target.argv[0]!;
  const program = resolveProgram(argv0, cwd);
  if (program === undefined) throw new ToolError(`No program ${JSON.stringify(argv0)} was found (on PATH, or as that path in ${cwd}); nothing was run.`);
  // A bare name found in the project (a PATH entry such as . or the project's bin/) would let a file the
  // agent can write pass for the program a rule allows (`make test*` running ./make): the project's
  // own programs are named by their path, which the approval and the rules then see.
  if (!argv0.includes("/") && isInside(root, program)) {
    throw new ToolError(`${JSON.stringify(argv0)} is found on PATH inside the project (${program}): name the project's own program by its path, e.g. ./${relative(cwd, program)}. Nothing was run.`);
  }
  return { root, target, cwd, program, argv: target.argv };
}

function isInside(root: string, file: string): boolean {
  return file === root || file.startsWith(root.endsWith(sep) ? root : root + sep);
}

function timeoutOf(ctx: ToolContext): number {
  const t = ctx.commands?.timeoutMs;
  return typeof t === "number" && t > 0 ? Math.min(t, MAX_COMMAND_TIMEOUT_MS) : DEFAULT_COMMAND_TIMEOUT_MS;
}

async function runCommandHandler(a: Record<string, unknown>, ctx: ToolContext): Promise<string> {
  const p = await prepare(a, ctx);
  const mark = newRunMark();
  const timeoutMs = timeoutOf(ctx);
  const outcome = await runProcess({
    program: p.program,
    argv: p.argv,
    cwd: p.cwd,
    env: commandEnvironment(mark),
    mark,
    signal: ctx.signal,
    timeoutMs,
    ...(ctx.output ? { onOutput: ctx.output } : {}),
  });
  const end = describeEnd(outcome, timeoutMs);
  const out = outcome.output;
  const cancelled = outcome.stopped === "cancelled";
  const lines = [
    ...(cancelled ? ["run_command was cancelled by the user; its output so far follows."] : []),
    `$ ${renderCommand(p.target)}`,
    `in ${p.cwd}`,
    `${end}; ${(outcome.durationMs / 1000).toFixed(1)} s; ${out.totalBytes} bytes of output (stdout and stderr together; no standard input).`,
  ];
  // A cancel answers as an error, whose text is bounded tighter than a result's: a shorter head and tail.
  if (out.totalBytes > 0) lines.push("", cancelled ? out.text(CANCELLED_HEAD_BYTES, CANCELLED_TAIL_BYTES) : out.text());
  if (outcome.spawnError !== undefined || cancelled) throw new ToolError(lines.join("\n"));
  return lines.join("\n");
}

export const shellTools: Tool[] = [
  defineTool({
    name: "run_command",
    description:
      "Run one of the project's commands (make test, a build or lint script) in the project root and get its exit status and output (head and tail). No standard input; give argv, not a shell line.",
    parameters: {
      argv: { type: "array", items: { type: "string" }, description: "The program and its arguments, e.g. [\"make\", \"test\"]; run without a shell." },
      shell: { type: "string", description: "A shell line (pipes, redirections), only when the user allows shells; else use argv." },
      directory: { type: "string", description: "Subdirectory of the project root to run in (default: the root)." },
    },
    safety: "dangerous",
    categories: ["shell"],
    command: (a, root) => {
      let target: CommandTarget;
      try {
        target = commandTarget(a);
      } catch {
        return undefined;
      }
      // The true file the program is, for deny and ask rules (`./del` linking to rm): when it cannot
      // be found now, the call is refused before it runs anyway.
      if (target.kind === "argv" && root !== undefined) {
        try {
          const program = resolveProgram(target.argv[0]!, commandDirectory(realRoot(root), a.directory));
          if (program !== undefined) return { ...target, program };
        } catch {
          // A directory out of the root: refused when it is prepared.
        }
      }
      return target;
    },
    // "Always allow" is for this command run here: the true directory and the program it finds now.
    sessionScope: (a, root) => {
      if (root === undefined) return undefined;
      const target = commandTarget(a);
      const cwd = commandDirectory(realRoot(root), a.directory);
      const program = target.kind === "shell" ? "/bin/sh" : resolveProgram(target.argv[0]!, cwd);
      return program === undefined ? undefined : JSON.stringify([cwd, program]);
    },
    runtime: "node",
    // Cancelled, it stops the process group and answers with the output so far.
    answersCancel: true,
    // The user's own timeout (commandTimeoutMs) is kept by the handler, which then stops the process
    // group and still answers with the output so far; this is only the executor's outer bound.
    timeoutMs: MAX_COMMAND_TIMEOUT_MS + 60_000,
    // Shown in the approval, and bound to it: the exact command, the program it starts, the true directory.
    preview: async (a, ctx) => {
      const p = await prepare(a, ctx);
      return { command_line: renderCommand(p.target), program: p.program, directory: p.cwd };
    },
    // A script of the project (which the agent can write) is approved as it reads now: a change to
    // it while the approval waits runs nothing.
    previewBinding: async (a, ctx) => {
      const p = await prepare(a, ctx);
      if (p.target.kind !== "argv" || !isInside(p.root, p.program)) return "";
      try {
        return `${p.program} ${createHash("sha256").update(readFileSync(p.program)).digest("hex")}`;
      } catch (err) {
        throw new ToolError(`${p.program} cannot be read (${(err as Error).message}); nothing was run.`);
      }
    },
    handler: runCommandHandler,
  }),
];

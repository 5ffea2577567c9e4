// The one place the project's own commands run (run_command): a process group of their own, no
// standard input, an environment without the secrets the product knows, the output kept bounded
// (its head and tail) and shown live to a caller at a bounded rate, stopped whole on cancel or
// timeout, and never waited on past a short grace once the command itself has exited (a daemon it
// forked may hold the pipes open for ever).

import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { isAbsolute, join, relative, sep } from "node:path";
import { constants as osConstants } from "node:os";
import { knowsSecretIn, redact, SECRET_ENV_NAME } from "../../log.js";
import { escapeUnsafe } from "../../text.js";
import { ToolError } from "../tool.js";
import { findOnPath } from "./files.js";

import type { CommandTarget } from "../command-rules.js";
import { loadChildProcess } from "../../lazy-builtins.js";

export type { CommandTarget } from "../command-rules.js";

/** The variable every process of one run inherits, so that those that left the group are found. */
export const RUN_MARK = "SLY_AGENT_Q_RUN";

/** Bytes of the output's start and end kept for the model; what lies between is counted and cut. */
export const HEAD_BYTES = 8_000;
export const TAIL_BYTES = 16_000;
/** Bytes of the output's end shown live in the chat's entry, and the pause between two updates. */
export const LIVE_TAIL_BYTES = 4_000;
export const LIVE_INTERVAL_MS = 250;
/** How long the pipes are read once the command itself has exited, before its group is stopped. */
export const EXIT_GRACE_MS = 500;
/** Between SIGTERM to the group and SIGKILL. */
export const KILL_GRACE_MS = 1_000;
export const DEFAULT_COMMAND_TIMEOUT_MS = 120_000;

/** The command a call's arguments name, or a ToolError saying what is wrong with them. */
export function commandTarget(args: Record<string, unknown>): CommandTarget {
  const argv = args.argv;
  const shell = args.shell;
  if (argv !== undefined && shell !== undefined) throw new ToolError("Give argv or shell, not both.");
  if (Array.isArray(argv)) {
    if (argv.length === 0 || argv[0] === "") throw new ToolError("argv is empty: give the program and its arguments, e.g. [\"make\", \"test\"].");
    if (!argv.every((a): a is string => typeof a === "string")) throw new ToolError("Every element of argv must be a string.");
    if (argv.some((a) => a.includes("\0"))) throw new ToolError("An element of argv holds a NUL character.");
    return { kind: "argv", argv: [...argv] };
  }
  if (typeof shell === "string") {
    if (shell.trim() === "") throw new ToolError("The shell line is empty.");
    if (shell.includes("\0")) throw new ToolError("The shell line holds a NUL character.");
    return { kind: "shell", line: shell };
  }
  throw new ToolError("Give argv (the program and its arguments, e.g. [\"make\", \"test\"]).");
}

/** One argv element as a POSIX shell would read it back as exactly that element, all on one line. */
export function quoteWord(word: string): string {
  if (word !== "" && /^[A-Za-z0-9_@%+=:,./-]+$/u.test(word)) return word;
  const escaped = escapeUnsafe(word);
  // Control, bidi or invisible characters: $'...' shows each as an escape, read back as itself.
  if (escaped !== word) {
    const body = word
      .replace(/\\/g, "\\\\")
      .replace(/'/g, "\\'")
      // Each as bash's $'...' reads it back: \n, \e, \x1F, \u202E, and \UXXXXXXXX beyond the BMP.
      .replace(/[^]/gu, (c) => (escapeUnsafe(c) !== c ? escapeUnsafe(c).replace(/^\\u\{([0-9A-F]+)\}$/u, (_m, h: string) => `\\U${h.padStart(8, "0")}`) : c));
    return `$'${body}'`;
  }
  return `'${word.replace(/'/g, "'\\''")}'`;
}

/** TARGET as one unambiguous line: argv quoted word by word; a shell line as `sh -c 'LINE'`. */
export function renderCommand(target: CommandTarget): string {
  return target.kind === "argv" ? target.argv.map(quoteWord).join(" ") : `sh -c ${quoteWord(target.line)}`;
}

/**
 * The true directory a command runs in: ROOT (a true name) or DIRECTORY under it. A directory that
 * is, or passes through, a link leading out of the root is refused; so is one that is not there.
 */
export function commandDirectory(root: string, directory: unknown): string {
  if (directory === undefined || directory === "" || directory === ".") return root;
  if (typeof directory !== "string") throw new ToolError("directory must be a path relative to the project root.");
  const wanted = isAbsolute(directory) ? directory : join(root, directory);
  let real: string;
  try {
    real = realpathSync(wanted);
  } catch {
    throw new ToolError(`The directory ${JSON.stringify(directory)} does not exist in the project; nothing was run.`);
  }
  const rel = relative(root, real);
  if (rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel)) {
    throw new ToolError(`The directory ${JSON.stringify(directory)} is outside the project root (${root}): it is ${real}; commands run only inside the root. Nothing was run.`);
  }
  if (!statSync(real).isDirectory()) throw new ToolError(`${JSON.stringify(directory)} is not a directory; nothing was run.`);
  return real;
}

/** The executable ARGV0 names, as it would be found now from CWD (PATH for a bare name). */
export function resolveProgram(argv0: string, cwd: string, path = process.env.PATH ?? ""): string | undefined {
  if (argv0.includes("/")) {
    const file = isAbsolute(argv0) ? argv0 : join(cwd, argv0);
    try {
      return statSync(file).isFile() ? realpathSync(file) : undefined;
    } catch {
      return undefined;
    }
  }
  // A relative PATH entry (".", "bin") is relative to the command's directory, as execvp reads it.
  const found = findOnPath(argv0, path.split(":").map((d) => (d === "" ? "." : isAbsolute(d) ? d : join(cwd, d))).join(":"));
  if (found === undefined) return undefined;
  try {
    return realpathSync(found);
  } catch {
    return found;
  }
}

/**
 * Names of variables a command does not get, besides SECRET_ENV_NAME's: other spellings of keys,
 * passwords, tokens, sessions and credentials (MISTRAL_APIKEY, MYSQL_PWD, SECRET_KEY_BASE, GITHUB_PAT,
 * BW_SESSION, NPM_CONFIG__AUTH, CLAUDE_CODE_OAUTH). Wider than SECRET_ENV_NAME, whose values are also
 * redacted everywhere: a value such as PWD's or DBUS_SESSION_BUS_ADDRESS's must not be, but a command
 * loses nothing it needs without them.
 */
const COMMAND_SECRET_NAME = /API_?KEY|SECRET|PASSW|PASSPHRASE|_PWD$|(^|_)PASS$|_PAT$|SESSION|(^|_)AUTH($|_)|OAUTH|CREDENTIAL|COOKIE|PRIVATE/i;
/** A value that is a URL with a password in it (postgres://user:password@host/db). */
const CREDENTIAL_URL = /[a-z][a-z0-9+.-]*:\/\/[^/\s:@]*:[^/\s@]+@/i;

/**
 * The environment a command gets: the server's own, without the variables whose names look like
 * secrets (*_KEY, *_TOKEN, *SECRET*, *PASSWORD*, *APIKEY*, *_PWD, *_PAT, *SESSION*, *AUTH*, ...), those
 * holding a URL with a password, the providers' settings, and any variable holding a secret the
 * product knows (the API key Emacs gave, whatever its variable is called); with RUN_MARK.
 */
export function commandEnvironment(mark: string, env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (SECRET_ENV_NAME.test(name) || COMMAND_SECRET_NAME.test(name) || CREDENTIAL_URL.test(value) || /^(ANTHROPIC|OPENAI|SLY_AGENT_Q)_/i.test(name) || knowsSecretIn(value)) continue;
    out[name] = value;
  }
  out[RUN_MARK] = mark;
  return out;
}

/** How a run ended. */
export interface CommandOutcome {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** Why the server stopped it, when it did. */
  stopped?: "timeout" | "cancelled";
  /** Set when the command exited but something it started kept the output open, and was stopped. */
  lingering?: boolean;
  output: BoundedOutput;
  durationMs: number;
  /** The spawn failed (no such program, not executable). */
  spawnError?: string;
}

/** The output's head and tail, and how much lay between. */
export class BoundedOutput {
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  totalBytes = 0;
  totalLines = 0;

  constructor(
    readonly headMax = HEAD_BYTES,
    readonly tailMax = TAIL_BYTES,
  ) {}

  push(chunk: Buffer): void {
    this.totalBytes += chunk.length;
    for (const b of chunk) if (b === 10) this.totalLines++;
    if (this.headBytes < this.headMax) {
      const take = chunk.subarray(0, this.headMax - this.headBytes);
      this.head.push(take);
      this.headBytes += take.length;
      chunk = chunk.subarray(take.length);
      if (chunk.length === 0) return;
    }
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    while (this.tail.length > 1 && this.tailBytes - this.tail[0]!.length >= this.tailMax) this.tailBytes -= this.tail.shift()!.length;
  }

  /** The last MAX bytes of output. */
  last(max: number): Buffer {
    const all = Buffer.concat([...(this.tailBytes < max ? this.head : []), ...this.tail]);
    return all.subarray(Math.max(0, all.length - max));
  }

  /** The output for the model: whole, or its head and tail with the count of what was cut between
   *  (at most HEADMAX and TAILMAX bytes of them, when smaller than what is kept). */
  text(headMax = this.headMax, tailMax = this.tailMax): string {
    const headAll = Buffer.concat(this.head);
    const head = headAll.subarray(0, Math.min(headMax, headAll.length));
    const rest = Buffer.concat([headAll.subarray(head.length), ...this.tail]);
    const tail = rest.subarray(Math.max(0, rest.length - Math.min(tailMax, this.tailMax)));
    const cut = this.totalBytes - head.length - tail.length;
    if (cut <= 0) return Buffer.concat([head, tail]).toString("utf8");
    const cutLines = this.totalLines - count(head, 10) - count(tail, 10);
    return `${head.toString("utf8")}\n[... ${cut} bytes (about ${cutLines} lines) of output cut here: only the first ${head.length} and the last ${tail.length} bytes are kept ...]\n${tail.toString("utf8")}`;
  }
}

function count(b: Buffer, byte: number): number {
  let n = 0;
  for (const c of b) if (c === byte) n++;
  return n;
}

/** The last MAX characters of TEXT's redacted form, a secret cut at the window's start included. */
export function redactedTail(bytes: Buffer, max: number): string {
  // Redacted over a wider window than shown, so that a secret straddling the cut is replaced whole.
  return redact(bytes.toString("utf8")).slice(-max);
}

export interface RunOptions {
  /** What is executed: PROGRAM with ARGV (argv[0] is passed as the process's name). */
  program: string;
  argv: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** The RUN_MARK value in ENV. */
  mark: string;
  signal: AbortSignal;
  timeoutMs: number;
  /** Given the output's last bytes, at most every LIVE_INTERVAL_MS, and once at the end. */
  onOutput?: (tail: string, totalBytes: number) => void;
  exitGraceMs?: number;
}

/** The runs under way, by process group: a server that exits stops them (its own exit, a signal it
 *  handles, Emacs closing its pipe); a server killed with SIGKILL cannot. */
const running = new Map<number, string>();
let exitHookSet = false;

function stopAllOnExit(): void {
  if (exitHookSet) return;
  exitHookSet = true;
  process.on("exit", () => {
    for (const [pgid, mark] of running) {
      try {
        process.kill(-pgid, "SIGKILL");
      } catch {
        // Gone already.
      }
      killMarked(mark, "SIGKILL");
    }
  });
}

/** A fresh RUN_MARK value: this server's pid, then a random part (killLeftovers reads the pid). */
export function newRunMark(): string {
  return `${process.pid}-${randomBytes(12).toString("hex")}`;
}

let leftoversKilled = false;

/**
 * Kills every process of this user carrying a RUN_MARK of a server that no longer runs: what a
 * server killed with SIGKILL (which no exit handler sees) left running. Called once, as a server
 * runs its first command; Linux's /proc only. A mark whose server's pid runs (another Emacs's
 * server, or a pid reused since) is left alone. Returns the pids killed.
 */
export function killLeftovers(): number[] {
  const prefix = Buffer.from(`\0${RUN_MARK}=`);
  return killWhere("SIGKILL", (environ) => {
    const env = Buffer.concat([Buffer.from([0]), environ]);
    const at = env.indexOf(prefix);
    if (at < 0) return false;
    const value = env.subarray(at + prefix.length, env.indexOf(0, at + prefix.length)).toString();
    const owner = /^(\d+)-[0-9a-f]+$/.exec(value);
    return !!owner && Number(owner[1]) !== process.pid && !alive(Number(owner[1]));
  });
}

/**
 * Sends SIG to every other process of this user whose environment (/proc/PID/environ, its
 * NUL-separated entries) CHOSEN accepts; returns the pids signalled. Linux's /proc only.
 */
function killWhere(sig: NodeJS.Signals, chosen: (environ: Buffer) => boolean): number[] {
  const killed: number[] = [];
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  } catch {
    return killed;
  }
  for (const pid of pids) {
    const n = Number(pid);
    if (n === process.pid) continue;
    try {
      if (!chosen(readFileSync(`/proc/${pid}/environ`))) continue;
      process.kill(n, sig);
      killed.push(n);
    } catch {
      // Another user's process, or gone.
    }
  }
  return killed;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Runs one command to its end (or stop), never rejecting. */
export async function runProcess(o: RunOptions): Promise<CommandOutcome> {
  // node:child_process loads at the first command, not at the server's start (lazy-builtins.ts).
  const { spawn } = await loadChildProcess();
  if (!leftoversKilled) {
    leftoversKilled = true;
    killLeftovers();
  }
  const started = performance.now();
  const output = new BoundedOutput();
  return new Promise((resolve) => {
    let stopped: CommandOutcome["stopped"];
    let lingering = false;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let done = false;
    let liveTimer: NodeJS.Timeout | undefined;
    let liveDirty = false;
    let timers: NodeJS.Timeout[] = [];
    const child = spawn(o.program, o.argv.slice(1), { argv0: o.argv[0], cwd: o.cwd, env: o.env, stdio: ["ignore", "pipe", "pipe"], detached: true, windowsHide: true });
    const pgid = child.pid;
    if (pgid !== undefined) {
      running.set(pgid, o.mark);
      stopAllOnExit();
    }

    const live = (): void => {
      liveTimer = undefined;
      if (!liveDirty || !o.onOutput) return;
      liveDirty = false;
      try {
        o.onOutput(redactedTail(output.last(LIVE_TAIL_BYTES + 512), LIVE_TAIL_BYTES), output.totalBytes);
      } catch {
        // The caller's display must not stop the run.
      }
    };
    const onData = (chunk: Buffer): void => {
      output.push(chunk);
      liveDirty = true;
      if (liveTimer === undefined && o.onOutput) liveTimer = setTimeout(live, LIVE_INTERVAL_MS);
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);

    const killGroup = (sig: NodeJS.Signals): void => {
      if (pgid !== undefined) {
        try {
          process.kill(-pgid, sig);
        } catch {
          // The group is gone already.
        }
      }
      killMarked(o.mark, sig);
    };
    const stop = (why: NonNullable<CommandOutcome["stopped"]>): void => {
      if (done || stopped) return;
      stopped = why;
      killGroup("SIGTERM");
      timers.push(setTimeout(() => killGroup("SIGKILL"), KILL_GRACE_MS));
      // Whatever keeps the pipes open after that is not waited for.
      timers.push(setTimeout(() => finish(), KILL_GRACE_MS + (o.exitGraceMs ?? EXIT_GRACE_MS)));
    };
    const onAbort = (): void => stop("cancelled");
    if (o.signal.aborted) onAbort();
    else o.signal.addEventListener("abort", onAbort, { once: true });
    timers.push(setTimeout(() => stop("timeout"), o.timeoutMs));

    const finish = (spawnError?: string): void => {
      if (done) return;
      done = true;
      for (const t of timers) clearTimeout(t);
      timers = [];
      o.signal.removeEventListener("abort", onAbort);
      child.stdout!.destroy();
      child.stderr!.destroy();
      // Nothing the command started outlives its answer: the group and every marked process go.
      killGroup("SIGKILL");
      if (pgid !== undefined) running.delete(pgid);
      if (liveTimer !== undefined) clearTimeout(liveTimer);
      liveDirty = true;
      live();
      resolve({
        exitCode: exit?.code ?? null,
        signal: exit?.signal ?? null,
        ...(stopped ? { stopped } : {}),
        ...(lingering ? { lingering } : {}),
        output,
        durationMs: Math.round(performance.now() - started),
        ...(spawnError !== undefined ? { spawnError } : {}),
      });
    };

    child.on("error", (err) => finish(err.message));
    child.on("exit", (code, signal) => {
      exit = { code, signal };
      // Its own output is read to the end; something it left behind holding the pipes is not waited for.
      timers.push(
        setTimeout(() => {
          lingering = true;
          finish();
        }, o.exitGraceMs ?? EXIT_GRACE_MS),
      );
    });
    child.on("close", () => finish());
  });
}

/**
 * Sends SIG to every process of this user whose environment holds RUN_MARK=MARK: what a command
 * started that left its process group (setsid, a daemon) but kept the mark. Linux's /proc only; a
 * process that also cleared its environment is beyond reach (said in the README).
 */
export function killMarked(mark: string, sig: NodeJS.Signals): number[] {
  const needle = Buffer.from(`${RUN_MARK}=${mark}\0`);
  return killWhere(sig, (environ) => environ.includes(needle));
}

/** OUTCOME's status in words: the exit status, the signal, or why the server stopped it. */
export function describeEnd(outcome: CommandOutcome, timeoutMs: number): string {
  if (outcome.spawnError !== undefined) return `could not be started: ${outcome.spawnError}`;
  const how = outcome.signal ? `killed by signal ${outcome.signal}${osConstants.signals[outcome.signal] ? ` (${osConstants.signals[outcome.signal]})` : ""}` : `exit status ${outcome.exitCode ?? "unknown"}`;
  if (outcome.stopped === "timeout") return `timed out after ${Math.round(timeoutMs / 1000)} s (the user's sly-agent-q-command-timeout): its process group was stopped; ${how}`;
  if (outcome.stopped === "cancelled") return `cancelled by the user: its process group was stopped; ${how}`;
  return how + (outcome.lingering ? "; something it started kept its output open after it exited and was stopped" : "");
}

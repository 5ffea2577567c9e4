// Logging to stderr with levels. stdout carries only protocol. Secrets never reach a log line.

import type { LogLevel } from "./protocol.js";

const RANK: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** Values that must never be printed (API keys, tokens), each with the name it is known by. */
const secrets = new Map<string, string>();

/** Shorter values are too likely to be ordinary text to be redacted everywhere. */
export const MIN_SECRET_LENGTH = 8;

/** Environment variables whose values are treated as secrets: *_KEY, *_TOKEN, *_SECRET, *PASSWORD*. */
export const SECRET_ENV_NAME = /(_KEY|_TOKEN|_SECRET)$|PASSWORD/i;

/** Registers VALUE as a secret known as NAME (the first name given for a value stays). */
export function registerSecret(value: string | undefined, name?: string): void {
  if (typeof value !== "string" || value.length < MIN_SECRET_LENGTH) return;
  if (!secrets.has(value) || (secrets.get(value) === "" && name)) secrets.set(value, name ?? "");
}

/** Registers the values of ENV's variables whose names look like secrets. */
export function registerEnvSecrets(env: NodeJS.ProcessEnv): void {
  // Names first: reading every value of process.env crosses into C++ once per variable.
  for (const name of Object.keys(env)) if (SECRET_ENV_NAME.test(name)) registerSecret(env[name], name);
}

/** Whether TEXT holds a secret the product knows (its API key, a secret-named variable's value). */
export function knowsSecretIn(text: string): boolean {
  for (const s of secrets.keys()) if (text.includes(s)) return true;
  return false;
}

/** Replaces every known secret, and anything shaped like an API key, with a marker saying so. */
export function redact(text: string): string {
  let out = text;
  // Longest first, so that a secret containing another is replaced whole.
  for (const [s, name] of [...secrets].sort((a, b) => b[0].length - a[0].length)) {
    if (out.includes(s)) out = out.split(s).join(name ? `[secret ${name} redacted]` : "[redacted]");
  }
  return out.replace(/\b(sk-[A-Za-z0-9_-]{8,})/g, "[redacted]");
}

export class Logger {
  constructor(
    public level: LogLevel = "info",
    private readonly sink: (line: string) => void = (line) => process.stderr.write(line + "\n"),
  ) {}

  log(level: LogLevel, message: string): void {
    if (RANK[level] < RANK[this.level]) return;
    try {
      this.sink(`[${new Date().toISOString()}] ${level.toUpperCase()} ${redact(message)}`);
    } catch {
      // stderr closed: nothing left to tell.
    }
  }
  debug(m: string): void { this.log("debug", m); }
  info(m: string): void { this.log("info", m); }
  warn(m: string): void { this.log("warn", m); }
  error(m: string): void { this.log("error", m); }
}

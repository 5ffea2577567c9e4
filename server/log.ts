// Logging to stderr with levels. stdout carries only protocol. Secrets never reach a log line.

import type { LogLevel } from "./protocol.js";

const RANK: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** Values that must never be printed (API keys); registered as they become known. */
const secrets = new Set<string>();

export function registerSecret(value: string | undefined): void {
  if (value && value.length >= 8) secrets.add(value);
}

/** Replaces every known secret, and anything shaped like an API key, with a marker. */
export function redact(text: string): string {
  let out = text;
  for (const s of secrets) out = out.split(s).join("[redacted]");
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

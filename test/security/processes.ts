// The real processes a security test starts (the mock LLM as its own process, bundles of the server),
// ended together when the file's tests are done.

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import type { BundleProcess } from "../server/stdio-client.js";

const ROOT = resolve(import.meta.dirname, "../..");

export class Processes {
  private readonly children: ChildProcess[] = [];
  private readonly bundles: BundleProcess[] = [];

  /** Starts the mock LLM (test/fixtures/mock-llm/cli.mjs) with SCRIPT in a process of its own; returns its URL. */
  async mock(script: unknown): Promise<string> {
    const dir = mkdtempSync(join(tmpdir(), "agent-q-security-"));
    const file = join(dir, "script.json");
    writeFileSync(file, JSON.stringify(script));
    const proc = spawn(process.execPath, [join(ROOT, "test/fixtures/mock-llm/cli.mjs"), "--script", file], { stdio: ["pipe", "pipe", "inherit"] });
    this.children.push(proc);
    const line = await new Promise<string>((res) => createInterface({ input: proc.stdout! }).once("line", res));
    return (JSON.parse(line) as { url: string }).url;
  }

  /** Keeps BUNDLE to be ended with the rest. */
  keep(bundle: BundleProcess): BundleProcess {
    this.bundles.push(bundle);
    return bundle;
  }

  end(): void {
    for (const c of this.children) if (c.exitCode === null) c.kill("SIGTERM");
    for (const b of this.bundles) b.kill();
  }
}

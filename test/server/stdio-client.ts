// A client for the real bundle: spawns it and speaks Content-Length framed JSON-RPC over its stdio,
// with a raw writer for malformed input.

import { fileURLToPath } from "node:url";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createMessageConnection, StreamMessageReader, StreamMessageWriter, type MessageConnection } from "vscode-jsonrpc/node";

export const BUNDLE = fileURLToPath(new URL("../../dist/sly-agent-q-server.js", import.meta.url));

export interface BundleProcess {
  child: ChildProcessWithoutNullStreams;
  connection: MessageConnection;
  stderr: () => string;
  /** Writes raw bytes to the server's stdin (for malformed frames). */
  raw(text: string): void;
  exited: Promise<number | null>;
  kill(): void;
}

export function startBundle(args: string[] = [], env: NodeJS.ProcessEnv = {}): BundleProcess {
  const child = spawn(process.execPath, [BUNDLE, ...args], { env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "pipe"] });
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
  connection.listen();
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    child,
    connection,
    stderr: () => err,
    raw: (text) => child.stdin.write(text),
    exited,
    kill: () => {
      connection.dispose();
      child.kill("SIGKILL");
    },
  };
}

export function frame(body: string): string {
  return `Content-Length: ${Buffer.byteLength(body, "utf8")}\r\n\r\n${body}`;
}

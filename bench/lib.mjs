// Shared helpers of the benchmark scripts: statistics, a minimal JSON-RPC client for the bundled
// server (Content-Length framing over stdio, the way Emacs's jsonrpc.el talks to it), the mock LLM,
// resident memory from /proc, and the results file that bench/report.mjs turns into the table.

import { spawn } from "node:child_process";
import { appendFileSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("..", import.meta.url));
export const BUNDLE = `${ROOT}dist/sly-agent-q-server.js`;
export const MOCK_CLI = `${ROOT}test/fixtures/mock-llm/cli.mjs`;

/** The P-th percentile (0..100) of SAMPLES, linearly interpolated. */
export function percentile(samples, p) {
  const s = [...samples].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const i = ((s.length - 1) * p) / 100;
  const lo = Math.floor(i);
  return s[lo] + (s[Math.min(lo + 1, s.length - 1)] - s[lo]) * (i - lo);
}
export const median = (samples) => percentile(samples, 50);

/** Appends one row for the final table to the file named by $BENCH_RESULTS (JSON lines). */
export function record(row) {
  const line = JSON.stringify(row);
  if (process.env.BENCH_RESULTS) appendFileSync(process.env.BENCH_RESULTS, line + "\n");
  else process.stdout.write(line + "\n");
}

/** VmRSS of process PID in MB. */
export function rssMb(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** CPU time (user + system) process PID has used so far, in ms (clock ticks of 10 ms). */
export function cpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** CPU time (user + system) of this process's children that have exited and been waited for, in ms. */
export function childrenCpuMs() {
  const f = readFileSync("/proc/self/stat", "utf8").split(") ")[1].split(" ");
  return (Number(f[13]) + Number(f[14])) * 10;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Spawns the server (node BUNDLE --stdio) and speaks JSON-RPC with it. ON_NOTIFICATION gets every
 * notification (method, params, client); answer emacs/call with client.notify("emacs/reply", ...).
 */
export function startServer({ bundle = BUNDLE, cwd, env = {}, onNotification = () => {} } = {}) {
  const child = spawn(process.execPath, [bundle, "--stdio", "--log-level", "warn"], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const pending = new Map();
  let nextId = 1;
  let buf = Buffer.alloc(0);
  const client = {
    child,
    pid: child.pid,
    stderr: () => stderr,
    request(method, params) {
      const id = nextId++;
      send({ jsonrpc: "2.0", id, method, params });
      return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
    },
    notify(method, params) {
      send({ jsonrpc: "2.0", method, params });
    },
    async close() {
      try {
        await Promise.race([client.request("shutdown", null), sleep(2000)]);
        client.notify("exit", null);
      } catch {}
      await Promise.race([new Promise((r) => child.once("exit", r)), sleep(2000)]);
      child.kill("SIGKILL");
    },
  };
  function send(msg) {
    const body = Buffer.from(JSON.stringify(msg), "utf8");
    child.stdin.write(`Content-Length: ${body.length}\r\n\r\n`);
    child.stdin.write(body);
  }
  child.stdout.on("data", (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const len = Number(/Content-Length: (\d+)/i.exec(buf.subarray(0, end).toString())?.[1]);
      if (buf.length < end + 4 + len) return;
      const msg = JSON.parse(buf.subarray(end + 4, end + 4 + len).toString("utf8"));
      buf = buf.subarray(end + 4 + len);
      if (msg.id !== undefined && !msg.method) {
        const p = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) p?.reject(new Error(msg.error.message));
        else p?.resolve(msg.result);
      } else if (msg.method) {
        onNotification(msg.method, msg.params, client);
      }
    }
  });
  return client;
}

/** Starts the mock LLM with SCRIPT; returns {url, setScript, requests, close}. */
export async function startMock(script = { steps: [] }) {
  const child = spawn(process.execPath, [MOCK_CLI], { stdio: ["pipe", "pipe", "inherit"] });
  const line = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) resolve(out.split("\n")[0]);
    });
    child.once("exit", () => reject(new Error("the mock LLM exited")));
  });
  const { url } = JSON.parse(line);
  const mock = {
    url,
    pid: child.pid,
    async setScript(s) {
      await fetch(`${url}/_script`, { method: "POST", body: JSON.stringify(s) });
    },
    async requests() {
      return (await fetch(`${url}/_requests`)).json();
    },
    close() {
      child.stdin.end();
      child.kill();
    },
  };
  await mock.setScript(script);
  return mock;
}

// The protocol is declared once (server/protocol.ts) and the server answers all of it: every method
// Emacs may send has a handler; the server sends nothing that is not declared; protocol.ts depends on
// no implementation module; and server/ has no import cycles. The Elisp half of the agreement is
// checked by test/elisp/sly-agent-q-protocol-test.el against `--protocol`.

import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ErrorCodes as RpcErrorCodes, ResponseError, type NotificationMessage } from "vscode-jsonrpc/node";
import { registerChatHandlers } from "../../server/agent/chat-handlers.js";
import { registerMcpHandlers } from "../../server/mcp/handlers.js";
import { ClientNotifications, Requests } from "../../server/protocol.js";
import { describeProtocol } from "../../server/protocol-description.js";
import { AgentServer } from "../../server/rpc/server.js";
import { connectionPair } from "./helpers.js";

const serverDir = resolve(__dirname, "../../server");

function sources(dir = serverDir): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [],
  );
}

/** The modules FILE imports (relative specifiers only), as absolute .ts paths. */
function localImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const specifiers = [...text.matchAll(/^\s*(?:import|export)\b[^"';]*?from\s+"([^"]+)"/gms)].map((m) => m[1]!);
  return specifiers.filter((s) => s.startsWith(".")).map((s) => resolve(dirname(file), s.replace(/\.js$/, ".ts")));
}

let dispose: (() => void) | undefined;
afterEach(() => dispose?.());

/** The server wired as server/main.ts wires it, initialized. */
async function liveServer() {
  // Every method gets {} on purpose: not in shape.
  const pair = connectionPair({ checked: false });
  const unhandled: NotificationMessage[] = [];
  pair.serverSide.onUnhandledNotification((n) => unhandled.push(n));
  const server = new AgentServer(pair.serverSide, { env: {} });
  server.logger.level = "error";
  registerChatHandlers(server);
  registerMcpHandlers(server);
  server.listen();
  pair.client.listen();
  dispose = () => {
    server.dispose();
    pair.dispose();
  };
  await pair.client.sendRequest(Requests.initialize, { capabilities: {} });
  return { client: pair.client, unhandled };
}

describe("the protocol", () => {
  it("has a server handler for every request Emacs may send", async () => {
    const { client } = await liveServer();
    const missing: string[] = [];
    for (const m of describeProtocol().methods.filter((m) => m.direction === "emacs->server" && m.kind === "request")) {
      if (m.method === "shutdown") continue; // answered below, last
      try {
        await client.sendRequest(m.method, {});
      } catch (err) {
        if (err instanceof ResponseError && err.code === RpcErrorCodes.MethodNotFound) missing.push(m.method);
      }
    }
    await expect(client.sendRequest(Requests.shutdown)).resolves.toBeNull();
    expect(missing).toEqual([]);
  });

  it("has a server handler for every notification Emacs may send", async () => {
    const { client, unhandled } = await liveServer();
    for (const m of describeProtocol().methods.filter((m) => m.direction === "emacs->server" && m.kind === "notification")) {
      if (m.method === ClientNotifications.exit.method) continue; // would end the process in main
      await client.sendNotification(m.method, {});
    }
    // A request after them: notifications are handled in order, so all were seen by now.
    await client.sendRequest(Requests.toolsList, {});
    expect(unhandled.map((n) => n.method)).toEqual([]);
    // And the check can fail: an undeclared method is reported unhandled.
    await client.sendNotification("no/such", {});
    await client.sendRequest(Requests.toolsList, {});
    expect(unhandled.map((n) => n.method)).toEqual(["no/such"]);
  });

  it("declares its methods in protocol.ts only, and protocol.ts imports no implementation", () => {
    const protocolFile = join(serverDir, "protocol.ts");
    expect(localImports(protocolFile)).toEqual([]);
    const elsewhere = sources().filter((f) => f !== protocolFile && /new (?:Request|Notification)Type0?\b/.test(readFileSync(f, "utf8")));
    expect(elsewhere.map((f) => relative(serverDir, f))).toEqual([]);
    const names = describeProtocol().methods.map((m) => m.method);
    expect(new Set(names).size).toBe(names.length);
  });

  it("leaves server/ free of import cycles", () => {
    const graph = new Map(sources().map((f) => [f, localImports(f)]));
    const cycles: string[] = [];
    const state = new Map<string, "visiting" | "done">();
    const visit = (file: string, path: string[]) => {
      if (state.get(file) === "done") return;
      if (state.get(file) === "visiting") {
        cycles.push([...path.slice(path.indexOf(file)), file].map((f) => relative(serverDir, f)).join(" -> "));
        return;
      }
      state.set(file, "visiting");
      for (const next of graph.get(file) ?? []) visit(next, [...path, file]);
      state.set(file, "done");
    };
    for (const file of graph.keys()) visit(file, []);
    expect(cycles).toEqual([]);
  });
});

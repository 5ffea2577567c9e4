// Entry point of the bundled server: `node sly-agent-q-server.js [--stdio] [--log-level LEVEL]`.
// stdout carries only JSON-RPC; everything else goes to stderr.

import { createMessageConnection, StreamMessageReader } from "vscode-jsonrpc/node";
import { Logger } from "./log.js";
import type { LogLevel } from "./protocol.js";
import { describeProtocol } from "./protocol-description.js";
import { registerChatHandlers } from "./agent/chat-handlers.js";
import { registerMcpHandlers } from "./mcp/handlers.js";
import { FramedMessageWriter } from "./rpc/framed-writer.js";
import { GuardedMessageReader } from "./rpc/guarded-reader.js";
import { AgentServer } from "./rpc/server.js";
import { builtinTools } from "./tools/catalog/index.js";
import { SERVER_NAME, SERVER_VERSION } from "./version.js";

const HELP = `${SERVER_NAME} ${SERVER_VERSION}: the JSON-RPC server of sly-agent-q, started by Emacs.

Usage: node ${SERVER_NAME}-server.js [options]

Speaks JSON-RPC 2.0 with Content-Length framing on stdin/stdout; logs go to stderr.

Options:
  --stdio              talk over stdin/stdout (the default and only transport)
  --log-level LEVEL    debug, info, warn or error (default info)
  --mcp-stdio          instead: an MCP server on stdin/stdout that forwards to the MCP server
                       started in Emacs (M-x sly-agent-q-mcp-start), found through its state file
  --mcp-state FILE     that state file (default $SLY_AGENT_Q_MCP_STATE, else
                       $XDG_STATE_HOME/sly-agent-q/mcp.json, else ~/.local/state/sly-agent-q/mcp.json)
  --protocol           print the JSON-RPC protocol (methods, directions, emacs/call kinds,
                       error codes) as JSON and exit
  --tools              print the tool catalog (names, aliases, runtimes, implementations, review
                       kinds, categories, parameters) as JSON and exit
  --version            print the version and exit
  --help               print this help and exit

Environment: ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OPENAI_API_KEY, OPENAI_BASE_URL
(the client's configuration may give these instead).
`;

function main(argv: string[]): void {
  let level: LogLevel = "info";
  let mcpStdio = false;
  let mcpState: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--version") {
      process.stdout.write(`${SERVER_VERSION}\n`);
      return;
    } else if (a === "--protocol") {
      process.stdout.write(`${JSON.stringify(describeProtocol(), null, 2)}\n`);
      return;
    } else if (a === "--tools") {
      process.stdout.write(`${JSON.stringify(describeCatalog(), null, 2)}\n`);
      return;
    } else if (a === "--help" || a === "-h") {
      process.stdout.write(HELP);
      return;
    } else if (a === "--log-level") {
      const v = argv[++i];
      if (v !== "debug" && v !== "info" && v !== "warn" && v !== "error") return usage(`--log-level takes debug, info, warn or error, not ${String(v)}`);
      level = v;
    } else if (a === "--mcp-stdio") {
      mcpStdio = true;
    } else if (a === "--mcp-state") {
      mcpState = argv[++i];
      if (!mcpState) return usage("--mcp-state takes a file name");
    } else if (a !== "--stdio") {
      return usage(`unknown option ${a}`);
    }
  }
  // Nothing but protocol may reach stdout: route stray console output to stderr.
  console.log = console.info = console.debug = (...args: unknown[]) => process.stderr.write(args.map(String).join(" ") + "\n");
  if (mcpStdio) {
    // Loaded only here: the agent server never needs the shim (nor the MCP SDK before an MCP request).
    import("./mcp/stdio-shim.js").then(({ runStdioShim }) => runStdioShim(mcpState)).catch((err: unknown) => {
      process.stderr.write(`${SERVER_NAME} --mcp-stdio: ${(err as Error)?.message ?? String(err)}\n`);
      process.exit(1);
    });
    return;
  }

  const logger = new Logger(level);
  const writer = new FramedMessageWriter(process.stdout);
  const reader = new GuardedMessageReader(new StreamMessageReader(process.stdin), writer);
  const connection = createMessageConnection(reader, writer);
  const server = new AgentServer(connection, {
    logger,
    onExit: (code) => {
      server.dispose();
      process.exit(code);
    },
  });
  registerChatHandlers(server);
  const mcp = registerMcpHandlers(server);
  process.on("exit", () => mcp.stopSync());
  // Node ends on these signals without its exit handlers, which stop the commands still running (and
  // the MCP servers): Emacs exiting sends SIGHUP. They end the server as before, through them.
  for (const [sig, n] of [["SIGHUP", 1], ["SIGINT", 2], ["SIGTERM", 15]] as const) process.on(sig, () => process.exit(128 + n));
  process.on("uncaughtException", (err) => logger.error(`uncaught: ${err.stack ?? err.message}`));
  process.on("unhandledRejection", (err) => logger.error(`unhandled rejection: ${String((err as Error)?.stack ?? err)}`));
  server.listen();
  logger.info(`${SERVER_NAME} ${SERVER_VERSION} listening on stdio (node ${process.version})`);
}

function usage(message: string): void {
  process.stderr.write(`${SERVER_NAME}: ${message}\n\n${HELP}`);
  process.exitCode = 2;
}

main(process.argv.slice(2));

/** The catalog as the other halves' tests read it: what each tool is called, where it runs, how it is reviewed. */
function describeCatalog() {
  return builtinTools.map((t) => ({
    name: t.name,
    ...(t.aliasOf ? { aliasOf: t.aliasOf } : {}),
    runtime: t.runtime,
    ...(t.implementation ? { implementation: t.implementation } : {}),
    review: t.review ?? "arguments",
    safety: t.safety,
    categories: [...t.categories],
    parameters: Object.keys(t.parameters),
    ...(t.argumentNames ? { argumentNames: { ...t.argumentNames } } : {}),
    required: [...t.required],
    description: t.description,
  }));
}

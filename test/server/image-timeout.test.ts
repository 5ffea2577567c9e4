// One image timeout. Emacs's sly-agent-q-image-timeout (imageTimeoutMs in the
// configuration) and the helpers' load timeout set the executor's deadline for image tools, so the
// server never cuts an evaluation the image and Emacs still allow.

import { afterEach, describe, expect, it } from "vitest";
import type { MessageConnection } from "vscode-jsonrpc/node";
import type { InitializeResult } from "../../server/protocol.js";
import { AgentServer } from "../../server/rpc/server.js";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";
import { connectionPair } from "./helpers.js";

let dispose: (() => void) | undefined;
afterEach(() => dispose?.());

async function started(configuration: Record<string, unknown>): Promise<{ server: AgentServer; client: MessageConnection }> {
  const pair = connectionPair();
  const server = new AgentServer(pair.serverSide, { registry: createDefaultRegistry() });
  server.logger.level = "error";
  pair.client.listen();
  server.listen();
  dispose = () => {
    server.dispose();
    pair.dispose();
  };
  await pair.client.sendRequest<InitializeResult>("initialize", {
    clientInfo: { name: "test" },
    capabilities: { tools: true, image: true, approvals: true },
    configuration,
  });
  return { server, client: pair.client };
}

const deadline = (server: AgentServer, name: string) => server.executor.timeoutFor(server.registry.get(name)!);

describe("image tool deadlines", () => {
  it("derive from imageTimeoutMs above 60 s, plus the helpers' load time", async () => {
    const { server } = await started({ imageTimeoutMs: 120_000, imageLoadTimeoutMs: 300_000 });
    for (const name of ["eval_form", "compile_form", "describe_symbol", "macroexpand_form"]) {
      expect(deadline(server, name)).toBeGreaterThan(120_000 + 300_000);
    }
  });

  it("follow a configuration change", async () => {
    const { server, client } = await started({ imageTimeoutMs: 2_000, imageLoadTimeoutMs: 1_000 });
    const small = deadline(server, "eval_form");
    expect(small).toBeGreaterThan(3_000);
    expect(small).toBeLessThan(60_000);
    await client.sendRequest("configuration/change", { configuration: { imageTimeoutMs: 600_000 } });
    expect(deadline(server, "eval_form")).toBeGreaterThan(600_000);
  });

  it("leave Emacs tools on the default tool timeout", async () => {
    const { server } = await started({ imageTimeoutMs: 120_000 });
    expect(deadline(server, "read_file")).toBeLessThan(120_000);
  });
});

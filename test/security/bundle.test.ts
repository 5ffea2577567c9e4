// Attack classes 4 (secrets in tool results) and 5 (malformed UTF-16 to Emacs), against the real
// bundle over stdio, with the mock LLM as a separate process and this test as the Emacs side.

import { afterAll, expect, it } from "vitest";
import type { EmacsCallParams } from "../../server/protocol.js";
import { startBundle } from "../server/stdio-client.js";
import { Processes } from "./processes.js";

const processes = new Processes();
afterAll(() => processes.end());

/** A bundle whose emacs/call of kind image is answered by IMAGE; collects every notification. */
function server(env: NodeJS.ProcessEnv, image: (call: EmacsCallParams) => string) {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(ANTHROPIC|OPENAI)_/.test(k)));
  const b = startBundle(["--stdio", "--log-level", "debug"], { ...clean, ...env });
  processes.keep(b);
  const notes: { method: string; params: any }[] = [];
  let finish!: (p: any) => void;
  const ended = new Promise<any>((r) => (finish = r));
  b.connection.onNotification((method: string, params: any) => {
    notes.push({ method, params });
    if (method === "emacs/call" && params.kind === "image") void b.connection.sendNotification("emacs/reply", { id: params.id, result: { content: image(params) } });
    if (method === "chat/turnFinished" || method === "chat/turnFailed") finish({ method, ...params });
  });
  return { b, notes, ended };
}

it("redacts known secrets from tool results before the chat, the logs and the model see them", async () => {
  const apiKey = "sk-ant-security-test-0123456789abcdef";
  const token = "ghp_TotallySecretToken42";
  const password = "hunter2-but-longer";
  const url = await processes.mock({
    steps: [
      { content: [{ type: "tool_use", name: "eval_form", input: { form: "(sb-ext:posix-getenv \"ANTHROPIC_API_KEY\")" } }] },
      { content: [{ type: "text", text: "I saw: {{last_tool_result}}" }] },
    ],
  });
  const { b, notes, ended } = server({ ANTHROPIC_API_KEY: apiKey, MY_GITHUB_TOKEN: token, DB_Password: password, SHORT_KEY: "abc" }, () =>
    `key=${apiKey} token=${token} pw=${password} short=abc`,
  );
  await b.connection.sendRequest("initialize", {
    clientInfo: { name: "security" },
    capabilities: { tools: true, image: true, approvals: false },
    configuration: { provider: "anthropic", baseUrl: url, model: "claude-sonnet-4-6" },
  });
  await b.connection.sendRequest("chat/send", { text: "what is the key?" });
  const end = await ended;
  expect(end.method).toBe("chat/turnFinished");
  const result = notes.find((n) => n.method === "chat/toolResult")!.params;
  expect(result.success).toBe(true);
  expect(result.content).toBe("key=[secret ANTHROPIC_API_KEY redacted] token=[secret MY_GITHUB_TOKEN redacted] pw=[secret DB_Password redacted] short=abc");
  // What the model saw: the request bodies (the headers carry the key by design, to authenticate).
  const requests = JSON.stringify(((await (await fetch(`${url}/_requests`)).json()) as { body: unknown }[]).map((r) => r.body));
  const everything = [JSON.stringify(notes), requests, b.stderr()].join("\n");
  for (const secret of [apiKey, token, password]) expect(everything).not.toContain(secret);
  expect(requests).toContain("[secret ANTHROPIC_API_KEY redacted]");
  expect(end.text).toContain("[secret MY_GITHUB_TOKEN redacted]");
}, 30_000);

it("sends only well-formed UTF-16: a lone surrogate from the model becomes U+FFFD and the turn finishes", async () => {
  const url = await processes.mock({
    steps: [
      { content: [{ type: "text", text: "a\ud800b" }, { type: "tool_use", name: "eval_form", input: { form: "(print \"\udc00\")" } }] },
      { content: [{ type: "text", text: "done \ud83d and {{last_tool_result}}" }] },
    ],
  });
  const { b, notes, ended } = server({ ANTHROPIC_API_KEY: "sk-ant-utf16-test-key-000000" }, (call) => `ran ${JSON.stringify((call.params as { arguments: unknown }).arguments)} \udfff`);
  await b.connection.sendRequest("initialize", {
    clientInfo: { name: "security" },
    capabilities: { tools: true, image: true, approvals: false },
    configuration: { provider: "anthropic", baseUrl: url, model: "claude-sonnet-4-6" },
  });
  await b.connection.sendRequest("chat/send", { text: "go" });
  const end = await ended;
  expect(end.method).toBe("chat/turnFinished");
  const lone = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
  const strings = (v: unknown): string[] =>
    typeof v === "string" ? [v] : v && typeof v === "object" ? Object.entries(v).flatMap(([k, x]) => [k, ...strings(x)]) : [];
  for (const n of notes) for (const str of strings(n.params)) expect(lone.test(str), `${n.method}: ${JSON.stringify(str)}`).toBe(false);
  const deltas = notes.filter((n) => n.method === "chat/textDelta").map((n) => n.params.text).join("");
  expect(deltas).toContain("a\ufffdb");
  const image = notes.find((n) => n.method === "emacs/call" && n.params.kind === "image")!.params;
  expect(image.params.arguments.form).toBe("(print \"\ufffd\")");
  expect(end.text).toMatch(/^done \ufffd and /);
}, 30_000);

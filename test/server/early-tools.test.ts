// Tools that start while the answer streams: a call that only reads starts as soon as its block ends,
// before the rest of the message; anything that may change something waits for the end of the message,
// and so does every call after it; results go back in the model's order; a stream that fails or is
// cancelled discards what started and runs nothing more. Against the mock LLM with the real SDKs.

import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startMockLLM } from "../fixtures/mock-llm/server.mjs";
import { FAKE_KEY, newConversation, provider, turn, type Harness } from "./agent-helpers.js";
import { AnthropicProvider } from "../../server/llm/anthropic.js";
import type { LLMProvider, Message } from "../../server/llm/provider.js";
import { Executor } from "../../server/tools/executor.js";
import { ToolPolicy, type ApprovalReason } from "../../server/tools/policy.js";
import { ToolRegistry } from "../../server/tools/registry.js";
import { defineTool } from "../../server/tools/tool.js";

type Kind = "anthropic" | "openai";

interface Probe {
  log: string[];
  /** Resolves when the probe called NAME starts. */
  started(name: string): Promise<void>;
  /** Names of probes whose signal was aborted while they ran. */
  aborted: string[];
  /** Probes named here wait until their signal aborts. */
  holding: Set<string>;
}

function probeRegistry(): { registry: ToolRegistry; probe: Probe } {
  const waiters = new Map<string, () => void>();
  const probe: Probe = {
    log: [],
    aborted: [],
    holding: new Set(),
    started: (name) => new Promise((resolve) => waiters.set(name, resolve)),
  };
  const registry = new ToolRegistry();
  registry.register(
    defineTool({
      name: "probe",
      description: "Reads something.",
      parameters: { name: { type: "string", description: "Its name." } },
      required: ["name"],
      safety: "safe",
      categories: ["introspection"],
      runtime: "node",
      handler: async (a, ctx) => {
        const name = String(a.name);
        probe.log.push(`start:${name}`);
        waiters.get(name)?.();
        if (probe.holding.has(name)) {
          await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
          probe.aborted.push(name);
        }
        probe.log.push(`end:${name}`);
        return `read ${name}`;
      },
    }),
  );
  registry.register(
    defineTool({
      name: "change",
      description: "Changes something.",
      parameters: { form: { type: "string", description: "The form." } },
      required: ["form"],
      safety: "cautious",
      categories: ["execution"],
      runtime: "node",
      handler: async (a) => {
        probe.log.push(`start:change`);
        await new Promise((r) => setTimeout(r, 20));
        probe.log.push(`end:change`);
        return `changed ${String(a.form)}`;
      },
    }),
  );
  registry.register(
    defineTool({
      name: "mover",
      description: "Moves point, and reads nothing.",
      parameters: {},
      safety: "safe",
      effect: "moves point",
      categories: ["navigation"],
      runtime: "node",
      handler: async () => {
        probe.log.push("start:mover");
        await new Promise((r) => setTimeout(r, 30));
        probe.log.push("end:mover");
        return "moved";
      },
    }),
  );
  registry.register(
    defineTool({
      name: "library",
      description: "Reads a library's definition, outside the project.",
      parameters: {},
      safety: "safe",
      categories: ["introspection"],
      runtime: "node",
      handler: async (_a, ctx) => {
        probe.log.push("start:library");
        waiters.get("library")?.();
        await ctx.readOutside!("/elsewhere/library.lisp");
        probe.log.push("end:library");
        return "read the library";
      },
    }),
  );
  return { registry, probe };
}

/** An executor over REGISTRY whose user approves everything asked, noting each call id in ASKED and why it asked in REASONS. */
function approvingExecutor(registry: ToolRegistry, asked: string[], reasons: ApprovalReason[] = []): Executor {
  return new Executor({
    registry,
    approve: async (request) => {
      asked.push(request.callId);
      reasons.push(request.reason);
      return { decision: "approved" };
    },
  });
}

/** PROVIDER, logging "stream-end" into LOG when an answer is complete. */
function logged(inner: LLMProvider, log: string[]): LLMProvider {
  return {
    name: inner.name,
    stream: async (request, handlers, signal) => {
      const response = await inner.stream(request, handlers, signal);
      log.push("stream-end");
      return response;
    },
  };
}

const probeCall = (name: string) => ({ type: "tool_use" as const, name: "probe", input: { name } });
const libraryCall = { type: "tool_use" as const, name: "library", input: {} };
const changeCall = { type: "tool_use" as const, name: "change", input: { form: "(setf *x* 1)" } };
const moverCall = { type: "tool_use" as const, name: "mover", input: {} };

/** How many stream chunks the mock sends before the first chunk of tool call N (0-based), no text blocks. */
function chunksBeforeCall(kind: Kind, n: number): number {
  // Anthropic: message_start, ping, then per call start, five deltas (an empty one and four pieces), stop.
  // OpenAI: the role chunk, then per call a header and four argument pieces.
  return kind === "anthropic" ? 2 + 7 * n : 1 + 5 * n;
}

function toolUses(messages: readonly Message[]): string[] {
  return messages.flatMap((m) => (m.role === "assistant" ? m.content.flatMap((b) => (b.type === "tool_use" ? [b.name] : [])) : []));
}

describe.each<Kind>(["anthropic", "openai"])("tools starting while the answer streams, over %s", (kind) => {
  let h: Harness;
  let probe: Probe;
  beforeAll(async () => {
    const mock = await startMockLLM();
    const built = probeRegistry();
    probe = built.probe;
    h = { mock, registry: built.registry, executor: new Executor({ registry: built.registry }), close: () => mock.close() };
  });
  afterAll(async () => {
    await h.close();
  });

  it("starts a safe call before the message ends; a change, and every call after it, waits; results keep the model's order", async () => {
    probe.log.length = 0;
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Look, change, look again", {
      settings: { provider: logged(provider(kind, h.mock), probe.log) },
      script: {
        steps: [
          { content: [probeCall("a"), probeCall("b"), changeCall, probeCall("c")], chunk_delay_ms: 5 },
          { content: [{ type: "text", text: "Done." }] },
        ],
      },
    });
    expect(outcome.status).toBe("finished");
    const at = (what: string) => probe.log.indexOf(what);
    // a and b ran while the answer was still streaming...
    expect(at("start:a")).toBeGreaterThanOrEqual(0);
    expect(at("start:a")).toBeLessThan(at("stream-end"));
    expect(at("start:b")).toBeLessThan(at("stream-end"));
    // ...the change only after the whole message, and c only after the change was done.
    expect(at("start:change")).toBeGreaterThan(at("stream-end"));
    expect(at("start:c")).toBeGreaterThan(at("end:change"));
    // Every call announced before any result; the results in the history in the model's order.
    expect(events.order.slice(0, 4)).toEqual(["call:probe", "call:probe", "call:change", "call:probe"]);
    const results = c.messages[2]!.content.flatMap((b) => (b.type === "tool_result" ? [b.content] : []));
    expect(results).toEqual(["read a", "read b", "changed (setf *x* 1)", "read c"]);
  });

  it("tells when each call starts: a read that started early as it is announced, the rest only as they run, after approval", async () => {
    const shown: string[] = [];
    const executor = new Executor({
      registry: h.registry,
      safetyOverrides: { change: "dangerous" },
      approve: async (request) => {
        shown.push(`asked:${request.callId}`);
        await new Promise((r) => setTimeout(r, 20));
        return { decision: "approved" };
      },
    });
    const c = newConversation();
    const { outcome, events } = await turn({ ...h, executor }, kind, c, "Look, change, look again", {
      script: {
        steps: [
          { content: [probeCall("a"), changeCall, probeCall("c")], chunk_delay_ms: 5 },
          { content: [{ type: "text", text: "Done." }] },
        ],
      },
    });
    expect(outcome.status).toBe("finished");
    const [a, change, c2] = events.calls.map((x) => x.call.id);
    const seen = events.callsShown;
    const at = (what: string) => seen.indexOf(what);
    // The read that started while the answer streamed is announced as running.
    expect(at(`started:${a}`)).toBe(at(`call:${a}`) + 1);
    // The change is announced with the rest, and starts only after the user approved it...
    expect(at(`started:${change}`)).toBeGreaterThan(at(`call:${c2}`));
    expect(shown).toContain(`asked:${change}`);
    // ...and the read after it only once the change is done.
    expect(at(`started:${c2}`)).toBeGreaterThan(at(`result:${change}`));
    // Each call: announced, started, answered, once each.
    for (const id of [a, change, c2]) {
      expect(seen.filter((s) => s.endsWith(`:${id}`))).toEqual([`call:${id}`, `started:${id}`, `result:${id}`]);
    }
  });

  for (const [what, content] of [
    ["started early", [libraryCall]],
    ["started after the call before it", [changeCall, libraryCall]],
  ] as const) {
    it(`a call that asks as it runs (a read outside the project) is said to run again once allowed (${what})`, async () => {
      const asked: string[] = [];
      const reasons: ApprovalReason[] = [];
      const executor = approvingExecutor(h.registry, asked, reasons);
      const c = newConversation();
      const { outcome, events } = await turn({ ...h, executor }, kind, c, "Read the library", {
        script: { steps: [{ content: [...content], chunk_delay_ms: 5 }, { content: [{ type: "text", text: "Done." }] }] },
      });
      expect(outcome.status).toBe("finished");
      const id = events.calls.find((x) => x.call.name === "library")!.call.id;
      expect(asked).toEqual([id]);
      // Asked as a read outside the project: Emacs offers neither "always allow" nor an edit of it.
      expect(reasons).toEqual([{ kind: "outside", path: "/elsewhere/library.lisp" }]);
      // Started (announced running, or told as it ran), then asked (the chat says "waiting for
      // approval"), then started again once allowed, then its result.
      expect(events.callsShown.filter((s) => s.endsWith(`:${id}`))).toEqual([`call:${id}`, `started:${id}`, `started:${id}`, `result:${id}`]);
    });
  }

  it("a call refused or denied is never said to start", async () => {
    const executor = new Executor({ registry: h.registry, safetyOverrides: { change: "dangerous" }, approve: async () => ({ decision: "denied" }) });
    const c = newConversation();
    const { outcome, events } = await turn({ ...h, executor }, kind, c, "Change", {
      script: { steps: [{ content: [changeCall, { type: "tool_use", name: "no_such_tool", input: {} }] }, { content: [{ type: "text", text: "Fine." }] }] },
    });
    expect(outcome.status).toBe("finished");
    expect(events.callsShown.filter((s) => s.startsWith("started:"))).toEqual([]);
    expect(events.callsShown.filter((s) => s.startsWith("result:"))).toHaveLength(2);
  });

  it("discards a call that started early when the turn is cancelled mid-stream, and runs nothing more", async () => {
    probe.log.length = 0;
    probe.aborted.length = 0;
    probe.holding.add("held");
    const c = newConversation();
    const controller = new AbortController();
    const started = probe.started("held");
    const run = turn(h, kind, c, "Look", {
      signal: controller.signal,
      script: { steps: [{ content: [probeCall("held"), probeCall("later")], hang_after_chunks: chunksBeforeCall(kind, 1) + 1 }] },
    });
    await started;
    controller.abort();
    const { outcome, events } = await run;
    probe.holding.delete("held");
    expect(outcome).toMatchObject({ status: "failed", kind: "cancelled" });
    expect(probe.aborted).toEqual(["held"]);
    expect(probe.log).not.toContain("start:later");
    // Nothing of the cut answer was announced, reported or kept.
    expect(events.calls).toEqual([]);
    expect(events.results).toEqual([]);
    expect(toolUses(c.messages)).toEqual([]);
  });

  it("a stream that fails after its calls runs none of the rest: no change, no later call, no results", async () => {
    probe.log.length = 0;
    probe.aborted.length = 0;
    probe.holding.add("first");
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Look and change", {
      settings: { retry: { maxRetries: 0, baseDelayMs: 1, maxDelayMs: 1 } },
      script: {
        steps: [{ content: [probeCall("first"), changeCall, probeCall("second")], stream_error: { after_chunks: chunksBeforeCall(kind, 3), type: "api_error", message: "boom" } }],
      },
    });
    probe.holding.delete("first");
    expect(outcome.status).toBe("failed");
    // The first call had started (it only reads) and was stopped; nothing else ever ran.
    expect(probe.log).toContain("start:first");
    expect(probe.aborted).toEqual(["first"]);
    expect(probe.log.filter((l) => l.startsWith("start:"))).toEqual(["start:first"]);
    expect(events.results).toEqual([]);
    expect(toolUses(c.messages)).toEqual([]);
  });

  it("a read that must ask the user as it runs asks only after its call was announced; a cut stream asks nothing", async () => {
    probe.log.length = 0;
    const order: string[] = [];
    const asked: string[] = [];
    const executor = new Executor({
      registry: h.registry,
      approve: async (request, signal) => {
        asked.push(request.callId);
        order.push(`ask:${request.tool.name}`);
        if (signal.aborted) return { decision: "denied" };
        return { decision: "approved" };
      },
    });
    const withAsking = { ...h, executor };
    // A whole message: the approval comes after the call is announced, as for any call that asks.
    const c = newConversation();
    const { outcome } = await turn(withAsking, kind, c, "Read the library", {
      script: { steps: [{ content: [libraryCall, probeCall("after")], chunk_delay_ms: 5 }, { content: [{ type: "text", text: "Done." }] }] },
      onEvent: (what) => order.push(what),
    });
    expect(outcome.status).toBe("finished");
    expect(order.indexOf("ask:library")).toBeGreaterThan(order.indexOf("call"));
    const results = c.messages[2]!.content.flatMap((b) => (b.type === "tool_result" ? [b.content] : []));
    expect(results).toEqual(["read the library", "read after"]);

    // A stream cancelled after the call started: the user is never asked about a call of a discarded answer.
    asked.length = 0;
    const controller = new AbortController();
    const started = probe.started("library");
    const run = turn(withAsking, kind, newConversation(), "Read the library", {
      signal: controller.signal,
      script: { steps: [{ content: [libraryCall, probeCall("later")], hang_after_chunks: chunksBeforeCall(kind, 1) + 1 }] },
    });
    await started;
    await new Promise((resolve) => setImmediate(resolve));
    controller.abort();
    const cut = await run;
    expect(cut.outcome).toMatchObject({ status: "failed", kind: "cancelled" });
    expect(asked).toEqual([]);
    expect(cut.events.results).toEqual([]);
  });

  it("a read streamed before a change it comes after in the message waits for that change", async () => {
    probe.log.length = 0;
    const c = newConversation();
    const { outcome } = await turn(h, kind, c, "Look, change, look again", {
      settings: { provider: logged(provider(kind, h.mock), probe.log) },
      script: {
        steps: [
          // Calls c and d stream before the change, though the message holds the change before them.
          { content: [probeCall("a"), changeCall, probeCall("c"), probeCall("d")], block_order: [0, 2, 3, 1], chunk_delay_ms: 2 },
          { content: [{ type: "text", text: "Done." }] },
        ],
      },
    });
    expect(outcome.status).toBe("finished");
    const at = (what: string) => probe.log.indexOf(what);
    expect(at("start:c")).toBeGreaterThan(at("end:change"));
    expect(at("start:d")).toBeGreaterThan(at("end:change"));
    const results = c.messages[2]!.content.flatMap((b) => (b.type === "tool_result" ? [b.content] : []));
    expect(results).toEqual(["read a", "changed (setf *x* 1)", "read c", "read d"]);
  });

  it("calls that repeat an id (in the message, or one of the history's) each get a result of their own, in order", async () => {
    probe.log.length = 0;
    const c = newConversation();
    const { outcome, events } = await turn(h, kind, c, "Look twice", {
      script: {
        steps: [
          { content: [{ ...probeCall("a"), id: "same" }, { ...probeCall("b"), id: "same" }], chunk_delay_ms: 2 },
          { content: [{ ...probeCall("c"), id: "same" }] },
          { content: [{ type: "text", text: "Done." }] },
        ],
      },
    });
    expect(outcome.status).toBe("finished");
    const results = c.messages.flatMap((m) => (m.role === "user" ? m.content.flatMap((b) => (b.type === "tool_result" ? [`${b.toolUseId}:${b.content}`] : [])) : []));
    const ids = c.messages.flatMap((m) => (m.role === "assistant" ? m.content.flatMap((b) => (b.type === "tool_use" ? [b.id] : [])) : []));
    expect(new Set(ids).size).toBe(3);
    expect(results).toEqual([`${ids[0]}:read a`, `${ids[1]}:read b`, `${ids[2]}:read c`]);
    expect(events.results.map((r) => r.content)).toEqual(["read a", "read b", "read c"]);
    expect(probe.log.filter((l) => l.startsWith("start:"))).toEqual(["start:a", "start:b", "start:c"]);
  });

  it("a safe call that changes something besides answering (a declared effect) waits for the whole answer, and so does every call after it", async () => {
    probe.log.length = 0;
    const c = newConversation();
    const { outcome } = await turn(h, kind, c, "Look, move, look", {
      settings: { provider: logged(provider(kind, h.mock), probe.log) },
      script: { steps: [{ content: [probeCall("a"), moverCall, probeCall("b")], chunk_delay_ms: 5 }, { content: [{ type: "text", text: "Done." }] }] },
    });
    expect(outcome.status).toBe("finished");
    const at = (what: string) => probe.log.indexOf(what);
    expect(at("start:a")).toBeLessThan(at("stream-end"));
    expect(at("start:mover")).toBeGreaterThan(at("stream-end"));
    // Alone, in order: the read after it sees what it did.
    expect(at("start:b")).toBeGreaterThan(at("end:mover"));
  });

  it("a tool the user's settings made safe may still change something: it runs unasked, but never early, and alone", async () => {
    probe.log.length = 0;
    const executor = new Executor({ registry: h.registry, policy: new ToolPolicy(h.registry, { safetyOverrides: { change: "safe" } }) });
    const c = newConversation();
    const { outcome, events } = await turn({ ...h, executor }, kind, c, "Change, look", {
      settings: { provider: logged(provider(kind, h.mock), probe.log) },
      script: { steps: [{ content: [changeCall, probeCall("b")], chunk_delay_ms: 5 }, { content: [{ type: "text", text: "Done." }] }] },
    });
    expect(outcome.status).toBe("finished");
    const at = (what: string) => probe.log.indexOf(what);
    expect(at("start:change")).toBeGreaterThan(at("stream-end"));
    expect(at("start:b")).toBeGreaterThan(at("end:change"));
    expect(events.results.map((r) => r.content)).toEqual(["changed (setf *x* 1)", "read b"]);
  });

  it("a rule that denies a read, set while it ran early, applies: its early result is dropped and the call is refused", async () => {
    probe.log.length = 0;
    let policy = new ToolPolicy(h.registry);
    const executor = new Executor({ registry: h.registry, policy: () => policy });
    const c = newConversation();
    const startedA = probe.started("a");
    const run = turn({ ...h, executor }, kind, c, "Look", {
      script: { steps: [{ content: [probeCall("a"), probeCall("b")], chunk_delay_ms: 10 }, { content: [{ type: "text", text: "Done." }] }] },
    });
    await startedA;
    policy = new ToolPolicy(h.registry, { permissionRules: [{ action: "deny", tool: "probe", argument: "name", pattern: "^a$" }] });
    const { outcome, events } = await run;
    expect(outcome.status).toBe("finished");
    const results = events.results.map((r) => String(r.content));
    expect(results[0]).not.toContain("read a");
    expect(results[0]).toMatch(/denied|rule/i);
    expect(results[1]).toBe("read b");
  });

  it("a cancel after the answer's end marker, before its stream ended, cuts it like any other: nothing announced, reported or kept", async () => {
    probe.log.length = 0;
    const c = newConversation();
    const controller = new AbortController();
    const calls = [probeCall("a"), probeCall("b"), changeCall];
    // Every chunk up to message_stop (Anthropic: 2 + 7 per call + message_delta + message_stop) or up
    // to the finish_reason chunk (OpenAI: the role chunk, 5 per call, finish_reason); then it stalls.
    const run = turn(h, kind, c, "go", { signal: controller.signal, script: { steps: [{ content: calls, hang_after_chunks: kind === "anthropic" ? 25 : 17 }] } });
    await new Promise((r) => setTimeout(r, 200));
    controller.abort();
    const { outcome, events } = await run;
    expect(outcome).toMatchObject({ status: "failed", kind: "cancelled" });
    expect(events.calls).toEqual([]);
    expect(events.results).toEqual([]);
    expect(probe.log).not.toContain("start:change");
    expect(toolUses(c.messages)).toEqual([]);
  });

  // Anthropic only: there a block can be streamed again under its index (an OpenAI call's fragments
  // after a later call began make the stream malformed, which the failed-stream test covers).
  it.runIf(kind === "anthropic")("a call streamed again under its block's index runs once, and only the message's call asks", async () => {
    probe.log.length = 0;
    const asked: string[] = [];
    const executor = approvingExecutor(h.registry, asked);
    const c = newConversation();
    const { outcome } = await turn({ ...h, executor }, kind, c, "Read the library", {
      script: { steps: [{ content: [libraryCall, probeCall("b")], block_order: [0, 1, 0], chunk_delay_ms: 2 }, { content: [{ type: "text", text: "Done." }] }] },
    });
    expect(outcome.status).toBe("finished");
    const ids = c.messages[1]!.content.flatMap((b) => (b.type === "tool_use" ? [b.id] : []));
    expect(asked).toEqual([ids[0]]);
    expect(probe.log.filter((l) => l === "end:library")).toHaveLength(1);
    const results = c.messages[2]!.content.flatMap((b) => (b.type === "tool_result" ? [b.content] : []));
    expect(results).toEqual(["read the library", "read b"]);
  });
});

// A block streamed again under its index as a call that changes something: Anthropic's stream allows it
// (the last block under an index is the message's), so the raw stream is written by hand.

/** An HTTP server that answers every request with EVENTS, one every 10 ms. */
function rawSSE(events: string[]): Promise<{ url: string; server: Server }> {
  return new Promise((resolve) => {
    const server = createServer(async (req, res) => {
      req.resume();
      await new Promise((r) => req.on("end", r));
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (const e of events) {
        res.write(e);
        await new Promise((r) => setTimeout(r, 10));
      }
      res.end();
    });
    server.listen(0, "127.0.0.1", () => resolve({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server }));
  });
}
const sse = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const toolBlock = (index: number, id: string, name: string, json: string) => [
  sse("content_block_start", { index, content_block: { type: "tool_use", id, name, input: {} } }),
  sse("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: json } }),
  sse("content_block_stop", { index }),
];

describe("a block streamed again under its index as a change (Anthropic)", () => {
  it("the read the message puts after the change runs after it, though it started early", async () => {
    const { registry, probe } = probeRegistry();
    const { url, server } = await rawSSE([
      sse("message_start", { message: { id: "m", type: "message", role: "assistant", model: "x", content: [], stop_reason: null, usage: { input_tokens: 1, output_tokens: 1 } } }),
      ...toolBlock(0, "t1", "probe", '{"name":"first"}'),
      ...toolBlock(0, "t1", "change", '{"form":"(setf *x* 2)"}'),
      ...toolBlock(1, "t2", "probe", '{"name":"after"}'),
      sse("message_delta", { delta: { stop_reason: "tool_use" }, usage: { output_tokens: 5 } }),
      sse("message_stop", {}),
    ]);
    try {
      const h: Harness = { mock: { url } as never, registry, executor: new Executor({ registry }), close: async () => undefined };
      const c = newConversation();
      const anthropic = logged(new AnthropicProvider({ apiKey: FAKE_KEY, baseUrl: url }), probe.log);
      const { outcome, events } = await turn(h, "anthropic", c, "go", { settings: { provider: anthropic, maxSteps: 1 } });
      expect(outcome.status).toBe("finished");
      expect(toolUses(c.messages)).toEqual(["change", "probe"]);
      expect(events.results.map((r) => r.content)).toEqual(["changed (setf *x* 2)", "read after"]);
      // The early run of "after" (before the change) is not the one the model gets.
      expect(probe.log.lastIndexOf("start:after")).toBeGreaterThan(probe.log.indexOf("end:change"));
    } finally {
      server.close();
    }
  });
});

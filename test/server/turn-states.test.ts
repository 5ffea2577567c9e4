// The turn as a state machine: the states a real server reports through chat/turnState for
// each kind of turn, against the scripted mock LLM; every transition taken is in the table; the table
// reaches every state; each tool result is reported once, cancelled or timed out; an illegal
// transition throws; doc/turn-states.md's diagram has exactly the table's edges.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startMockLLM, type MockLLM, type MockScript } from "../fixtures/mock-llm/server.mjs";
import { TURN_HANDLERS } from "../../server/agent/loop.js";
import {
  checkTransition,
  IllegalTransitionError,
  INITIAL_TURN_STATE,
  isLegalTransition,
  isTerminal,
  TURN_STATES,
  TURN_TRANSITIONS,
  type TurnState,
} from "../../server/agent/turn-states.js";
import type { ChatSendResult, Configuration, EmacsCallParams, TurnStateParams } from "../../server/protocol.js";
import { Executor, type ToolResult } from "../../server/tools/executor.js";
import { defineTool } from "../../server/tools/tool.js";
import { FAKE_KEY, testRegistry } from "./agent-helpers.js";
import { connectChat, writeNoteTool, type Note } from "./chat-harness.js";

const root = join(__dirname, "../..");

let mock: MockLLM;
beforeAll(async () => {
  mock = await startMockLLM();
});
afterAll(async () => {
  await mock.close();
});

const open: (() => void)[] = [];
afterEach(() => {
  open.splice(0).forEach((d) => d());
});

/** Every transition any turn of this file took, checked against the table at the end. */
const taken: [TurnState | null, TurnState][] = [];

function registry() {
  const r = testRegistry();
  r.register(writeNoteTool());
  r.register(
    defineTool({
      name: "stuck_tool",
      description: "Never returns and ignores being stopped.",
      parameters: {},
      safety: "safe",
      categories: ["test"],
      runtime: "node",
      timeoutMs: 100,
      handler: () => new Promise(() => undefined),
    }),
  );
  return r;
}

type Approval = "approved" | "denied" | "never";

async function connect(configuration: Configuration, approval: Approval = "never") {
  const h = await connectChat({
    configuration,
    registry: registry(),
    capabilities: { tools: true, image: true, approvals: true },
    onNote: (n, client) => {
      const p = n.params as EmacsCallParams;
      if (n.method === "emacs/call" && p.kind === "approval" && approval !== "never") {
        void client.sendNotification("emacs/reply", { id: p.id, result: approval === "approved" ? { decision: "approved" } : { decision: "denied", reason: "not now" } });
      }
    },
  });
  open.push(h.dispose);
  const { client, server, notes, waitFor, ended } = h;
  const send = async (text: string) => {
    const sent: ChatSendResult = await client.sendRequest("chat/send", { text });
    return sent;
  };
  /** The states TURNID went through, each checked to follow the one before. */
  const states = (turnId: string): TurnState[] => {
    const ps = notes.filter((n) => n.method === "chat/turnState" && n.params.turnId === turnId).map((n) => n.params as TurnStateParams);
    ps.forEach((p, i) => {
      expect(p.previous).toBe(i === 0 ? null : ps[i - 1]!.state);
      expect(isLegalTransition(p.previous, p.state), `${p.previous} -> ${p.state}`).toBe(true);
      taken.push([p.previous, p.state]);
    });
    return ps.map((p) => p.state);
  };
  return { client, server, notes, waitFor, send, ended, states };
}

const config = (extra: Configuration = {}): Configuration => ({ provider: "anthropic", apiKey: FAKE_KEY, baseUrl: mock.url, model: "claude-sonnet-4-6", ...extra });

async function runScript(script: MockScript, opts: { configuration?: Configuration; approval?: Approval } = {}) {
  mock.setScript(script);
  const s = await connect(config(opts.configuration), opts.approval);
  const sent = await s.send("go");
  const end = await s.ended(sent.turnId);
  return { s, sent, end, states: s.states(sent.turnId) };
}

/** Each call of TURNID answered by exactly one chat/toolResult, and nothing else answered. */
function expectOneResultPerCall(notes: Note[], turnId: string) {
  const calls = notes.filter((n) => n.method === "chat/toolCall" && n.params.turnId === turnId).map((n) => n.params.callId as string);
  const results = notes.filter((n) => n.method === "chat/toolResult" && n.params.turnId === turnId).map((n) => n.params.callId as string);
  expect(calls.length).toBeGreaterThan(0);
  expect([...results].sort()).toEqual([...calls].sort());
  expect(new Set(results).size).toBe(results.length);
}

const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });

describe("the states of a turn, as the server reports them", () => {
  it("a text answer: requesting, streaming, finished", async () => {
    const { states, end, s, sent } = await runScript({ steps: [text("Hello there, nice to meet you.")] });
    expect(end.method).toBe("chat/turnFinished");
    expect(states).toEqual(["requesting", "streaming", "finished"]);
    // The state says streaming before the first text is shown, and finished after the last.
    const turn = s.notes.filter((n) => n.params?.turnId === sent.turnId).map((n) => (n.method === "chat/turnState" ? n.params.state : n.method));
    expect(turn.indexOf("streaming")).toBeLessThan(turn.indexOf("chat/textDelta"));
    expect(turn.lastIndexOf("chat/textDelta")).toBeLessThan(turn.indexOf("finished"));
  });

  it("an answer with only tool calls goes from requesting to running-tools without streaming", async () => {
    const { states, end } = await runScript({ steps: [{ content: [{ type: "tool_use", name: "describe_symbol", input: { symbol: "f" } }] }, text("It is {{last_tool_result}}")] });
    expect(end.params).toMatchObject({ stopReason: "end_turn", steps: 1 });
    expect(states).toEqual(["requesting", "running-tools", "requesting", "streaming", "finished"]);
  });

  it("an answer with text and tool calls streams, then runs the tools", async () => {
    const { states, s, sent } = await runScript({
      steps: [{ content: [{ type: "text", text: "Looking." }, { type: "tool_use", name: "who_calls", input: { symbol: "f" } }] }, text("Done.")],
    });
    expect(states).toEqual(["requesting", "streaming", "running-tools", "requesting", "streaming", "finished"]);
    // The tool call is announced in running-tools.
    const turn = s.notes.filter((n) => n.params?.turnId === sent.turnId).map((n) => (n.method === "chat/turnState" ? n.params.state : n.method));
    expect(turn.indexOf("running-tools")).toBeLessThan(turn.indexOf("chat/toolCall"));
    expectOneResultPerCall(s.notes, sent.turnId);
  });

  it("an approved call: running-tools, awaiting-approval, running-tools, and the tool runs", async () => {
    const { states, end, s, sent } = await runScript({ steps: [{ content: [{ type: "tool_use", name: "write_note", input: { text: "hi" } }] }, text("{{last_tool_result}}")] }, { approval: "approved" });
    expect(end.params.text).toBe("wrote hi");
    expect(states).toEqual(["requesting", "running-tools", "awaiting-approval", "running-tools", "requesting", "streaming", "finished"]);
    // The chat hears the state before the question.
    const turn = s.notes.filter((n) => n.params?.turnId === sent.turnId || n.method === "emacs/call").map((n) => (n.method === "chat/turnState" ? n.params.state : n.method));
    expect(turn.indexOf("awaiting-approval")).toBeLessThan(turn.indexOf("chat/approvalNeeded"));
    expect(turn.indexOf("chat/approvalNeeded")).toBeLessThan(turn.indexOf("emacs/call"));
    expectOneResultPerCall(s.notes, sent.turnId);
  });

  it("a denied call: the same states, the call answered as denied", async () => {
    const { states, end, s, sent } = await runScript({ steps: [{ content: [{ type: "tool_use", name: "write_note", input: { text: "hi" } }] }, text("Understood.")] }, { approval: "denied" });
    expect(end.method).toBe("chat/turnFinished");
    expect(states).toEqual(["requesting", "running-tools", "awaiting-approval", "running-tools", "requesting", "streaming", "finished"]);
    expect(s.notes.find((n) => n.method === "chat/toolResult")!.params).toMatchObject({ success: false, approved: false, error: expect.stringContaining("denied write_note: not now.") });
    expectOneResultPerCall(s.notes, sent.turnId);
  });

  it("a cancel mid-stream: requesting, streaming, cancelled", async () => {
    mock.setScript({ steps: [{ content: [{ type: "text", text: "A long answer that never ends because the server hangs" }], hang_after_chunks: 4 }] });
    const s = await connect(config());
    const sent = await s.send("go");
    await s.waitFor((n) => n.method === "chat/textDelta");
    await s.client.sendRequest("chat/cancel", { turnId: sent.turnId });
    expect((await s.ended(sent.turnId)).params).toMatchObject({ kind: "cancelled" });
    expect(s.states(sent.turnId)).toEqual(["requesting", "streaming", "cancelled"]);
  });

  it("a cancel while waiting for approval: the step goes on to answer the call, then the turn is cancelled", async () => {
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "write_note", input: { text: "hi" } }, { type: "tool_use", name: "describe_symbol", input: { symbol: "g" } }] }] });
    const s = await connect(config(), "never");
    const sent = await s.send("go");
    await s.waitFor((n) => n.method === "emacs/call");
    await s.client.sendRequest("chat/cancel", { turnId: sent.turnId });
    expect((await s.ended(sent.turnId)).params).toMatchObject({ kind: "cancelled" });
    expect(s.states(sent.turnId)).toEqual(["requesting", "running-tools", "awaiting-approval", "running-tools", "cancelled"]);
    expectOneResultPerCall(s.notes, sent.turnId);
  });

  it("a provider failure: requesting, failed (and streaming, failed after text)", async () => {
    const auth = await runScript({ steps: [{ error: { status: 401, type: "authentication_error", message: "invalid x-api-key" } }] });
    expect(auth.end.params).toMatchObject({ kind: "auth" });
    expect(auth.states).toEqual(["requesting", "failed"]);
    const late = await runScript({ steps: [{ content: [{ type: "text", text: "Partial answer that stops" }], stream_error: { after_chunks: 5, type: "overloaded_error", message: "Overloaded" } }] });
    expect(late.end.params).toMatchObject({ kind: "provider" });
    expect(late.states).toEqual(["requesting", "streaming", "failed"]);
  });

  it("the step limit: the last step's running-tools goes to finished", async () => {
    const step = { content: [{ type: "tool_use" as const, name: "describe_symbol", input: { symbol: "loop" } }] };
    const { states, end } = await runScript({ steps: [step, step, step] }, { configuration: { maxSteps: 2 } });
    expect(end.params).toMatchObject({ stopReason: "step_limit", steps: 2 });
    expect(states).toEqual(["requesting", "running-tools", "requesting", "running-tools", "finished"]);
  });

  it("a turn refused before it starts (no API key) has no states", async () => {
    const s = await connect(config({ apiKey: undefined }));
    const sent = await s.send("go");
    expect((await s.ended(sent.turnId)).params).toMatchObject({ kind: "config" });
    expect(s.states(sent.turnId)).toEqual([]);
  });
});

describe("each tool result is reported exactly once", () => {
  it("when a running call is cancelled", async () => {
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "slow_tool", input: {} }, { type: "tool_use", name: "describe_symbol", input: { symbol: "s" } }, { type: "tool_use", name: "write_note", input: { text: "later" } }] }] });
    const s = await connect(config(), "approved");
    const sent = await s.send("go");
    await s.waitFor((n) => n.method === "chat/toolResult" && n.params.name === "describe_symbol");
    await s.client.sendRequest("chat/cancel", { turnId: sent.turnId });
    expect((await s.ended(sent.turnId)).params).toMatchObject({ kind: "cancelled" });
    expectOneResultPerCall(s.notes, sent.turnId);
    const results = s.notes.filter((n) => n.method === "chat/toolResult").map((n) => [n.params.name, n.params.success]);
    expect(results).toEqual(
      expect.arrayContaining([
        ["slow_tool", false],
        ["describe_symbol", true],
        ["write_note", false],
      ]),
    );
    // The call after the cancellation is answered without asking, and without awaiting approval.
    expect(s.notes.some((n) => n.method === "chat/approvalNeeded" || n.method === "emacs/call")).toBe(false);
    expect(s.states(sent.turnId)).toEqual(["requesting", "running-tools", "cancelled"]);
  });

  it("when a call times out, alone or beside others", async () => {
    const { s, sent, end, states } = await runScript(
      {
        steps: [
          { content: [{ type: "tool_use", name: "stuck_tool", input: {} }, { type: "tool_use", name: "who_calls", input: { symbol: "h" } }] },
          { content: [{ type: "tool_use", name: "slow_tool", input: {} }] },
          text("Both timed out: {{last_tool_result}}"),
        ],
      },
      { configuration: { toolTimeoutMs: 100 } },
    );
    expect(end.method).toBe("chat/turnFinished");
    expect(end.params.text).toMatch(/slow_tool timed out after 100 ms/);
    expectOneResultPerCall(s.notes, sent.turnId);
    const stuck = s.notes.find((n) => n.method === "chat/toolResult" && n.params.name === "stuck_tool")!.params;
    expect(stuck).toMatchObject({ success: false, error: expect.stringContaining("stuck_tool timed out after 100 ms") });
    expect(states).toEqual(["requesting", "running-tools", "requesting", "running-tools", "requesting", "streaming", "finished"]);
  });

  it("when the turn's own time limit stops a running call", async () => {
    mock.setScript({ steps: [{ content: [{ type: "tool_use", name: "slow_tool", input: {} }] }] });
    const s = await connect(config({ turnTimeoutMs: 200 }));
    const sent = await s.send("go");
    expect((await s.ended(sent.turnId)).params).toMatchObject({ kind: "timeout" });
    expectOneResultPerCall(s.notes, sent.turnId);
    expect(s.states(sent.turnId)).toEqual(["requesting", "running-tools", "failed"]);
  });

  it("by the executor's onResult, at whichever stage answers the call", async () => {
    const reg = registry();
    let asked = 0;
    const executor = new Executor({
      registry: reg,
      defaultTimeoutMs: 50,
      approve: async (req) => (++asked, req.arguments.text === "yes" ? { decision: "approved" } : { decision: "denied" }),
    });
    const reported: ToolResult[] = [];
    const onResult = (r: ToolResult) => reported.push(r);
    const calls = [
      { id: "bad-args", name: "describe_symbol", arguments: "{" },
      { id: "unknown", name: "nope", arguments: {} },
      { id: "approved", name: "write_note", arguments: { text: "yes" } },
      { id: "denied", name: "write_note", arguments: { text: "no" } },
      { id: "timeout", name: "slow_tool", arguments: {} },
      { id: "ok", name: "who_calls", arguments: { symbol: "x" } },
    ];
    const results = await executor.executeAll(calls, { onResult });
    expect(asked).toBe(2);
    expect(reported.map((r) => r.id).sort()).toEqual(calls.map((c) => c.id).sort());
    expect(results.map((r) => [r.id, r.success])).toEqual([
      ["bad-args", false],
      ["unknown", false],
      ["approved", true],
      ["denied", false],
      ["timeout", false],
      ["ok", true],
    ]);
    // Cancelled before anything runs: still one result each.
    const ctl = new AbortController();
    ctl.abort();
    const more: ToolResult[] = [];
    await executor.executeAll(calls.slice(2), { signal: ctl.signal, onResult: (r) => more.push(r) });
    expect(more.map((r) => r.id).sort()).toEqual(calls.slice(2).map((c) => c.id).sort());
    expect(more.every((r) => !r.success)).toBe(true);
    // A stage refuses a call another stage already answered.
    const stage = executor.admit({ id: "w", name: "write_note", arguments: { text: "no" } }, { onResult });
    expect(stage.kind).toBe("admitted");
    if (stage.kind !== "admitted") return;
    expect((await executor.askApproval(stage.call)).kind).toBe("answered");
    await expect(executor.run(stage.call)).rejects.toThrow(/already answered/);
  });
});

describe("the transitions table", () => {
  it("has every state, is frozen, and lets only its own transitions through", () => {
    expect(Object.keys(TURN_TRANSITIONS).sort()).toEqual([...TURN_STATES].sort());
    expect(Object.isFrozen(TURN_TRANSITIONS)).toBe(true);
    expect(Object.values(TURN_TRANSITIONS).every((next) => Object.isFrozen(next))).toBe(true);
    expect(() => {
      (TURN_TRANSITIONS as Record<string, readonly TurnState[]>).finished = ["requesting"];
    }).toThrow(TypeError);
    expect(() => (TURN_TRANSITIONS.streaming as TurnState[]).push("requesting")).toThrow(TypeError);
    for (const from of TURN_STATES) for (const to of TURN_TRANSITIONS[from]) expect(() => checkTransition(from, to)).not.toThrow();
    expect(() => checkTransition(null, INITIAL_TURN_STATE)).not.toThrow();
  });

  it("throws on an illegal transition", () => {
    expect(() => checkTransition("finished", "requesting")).toThrow(IllegalTransitionError);
    expect(() => checkTransition("streaming", "requesting")).toThrow(/Illegal turn transition streaming -> requesting; streaming may go to running-tools, finished, failed, cancelled/);
    expect(() => checkTransition("awaiting-approval", "finished")).toThrow(IllegalTransitionError);
    expect(() => checkTransition("cancelled", "failed")).toThrow(/cancelled may go to nothing/);
    expect(() => checkTransition(null, "streaming")).toThrow(/a turn starts in requesting/);
    expect(() => checkTransition("requesting", "requesting")).toThrow(IllegalTransitionError);
  });

  it("has no unreachable state, and every live state can end", () => {
    const reached = new Set<TurnState>([INITIAL_TURN_STATE]);
    const queue: TurnState[] = [INITIAL_TURN_STATE];
    while (queue.length) for (const next of TURN_TRANSITIONS[queue.shift()!]) if (!reached.has(next)) (reached.add(next), queue.push(next));
    expect([...reached].sort()).toEqual([...TURN_STATES].sort());
    for (const s of TURN_STATES) {
      if (isTerminal(s)) continue;
      expect(TURN_TRANSITIONS[s]).toEqual(expect.arrayContaining(["failed", "cancelled"]));
    }
    expect(TURN_STATES.filter(isTerminal).sort()).toEqual(["cancelled", "failed", "finished"]);
  });

  it("has one handler per live state", () => {
    expect(Object.keys(TURN_HANDLERS).sort()).toEqual(TURN_STATES.filter((s) => !isTerminal(s)).sort());
  });

  // After the turns above (a file's tests run in order): together they took every state.
  it("holds every transition the turns above took", () => {
    expect(taken.length).toBeGreaterThan(30);
    for (const [from, to] of taken) expect(isLegalTransition(from, to), `${from} -> ${to}`).toBe(true);
    // Every state was seen.
    expect(new Set(taken.map(([, to]) => to))).toEqual(new Set(TURN_STATES));
  });
});

describe("doc/turn-states.md", () => {
  it("draws exactly the table's transitions", () => {
    const doc = readFileSync(join(root, "doc/turn-states.md"), "utf8");
    const diagram = /```mermaid\n(stateDiagram-v2\n[\s\S]*?)```/.exec(doc)?.[1];
    expect(diagram, "a mermaid stateDiagram-v2 block").toBeDefined();
    // Mermaid ids cannot hold a dash: `state "running-tools" as running_tools` names the state.
    const names = new Map<string, string>();
    for (const m of diagram!.matchAll(/^\s*state\s+"([^"]+)"\s+as\s+(\w+)\s*$/gm)) names.set(m[2]!, m[1]!);
    const name = (id: string) => names.get(id) ?? id;
    const edges = new Set<string>();
    for (const m of diagram!.matchAll(/^\s*(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)\s*(?::.*)?$/gm)) edges.add(`${name(m[1]!)} -> ${name(m[2]!)}`);
    // Every line is a declaration, an edge, a note or blank: nothing the parse above would miss.
    for (const line of diagram!.split("\n").slice(1)) expect(line, line).toMatch(/^\s*(state\s+"[^"]+"\s+as\s+\w+|(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)(\s*:.*)?|%%.*)?\s*$/);
    const expected = new Set<string>([`[*] -> ${INITIAL_TURN_STATE}`]);
    for (const from of TURN_STATES) {
      for (const to of TURN_TRANSITIONS[from]) expected.add(`${from} -> ${to}`);
      if (isTerminal(from)) expected.add(`${from} -> [*]`);
    }
    expect([...edges].sort()).toEqual([...expected].sort());
  });

  it("says a sentence about every state, and doc/architecture.md links it", () => {
    const doc = readFileSync(join(root, "doc/turn-states.md"), "utf8");
    for (const s of TURN_STATES) expect(doc, s).toMatch(new RegExp(`^- \`${s}\`: \\S`, "m"));
    expect(readFileSync(join(root, "doc/architecture.md"), "utf8")).toContain("](turn-states.md)");
  });
});

describe("the chat's view of the turn", () => {
  it("is the server's transitions table (sly-agent-q-turn-transitions in lisp-elisp/sly-agent-q-turn.el)", () => {
    const source = readFileSync(new URL("../../lisp-elisp/sly-agent-q-turn.el", import.meta.url), "utf8");
    const start = source.indexOf("(defconst sly-agent-q-turn-transitions");
    expect(start).toBeGreaterThanOrEqual(0);
    const body = source.slice(start, source.indexOf('"', start));
    const rows = [...body.matchAll(/\(([a-z-]+(?: [a-z-]+)*)\)/g)].map((m) => m[1]!.split(" "));
    const chat: Record<string, string[]> = {};
    for (const [state, ...next] of rows) chat[state!] = next;
    expect(chat["nil"]).toEqual(["requesting"]);
    delete chat["nil"];
    const server = Object.fromEntries(Object.entries(TURN_TRANSITIONS).map(([k, v]) => [k, [...v].sort()]));
    expect(Object.fromEntries(Object.entries(chat).map(([k, v]) => [k, [...v].sort()]))).toEqual(server);
  });
});

// A conversation as Org or Markdown (issue 14's export): each turn under a heading, the user's and
// the agent's text as written, each tool call a collapsible block (an Org subtree, a Markdown
// <details>) holding its arguments and its result.

import type { HistoryMessage } from "../protocol.js";

export type ExportFormat = "org" | "markdown";

interface Part {
  kind: "user" | "agent" | "tool";
  text: string;
  tool?: { name: string; input: unknown; result?: string; isError?: boolean };
}

/** The conversation's parts in order, each tool call joined with its result. */
function parts(messages: readonly HistoryMessage[]): Part[] {
  const out: Part[] = [];
  const calls = new Map<string, Part>();
  for (const m of messages) {
    for (const b of m.content) {
      if (b.type === "text") out.push({ kind: m.role === "user" ? "user" : "agent", text: b.text });
      else if (b.type === "tool_use") {
        const part: Part = { kind: "tool", text: "", tool: { name: b.name, input: b.input } };
        calls.set(b.id, part);
        out.push(part);
      } else {
        const call = calls.get(b.toolUseId);
        if (call?.tool) {
          call.tool.result = b.content;
          call.tool.isError = b.isError;
        }
      }
    }
  }
  return out;
}

const json = (v: unknown): string => JSON.stringify(v ?? {}, null, 2);

/** Org text lines: a line that would start a heading is kept from doing so. */
function orgText(text: string): string {
  return text.replace(/^(\*+\s)/gm, " $1");
}

/** Text inside an Org block: lines Org would read as structure get its comma escape. */
function orgBlock(text: string): string {
  return text.replace(/^(\s*)(\*|#\+|,\*|,#\+)/gm, "$1,$2");
}

function fence(text: string): string {
  const longest = Math.max(2, ...[...text.matchAll(/`+/g)].map((m) => m[0].length));
  return "`".repeat(longest + 1);
}

function escapeHtml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function exportConversation(title: string, messages: readonly HistoryMessage[], format: ExportFormat): string {
  const lines: string[] = [];
  if (format === "org") {
    lines.push(`#+title: ${title.replace(/\n/g, " ")}`, "");
    for (const p of parts(messages)) {
      if (p.kind === "user") lines.push("* You", orgText(p.text), "");
      else if (p.kind === "agent") lines.push("** Agent", orgText(p.text), "");
      else if (p.tool) {
        const status = p.tool.result === undefined ? " (no result)" : p.tool.isError ? " (error)" : "";
        lines.push(`*** Tool ${p.tool.name}${status}`, "#+begin_src json", orgBlock(json(p.tool.input)), "#+end_src");
        if (p.tool.result !== undefined) lines.push("#+begin_example", orgBlock(p.tool.result), "#+end_example");
        lines.push("");
      }
    }
  } else {
    lines.push(`# ${title.replace(/\n/g, " ")}`, "");
    for (const p of parts(messages)) {
      if (p.kind === "user") lines.push("## You", "", p.text, "");
      else if (p.kind === "agent") lines.push("### Agent", "", p.text, "");
      else if (p.tool) {
        const status = p.tool.result === undefined ? " (no result)" : p.tool.isError ? " (error)" : "";
        const args = json(p.tool.input);
        lines.push("<details>", `<summary>Tool ${escapeHtml(p.tool.name)}${status}</summary>`, "", `${fence(args)}json`, args, fence(args));
        if (p.tool.result !== undefined) lines.push("", fence(p.tool.result), p.tool.result, fence(p.tool.result));
        lines.push("", "</details>", "");
      }
    }
  }
  return `${lines.join("\n").trimEnd()}\n`;
}

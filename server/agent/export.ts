// A conversation as Org or Markdown: each turn under a heading, the user's and the agent's text as
// written, each tool call a collapsible block (an Org subtree, a Markdown <details>) holding its
// arguments and its result.
//
// The text is the model's, a tool's or a file's, so the export is inert: opening it, or exporting it
// again, must run and ask nothing. In Org every text goes in an example block (whose lines Org does
// not read as keywords, links, macros, blocks or inline calls) with Org's comma escape; the title is
// broken with Org's zero-width space where Org would read it. In Markdown raw HTML outside fences is
// escaped. In both, the first line is ours (Emacs reads a -*- line there) and the file ends with a
// page break (Emacs reads a Local Variables block only in the last page).

import type { HistoryMessage } from "../protocol.js";

export type ExportFormat = "org" | "markdown";

interface Part {
  kind: "user" | "agent" | "tool" | "thinking";
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
      else if (b.type === "thinking" || b.type === "redacted_thinking") out.push({ kind: "thinking", text: b.type === "thinking" ? b.thinking : "(redacted)" });
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

/** Text inside an Org block: lines Org would read as structure get its comma escape. */
function orgBlock(text: string): string {
  return text.replace(/^(\s*)(\*|#\+|,\*|,#\+)/gm, "$1,$2");
}

/** TEXT as an Org example block: shown as written, read as nothing. */
function orgExample(text: string): string[] {
  return ["#+begin_example", orgBlock(text), "#+end_example"];
}

/** A one-line TEXT for an Org keyword or heading: Org's zero-width space breaks links, macros,
 *  inline calls and inline source blocks. */
function orgLine(text: string): string {
  return text
    .replace(/\n/g, " ")
    .replace(/([[{])(?=[[{])/g, "$1\u200b")
    // Org reads src_ and call_ after any character but a letter, a digit or "-" (an underscore too),
    // so every one is broken, not only those at a word's start.
    .replace(/(src|call)_/gi, "$1\u200b_");
}

/** The first line: Emacs reads a -*- line there, so it is never the conversation's text. */
const FIRST_LINE = "Conversation exported by sly-agent-q.";
/** The end: a page break, after which Emacs finds no Local Variables block of the text before. */
const LAST_PAGE = "\f";

/** Markdown TEXT with raw HTML outside fenced blocks and code spans escaped. */
function markdownText(text: string): string {
  let fenceOpen: string | undefined;
  return text
    .split("\n")
    .map((line) => {
      const f = /^ {0,3}(`{3,}|~{3,})/.exec(line);
      if (fenceOpen !== undefined) {
        if (f && f[1]![0] === fenceOpen[0] && f[1]!.length >= fenceOpen.length && line.trim() === f[1]) fenceOpen = undefined;
        return line;
      }
      if (f) {
        fenceOpen = f[1];
        return line;
      }
      // Code spans (between equal runs of backticks) show HTML as text already.
      return line
        .split(/(`+[^`]*`+)/)
        .map((piece, i) => (i % 2 === 1 ? piece : escapeHtml(piece)))
        .join("");
    })
    .join("\n");
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
    lines.push(`# ${FIRST_LINE}`, `#+title: ${orgLine(title)}`, "");
    for (const p of parts(messages)) {
      if (p.kind === "user") lines.push("* You", ...orgExample(p.text), "");
      else if (p.kind === "agent") lines.push("** Agent", ...orgExample(p.text), "");
      // A subtree of its own: Org shows it folded with the rest of the outline.
      else if (p.kind === "thinking") lines.push("*** Thinking", ...orgExample(p.text), "");
      else if (p.tool) {
        const status = p.tool.result === undefined ? " (no result)" : p.tool.isError ? " (error)" : "";
        lines.push(`*** Tool ${orgLine(p.tool.name)}${status}`, ...orgExample(json(p.tool.input)));
        if (p.tool.result !== undefined) lines.push(...orgExample(p.tool.result));
        lines.push("");
      }
    }
  } else {
    lines.push(`<!-- ${FIRST_LINE} -->`, `# ${escapeHtml(title.replace(/\n/g, " "))}`, "");
    for (const p of parts(messages)) {
      if (p.kind === "user") lines.push("## You", "", markdownText(p.text), "");
      else if (p.kind === "agent") lines.push("### Agent", "", markdownText(p.text), "");
      else if (p.kind === "thinking") lines.push("<details>", "<summary>Thinking</summary>", "", fence(p.text), p.text, fence(p.text), "", "</details>", "");
      else if (p.tool) {
        const status = p.tool.result === undefined ? " (no result)" : p.tool.isError ? " (error)" : "";
        const args = json(p.tool.input);
        lines.push("<details>", `<summary>Tool ${escapeHtml(p.tool.name)}${status}</summary>`, "", `${fence(args)}json`, args, fence(args));
        if (p.tool.result !== undefined) lines.push("", fence(p.tool.result), p.tool.result, fence(p.tool.result));
        lines.push("", "</details>", "");
      }
    }
  }
  return `${lines.join("\n").trimEnd()}\n\n${LAST_PAGE}\n`;
}

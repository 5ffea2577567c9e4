// The system prompt (seed 000, "Updated System Prompt"), generated from the tools actually offered so
// it never names a tool the model cannot call, with each tool's safety note, the editor's context
// (current package, project root) and the project's own instructions file when there is one.

import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { SafetyLevel, Tool } from "../tools/tool.js";

export interface SystemPromptInput {
  tools: readonly Tool[];
  /** The level in force for a tool after the user's overrides. */
  safetyOf: (tool: Tool) => SafetyLevel;
  currentPackage?: string;
  projectRoot?: string;
}

/** Project instruction files, first found wins. */
export const INSTRUCTION_FILES = ["AGENT-Q.md", "AGENTS.md"] as const;
export const MAX_INSTRUCTION_CHARS = 16_000;

/** Section titles, in the order of the seed's prompt; a tool goes under its first known category. */
const SECTIONS: [category: string, title: string][] = [
  ["introspection", "Introspection"],
  ["xref", "Introspection"],
  ["clos", "Introspection"],
  ["execution", "Execution"],
  ["buffer", "Buffer Operations"],
  ["filesystem", "Files"],
  ["navigation", "Navigation"],
  ["diff", "Reviewed Edits"],
];

const INTRO = `You are Agent-Q, an AI assistant integrated into a live Common Lisp development environment.

## Your Capabilities
You have access to the running Lisp image through tools. You can:`;

const HOW_TO_WORK = `## How To Work
1. When asked to understand code, use introspection tools first
2. When asked to fix bugs, examine the error, relevant code, and callers
3. When writing new code, test it with eval_form before presenting
4. Iterate: if something doesn't work, examine why and try again
5. Explain your reasoning when it helps the developer understand

## Guidelines
- Write idiomatic Common Lisp
- Use introspection to understand before changing
- Test your code before presenting final solutions
- Be precise about packages and symbols
- When you make changes, explain what you changed and why
- A tool result that starts with "Error:" means the call failed; read the message, fix the call and try again
- The user may deny a tool that needs approval; then choose another way or ask them`;

export function buildSystemPrompt(input: SystemPromptInput): string {
  const parts: string[] = [INTRO];
  const groups = new Map<string, string[]>();
  for (const tool of input.tools) {
    const title = SECTIONS.find(([c]) => tool.categories.includes(c))?.[1] ?? "Other Tools";
    const line = `- \`${tool.name}\`: ${firstSentence(tool.description)}${safetyNote(input.safetyOf(tool))}`;
    groups.set(title, [...(groups.get(title) ?? []), line]);
  }
  if (groups.size === 0) {
    parts.push("(No tools are available in this session: answer from what you know and say so when you cannot check.)");
  }
  const order = [...new Set(SECTIONS.map(([, t]) => t)), "Other Tools"];
  for (const title of order) {
    const lines = groups.get(title);
    if (lines) parts.push(`### ${title}\n${lines.join("\n")}`);
  }
  parts.push(HOW_TO_WORK);

  const context: string[] = [];
  if (input.currentPackage) context.push(`- Current package in the REPL: ${input.currentPackage} (names are read in it unless a tool call says otherwise)`);
  if (input.projectRoot) context.push(`- Project root: ${input.projectRoot} (file paths are relative to it)`);
  if (context.length > 0) parts.push(`## Context\n${context.join("\n")}`);

  const instructions = input.projectRoot ? readInstructions(input.projectRoot) : undefined;
  if (instructions) parts.push(`## Project Instructions (from ${instructions.file})\n${instructions.text}`);
  return parts.join("\n\n");
}

function safetyNote(level: SafetyLevel): string {
  if (level === "dangerous") return " (requires the user's approval; may be denied)";
  if (level === "cautious") return " (runs without asking, and is logged)";
  return "";
}

function firstSentence(description: string): string {
  const m = /^(.*?[.!?])(\s|$)/s.exec(description);
  return (m?.[1] ?? description).trim();
}

/** The project's instruction file, bounded in size; undefined when there is none or it cannot be read. */
export function readInstructions(projectRoot: string): { file: string; text: string } | undefined {
  for (const file of INSTRUCTION_FILES) {
    const path = join(projectRoot, file);
    try {
      if (!statSync(path).isFile()) continue;
      let text = readFileSync(path, "utf8").trim();
      if (text === "") continue;
      if (text.length > MAX_INSTRUCTION_CHARS) {
        text = `${text.slice(0, MAX_INSTRUCTION_CHARS)}\n[... ${file} is longer; the rest was left out.]`;
      }
      return { file, text };
    } catch {
      // Absent or unreadable: try the next name.
    }
  }
  return undefined;
}

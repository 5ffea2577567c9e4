// The lean tool set. Every tool's definition goes with every request; with 50-odd tools that is over
// 5,000 tokens, a sixth to two thirds of the 8k-32k windows local models (Ollama, llama.cpp) run with,
// before the first message. Where the window is at most LEAN_CONTEXT_WINDOW, a conversation is offered
// a core set and add_tools, with which the model brings in a category when it needs one. What it
// added stays for the rest of the conversation (so the prefix a provider caches stays the same), and
// is found again in the history when a saved conversation is resumed.

import type { Message } from "../llm/provider.js";
import { ADD_TOOLS } from "../tools/catalog/tool-set.js";
import { ToolError, type Tool } from "../tools/tool.js";

/**
 * Windows up to this many tokens get the lean set: the local models' usual 8k-32k, and unlisted models,
 * whose window the models table guesses at 32k. Every model the table lists has 128k or more, where
 * the whole set is under 3% of the window.
 */
export const LEAN_CONTEXT_WINDOW = 32_000;

/** What a Lisp session needs at every turn: look things up, read and change code, evaluate. */
export const CORE_TOOLS: readonly string[] = [
  "describe_symbol",
  "apropos_search",
  "who_calls",
  "find_definition",
  "read_definition",
  "replace_definition",
  "macroexpand_form",
  "eval_form",
  "compile_form",
  "get_last_error",
  "read_file",
  "read_buffer",
  "directory_list",
  "search_project",
  "find_files",
];

export function isLean(contextWindow: number): boolean {
  return contextWindow <= LEAN_CONTEXT_WINDOW;
}

/** The categories of ALL a model may add, each with its tools' names, in registration order. */
export function categoriesOf(all: readonly Tool[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const t of all) {
    if (t.name === ADD_TOOLS || t.internal) continue; // internal tools are never offered
    for (const c of t.categories) out.set(c, [...(out.get(c) ?? []), t.name]);
  }
  return out;
}

/**
 * The system prompt's part that says what add_tools can bring in (the same whatever was added): each
 * category with the tools it would add, those of the core set left out (their schemas are sent already;
 * listing them again cost a tenth of the lean prefix), a category with nothing to add left out. A
 * category that holds the whole of smaller ones (introspection holds xref, packages and clos) names
 * them instead of listing their tools twice; the names go without the backticks of the other lists.
 */
export function moreToolsSection(all: readonly Tool[]): string {
  const more = [...categoriesOf(all)].flatMap(([c, names]): [string, string[]][] => {
    const left = names.filter((n) => !CORE_TOOLS.includes(n));
    return left.length > 0 ? [[c, left]] : [];
  });
  const lines = more.map(([c, names]) => {
    // The smaller categories wholly inside this one, each not inside another of them.
    const inside = more.filter(([o, ns]) => o !== c && ns.length < names.length && ns.every((n) => names.includes(n)));
    const parts = inside.filter(([o, ns]) => !inside.some(([p, ps]) => p !== o && ps.length > ns.length && ns.every((n) => ps.includes(n))));
    const covered = new Set(parts.flatMap(([, ns]) => ns));
    const own = names.filter((n) => !covered.has(n));
    const named = parts.map(([o]) => o);
    const those = named.length > 0 ? [`the ${named.length > 1 ? `${named.slice(0, -1).join(", ")} and ${named.at(-1)}` : named[0]} tools`] : [];
    return `- ${c}: ${[...those, ...own].join(", ")}`;
  });
  return `## More Tools\n\`${ADD_TOOLS}\` adds a category's tools to the core set, for the rest of the conversation:\n${lines.join("\n")}`;
}

/**
 * The tools a lean conversation offers: the core set and add_tools, in registration order, then each
 * category the model added, in the order added (what was offered before stays first, as it was sent).
 * ADDED is the conversation's own list, which offer extends.
 */
export class LeanToolSet {
  constructor(
    private readonly all: readonly Tool[],
    private readonly added: string[],
  ) {}

  current(): Tool[] {
    const out = this.all.filter((t) => CORE_TOOLS.includes(t.name) || t.name === ADD_TOOLS);
    for (const c of this.added) for (const t of this.all) if (t.categories.includes(c) && !out.includes(t)) out.push(t);
    return out;
  }

  /** Adds CATEGORY; returns the names of the tools it brought in. */
  offer(category: string): string[] {
    const known = categoriesOf(this.all);
    if (!known.has(category)) throw new ToolError(`Unknown category "${category}". Categories: ${[...known.keys()].join(", ")}.`);
    const before = new Set(this.current().map((t) => t.name));
    if (!this.added.includes(category)) this.added.push(category);
    return this.current().flatMap((t) => (before.has(t.name) ? [] : [t.name]));
  }
}

/** The categories add_tools added in MESSAGES (a resumed conversation's history), in order. */
export function categoriesAddedIn(messages: readonly Message[]): string[] {
  const failed = new Set(messages.flatMap((m) => (m.role === "user" ? m.content.flatMap((b) => (b.type === "tool_result" && b.isError ? [b.toolUseId] : [])) : [])));
  const out: string[] = [];
  for (const m of messages) {
    if (m.role !== "assistant") continue;
    for (const b of m.content) {
      if (b.type !== "tool_use" || b.name !== ADD_TOOLS || failed.has(b.id)) continue;
      const c = b.input.category;
      if (typeof c === "string" && !out.includes(c)) out.push(c);
    }
  }
  return out;
}

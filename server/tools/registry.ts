// The tool registry: register, get, list, filter, and the description the model sees
// (each provider builds its own wire format from it).

import { safetyRank, type ModelSchema, type SafetyLevel, type Tool } from "./tool.js";

export interface ToolFilter {
  /** Only tools at or below this level. */
  maxSafetyLevel?: SafetyLevel;
  /** Only tools with at least one of these categories. */
  categories?: readonly string[];
  /** Include alias names (read_file next to file_read); off by default so each capability is offered once. */
  includeAliases?: boolean;
  /** Exactly these names, whatever else the filter says (aliases included). */
  names?: readonly string[];
}

export class ToolRegistry {
  private readonly tools = new Map<string, Tool>();

  /** Idempotent: a tool of the same name is replaced. */
  register(tool: Tool): Tool {
    this.tools.set(tool.name, tool);
    return tool;
  }

  /** Removes NAME (tools of an MCP server that went away); true when it was there. */
  unregister(name: string): boolean {
    return this.tools.delete(name);
  }

  get(name: string): Tool | undefined {
    return this.tools.get(name);
  }

  names(): string[] {
    return [...this.tools.keys()];
  }

  /** Every category some registered tool has. */
  categories(): string[] {
    return [...new Set([...this.tools.values()].flatMap((t) => t.categories))];
  }

  get size(): number {
    return this.tools.size;
  }

  /** Tools matching every given filter, in registration order. */
  list(filter: ToolFilter = {}): Tool[] {
    const { maxSafetyLevel, categories, includeAliases, names } = filter;
    return [...this.tools.values()].filter((t) => {
      if (names) return names.includes(t.name);
      if (t.aliasOf && !includeAliases) return false;
      if (maxSafetyLevel && safetyRank(t.safety) > safetyRank(maxSafetyLevel)) return false;
      if (categories && categories.length > 0 && !t.categories.some((c) => categories.includes(c))) return false;
      return true;
    });
  }

  /** Names closest to NAME, best first: what to suggest for an unknown tool. */
  closest(name: string, n = 3): string[] {
    return [...this.tools.keys()]
      .map((candidate) => ({ candidate, d: editDistance(name.toLowerCase(), candidate) }))
      .sort((a, b) => a.d - b.d || a.candidate.localeCompare(b.candidate))
      .slice(0, n)
      .map((x) => x.candidate);
  }
}

/** The description the model sees, with the safety note it needs to plan (approval can be refused). */
export function describeForModel(tool: Tool, level: SafetyLevel = tool.safety): string {
  if (level === "dangerous") return `${tool.description} Requires the user's approval; may be denied.`;
  return tool.description;
}

/**
 * The schema the model sees. Left out: the parameters marked notOffered, the lisp marks, an empty required list, and
 * additionalProperties (the executor refuses unknown arguments itself, naming the known ones): every
 * request carries these schemas, so each character costs in every request of a session.
 */
export function schemaForModel(tool: Tool): ModelSchema {
  // What the approval UI needs to know (lisp) costs tokens in every request and is no schema keyword.
  const properties = Object.fromEntries(
    Object.entries(tool.schema.properties)
      .filter(([, spec]) => !spec.notOffered)
      .map(([name, { lisp: _lisp, ...spec }]) => [name, spec]),
  );
  return tool.required.length ? { type: "object", properties, required: [...tool.required] } : { type: "object", properties };
}

/** Levenshtein distance, with a bonus for substrings so "describe" finds "describe_symbol". */
function editDistance(a: string, b: string): number {
  if (a.length > 200) a = a.slice(0, 200);
  if (b.includes(a) || a.includes(b)) return Math.abs(a.length - b.length) / 4;
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}

// What the agent needs to know per model: its context window (to shorten old tool results before
// the request no longer fits) and its price (to report a cost per turn). Matched by the longest
// prefix, so dated snapshots (claude-sonnet-4-5-20250929) find their family.

import type { Usage } from "../protocol.js";

/** US dollars per million tokens. */
export interface Price {
  input: number;
  output: number;
  cacheWrite: number;
  cacheRead: number;
}

export interface ModelInfo {
  contextWindow: number;
  /** Undefined: the price is not known, and the cost is reported as 0 with a note. */
  price?: Price;
  /** True when the model was not in the table and the numbers are guesses. */
  unknown?: boolean;
}

const claude = (input: number, output: number): Price => ({ input, output, cacheWrite: input * 1.25, cacheRead: input / 10 });
const oai = (input: number, output: number, cacheRead: number): Price => ({ input, output, cacheWrite: input, cacheRead });

const TABLE: [prefix: string, info: ModelInfo][] = [
  // Opus 4.5 moved Opus to the lower price tier; later 4.x Opus releases are assumed to keep it.
  ["claude-opus-4-8", { contextWindow: 200_000, price: claude(5, 25) }],
  ["claude-opus-4-7", { contextWindow: 200_000, price: claude(5, 25) }],
  ["claude-opus-4-6", { contextWindow: 200_000, price: claude(5, 25) }],
  ["claude-opus-4-5", { contextWindow: 200_000, price: claude(5, 25) }],
  ["claude-opus-4", { contextWindow: 200_000, price: claude(15, 75) }],
  ["claude-sonnet-4", { contextWindow: 200_000, price: claude(3, 15) }],
  ["claude-3-7-sonnet", { contextWindow: 200_000, price: claude(3, 15) }],
  ["claude-3-5-sonnet", { contextWindow: 200_000, price: claude(3, 15) }],
  ["claude-haiku-4", { contextWindow: 200_000, price: claude(1, 5) }],
  ["claude-3-5-haiku", { contextWindow: 200_000, price: claude(0.8, 4) }],
  ["claude-3-haiku", { contextWindow: 200_000, price: claude(0.25, 1.25) }],
  ["claude-3-opus", { contextWindow: 200_000, price: claude(15, 75) }],
  ["gpt-5-nano", { contextWindow: 400_000, price: oai(0.05, 0.4, 0.005) }],
  ["gpt-5-mini", { contextWindow: 400_000, price: oai(0.25, 2, 0.025) }],
  ["gpt-5", { contextWindow: 400_000, price: oai(1.25, 10, 0.125) }],
  ["gpt-4.1-nano", { contextWindow: 1_047_576, price: oai(0.1, 0.4, 0.025) }],
  ["gpt-4.1-mini", { contextWindow: 1_047_576, price: oai(0.4, 1.6, 0.1) }],
  ["gpt-4.1", { contextWindow: 1_047_576, price: oai(2, 8, 0.5) }],
  ["gpt-4o-mini", { contextWindow: 128_000, price: oai(0.15, 0.6, 0.075) }],
  ["gpt-4o", { contextWindow: 128_000, price: oai(2.5, 10, 1.25) }],
  ["o4-mini", { contextWindow: 200_000, price: oai(1.1, 4.4, 0.275) }],
  ["o3-mini", { contextWindow: 200_000, price: oai(1.1, 4.4, 0.55) }],
  ["o3", { contextWindow: 200_000, price: oai(2, 8, 0.5) }],
];

/** Local and unlisted models: a window small enough to be safe for most of them, and no price. */
const UNKNOWN: ModelInfo = { contextWindow: 32_000, unknown: true };

export function modelInfo(model: string): ModelInfo {
  // OpenRouter-style names carry a vendor prefix: anthropic/claude-sonnet-4.
  const name = model.toLowerCase().replace(/^[a-z0-9-]+\//, "");
  // ... and write Claude versions with dots (claude-sonnet-4.5).
  const bare = name.startsWith("claude") ? name.replace(/\./g, "-") : name;
  let best: ModelInfo | undefined;
  let bestLength = 0;
  for (const [prefix, info] of TABLE) {
    if (bare.startsWith(prefix) && prefix.length > bestLength) {
      best = info;
      bestLength = prefix.length;
    }
  }
  return best ?? UNKNOWN;
}

export interface Cost {
  usd: number;
  /** Set when the price is unknown (the cost is then 0). */
  note?: string;
}

export function costOf(model: string, usage: Usage): Cost {
  const { price } = modelInfo(model);
  if (!price) return { usd: 0, note: `No price is known for model ${model}; its cost is counted as 0.` };
  const usd =
    (usage.inputTokens * price.input +
      usage.outputTokens * price.output +
      usage.cacheWriteTokens * price.cacheWrite +
      usage.cacheReadTokens * price.cacheRead) /
    1_000_000;
  return { usd: Math.round(usd * 1e6) / 1e6 };
}

export const DEFAULT_MODELS = { anthropic: "claude-sonnet-4-6", openai: "gpt-4.1" } as const;

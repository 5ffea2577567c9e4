// Figure 6, tokens: what each request to the model costs, split into the fixed prefix (system prompt +
// tool definitions, the same in every request of a session) and the history (the messages so far).
// Tokens are estimated as ceil(chars / 4), the rule the server itself uses.
//
// `node bench/tokens.mjs FILE...`: FILE is a mock LLM's /_requests answer (JSON) recorded while one of
// the specification's three scenarios ran in a real image (bench/emacs.el writes them to
// bench/.work/scenario-N.json); prints every request and records one row per scenario.

import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";
import { record } from "./lib.mjs";
import { cacheShares } from "../test/fixtures/mock-llm/cache-prefix.mjs";

/** Figure 10's target: the share of input a provider's prompt cache would serve. */
const CACHE_TARGET = 0.9;

/**
 * Records figure 10 for REQUESTS (a mock's /_requests, in order) named NAME: the share of their input
 * inside a prefix already sent up to a cache breakpoint. EARLIER requests (sent before, in the same
 * session) count as already sent.
 */
export function cacheRow(requests, name, earlier = [], { cold = false } = {}) {
  const shares = cacheShares([...earlier, ...requests]).slice(earlier.length);
  const total = shares.reduce((n, s) => n + s.total, 0);
  const cached = shares.reduce((n, s) => n + s.cached, 0);
  const share = total ? cached / total : 0;
  // A session's very first request can only write the cache: a conversation of two requests that
  // starts the session cannot pass half. Its row is shown for what it is, without the target.
  const first = shares[0]?.total ?? 0;
  const ceiling = total ? (total - first) / total : 0;
  record({
    figure: `10. cache share: ${name}`,
    unit: "%",
    value: 100 * share,
    target: cold ? `- (at most ${Math.round(100 * ceiling)}%: the first request writes the cache)` : `>= ${100 * CACHE_TARGET}%`,
    ratio: cold ? undefined : share / CACHE_TARGET,
    ...(cold ? {} : { pass: share >= CACHE_TARGET }),
    note: `${requests.length} requests, ~${estimate(total)} input tokens, ~${estimate(cached)} of them inside a prefix identical to one already sent up to a cache breakpoint${earlier.length ? ` (the ${earlier.length} requests sent before in the same session count as sent)` : ""}; per request: ${shares.map((s) => `${Math.round((100 * s.cached) / Math.max(1, s.total))}%`).join(" ")}`,
  });
}

export const estimate = (chars) => Math.ceil(chars / 4);

/** {prefix, history} in characters of one Anthropic request BODY. */
export function split(body) {
  const system = typeof body.system === "string" ? body.system : (body.system ?? []).map((b) => b.text).join("");
  return { prefix: system.length + JSON.stringify(body.tools ?? []).length, history: JSON.stringify(body.messages ?? []).length };
}

const SCENARIOS = {
  "scenario-1": "1 describe PROCESS-DATA",
  "scenario-2": "2 fix PARSE-INPUT",
  "scenario-3": "3 add a SERIALIZE method",
};

export function scenarioRows(files) {
  const sent = [];
  const all = [];
  for (const file of [...files].sort()) {
    const requests = JSON.parse(readFileSync(file, "utf8"));
    const key = basename(file, ".json");
    const name = SCENARIOS[key] ?? key;
    let prefix = 0;
    let history = 0;
    process.stderr.write(`\nTokens per request, scenario ${name} (${requests.length} requests)\n`);
    requests.forEach((r, i) => {
      const s = split(r.body);
      prefix += estimate(s.prefix);
      history += estimate(s.history);
      process.stderr.write(`  request ${i + 1}: prefix ~${estimate(s.prefix)} + history ~${estimate(s.history)} = ~${estimate(s.prefix) + estimate(s.history)} tokens\n`);
    });
    process.stderr.write(`  total: ~${prefix + history} tokens (prefix ${prefix}, history ${history})\n`);
    record({
      figure: `6. scenario ${name}: all requests`,
      unit: "tokens",
      value: prefix + history,
      target: "-",
      note: `${requests.length} requests in a real image; fixed prefix ~${prefix} tokens in all (the same each time, cacheable), history ~${history}`,
    });
    // One Emacs session runs the scenarios one after the other: what the earlier ones sent counts.
    // The first scenario starts the session cold; it is measured again as a later conversation of a
    // session under way (the provider keeps a prefix for minutes, across conversations).
    cacheRow(requests, `scenario ${name}${sent.length ? "" : ", the session's first conversation"}`, sent, { cold: sent.length === 0 });
    all.push({ name, requests });
    sent.push(...requests);
  }
  if (all.length > 1) {
    const [{ name, requests }, ...rest] = all;
    cacheRow(requests, `scenario ${name}, after the others in the same session`, rest.flatMap((r) => r.requests));
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) scenarioRows(process.argv.slice(2));

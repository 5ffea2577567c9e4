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
  for (const file of files) {
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
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) scenarioRows(process.argv.slice(2));

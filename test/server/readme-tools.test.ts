// The README's tool table is generated from the registry so that it cannot drift.
// Regenerate with: UPDATE_README=1 npx vitest run test/server/readme-tools.test.ts

import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createDefaultRegistry } from "../../server/tools/catalog/index.js";

const README = fileURLToPath(new URL("../../README.md", import.meta.url));
const BEGIN = "<!-- tools:begin (generated from the registry by test/server/readme-tools.test.ts) -->";
const END = "<!-- tools:end -->";

export function toolTable(): string {
  const rows = createDefaultRegistry()
    .list({ includeAliases: true })
    .map((t) => {
      const params = Object.keys(t.schema.properties)
        .map((p) => (t.required.includes(p) ? `**${p}**` : p))
        .join(", ");
      const name = t.aliasOf ? `${t.name} (alias of ${t.aliasOf})` : t.name;
      return `| ${name} | ${t.safety} | ${t.runtime} | ${params || "none"} | ${t.description.replace(/\|/g, "\\|")} |`;
    });
  return [BEGIN, "| tool | safety | runs in | parameters (**required**) | what it does |", "| --- | --- | --- | --- | --- |", ...rows, END].join("\n");
}

describe("README tool table", () => {
  it("matches the registry", () => {
    const text = readFileSync(README, "utf8");
    const start = text.indexOf(BEGIN);
    const end = text.indexOf(END);
    expect(start, "README has the tools:begin marker").toBeGreaterThanOrEqual(0);
    expect(end).toBeGreaterThan(start);
    const current = text.slice(start, end + END.length);
    const wanted = toolTable();
    if (process.env.UPDATE_README && current !== wanted) {
      writeFileSync(README, text.slice(0, start) + wanted + text.slice(end + END.length));
      return;
    }
    expect(current).toBe(wanted);
  });
});

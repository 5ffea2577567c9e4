// Prints the benchmark table from the rows in FILE (JSON lines written by the bench scripts):
// `node bench/report.mjs FILE [--markdown]`.
// A row: {figure, unit, samples?: number[], value?: number, spread?: "min-max", target, ratio?, pass?, note?}.

import { readFileSync } from "node:fs";
import { median, percentile } from "./lib.mjs";

const [file, flag] = process.argv.slice(2);
// In figure order (stable: each script's own order within a figure).
const rows = readFileSync(file, "utf8")
  .split("\n")
  .filter(Boolean)
  .map((l) => JSON.parse(l))
  .sort((a, b) => parseInt(a.figure) - parseInt(b.figure));

const num = (x) => (x === undefined || Number.isNaN(x) ? "-" : Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2));
const table = rows.map((r) => {
  const s = r.samples;
  const mid = s ? median(s) : r.value;
  const spread = !s || s.length < 2 ? "" : r.spread === "min-max" ? `${num(Math.min(...s))}–${num(Math.max(...s))}` : `${num(percentile(s, 10))}–${num(percentile(s, 90))}`;
  return {
    figure: r.figure,
    median: `${num(mid)} ${r.unit}`,
    spread: s ? `${spread}${s.length > 1 ? ` (n=${s.length}${r.spread === "min-max" ? ", min–max" : ""})` : ""}` : "",
    target: r.target ?? "-",
    ratio: r.ratio === undefined ? "-" : `${r.ratio.toFixed(2)}x`,
    result: r.pass === undefined ? "info" : r.pass ? "PASS" : "MISS",
    note: r.note ?? "",
  };
});

const cols = ["figure", "median", "spread", "target", "ratio", "result"];
const heads = { figure: "figure", median: "median", spread: "spread (p10–p90)", target: "target", ratio: "ratio", result: "" };
if (flag === "--markdown") {
  console.log(`| ${cols.map((c) => heads[c]).join(" | ")} |`);
  console.log(`|${cols.map(() => " --- ").join("|")}|`);
  for (const t of table) console.log(`| ${cols.map((c) => t[c]).join(" | ")} |`);
  const notes = table.filter((t) => t.note);
  if (notes.length) {
    console.log();
    for (const t of notes) console.log(`- ${t.figure}: ${t.note}`);
  }
} else {
  const w = Object.fromEntries(cols.map((c) => [c, Math.max(heads[c].length, ...table.map((t) => t[c].length))]));
  const line = (t) => cols.map((c) => t[c].padEnd(w[c])).join("  ").trimEnd();
  console.log(line(heads));
  console.log(cols.map((c) => "-".repeat(w[c])).join("  "));
  for (const t of table) console.log(line(t));
  const notes = table.filter((t) => t.note);
  if (notes.length) {
    console.log();
    for (const t of notes) console.log(`  ${t.figure}: ${t.note}`);
  }
}

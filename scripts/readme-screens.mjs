// `make screens`: the README's text captures of the chat, rewritten from the screens the terminal
// suite keeps (test/tui: `sly-agent-q-tui-snapshot' writes NAME.txt into SAQ_TUI_SNAPSHOTS), so that
// none is typed by hand. In the README a capture is a fenced block between
//
//   <!-- screen NAME (from the terminal suite: make screens) -->
//   <!-- /screen -->
//
//   node scripts/readme-screens.mjs DIR   rewrite every such block from DIR/NAME.txt
//
// A name with no file in DIR is left as it is and named on stderr (exit 1).

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const BLOCK = /(<!-- screen ([a-z0-9-]+)\b[^>]*-->\n)[\s\S]*?(<!-- \/screen -->)/g;

/** The names of the captures the README (TEXT) holds, in order. */
export function screenNames(text) {
  return [...text.matchAll(BLOCK)].map((m) => m[2]);
}

/** A capture as a fenced block: blank runs (a window's empty lines) made one line, and a fence
 * longer than any line of backquotes in it. */
export function fenced(capture) {
  const body = capture.replace(/[ \t]+$/gm, "").replace(/\n{3,}/g, "\n\n").replace(/\n+$/, "");
  const longest = Math.max(0, ...[...body.matchAll(/^`{3,}/gm)].map((m) => m[0].length));
  const fence = "`".repeat(Math.max(3, longest + 1));
  return `${fence}\n${body}\n${fence}\n`;
}

/** TEXT with each capture replaced by READ(name) (a string, or undefined to leave it). */
export function withScreens(text, read) {
  return text.replace(BLOCK, (whole, open, name, close) => {
    const capture = read(name);
    return capture === undefined ? whole : `${open}${fenced(capture)}${close}`;
  });
}

/** The snapshot names the terminal suite's tests take, from their SOURCES (Elisp texts). */
export function snapshotNames(sources) {
  return sources.flatMap((s) => [...s.matchAll(/\(sly-agent-q-tui-snapshot "([^"]+)"\)/g)].map((m) => m[1]));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const dir = process.argv[2];
  if (!dir) {
    console.error("usage: node scripts/readme-screens.mjs DIR (the terminal suite's SAQ_TUI_SNAPSHOTS)");
    process.exit(2);
  }
  const readme = join(root, "README.md");
  const missing = [];
  const text = withScreens(readFileSync(readme, "utf8"), (name) => {
    const file = join(dir, `${name}.txt`);
    if (existsSync(file)) return readFileSync(file, "utf8");
    missing.push(name);
    return undefined;
  });
  writeFileSync(readme, text);
  if (missing.length > 0) {
    console.error(`readme-screens: no capture for ${missing.join(", ")} in ${dir}`);
    process.exit(1);
  }
}

// Small helpers shared by the modules that build messages and merge protocol objects.

/** TEXT trimmed and ended as a sentence: a full stop is added unless it already ends with one (or ! ? or ...). */
export function sentence(text: string): string {
  const t = text.trim();
  return t === "" || /[.!?\u2026]["')\]]*$/.test(t) ? t : `${t}.`;
}

/** O without the properties whose value is undefined (so that they do not override others in a spread). */
export function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** TEXT's first MAX UTF-16 units, or one fewer where the cut would split a character in two (half a
 *  surrogate pair is not valid Unicode: an API refuses a request holding one). */
export function cutText(text: string, max: number): string {
  if (text.length <= max) return text;
  const end = max > 0 && /[\ud800-\udbff]/.test(text[max - 1]!) ? max - 1 : max;
  return text.slice(0, end);
}

/** TEXT on one line (white space runs made one space, trimmed), cut to MAX characters with an ellipsis. */
export function oneLine(text: string, max = Infinity): string {
  const line = text.trim().replace(/\s+/g, " ");
  return line.length > max ? `${cutText(line, max - 1)}…` : line;
}

// Control characters (C0, DEL, C1), bidi controls and other invisible format characters: text from outside
// holding them could draw lines of its own, reorder what follows, or hide itself when shown.
const UNSAFE_CHARS =
  /[\u0000-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/gu;

/** TEXT with every control, bidi and format character shown escaped (\n, \t, \e, \u202E...), all on one line. */
export function escapeUnsafe(text: string): string {
  return text.replace(UNSAFE_CHARS, (c) => {
    if (c === "\n") return "\\n";
    if (c === "\t") return "\\t";
    if (c === "\r") return "\\r";
    if (c === "\u001b") return "\\e";
    const code = c.codePointAt(0)!;
    return code < 0x80 ? `\\x${code.toString(16).toUpperCase().padStart(2, "0")}` : `\\u${code.toString(16).toUpperCase().padStart(4, "0")}`;
  });
}

/** A name given by an outside party (an MCP client or server), printable and at most MAX characters; FALLBACK when empty. */
export function printableName(raw: unknown, max = 64, fallback = "an unnamed MCP client"): string {
  const name = escapeUnsafe(typeof raw === "string" ? raw : "").trim();
  if (name === "") return fallback;
  return name.length > max ? `${cutText(name, max)}…` : name;
}

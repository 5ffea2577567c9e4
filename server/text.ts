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

// Characters a reader never sees or that act on what is shown: Unicode's default ignorables (zero-width
// characters, variation selectors, the tag characters U+E0000-U+E007F that can spell a whole
// instruction invisibly...), every format character (\p{Cf}: the bidi controls that reorder what
// follows, the interlinear annotation marks, the Arabic and Syriac marks, the Egyptian format controls,
// listed too where this Node's Unicode lacks them), the line and paragraph separators, DEL and C1, and
// the C0 controls but tab, newline and carriage return (ESC starts the terminal sequences that hide
// text from `cat`). One list serves both uses below.
const INVISIBLE_CLASS = String.raw`\p{Default_Ignorable_Code_Point}\p{Cf}\u{13430}-\u{1343f}\u2028\u2029\u007f-\u009f\u0000-\u0008\u000b\u000c\u000e-\u001f`;

// Text from outside holding any of them, or a tab, newline or carriage return, could draw lines of its
// own, reorder what follows, or hide itself when shown on one line.
const UNSAFE_CHARS = new RegExp(`[${INVISIBLE_CLASS}\\t\\n\\r]`, "gu");

/** TEXT with every control, bidi and format character shown escaped (\n, \t, \e, \u202E...), all on one line. */
export function escapeUnsafe(text: string): string {
  return text.replace(UNSAFE_CHARS, (c) => {
    if (c === "\n") return "\\n";
    if (c === "\t") return "\\t";
    if (c === "\r") return "\\r";
    if (c === "\u001b") return "\\e";
    const code = c.codePointAt(0)!;
    const hex = code.toString(16).toUpperCase();
    return code < 0x80 ? `\\x${hex.padStart(2, "0")}` : code > 0xffff ? `\\u{${hex}}` : `\\u${hex.padStart(4, "0")}`;
  });
}

/** A name given by an outside party (an MCP client or server), printable and at most MAX characters; FALLBACK when empty. */
export function printableName(raw: unknown, max = 64, fallback = "an unnamed MCP client"): string {
  const name = escapeUnsafe(typeof raw === "string" ? raw : "").trim();
  if (name === "") return fallback;
  return name.length > max ? `${cutText(name, max)}…` : name;
}

// Text the model reads as instructions from a file the user may never have looked at is sent without
// them (its tabs and line breaks kept).
const INVISIBLE = new RegExp(`[${INVISIBLE_CLASS}]`, "gu");

/** What removeInvisible took out of a text. */
export interface InvisibleRemoved {
  /** How many characters were removed. */
  count: number;
  /** Each removed character's code point ("U+200B") and how often it was removed, in order of first sight. */
  characters: { codePoint: string; count: number }[];
  /** What the removed tag characters (U+E0020-U+E007E) spelled, as ASCII: an instruction hidden in them. */
  tagText?: string;
}

/** TEXT without its invisible and direction-changing characters, and what was removed. */
export function removeInvisible(text: string): { text: string; removed: InvisibleRemoved } {
  const counts = new Map<number, number>();
  let tagText = "";
  const cleaned = text.replace(INVISIBLE, (c) => {
    const code = c.codePointAt(0)!;
    counts.set(code, (counts.get(code) ?? 0) + 1);
    if (code >= 0xe0020 && code <= 0xe007e) tagText += String.fromCharCode(code - 0xe0000);
    return "";
  });
  const characters = [...counts].map(([code, count]) => ({ codePoint: `U+${code.toString(16).toUpperCase().padStart(4, "0")}`, count }));
  const count = characters.reduce((n, c) => n + c.count, 0);
  return { text: cleaned, removed: { count, characters, ...(tagText !== "" ? { tagText } : {}) } };
}

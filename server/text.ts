// Small helpers shared by the modules that build messages and merge protocol objects.

/** TEXT trimmed and ended as a sentence: a full stop is added unless it already ends with one (or ! ? or ...). */
export function sentence(text: string): string {
  const t = text.trim();
  return t === "" || /[.!?…]["')\]]*$/.test(t) ? t : `${t}.`;
}

/** O without the properties whose value is undefined (so that they do not override others in a spread). */
export function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** TEXT on one line (white space runs made one space, trimmed), cut to MAX characters with an ellipsis. */
export function oneLine(text: string, max = Infinity): string {
  const line = text.trim().replace(/\s+/g, " ");
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

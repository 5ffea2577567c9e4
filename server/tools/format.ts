// Turning whatever a handler returns into the string the model reads ("Result Formatting").

import { cutText } from "../text.js";

export function formatResult(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === null || value === undefined) return "nil";
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") return String(value);
  try {
    return JSON.stringify(value, null, 2) ?? String(value);
  } catch {
    return String(value);
  }
}

/** Cuts TEXT to MAX characters with a marker that says how much was left out and how to get it. */
export function truncate(text: string, max: number, hint?: string): string {
  if (text.length <= max) return text;
  const kept = cutText(text, max);
  const how = hint ?? "Ask for a smaller part to see the rest.";
  return `${kept}\n[... truncated: ${text.length - kept.length} of ${text.length} characters left out. ${how}]`;
}

/** A one-line, bounded description of an error of any type. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  if (typeof err === "string") return err;
  try {
    return JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}

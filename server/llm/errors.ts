// Provider failures, mapped once to what the turn reports: a kind the client can act on, whether a
// retry may help, and a message that says what the user should do. Both SDKs' errors share the
// same shape (status, headers, error body), so they are read by duck typing.

import type { TurnFailureKind } from "../protocol.js";
import { redact } from "../log.js";

export class ProviderError extends Error {
  constructor(
    readonly kind: TurnFailureKind,
    message: string,
    readonly retryable: boolean,
    readonly status?: number,
    /** From a retry-after header, when the provider sent one. */
    readonly retryAfterMs?: number,
  ) {
    super(redact(message));
    this.name = "ProviderError";
  }
}

export interface ErrorContext {
  provider: string;
  baseUrl: string;
  model: string;
  /** Where the key can be set, for the 401 message. */
  keyHint: string;
}

/** A stream that ended without its final event, or sent something unreadable. */
export class MalformedStreamError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MalformedStreamError";
  }
}

export function isAbortError(err: unknown): boolean {
  const name = (err as { name?: string } | null)?.name;
  return name === "AbortError" || name === "APIUserAbortError";
}

export function toProviderError(err: unknown, ctx: ErrorContext): ProviderError {
  if (err instanceof ProviderError) return err;
  const e = (err ?? {}) as { status?: unknown; name?: string; message?: string; headers?: unknown; error?: unknown; type?: unknown };
  const detail = providerMessage(e) ?? e.message ?? String(err);
  // An error event inside an SSE stream has no HTTP status, only the provider's error type.
  const status = typeof e.status === "number" ? e.status : statusOfType(errorType(e));
  const who = `${ctx.provider} (${ctx.baseUrl})`;
  if (err instanceof MalformedStreamError || e.name === "SyntaxError" || (/parse|JSON/i.test(String(e.message)) && status === undefined && !isConnection(e))) {
    return new ProviderError("provider", `${who} sent a response stream that could not be read (${detail}). Try again; if it keeps happening, check that the base URL points at an ${ctx.provider === "anthropic" ? "Anthropic Messages" : "OpenAI-compatible chat completions"} endpoint.`, false);
  }
  if (status === undefined) {
    if (isConnection(e)) {
      const timeout = /timeout|timed out/i.test(`${e.name} ${e.message}`);
      return new ProviderError("provider", `Could not reach ${who}: ${timeout ? "the request timed out" : detail}. Check the network connection and the base URL setting.`, true);
    }
    return new ProviderError("internal", `The request to ${who} failed: ${detail}`, false);
  }
  const retryAfterMs = retryAfter(e.headers);
  switch (true) {
    case status === 401:
      return new ProviderError("auth", `${who} rejected the API key (401: ${detail}). Set a valid key with ${ctx.keyHint}.`, false, status);
    case status === 403:
      return new ProviderError("auth", `${who} refused access (403: ${detail}). Check that the API key may use model ${ctx.model}.`, false, status);
    case status === 404:
      return new ProviderError("config", `${who} answered 404 (${detail}). Check the model name (${ctx.model}) and the base URL.`, false, status);
    case status === 429:
      return new ProviderError("rate_limit", `${who} is rate limiting requests (429: ${detail}). Wait a moment and try again, or check the account's limits.`, true, status, retryAfterMs);
    case status === 529 || /overloaded/i.test(detail):
      return new ProviderError("provider", `${who} is overloaded (${status}: ${detail}). Try again in a little while.`, true, status, retryAfterMs);
    case status === 408 || status === 409 || status >= 500:
      return new ProviderError("provider", `${who} had a server error (${status}: ${detail}). Try again; if it persists, check the provider's status page.`, true, status, retryAfterMs);
    case status === 400 || status === 413 || status === 422:
      return new ProviderError("provider", `${who} rejected the request (${status}: ${detail}). Starting a new conversation may help if the history is too long.`, false, status);
    default:
      return new ProviderError("provider", `${who} answered ${status}: ${detail}`, false, status);
  }
}

const TYPE_STATUS: Record<string, number> = {
  invalid_request_error: 400,
  authentication_error: 401,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  timeout_error: 504,
  overloaded_error: 529,
};

function errorType(e: { error?: unknown; type?: unknown }): string | undefined {
  const body = e.error as { error?: { type?: unknown }; type?: unknown } | undefined;
  const t = body?.error?.type ?? body?.type ?? e.type;
  return typeof t === "string" ? t : undefined;
}

function statusOfType(type: string | undefined): number | undefined {
  return type === undefined ? undefined : TYPE_STATUS[type];
}

function isConnection(e: { name?: string; message?: string }): boolean {
  return /Connection|Timeout|fetch failed|ECONNREFUSED|ENOTFOUND|ECONNRESET|socket|terminated/i.test(`${e.name} ${e.message}`);
}

/** The provider's own error message from its JSON body, when there is one. */
function providerMessage(e: { error?: unknown }): string | undefined {
  const body = e.error as { error?: { message?: unknown }; message?: unknown } | undefined;
  const m = body?.error?.message ?? body?.message;
  return typeof m === "string" && m !== "" ? m : undefined;
}

function retryAfter(headers: unknown): number | undefined {
  const get = (headers as { get?: (k: string) => string | null } | undefined)?.get;
  if (typeof get !== "function") return undefined;
  const ms = get.call(headers, "retry-after-ms");
  if (ms && Number.isFinite(Number(ms))) return Number(ms);
  const s = get.call(headers, "retry-after");
  if (s === null || s === undefined || s === "") return undefined;
  if (Number.isFinite(Number(s))) return Number(s) * 1000;
  const date = Date.parse(s);
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : undefined;
}

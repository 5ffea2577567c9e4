// Provider failures, mapped once to what the turn reports: a kind the client can act on, whether a
// retry may help, and a message that says what the user should do. Both SDKs throw the same family
// of classes (APIError and its subclasses by HTTP status, APIConnectionError, APIUserAbortError);
// the classification goes by those classes, and by the provider's error type for an error event
// inside a stream (which has no HTTP status), never by the wording of a message.

import type { APIError as AnthropicAPIError } from "@anthropic-ai/sdk/core/error";
import type { APIError as OpenAIAPIError } from "openai/core/error";
import type { TurnFailureKind } from "../protocol.js";
import { redact } from "../log.js";
import { sentence } from "../text.js";
import { loadedSdks, SdkLoadError } from "./sdks.js";

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

/** The model's stream sent nothing for the idle timeout; the loop retries it at most once. */
export class StreamIdleError extends ProviderError {
  constructor(readonly idleMs: number) {
    super("timeout", `The model's stream sent nothing for ${formatSeconds(idleMs)} s.`, true);
    this.name = "StreamIdleError";
  }

  /** What ends the turn: after text reached the user (no retry then), or after the one retry. */
  final(afterText: boolean): ProviderError {
    const s = formatSeconds(this.idleMs);
    const hint = "Raise sly-agent-q-stream-idle-timeout (streamIdleTimeoutMs) if the model needs longer to answer.";
    return new ProviderError(
      "timeout",
      afterText
        ? `The model's stream sent nothing for ${s} s after part of its answer was shown; the turn was stopped. Ask again to continue. ${hint}`
        : `The model's stream sent nothing for ${s} s, again after one retry; the turn was stopped. Try again later. ${hint}`,
      false,
    );
  }
}

export interface ErrorContext {
  provider: string;
  baseUrl: string;
  model: string;
  /** Where the key can be set, for the 401 message. */
  keyHint: string;
  /** True once the response's stream had begun: a connection lost then was lost mid-answer. */
  streaming?: boolean;
}

/** A stream that ended without its final event, or sent something unreadable. */
export class MalformedStreamError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MalformedStreamError";
  }
}

type SdkError = AnthropicAPIError | OpenAIAPIError;

// The SDKs are loaded on first use (sdks.ts): an error is an instance of an SDK's class only once that
// SDK is loaded, so a class of an SDK not loaded matches nothing.
type ErrorClass = abstract new (...args: never[]) => Error;
const is = (e: unknown, ...classes: (ErrorClass | undefined)[]): boolean => classes.some((c) => c !== undefined && e instanceof c);
const A = () => loadedSdks.anthropic;
const O = () => loadedSdks.openai;

const isSdkError = (e: unknown): e is SdkError => is(e, A()?.APIError, O()?.APIError);

export function isAbortError(err: unknown): boolean {
  return is(err, A()?.APIUserAbortError, O()?.APIUserAbortError) || (err instanceof Error && err.name === "AbortError");
}

/** The failure classes both SDKs share, each a subclass of their APIError. */
type Failure = "auth" | "permission" | "not_found" | "bad_request" | "rate_limit" | "overloaded" | "server" | "timeout" | "connection" | "other";

function failureOf(e: SdkError): Failure {
  const a = A();
  const o = O();
  if (is(e, a?.APIConnectionTimeoutError, o?.APIConnectionTimeoutError)) return "timeout";
  if (is(e, a?.APIConnectionError, o?.APIConnectionError)) return "connection";
  if (is(e, a?.AuthenticationError, o?.AuthenticationError)) return "auth";
  if (is(e, a?.PermissionDeniedError, o?.PermissionDeniedError)) return "permission";
  if (is(e, a?.NotFoundError, o?.NotFoundError)) return "not_found";
  if (is(e, a?.RateLimitError, o?.RateLimitError)) return "rate_limit";
  if (is(e, a?.OverloadedError)) return "overloaded";
  if (is(e, a?.InternalServerError, o?.InternalServerError)) return e.status === 529 ? "overloaded" : "server";
  if (is(e, a?.RequestTimeoutError, a?.ConflictError, o?.ConflictError)) return "server";
  if (is(e, a?.BadRequestError, o?.BadRequestError, a?.UnprocessableEntityError, o?.UnprocessableEntityError, a?.ContentTooLargeError)) return "bad_request";
  // An error event inside a stream: no HTTP status, only the provider's error type.
  if (e.status === undefined && typeof e.type === "string") return STREAM_ERROR_TYPES[e.type] ?? "other";
  if (e.status === 408 || e.status === 409) return "server";
  if (e.status === 413) return "bad_request";
  return "other";
}

const STREAM_ERROR_TYPES: Record<string, Failure> = {
  invalid_request_error: "bad_request",
  authentication_error: "auth",
  permission_error: "permission",
  not_found_error: "not_found",
  request_too_large: "bad_request",
  rate_limit_error: "rate_limit",
  api_error: "server",
  server_error: "server",
  timeout_error: "server",
  overloaded_error: "overloaded",
};

export function toProviderError(err: unknown, ctx: ErrorContext): ProviderError {
  if (err instanceof ProviderError) return err;
  const who = `${ctx.provider} (${ctx.baseUrl})`;
  if (err instanceof SdkLoadError) {
    // Not the provider's failure, nor the network's: the request never left.
    return new ProviderError("internal", `${sentence(err.message)} Nothing was sent to ${who}.`, false);
  }
  if (err instanceof MalformedStreamError || err instanceof SyntaxError) {
    return new ProviderError(
      "provider",
      `${who} sent a response stream that could not be read (${err.message}). Try again; if it keeps happening, check that the base URL points at an ${ctx.provider === "anthropic" ? "Anthropic Messages" : "OpenAI-compatible chat completions"} endpoint.`,
      false,
    );
  }
  if (ctx.streaming && networkCode(err) !== undefined) {
    // Reading the body is not the SDK's: a broken connection surfaces as fetch's own TypeError.
    return new ProviderError("provider", `The connection to ${who} was lost in the middle of the answer (${networkCode(err)}). Try again.`, true);
  }
  if (!isSdkError(err)) {
    return new ProviderError("internal", `The request to ${who} failed: ${(err as Error)?.message ?? String(err)}`, false);
  }
  const detail = providerMessage(err) ?? err.message;
  const status = err.status;
  const code = status === undefined ? (typeof err.type === "string" ? err.type : "error") : String(status);
  const retryAfterMs = retryAfter(err.headers);
  switch (failureOf(err)) {
    case "timeout":
      return new ProviderError("provider", `Could not reach ${who}: the request timed out. Check the network connection and the base URL setting.`, true);
    case "connection":
      return ctx.streaming
        ? new ProviderError("provider", `The connection to ${who} was lost in the middle of the answer (${detail}). Try again.`, true)
        : new ProviderError("provider", `Could not reach ${who}: ${sentence(detail)} Check the network connection and the base URL setting.`, true);
    case "auth":
      return new ProviderError("auth", `${who} rejected the API key (${code}: ${detail}). Set a valid key with ${ctx.keyHint}.`, false, status);
    case "permission":
      return new ProviderError("auth", `${who} refused access (${code}: ${detail}). Check that the API key may use model ${ctx.model}.`, false, status);
    case "not_found":
      return new ProviderError("config", `${who} answered ${code} (${detail}). Check the model name (${ctx.model}) and the base URL.`, false, status);
    case "rate_limit":
      return new ProviderError("rate_limit", `${who} is rate limiting requests (${code}: ${detail}). Wait a moment and try again, or check the account's limits.`, true, status, retryAfterMs);
    case "overloaded":
      return new ProviderError("provider", `${who} is overloaded (${code}: ${detail}). Try again in a little while.`, true, status, retryAfterMs);
    case "server":
      return new ProviderError("provider", `${who} had a server error (${code}: ${detail}). Try again; if it persists, check the provider's status page.`, true, status, retryAfterMs);
    case "bad_request":
      // Only a request the provider calls too large is one a shorter history may cure.
      if (tooLarge(err)) {
        return new ProviderError("provider", `${who} rejected the request as too large for the model (${code}: ${detail}). Compact the conversation (sly-agent-q-compact) or start a new one.`, false, status);
      }
      // A refusal about thinking (a model that takes another mode, a budget, a tool choice): the setting that decides it.
      if (/thinking|budget_tokens|output_config|effort/i.test(detail)) {
        return new ProviderError("provider", `${who} rejected the request's thinking for ${ctx.model} (${code}: ${detail}). Set this model's thinking in sly-agent-q-thinking (off, auto, an effort level or a budget); the conversation is unchanged.`, false, status);
      }
      return new ProviderError("provider", `${who} rejected the request as invalid (${code}: ${detail}). Its length is not the cause; please report this with the message.`, false, status);
    case "other":
      return new ProviderError("provider", `${who} answered ${code}: ${sentence(detail)}`, false, status);
  }
}

/**
 * Whether the provider refused the request for its size: HTTP 413 or Anthropic's request_too_large
 * (the body), or OpenAI's context_length_exceeded code (the tokens). Anthropic answers a prompt of
 * too many tokens with a plain invalid_request_error whose message says so; that message is shown.
 */
function tooLarge(e: SdkError): boolean {
  const body = e.error as { error?: { type?: unknown; code?: unknown }; type?: unknown; code?: unknown } | undefined;
  const type = body?.error?.type ?? e.type;
  const code = body?.error?.code ?? body?.code ?? (e as { code?: unknown }).code;
  return e.status === 413 || type === "request_too_large" || code === "context_length_exceeded";
}

/** The system or undici error code (ECONNRESET, UND_ERR_SOCKET...) of ERR or of its causes. */
function networkCode(err: unknown): string | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && /^(E[A-Z]+|UND_ERR_[A-Z_]+)$/.test(code)) return code;
  }
  return undefined;
}

/** The provider's own error message from its JSON body, when there is one. */
function providerMessage(e: SdkError): string | undefined {
  const body = e.error as { error?: { message?: unknown }; message?: unknown } | undefined;
  const m = body?.error?.message ?? body?.message;
  return typeof m === "string" && m !== "" ? m : undefined;
}

function retryAfter(headers: Headers | undefined): number | undefined {
  if (!headers) return undefined;
  const ms = headers.get("retry-after-ms");
  if (ms && Number.isFinite(Number(ms))) return Number(ms);
  const s = headers.get("retry-after");
  if (s === null || s === "") return undefined;
  if (Number.isFinite(Number(s))) return Number(s) * 1000;
  const date = Date.parse(s);
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : undefined;
}

/** 250 -> "0.25", 90000 -> "90". */
export function formatSeconds(ms: number): string {
  return String(Number((ms / 1000).toFixed(2)));
}

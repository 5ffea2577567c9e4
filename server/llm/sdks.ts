// The providers' SDKs, loaded on the first request to a model rather than at start: evaluating them
// (and the fetch machinery they reach for) was most of the server's start-up. In the bundle a dynamic
// import of a bundled module is a function that evaluates the module on first call, so nothing is
// fetched from disk; the code stays in the one file.

import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";

export type AnthropicSdk = typeof Anthropic;
export type OpenAISdk = typeof OpenAI;

/** The SDKs loaded so far: an error can only be an instance of an SDK's class once that SDK is loaded. */
export const loadedSdks: { anthropic?: AnthropicSdk; openai?: OpenAISdk } = {};

let anthropic: Promise<AnthropicSdk> | undefined;
let openai: Promise<OpenAISdk> | undefined;

/**
 * An SDK could not be loaded: the request was never sent. In the bundle, the loader's own error says
 * what failed (its code ERR_SAQ_BUNDLED_PACKAGES: the packages it carries compressed, scripts/bundle-loader.js).
 */
export class SdkLoadError extends Error {
  constructor(pkg: string, cause: unknown) {
    const bundled = (cause as { code?: unknown })?.code === "ERR_SAQ_BUNDLED_PACKAGES";
    const why = (cause as Error)?.message ?? String(cause);
    super(bundled ? why : `The package ${pkg} could not be loaded: ${why}`, { cause });
    this.name = "SdkLoadError";
  }
}

// A failed load is not kept: the next request tries again.
export function loadAnthropicSdk(): Promise<AnthropicSdk> {
  return (anthropic ??= import("@anthropic-ai/sdk").then(
    (m) => (loadedSdks.anthropic = m.default),
    (err: unknown) => {
      anthropic = undefined;
      throw new SdkLoadError("@anthropic-ai/sdk", err);
    },
  ));
}

export function loadOpenAISdk(): Promise<OpenAISdk> {
  return (openai ??= import("openai").then(
    (m) => (loadedSdks.openai = m.default),
    (err: unknown) => {
      openai = undefined;
      throw new SdkLoadError("openai", err);
    },
  ));
}

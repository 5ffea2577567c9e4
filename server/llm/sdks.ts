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

export function loadAnthropicSdk(): Promise<AnthropicSdk> {
  return (anthropic ??= import("@anthropic-ai/sdk").then((m) => (loadedSdks.anthropic = m.default)));
}

export function loadOpenAISdk(): Promise<OpenAISdk> {
  return (openai ??= import("openai").then((m) => (loadedSdks.openai = m.default)));
}

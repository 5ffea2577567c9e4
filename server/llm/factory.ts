// Picks and builds the provider a turn uses from the effective configuration, with the environment
// (ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL, OPENAI_API_KEY / OPENAI_BASE_URL) as the fallback.

import { registerSecret } from "../log.js";
import type { Configuration, ProviderName } from "../protocol.js";
import { AnthropicProvider } from "./anthropic.js";
import { ProviderError } from "./errors.js";
import { DEFAULT_MODELS } from "./models.js";
import { OpenAIProvider } from "./openai.js";
import type { LLMProvider } from "./provider.js";

export interface ResolvedProvider {
  provider: LLMProvider;
  name: ProviderName;
  model: string;
  baseUrl: string | undefined;
}

/** Throws a ProviderError of kind "config" when the configuration cannot work. */
export function createProvider(config: Configuration, env: NodeJS.ProcessEnv = process.env): ResolvedProvider {
  const name: ProviderName = config.provider ?? "anthropic";
  if (name !== "anthropic" && name !== "openai") {
    throw new ProviderError("config", `Unknown provider "${String(name)}": use "anthropic" or "openai" (for any OpenAI-compatible endpoint).`, false);
  }
  const model = config.model || DEFAULT_MODELS[name];
  // Anything but a positive number would abort every request at once: the default holds then.
  const ms = config.streamIdleTimeoutMs;
  const idle = typeof ms === "number" && ms > 0 ? { streamIdleTimeoutMs: ms } : {};
  if (name === "anthropic") {
    const apiKey = config.apiKey || env.ANTHROPIC_API_KEY;
    const baseUrl = config.baseUrl || env.ANTHROPIC_BASE_URL || undefined;
    if (!apiKey) {
      throw new ProviderError("config", noKey("Anthropic", "ANTHROPIC_API_KEY", hostOf(baseUrl, "api.anthropic.com")), false);
    }
    registerSecret(apiKey);
    return { provider: new AnthropicProvider({ apiKey, baseUrl, ...idle }), name, model, baseUrl };
  }
  const apiKey = config.apiKey || env.OPENAI_API_KEY;
  const baseUrl = config.baseUrl || env.OPENAI_BASE_URL || undefined;
  // Local OpenAI-compatible servers (Ollama, llama.cpp) take no key; OpenAI itself does.
  if (!apiKey && !baseUrl) {
    throw new ProviderError(
      "config",
      `${noKey("OpenAI", "OPENAI_API_KEY", "api.openai.com")} A local OpenAI-compatible server (Ollama, llama.cpp) needs no key: set sly-agent-q-base-url to its address instead.`,
      false,
    );
  }
  registerSecret(apiKey);
  return { provider: new OpenAIProvider({ apiKey, baseUrl, ...idle }), name, model, baseUrl };
}

/**
 * What the user reads when no key is found: the three places Emacs looks (sly-agent-q-server.el
 * hands the key over in the server's environment, at start), and that the server must restart.
 */
function noKey(provider: string, variable: string, host: string): string {
  return (
    `No ${provider} API key was found. Give one in Emacs: set sly-agent-q-api-key (the key, or a function returning it), ` +
    `or ${variable} in Emacs's environment, or put "machine ${host} password KEY" in ~/.authinfo.gpg (auth-source). ` +
    "The key is read when the server starts: then run M-x sly-agent-q-restart-server."
  );
}

function hostOf(baseUrl: string | undefined, fallback: string): string {
  try {
    return baseUrl ? new URL(baseUrl).hostname || fallback : fallback;
  } catch {
    return fallback;
  }
}

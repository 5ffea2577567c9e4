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
      throw new ProviderError("config", "No Anthropic API key: set apiKey in sly-agent-q's configuration or ANTHROPIC_API_KEY in the server's environment.", false);
    }
    registerSecret(apiKey);
    return { provider: new AnthropicProvider({ apiKey, baseUrl, ...idle }), name, model, baseUrl };
  }
  const apiKey = config.apiKey || env.OPENAI_API_KEY;
  const baseUrl = config.baseUrl || env.OPENAI_BASE_URL || undefined;
  // Local OpenAI-compatible servers (Ollama, llama.cpp) take no key; OpenAI itself does.
  if (!apiKey && !baseUrl) {
    throw new ProviderError("config", "No OpenAI API key: set apiKey in sly-agent-q's configuration or OPENAI_API_KEY, or set baseUrl to a local OpenAI-compatible server.", false);
  }
  registerSecret(apiKey);
  return { provider: new OpenAIProvider({ apiKey, baseUrl, ...idle }), name, model, baseUrl };
}

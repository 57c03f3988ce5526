/*
 * The OpenClaw configuration Stepwise hands to OpenClaw: one custom provider whose base URL is a
 * Stepwise gateway (a trajectory's base_url in the gym, the fixed base_url online), and settings that
 * keep a run reproducible and offline (no update check, no telemetry, no tool search). OpenClaw reads
 * JSON5; what we write is plain JSON, which is JSON5 too.
 */

/** The provider id under `models.providers`; the model is `stepwise/<model>` to OpenClaw. */
export const OPENCLAW_PROVIDER = 'stepwise';

/** The tools a gym run offers: files, shell and directory listing, what Claw-style tasks need. */
export const GYM_TOOLS = ['read', 'write', 'edit', 'apply_patch', 'exec', 'process', 'ls'] as const;

export interface OpenClawConfigOptions {
  /** OpenAI-compatible base URL ending in `/v1`, as OpenClaw will reach it. */
  baseUrl: string;
  apiKey: string;
  /** The model name OpenClaw sends; the gateway passes it on to the engine. */
  model: string;
  /** Declared context window of the model (default 65,536 tokens). */
  contextWindow?: number;
  /** Output-token cap per call (default 4,096). */
  maxTokens?: number;
  /** Static headers on every model request (e.g. `X-Stepwise-Session: auto` online). */
  headers?: Record<string, string>;
  /** Tools OpenClaw may offer; undefined keeps its whole `coding` profile. */
  allowTools?: readonly string[];
  /**
   * Declare that the endpoint takes `prompt_cache_key`: OpenClaw then sends its session id with every
   * call, which is how the gateway maps an online session to a trajectory.
   */
  sessionKeys?: boolean;
  /** Per-request model HTTP timeout, seconds (OpenClaw's own default when unset). */
  requestTimeoutSeconds?: number;
}

/** The parts of OpenClaw's config schema that Stepwise writes. */
export interface OpenClawConfig {
  models: { mode: 'replace'; providers: Record<string, OpenClawProvider> };
  agents: { defaults: { model: { primary: string } } };
  tools: { profile: 'coding'; toolSearch: false; allow?: string[] };
  update: { checkOnStart: false };
}

export interface OpenClawProvider {
  baseUrl: string;
  apiKey: string;
  api: 'openai-completions';
  headers?: Record<string, string>;
  timeoutSeconds?: number;
  models: OpenClawModel[];
}

export interface OpenClawModel {
  id: string;
  name: string;
  reasoning: false;
  input: ['text'];
  cost: { input: 0; output: 0; cacheRead: 0; cacheWrite: 0 };
  contextWindow: number;
  maxTokens: number;
  compat?: { supportsPromptCacheKey: true };
}

export function openClawConfig(options: OpenClawConfigOptions): OpenClawConfig {
  const model: OpenClawModel = {
    id: options.model,
    name: options.model,
    reasoning: false,
    input: ['text'],
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow: options.contextWindow ?? 65_536,
    maxTokens: options.maxTokens ?? 4_096,
  };
  if (options.sessionKeys) model.compat = { supportsPromptCacheKey: true };
  const provider: OpenClawProvider = {
    baseUrl: options.baseUrl,
    apiKey: options.apiKey,
    api: 'openai-completions',
    models: [model],
  };
  if (options.headers && Object.keys(options.headers).length > 0) provider.headers = options.headers;
  if (options.requestTimeoutSeconds !== undefined) provider.timeoutSeconds = options.requestTimeoutSeconds;
  const tools: OpenClawConfig['tools'] = { profile: 'coding', toolSearch: false };
  if (options.allowTools) tools.allow = [...options.allowTools];
  return {
    models: { mode: 'replace', providers: { [OPENCLAW_PROVIDER]: provider } },
    agents: { defaults: { model: { primary: `${OPENCLAW_PROVIDER}/${options.model}` } } },
    tools,
    update: { checkOnStart: false },
  };
}

/** The config as a file: JSON (valid JSON5) with a header saying where it came from. */
export function renderOpenClawConfig(options: OpenClawConfigOptions, comment?: string): string {
  const header = comment
    ? `${comment
        .split('\n')
        .map((line) => `// ${line}`.trimEnd())
        .join('\n')}\n`
    : '';
  return `${header}${JSON.stringify(openClawConfig(options), null, 2)}\n`;
}

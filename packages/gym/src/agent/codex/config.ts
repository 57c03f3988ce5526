/*
 * The config.toml Stepwise hands to Codex CLI (in CODEX_HOME): one custom model provider whose
 * base_url is a Stepwise gateway (a trajectory's base_url in the gym, the fixed base_url online),
 * speaking the Responses API, and settings that keep Codex to the tools the gateway carries
 * (function tools only: no hosted web search, no sub-agent namespace) and to no other network.
 * Keys checked against codex-cli 0.169.0 with `--strict-config`.
 */

/** The provider id under `model_providers`. */
export const CODEX_PROVIDER = 'stepwise';
/** The environment variable Codex reads the provider's API key from. */
export const CODEX_KEY_ENV = 'STEPWISE_API_KEY';

export interface CodexConfigOptions {
  /** OpenAI-compatible base URL ending in `/v1`, as Codex will reach it. */
  baseUrl: string;
  /** The model name Codex sends; the gateway passes it on to the engine. */
  model: string;
  /** Static headers on every model request (e.g. `X-Stepwise-Session` online). */
  headers?: Record<string, string>;
  /**
   * Gym runs: Codex runs its shell commands itself, without approvals or its own sandbox (the gym's
   * bubblewrap sandbox around it is the confinement; Codex's bwrap cannot nest inside it).
   */
  unsandboxed?: boolean;
  /** Retries of a failed model request (Codex's default is 4; the gym's sample fails at once). */
  retries?: number;
}

/** A TOML basic string: JSON's escapes are TOML's for every character JSON.stringify writes. */
const str = (value: string) => JSON.stringify(value);

/** A TOML key: bare when it can be, quoted otherwise. */
const key = (name: string) => (/^[A-Za-z0-9_-]+$/.test(name) ? name : str(name));

export function renderCodexConfig(options: CodexConfigOptions, comment?: string): string {
  const lines: string[] = [];
  if (comment) for (const line of comment.split('\n')) lines.push(`# ${line}`.trimEnd());
  lines.push(
    `model = ${str(options.model)}`,
    `model_provider = ${str(CODEX_PROVIDER)}`,
    // Hosted web search is a `web_search` tool the gateway cannot carry (and a way out).
    'web_search = "disabled"',
    'check_for_update_on_startup = false',
  );
  if (options.unsandboxed) lines.push('approval_policy = "never"', 'sandbox_mode = "danger-full-access"');
  lines.push(
    '',
    '[features]',
    // Goals, plugins, apps, memories, image generation: tools and calls that are not the task's.
    'goals = false',
    'plugins = false',
    'apps = false',
    'memories = false',
    'image_generation = false',
    'shell_snapshot = false',
    '',
    // Sub-agents come as a `namespace` tool, which the gateway does not carry.
    '[agents]',
    'enabled = false',
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[history]',
    'persistence = "none"',
    '',
    `[model_providers.${CODEX_PROVIDER}]`,
    'name = "Stepwise"',
    `base_url = ${str(options.baseUrl)}`,
    'wire_api = "responses"',
    `env_key = ${str(CODEX_KEY_ENV)}`,
  );
  if (options.retries !== undefined)
    lines.push(`request_max_retries = ${options.retries}`, `stream_max_retries = ${options.retries}`);
  const headers = Object.entries(options.headers ?? {});
  if (headers.length > 0)
    lines.push(`http_headers = { ${headers.map(([k, v]) => `${key(k)} = ${str(v)}`).join(', ')} }`);
  return `${lines.join('\n')}\n`;
}

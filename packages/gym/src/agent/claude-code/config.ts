import { z } from 'zod';

/*
 * What Stepwise hands Claude Code: environment variables that point it at a Stepwise gateway (a
 * trajectory's base_url in the gym, the fixed one online), name the served model for every model
 * role it has, and turn off its traffic to anywhere else; and the JSON result `claude -p
 * --output-format json` prints, read back into trajectory metadata.
 */

/** The built-in tools a gym run offers: shell and files, what Claw-style tasks need. */
export const GYM_TOOLS = ['Bash', 'Read', 'Edit', 'Write'] as const;

export interface ClaudeCodeEnvOptions {
  /** A Stepwise base_url ending in `/v1` (Claude Code appends `/v1/messages` itself). */
  baseUrl: string;
  /** Sent as `x-api-key`. */
  apiKey: string;
  /** The model every request names: main loop, subagents and the small "fast" model alike. */
  model: string;
  /** Static headers on every request (`X-Stepwise-Session: auto` online). */
  headers?: Record<string, string>;
}

/** Claude Code's base URL for a Stepwise base_url: the same URL less its trailing `/v1`. */
export const anthropicBaseUrl = (baseUrl: string) => baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '');

/** The environment (names from code.claude.com/docs/en/env-vars) for a run against the gateway. */
export function claudeCodeEnv(options: ClaudeCodeEnvOptions): Record<string, string> {
  const env: Record<string, string> = {
    ANTHROPIC_BASE_URL: anthropicBaseUrl(options.baseUrl),
    ANTHROPIC_API_KEY: options.apiKey,
    // Every model role names the served model: a side call (a title, a summary, a subagent) that
    // happened would reach the gateway as a step of the trajectory, never another provider.
    ANTHROPIC_MODEL: options.model,
    ANTHROPIC_DEFAULT_OPUS_MODEL: options.model,
    ANTHROPIC_DEFAULT_SONNET_MODEL: options.model,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: options.model,
    ANTHROPIC_SMALL_FAST_MODEL: options.model,
    CLAUDE_CODE_SUBAGENT_MODEL: options.model,
    // No update check, telemetry, error reports or feedback survey: the run talks to the gateway only.
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
    DISABLE_BUG_COMMAND: '1',
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: '1',
  };
  const headers = Object.entries(options.headers ?? {});
  if (headers.length > 0)
    env.ANTHROPIC_CUSTOM_HEADERS = headers.map(([name, value]) => `${name}: ${value}`).join('\n');
  return env;
}

/** The `--output-format json` result: fields are additive and may be absent, so the schema is loose. */
const Result = z.looseObject({
  type: z.literal('result'),
  subtype: z.string(),
  is_error: z.boolean().optional(),
  num_turns: z.number().optional(),
  result: z.string().nullable().optional(),
  session_id: z.string().optional(),
  stop_reason: z.string().nullable().optional(),
  terminal_reason: z.string().nullable().optional(),
  duration_ms: z.number().optional(),
  permission_denials: z.array(z.unknown()).optional(),
  usage: z
    .looseObject({ input_tokens: z.number().optional(), output_tokens: z.number().optional() })
    .optional(),
});

export interface ClaudeCodeResult {
  /** `success`, or an error kind (`error_max_turns`, `error_during_execution`, ...). */
  subtype: string;
  isError: boolean;
  /** Model calls of the main loop. */
  numTurns: number;
  /** The final answer (on success). */
  result: string | null;
  sessionId: string | null;
  stopReason: string | null;
  terminalReason: string | null;
  permissionDenials: number;
}

/** The JSON result from Claude Code's stdout (the last line that parses as one); null when none. */
export function parseResult(stdout: string): ClaudeCodeResult | null {
  for (const line of stdout.trim().split('\n').reverse()) {
    const text = line.trim();
    if (!text.startsWith('{')) continue;
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      continue;
    }
    const parsed = Result.safeParse(raw);
    if (!parsed.success) continue;
    const r = parsed.data;
    return {
      subtype: r.subtype,
      isError: r.is_error ?? r.subtype !== 'success',
      numTurns: r.num_turns ?? 0,
      result: r.result ?? null,
      sessionId: r.session_id ?? null,
      stopReason: r.stop_reason ?? null,
      terminalReason: r.terminal_reason ?? null,
      permissionDenials: r.permission_denials?.length ?? 0,
    };
  }
  return null;
}

/** What lands in the trajectory's metadata under `claude_code`. */
export function resultMetadata(result: ClaudeCodeResult, exitCode: number | null): Record<string, unknown> {
  return {
    status: result.isError ? 'error' : 'ok',
    subtype: result.subtype,
    exit_code: exitCode,
    num_turns: result.numTurns,
    stop_reason: result.stopReason,
    terminal_reason: result.terminalReason,
    permission_denials: result.permissionDenials,
    session_id: result.sessionId,
  };
}

import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CODEX_KEY_ENV, CODEX_PROVIDER, renderCodexConfig } from './config.js';

/** The config as TOML's reference parser (Python's tomllib) reads it. */
// biome-ignore lint/suspicious/noExplicitAny: the parsed TOML is read loosely
function parseToml(text: string): Record<string, any> {
  const script = 'import json, sys, tomllib; print(json.dumps(tomllib.loads(sys.stdin.read())))';
  return JSON.parse(execFileSync('python3', ['-c', script], { input: text, encoding: 'utf8' }));
}

describe('renderCodexConfig', () => {
  it('is TOML naming one Responses provider at the base_url, with the key from STEPWISE_API_KEY', () => {
    const config = parseToml(
      renderCodexConfig(
        { baseUrl: 'http://127.0.0.1:8100/t1/g1/v1', model: 'Qwen/Qwen3-8B' },
        'line one\nline two',
      ),
    );
    expect(config).toMatchObject({
      model: 'Qwen/Qwen3-8B',
      model_provider: CODEX_PROVIDER,
      web_search: 'disabled',
      agents: { enabled: false },
      analytics: { enabled: false },
      model_providers: {
        [CODEX_PROVIDER]: {
          base_url: 'http://127.0.0.1:8100/t1/g1/v1',
          wire_api: 'responses',
          env_key: CODEX_KEY_ENV,
        },
      },
    });
    // Outside the gym Codex keeps its own approvals and sandbox, and its retries.
    expect(config.approval_policy).toBeUndefined();
    expect(config.sandbox_mode).toBeUndefined();
    expect(config.model_providers[CODEX_PROVIDER].request_max_retries).toBeUndefined();
  });

  it('gym runs: no approvals, no sandbox of its own, no retries; headers and odd text survive quoting', () => {
    const odd = 'a "quoted" \\ back\\slash\ttab\nline é 🙂';
    const config = parseToml(
      renderCodexConfig({
        baseUrl: 'http://h/v1',
        model: odd,
        unsandboxed: true,
        retries: 0,
        headers: { 'X-Stepwise-Session': 'auto', 'x.dotted key': odd },
      }),
    );
    expect(config).toMatchObject({
      approval_policy: 'never',
      sandbox_mode: 'danger-full-access',
      model: odd,
    });
    expect(config.model_providers[CODEX_PROVIDER]).toMatchObject({
      request_max_retries: 0,
      stream_max_retries: 0,
      http_headers: { 'X-Stepwise-Session': 'auto', 'x.dotted key': odd },
    });
  });
});

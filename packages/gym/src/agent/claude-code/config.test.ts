import { describe, expect, it } from 'vitest';
import { anthropicBaseUrl, claudeCodeEnv, parseResult, resultMetadata } from './config.js';

describe('claudeCodeEnv', () => {
  it('points Claude Code at the base_url less /v1, every model role at the served model', () => {
    const env = claudeCodeEnv({
      baseUrl: 'http://127.0.0.1:8100/abc/def/v1',
      apiKey: 'stepwise',
      model: 'qwen3-8b',
    });
    expect(env).toMatchObject({
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:8100/abc/def',
      ANTHROPIC_API_KEY: 'stepwise',
      ANTHROPIC_MODEL: 'qwen3-8b',
      ANTHROPIC_DEFAULT_HAIKU_MODEL: 'qwen3-8b',
      ANTHROPIC_SMALL_FAST_MODEL: 'qwen3-8b',
      CLAUDE_CODE_SUBAGENT_MODEL: 'qwen3-8b',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_AUTOUPDATER: '1',
    });
    expect(env.ANTHROPIC_CUSTOM_HEADERS).toBeUndefined();
  });

  it('writes static headers one per line, as ANTHROPIC_CUSTOM_HEADERS takes them', () => {
    const env = claudeCodeEnv({
      baseUrl: 'http://gw:8100/v1/',
      apiKey: 'k',
      model: 'm',
      headers: { 'X-Stepwise-Session': 'auto', 'X-Stepwise-Channel': 'online' },
    });
    expect(env.ANTHROPIC_BASE_URL).toBe('http://gw:8100');
    expect(env.ANTHROPIC_CUSTOM_HEADERS).toBe('X-Stepwise-Session: auto\nX-Stepwise-Channel: online');
  });

  it('keeps a base URL that does not end in /v1', () => {
    expect(anthropicBaseUrl('http://gw:8100/proxy')).toBe('http://gw:8100/proxy');
  });
});

describe('parseResult', () => {
  // The shape `claude -p --output-format json` printed (2.1.328), trimmed to the fields we read.
  const line = JSON.stringify({
    type: 'result',
    subtype: 'success',
    is_error: false,
    num_turns: 5,
    result: 'Done: 4 actions taken.',
    session_id: 'a488da6a-bdbd-4f5c-bf95-ac2f6f2c4f1b',
    stop_reason: 'end_turn',
    terminal_reason: 'completed',
    permission_denials: [],
    usage: { input_tokens: 60871, output_tokens: 574 },
    modelUsage: {},
  });

  it('reads the result line, after whatever else was printed', () => {
    const result = parseResult(`warning: something\n${line}\n`);
    expect(result).toEqual({
      subtype: 'success',
      isError: false,
      numTurns: 5,
      result: 'Done: 4 actions taken.',
      sessionId: 'a488da6a-bdbd-4f5c-bf95-ac2f6f2c4f1b',
      stopReason: 'end_turn',
      terminalReason: 'completed',
      permissionDenials: 0,
    });
    expect(resultMetadata(result!, 0)).toMatchObject({ status: 'ok', num_turns: 5, exit_code: 0 });
  });

  it('reads an error result as one, and nothing from text that holds none', () => {
    const error = parseResult(
      JSON.stringify({ type: 'result', subtype: 'error_max_turns', is_error: true, num_turns: 9 }),
    );
    expect(error).toMatchObject({ subtype: 'error_max_turns', isError: true, result: null });
    expect(resultMetadata(error!, 1)).toMatchObject({ status: 'error', subtype: 'error_max_turns' });
    expect(parseResult('')).toBeNull();
    expect(parseResult('{"type":"assistant"}\nnot json {')).toBeNull();
  });
});

import { describe, expect, it } from 'vitest';
import { envelopeMetadata, parseEnvelope } from './envelope.js';

describe('parseEnvelope', () => {
  it("reads OpenClaw's pretty-printed envelope: status, turns and the tool summary", () => {
    const stdout = `${JSON.stringify(
      {
        ok: true,
        status: 'ok',
        final: 'Done.',
        payloads: [{ text: 'Done.', mediaUrl: null }],
        usage: { input: 20, output: 4, total: 24 },
        assistantTurns: 2,
        toolSummary: { calls: 1, tools: ['write'], failures: 0 },
        model: 'sim',
        provider: 'stepwise',
        sessionId: '60846bfa-bd89-4a5e-b487-123e88fe811f',
      },
      null,
      2,
    )}\n`;
    const e = parseEnvelope(stdout)!;
    expect(e).toMatchObject({
      ok: true,
      status: 'ok',
      final: 'Done.',
      assistantTurns: 2,
      toolCalls: 1,
      toolFailures: 0,
      tools: ['write'],
      error: null,
      sessionId: '60846bfa-bd89-4a5e-b487-123e88fe811f',
      usage: { input: 20, output: 4 },
    });
    expect(envelopeMetadata(e, 0)).toEqual({
      status: 'ok',
      exit_code: 0,
      assistant_turns: 2,
      tool_calls: 1,
      tool_failures: 0,
      tools: ['write'],
      session_id: '60846bfa-bd89-4a5e-b487-123e88fe811f',
    });
  });

  it("keeps a failed run's error, and fills absent fields", () => {
    const e = parseEnvelope(
      JSON.stringify({ ok: false, status: 'timeout', error: { message: 'deadline', kind: 'timeout' } }),
    )!;
    expect(e).toMatchObject({ ok: false, status: 'timeout', assistantTurns: 0, toolCalls: 0, tools: [] });
    expect(envelopeMetadata(e, 2)).toMatchObject({
      exit_code: 2,
      error: { message: 'deadline', kind: 'timeout' },
    });
  });

  it('is null when stdout holds no envelope', () => {
    expect(parseEnvelope('')).toBeNull();
    expect(parseEnvelope('plain final text')).toBeNull();
    expect(parseEnvelope('{"ok": tru')).toBeNull();
    expect(parseEnvelope('[1, 2]')).toBeNull();
  });
});

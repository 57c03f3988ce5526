import { describe, expect, it } from 'vitest';
import { parseCodexEvents } from './run.js';

// Lines as `codex exec --json` 0.169.0 prints them (codex-rs exec/src/exec_events.rs).
const OK = [
  'Reading additional input from stdin...',
  '{"type":"thread.started","thread_id":"01a2-thread"}',
  '{"type":"turn.started"}',
  '{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"/bin/bash -lc ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}',
  '{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"/bin/bash -lc ls","aggregated_output":"a\\n","exit_code":0,"status":"completed"}}',
  '{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc false","aggregated_output":"","exit_code":1,"status":"failed"}}',
  '{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Done: 2 actions taken."}}',
  '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":5}}',
].join('\n');

describe('parseCodexEvents', () => {
  it('counts commands and failures, keeps the thread, the final message and the usage', () => {
    expect(parseCodexEvents(OK)).toEqual({
      events: 7,
      threadId: '01a2-thread',
      completed: true,
      failed: null,
      commands: 2,
      commandFailures: 1,
      items: ['agent_message', 'command_execution'],
      final: 'Done: 2 actions taken.',
      usage: { input_tokens: 10, cached_input_tokens: 0, output_tokens: 5 },
    });
  });

  it("reports a failed turn's message, and no events from text that is not JSON lines", () => {
    const failed = [
      '{"type":"thread.started","thread_id":"t"}',
      '{"type":"turn.started"}',
      '{"type":"error","message":"unexpected status 400 Bad Request"}',
      '{"type":"turn.failed","error":{"message":"unexpected status 400 Bad Request: tools.4.type"}}',
    ].join('\n');
    expect(parseCodexEvents(failed)).toMatchObject({
      completed: false,
      failed: 'unexpected status 400 Bad Request: tools.4.type',
    });
    expect(parseCodexEvents('Error loading config.toml\n{not json').events).toBe(0);
  });
});

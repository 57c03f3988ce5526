import { describe, expect, it } from 'vitest';
import { contentText } from '../text/content.js';
import { detectToolError, toolResultsFor } from './tool-results.js';

describe('detectToolError', () => {
  const failed = (content: string, errorType: string) =>
    expect(detectToolError(content), content).toEqual({ error: true, errorType });
  const fine = (content: string) => expect(detectToolError(content), content).toEqual({ error: false });

  it('flags Python tracebacks and exception lines', () => {
    failed(
      'Traceback (most recent call last):\n  File "main.py", line 3, in <module>\n    x = int("a")\nValueError: invalid literal',
      'exception',
    );
    failed('  traceback (most recent call last):\n...', 'exception');
    failed('ValueError: invalid literal for int() with base 10', 'exception');
    failed('running tests\njson.decoder.JSONDecodeError: Expecting value', 'exception');
    failed('java.lang.NullPointerException: oops', 'exception');
  });

  it('classifies a missing file, a missing command and denied access', () => {
    failed('Error: ENOENT: no such file or directory, open "/tmp/x"', 'not_found');
    failed('cat: missing.txt: No such file or directory', 'not_found');
    failed('bash: foo: command not found', 'command_not_found');
    failed('rm: cannot remove "/etc/passwd": Permission denied', 'permission_denied');
    failed('the command timed out after 30 s', 'timeout');
    failed('unknown tool: fly', 'unknown_tool');
    // Each harness's refusal of a tool it does not offer, as its pinned build writes it.
    failed('unsupported call: exec_command_v2', 'unknown_tool'); // Codex CLI 0.169.0
    failed('unsupported custom tool call: apply_patch_v2', 'unknown_tool');
    failed('Tool read_v2 not found', 'unknown_tool'); // OpenClaw 2026.9.6
    failed(
      '<tool_use_error>Error: No such tool available: Read_v2. Read_v2 is not a tool you can call.</tool_use_error>',
      'unknown_tool',
    ); // Claude Code 2.1.328
    fine('the log mentions an unsupported call: nothing failed');
    failed('Invalid arguments: "path" is required', 'invalid_arguments');
  });

  it('flags nonzero exit codes but not exit code 0', () => {
    failed('build failed\nexit code: 2', 'nonzero_exit');
    failed('Process exited with code 1', 'nonzero_exit');
    failed('exit status 127', 'nonzero_exit');
    failed('returncode=-9', 'nonzero_exit');
    failed('Exit code 10', 'nonzero_exit');
    fine('all good\nexit code: 0');
    fine('Process exited with code 0');
    fine('exit status 0');
    fine('returncode=0');
  });

  it('flags generic error markers at the start of the output', () => {
    failed('error: could not compile', 'error');
    failed('ERROR (1): bad input', 'error');
    failed('[error] request failed', 'error');
  });

  it('reads JSON tool results', () => {
    failed('{"error": "file not found"}', 'error');
    failed('{"error": {"code": 42}}', 'error');
    failed('{"ok": false, "message": "nope"}', 'error');
    failed('{"success": false}', 'error');
    failed('{"status": "error"}', 'error');
    failed('{"exit_code": 1, "stdout": ""}', 'nonzero_exit');
    failed('{"exitCode": 2}', 'nonzero_exit');
    failed('  {"returncode": 3}  ', 'nonzero_exit');
    fine('{"exit_code": 0, "stdout": "done"}');
    fine('{"error": null, "result": 4}');
    fine('{"error": false}');
    fine('{"ok": true}');
    // A JSON answer is judged by its fields, not by words inside its strings.
    fine('{"stdout": "Traceback (most recent call last):"}');
  });

  it('judges text that only looks like JSON as text', () => {
    failed('{not json}\nbash: jq: command not found', 'command_not_found');
    fine('{ this is a template }');
  });

  it('does not flag plain successful outputs', () => {
    fine('3 files changed, 10 insertions(+), 2 deletions(-)');
    fine('No errors found');
    fine('Found 0 errors.');
    fine('0 errors, 0 warnings');
    fine('All 12 tests passed');
    fine('');
    fine('The function handles errors by returning null.');
  });
});

describe('contentText', () => {
  it('reads strings and the text parts of content arrays', () => {
    expect(contentText('plain')).toBe('plain');
    expect(
      contentText([
        { type: 'text', text: 'a' },
        { type: 'image_url', image_url: { url: 'x' } },
        null,
        { type: 'text', text: 'b' },
      ]),
    ).toBe('ab');
    expect(contentText(null)).toBe('');
    expect(contentText(42)).toBe('');
  });
});

describe('toolResultsFor', () => {
  const calls = [
    { id: 'call_1', name: 'read' },
    { id: 'call_2', name: 'run' },
  ];
  const user = { role: 'user', content: 'do it' };
  const assistant = { role: 'assistant', content: null, tool_calls: [{ id: 'call_1' }, { id: 'call_2' }] };

  it('matches tool messages to the calls by tool_call_id, in message order', () => {
    const results = toolResultsFor(
      [
        user,
        assistant,
        { role: 'tool', tool_call_id: 'call_2', content: 'bash: foo: command not found' },
        { role: 'tool', tool_call_id: 'call_1', content: 'file contents' },
      ],
      calls,
    );
    expect(results).toEqual([
      {
        tool_call_id: 'call_2',
        name: 'run',
        content: 'bash: foo: command not found',
        error: true,
        error_type: 'command_not_found',
      },
      { tool_call_id: 'call_1', name: 'read', content: 'file contents', error: false },
    ]);
    expect('error_type' in results[1]!).toBe(false);
  });

  it('skips tool messages whose id matches none of the calls', () => {
    const results = toolResultsFor(
      [
        assistant,
        { role: 'tool', tool_call_id: 'call_9', content: 'stray' },
        { role: 'tool', tool_call_id: 'call_1', content: 'ok' },
      ],
      calls,
    );
    expect(results.map((r) => [r.tool_call_id, r.content])).toEqual([['call_1', 'ok']]);
  });

  it('matches ids a harness rewrote (OpenClaw sends call_1 back as call1)', () => {
    const rewritten = { role: 'assistant', content: null, tool_calls: [{ id: 'call1' }, { id: 'call2' }] };
    const results = toolResultsFor(
      [
        user,
        rewritten,
        { role: 'tool', tool_call_id: 'call2', content: 'second' },
        { role: 'tool', tool_call_id: 'CALL1', content: 'first' },
        { role: 'user', content: [{ type: 'text', text: 'fresh context' }] },
      ],
      calls,
    );
    expect(results.map((r) => [r.tool_call_id, r.name, r.content])).toEqual([
      ['call_2', 'run', 'second'],
      ['call_1', 'read', 'first'],
    ]);
  });

  it('falls back to position when none of the ids matches (the agent replaced them all)', () => {
    const results = toolResultsFor(
      [
        assistant,
        { role: 'tool', tool_call_id: 'toolu_a', content: 'first' },
        { role: 'tool', tool_call_id: 'toolu_b', content: 'second' },
      ],
      calls,
    );
    expect(results.map((r) => [r.tool_call_id, r.content])).toEqual([
      ['call_1', 'first'],
      ['call_2', 'second'],
    ]);
  });

  it('falls back to position when the tool messages carry no ids', () => {
    const results = toolResultsFor(
      [assistant, { role: 'tool', content: 'first' }, { role: 'tool', content: '{"exit_code": 1}' }],
      calls,
    );
    expect(results).toEqual([
      { tool_call_id: 'call_1', name: 'read', content: 'first', error: false },
      {
        tool_call_id: 'call_2',
        name: 'run',
        content: '{"exit_code": 1}',
        error: true,
        error_type: 'nonzero_exit',
      },
    ]);
  });

  it('ignores positional results beyond the calls', () => {
    const results = toolResultsFor(
      [
        assistant,
        { role: 'tool', content: 'a' },
        { role: 'tool', content: 'b' },
        { role: 'tool', content: 'c' },
      ],
      calls,
    );
    expect(results.map((r) => r.content)).toEqual(['a', 'b']);
  });

  it('only reads tool messages after the last assistant message', () => {
    const results = toolResultsFor(
      [
        assistant,
        { role: 'tool', tool_call_id: 'call_1', content: 'old answer' },
        { role: 'assistant', content: 'thinking again', tool_calls: [{ id: 'call_2' }] },
        { role: 'tool', tool_call_id: 'call_2', content: 'new answer' },
      ],
      calls,
    );
    expect(results.map((r) => r.content)).toEqual(['new answer']);
  });

  it('is empty when the request does not answer the calls', () => {
    // The last message is the assistant turn itself: nothing after it.
    expect(toolResultsFor([user, assistant], calls)).toEqual([]);
    // The agent started over: a fresh conversation with no tool message.
    expect(toolResultsFor([{ role: 'system', content: 'be brief' }, user], calls)).toEqual([]);
  });

  it('reads every tool message when there is no assistant message at all', () => {
    const results = toolResultsFor([{ role: 'tool', tool_call_id: 'call_1', content: 'x' }], calls);
    expect(results.map((r) => r.name)).toEqual(['read']);
  });

  it('joins the text parts of a content array', () => {
    const results = toolResultsFor(
      [
        assistant,
        {
          role: 'tool',
          tool_call_id: 'call_1',
          content: [
            { type: 'text', text: 'Traceback (most recent call last):\n' },
            { type: 'text', text: 'KeyError: x' },
          ],
        },
      ],
      calls,
    );
    expect(results).toEqual([
      {
        tool_call_id: 'call_1',
        name: 'read',
        content: 'Traceback (most recent call last):\nKeyError: x',
        error: true,
        error_type: 'exception',
      },
    ]);
  });

  it('is empty when no calls were made', () => {
    expect(toolResultsFor([assistant, { role: 'tool', tool_call_id: 'call_1', content: 'x' }], [])).toEqual(
      [],
    );
  });
});

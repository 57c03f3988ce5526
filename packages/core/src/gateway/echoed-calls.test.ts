import { describe, expect, it } from 'vitest';
import { MAX_REMEMBERED_CALLS, rememberCalls, restoreEchoedCalls } from './echoed-calls.js';

const edit = {
  type: 'function',
  function: {
    name: 'Edit',
    parameters: {
      type: 'object',
      properties: {
        file_path: { type: 'string' },
        old_string: { type: 'string' },
        new_string: { type: 'string' },
        replace_all: { type: 'boolean', default: false },
      },
    },
  },
};
const generated = '{"file_path": "a.py", "old_string": "x", "new_string": "y"}';
const remembered = new Map([['call_1', generated]]);
const requestWith = (args: string, id = 'call_1') => ({
  messages: [
    { role: 'user', content: 'fix it' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id, type: 'function', function: { name: 'Edit', arguments: args } }],
    },
    { role: 'tool', tool_call_id: id, content: 'ok' },
  ],
  tools: [edit],
});
const argsOf = (request: ReturnType<typeof requestWith>) =>
  (request.messages[1] as { tool_calls: { function: { arguments: string } }[] }).tool_calls[0]!.function
    .arguments;

describe('restoreEchoedCalls', () => {
  it("puts back a call echoed with its tool's default filled in and its keys reordered", () => {
    const request = requestWith(
      JSON.stringify({ replace_all: false, file_path: 'a.py', old_string: 'x', new_string: 'y' }),
    );
    expect(restoreEchoedCalls(request, remembered)).toBe(true);
    expect(argsOf(request)).toBe(generated);
  });

  it('keeps a call the agent changed: another value, a non-default extra, a dropped key, another id', () => {
    for (const echoed of [
      { replace_all: true, file_path: 'a.py', old_string: 'x', new_string: 'y' },
      { file_path: 'a.py', old_string: 'x', new_string: 'z' },
      { file_path: 'a.py', old_string: 'x', new_string: 'y', extra: 1 },
      { file_path: 'a.py', old_string: 'x' },
    ]) {
      const request = requestWith(JSON.stringify(echoed));
      expect(restoreEchoedCalls(request, remembered)).toBe(false);
      expect(argsOf(request)).toBe(JSON.stringify(echoed));
    }
    const other = requestWith(
      JSON.stringify({ replace_all: false, file_path: 'a.py', old_string: 'x', new_string: 'y' }),
      'call_9',
    );
    expect(restoreEchoedCalls(other, remembered)).toBe(false);
  });

  it('without the tool offered, an added key is no default', () => {
    const request = {
      ...requestWith(
        JSON.stringify({ replace_all: false, file_path: 'a.py', old_string: 'x', new_string: 'y' }),
      ),
      tools: [],
    };
    expect(restoreEchoedCalls(request, remembered)).toBe(false);
  });
});

describe('rememberCalls', () => {
  it('keeps the newest calls, at most MAX_REMEMBERED_CALLS', () => {
    const map = new Map<string, string>();
    for (let i = 0; i <= MAX_REMEMBERED_CALLS; i++)
      rememberCalls(map, [{ id: `c${i}`, function: { arguments: `{"i": ${i}}` } }]);
    expect(map.size).toBe(MAX_REMEMBERED_CALLS);
    expect(map.has('c0')).toBe(false);
    expect(map.get(`c${MAX_REMEMBERED_CALLS}`)).toBe(`{"i": ${MAX_REMEMBERED_CALLS}}`);
  });
});

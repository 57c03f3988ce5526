import { describe, expect, it } from 'vitest';
import { parseToolArguments } from './arguments.js';

describe('parseToolArguments', () => {
  it('folds the common aliases onto the canonical names', () => {
    expect(parseToolArguments('read', { file_path: 'a', start_line: '3', max_lines: 2 })).toEqual({
      path: 'a',
      offset: 3,
      limit: 2,
    });
    expect(parseToolArguments('edit', { filePath: 'a', old_string: 'x', new_string: 'y' })).toEqual({
      path: 'a',
      oldText: 'x',
      newText: 'y',
    });
    expect(parseToolArguments('edit', { path: 'a', oldString: 'x', newString: '' })).toEqual({
      path: 'a',
      oldText: 'x',
      newText: '',
    });
    expect(parseToolArguments('exec', { cmd: 'ls', directory: 'd', timeout_ms: '1500' })).toEqual({
      command: 'ls',
      workdir: 'd',
      timeoutMs: 1500,
    });
    expect(parseToolArguments('ls', { dir: 'x' })).toEqual({ path: 'x' });
  });

  it('prefers the canonical name, ignores extras and nulls, accepts JSON strings', () => {
    expect(parseToolArguments('read', { path: 'a', file_path: 'b', reason: 'why', offset: null })).toEqual({
      path: 'a',
    });
    expect(parseToolArguments('write', '{"path":"a","content":""}')).toEqual({ path: 'a', content: '' });
    expect(parseToolArguments('ls', '')).toEqual({});
  });

  it('names the field and the rule a bad argument breaks', () => {
    expect(() => parseToolArguments('read', { path: 'a', limit: 0 })).toThrow(/limit/);
    expect(() => parseToolArguments('write', { path: 'a', content: 5 })).toThrow(
      /^Error: invalid arguments for write: content: /,
    );
    expect(() => parseToolArguments('exec', { command: 'x', timeout: -1 })).toThrow(/timeout/);
    expect(() => parseToolArguments('read', '{"path"')).toThrow(/invalid JSON/);
  });
});

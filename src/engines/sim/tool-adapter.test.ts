import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { TOOL_DEFINITIONS } from '../../gym/tools/definitions.js';
import type { ChatToolInput } from '../../text/index.js';
import { adaptCall, withoutFilledDefaults } from './tool-adapter.js';

const openclaw: ChatToolInput[] = JSON.parse(
  readFileSync(join(import.meta.dirname, '../../../test/fixtures/openclaw/tools.json'), 'utf8'),
);
// Claude Code 2.1.328's tools as the gateway hands them on (test/fixtures/claude-code/README.md).
const claudeCode: ChatToolInput[] = JSON.parse(
  readFileSync(join(import.meta.dirname, '../../../test/fixtures/claude-code/tools.json'), 'utf8'),
);
// Our built-in agent's tools, as a request carries them.
const builtIn: ChatToolInput[] = TOOL_DEFINITIONS.map((t) => ({ type: t.type, function: { ...t.function } }));
const only = (...names: string[]) => openclaw.filter((t) => names.includes(t.function.name));
const tool = (name: string, properties: Record<string, unknown>): ChatToolInput => ({
  type: 'function',
  function: { name, parameters: { type: 'object', properties } },
});

const ours = {
  read: { name: 'read', arguments: { path: 'notes.txt', offset: 3, limit: 2 } },
  write: { name: 'write', arguments: { path: 'out/a.txt', content: "it's\n" } },
  edit: { name: 'edit', arguments: { path: 'a.txt', oldText: 'hi', newText: 'hello' } },
  exec: { name: 'exec', arguments: { command: 'make test', workdir: 'src', timeout: 30 } },
  ls: { name: 'ls', arguments: { path: 'data' } },
};

describe('adaptCall: our actions in the offered schema', () => {
  it("writes an edit as OpenClaw's edits list; read, write and ls keep their names", () => {
    expect(adaptCall(ours.edit, openclaw)).toEqual({
      name: 'edit',
      arguments: { path: 'a.txt', edits: [{ oldText: 'hi', newText: 'hello' }] },
    });
    // OpenClaw's read offset is 1-based, as ours is: the same line.
    expect(adaptCall(ours.read, openclaw)).toEqual(ours.read);
    expect(adaptCall(ours.write, openclaw)).toEqual(ours.write);
    expect(adaptCall(ours.ls, openclaw)).toEqual(ours.ls);
  });

  it('maps exec timeouts onto the offered unit', () => {
    expect(adaptCall(ours.exec, openclaw)).toEqual({
      name: 'exec',
      arguments: { command: 'make test', workdir: 'src', timeoutSeconds: 30 },
    });
    const inMs = tool('exec', {
      cmd: { type: 'string' },
      cwd: { type: 'string' },
      timeout: { description: 'in milliseconds' },
    });
    expect(adaptCall(ours.exec, [inMs])).toEqual({
      name: 'exec',
      arguments: { cmd: 'make test', cwd: 'src', timeout: 30_000 },
    });
    // No timeout parameter: the bound is dropped, the command still runs.
    expect(adaptCall(ours.exec, [tool('exec', { command: {}, workdir: {} })]).arguments).toEqual({
      command: 'make test',
      workdir: 'src',
    });
  });

  it('renames arguments for other harnesses, and shifts a 0-based line offset', () => {
    const claude = [
      tool('read', { file_path: {}, offset: { type: 'integer', description: '0-based line number' } }),
      tool('edit', { file_path: {}, old_string: {}, new_string: {} }),
    ];
    expect(adaptCall(ours.read, claude)).toEqual({
      name: 'read',
      arguments: { file_path: 'notes.txt', offset: 2 },
    });
    expect(adaptCall(ours.edit, claude)).toEqual({
      name: 'edit',
      arguments: { file_path: 'a.txt', old_string: 'hi', new_string: 'hello' },
    });
  });

  it('leaves calls unchanged under our own schemas, without tools, and for tools it does not know', () => {
    for (const call of Object.values(ours)) {
      const adapted = adaptCall(call, builtIn);
      expect(adapted).toEqual(call);
      expect(Object.keys(adapted.arguments)).toEqual(Object.keys(call.arguments));
      expect(adaptCall(call, [])).toBe(call);
    }
    const other = { name: 'read_file', arguments: { path: 'x' } };
    expect(adaptCall(other, openclaw)).toBe(other);
    // A tool offered without a parameter schema: nothing to follow.
    expect(adaptCall(ours.read, [{ type: 'function', function: { name: 'read' } }])).toBe(ours.read);
  });

  it('falls back to an equivalent shell command when only exec can do it', () => {
    const exec = only('exec');
    expect(adaptCall(ours.ls, exec)).toEqual({ name: 'exec', arguments: { command: "ls -la -- 'data'" } });
    expect(adaptCall({ name: 'ls', arguments: {} }, exec).arguments).toEqual({ command: 'ls -la' });
    expect(adaptCall(ours.read, exec).arguments).toEqual({ command: "sed -n '3,4p' -- 'notes.txt'" });
    expect(adaptCall({ name: 'read', arguments: { path: 'a b' } }, exec).arguments).toEqual({
      command: "cat -- 'a b'",
    });
    expect(adaptCall(ours.write, exec).arguments).toEqual({
      command: `mkdir -p -- "$(dirname -- 'out/a.txt')" && printf '%s' 'it'\\''s\n' > 'out/a.txt'`,
    });
    // An offered read without an offset parameter cannot start at line 3: the shell can.
    expect(adaptCall(ours.read, [tool('read', { path: {} }), ...exec]).name).toBe('exec');
    // A shell tool without a working directory: cd first.
    expect(adaptCall(ours.exec, [tool('bash', { command: {} })])).toEqual({
      name: 'bash',
      arguments: { command: "cd -- 'src' && make test" },
    });
  });

  it('keeps a call as is when nothing offered can do it safely', () => {
    // No shell command edits exactly once and fails otherwise.
    expect(adaptCall(ours.edit, only('exec', 'read'))).toBe(ours.edit);
    expect(adaptCall(ours.ls, only('read', 'write'))).toBe(ours.ls);
  });
});

describe("adaptCall: Claude Code's tools", () => {
  it('writes read, write and edit as its capitalized tools, with file_path, old_string, new_string', () => {
    // Its Read offset is the 1-based line number, as ours is.
    expect(adaptCall(ours.read, claudeCode)).toEqual({
      name: 'Read',
      arguments: { file_path: 'notes.txt', offset: 3, limit: 2 },
    });
    expect(adaptCall(ours.write, claudeCode)).toEqual({
      name: 'Write',
      arguments: { file_path: 'out/a.txt', content: "it's\n" },
    });
    expect(adaptCall(ours.edit, claudeCode)).toEqual({
      name: 'Edit',
      arguments: { file_path: 'a.txt', old_string: 'hi', new_string: 'hello' },
    });
  });

  it('runs exec and ls through Bash, its timeout in milliseconds', () => {
    expect(adaptCall({ name: 'exec', arguments: { command: 'make test', timeout: 30 } }, claudeCode)).toEqual(
      {
        name: 'Bash',
        arguments: { command: 'make test', timeout: 30_000 },
      },
    );
    // Bash has no working-directory parameter: cd first.
    expect(adaptCall(ours.exec, claudeCode)).toEqual({
      name: 'Bash',
      arguments: { command: "cd -- 'src' && make test" },
    });
    expect(adaptCall(ours.ls, claudeCode)).toEqual({
      name: 'Bash',
      arguments: { command: "ls -la -- 'data'" },
    });
  });

  it('prefers a tool of exactly our name to a capitalized one', () => {
    const both = [tool('Read', { file_path: {} }), tool('read', { path: {}, offset: {}, limit: {} })];
    expect(adaptCall(ours.read, both)).toEqual(ours.read);
  });

  it("reads a recorded call without the defaults Claude Code filled in (Edit's replace_all: false)", () => {
    const sent = adaptCall(ours.edit, claudeCode);
    const recorded = { name: 'Edit', arguments: { replace_all: false, ...sent.arguments } };
    expect(withoutFilledDefaults(recorded, sent, claudeCode)).toEqual(sent.arguments);
    // A value other than the default, or one the sim set itself, stays.
    const all = { name: 'Edit', arguments: { ...sent.arguments, replace_all: true } };
    expect(withoutFilledDefaults(all, sent, claudeCode)).toEqual(all.arguments);
    const setBySim = { ...sent, arguments: { ...sent.arguments, replace_all: false } };
    expect(withoutFilledDefaults(setBySim, setBySim, claudeCode)).toEqual(setBySim.arguments);
  });
});

import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { adaptCall, withoutFilledDefaults } from '@stepwise/core/engines/sim/tool-adapter.js';
import type { ChatToolInput } from '@stepwise/core/text/index.js';
import { describe, expect, it } from 'vitest';
import { TOOL_DEFINITIONS } from './definitions.js';

const openclaw: ChatToolInput[] = JSON.parse(
  readFileSync(join(import.meta.dirname, '../../../../test/fixtures/openclaw/tools.json'), 'utf8'),
);
// Codex CLI 0.169's tools as the gateway hands them on (test/fixtures/codex/README.md).
const codex: ChatToolInput[] = JSON.parse(
  readFileSync(join(import.meta.dirname, '../../../../test/fixtures/codex/tools.json'), 'utf8'),
);
// Claude Code 2.1.328's tools as the gateway hands them on (test/fixtures/claude-code/README.md).
const claudeCode: ChatToolInput[] = JSON.parse(
  readFileSync(join(import.meta.dirname, '../../../../test/fixtures/claude-code/tools.json'), 'utf8'),
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

  it('keeps a call as is when nothing offered can do it', () => {
    expect(adaptCall(ours.edit, only('read'))).toBe(ours.edit);
    expect(adaptCall(ours.ls, only('read', 'write'))).toBe(ours.ls);
    // An empty old text has no single occurrence to replace.
    const empty = { name: 'edit', arguments: { path: 'a.txt', oldText: '', newText: 'x' } };
    expect(adaptCall(empty, only('exec'))).toBe(empty);
  });
});

describe("adaptCall: Codex CLI's shell tools", () => {
  it('writes exec as exec_command{cmd, workdir}; the timeout has no place there and is dropped', () => {
    expect(adaptCall(ours.exec, codex)).toEqual({
      name: 'exec_command',
      arguments: { cmd: 'make test', workdir: 'src' },
    });
    expect(adaptCall({ name: 'exec', arguments: { command: 'ls' } }, codex)).toEqual({
      name: 'exec_command',
      arguments: { cmd: 'ls' },
    });
  });

  it('writes read, write and ls as shell commands through exec_command', () => {
    expect(adaptCall(ours.ls, codex)).toEqual({
      name: 'exec_command',
      arguments: { cmd: "ls -la -- 'data'" },
    });
    expect(adaptCall(ours.read, codex)).toEqual({
      name: 'exec_command',
      arguments: { cmd: "sed -n '3,4p' -- 'notes.txt'" },
    });
    expect(adaptCall(ours.write, codex).name).toBe('exec_command');
  });

  it("runs a command given as an argv array (Codex's legacy shell tool) through bash", () => {
    const shell = tool('shell', { command: { type: 'array', items: { type: 'string' } }, workdir: {} });
    expect(adaptCall(ours.exec, [shell])).toEqual({
      name: 'shell',
      arguments: { command: ['bash', '-lc', 'make test'], workdir: 'src' },
    });
  });

  describe('an edit as a shell command', () => {
    const run = (dir: string, call: { name: string; arguments: Record<string, unknown> }) => {
      const adapted = adaptCall(call, codex);
      expect(adapted.name).toBe('exec_command');
      return spawnSync('bash', ['-c', adapted.arguments.cmd as string], { cwd: dir, encoding: 'utf8' });
    };
    const edit = (path: string, oldText: string, newText: string) => ({
      name: 'edit',
      arguments: { path, oldText, newText },
    });

    it('replaces the one occurrence, bytes and quotes kept', () => {
      const dir = mkdtempSync(join(tmpdir(), 'sim-edit-'));
      try {
        writeFileSync(join(dir, 'a.txt'), "x = 'it''s'\r\ny = $HOME\r\n");
        const result = run(dir, edit('a.txt', 'y = $HOME\r\n', "y = 'don'''t' `x`\r\nz\r\n"));
        expect(result.status, result.stderr).toBe(0);
        expect(readFileSync(join(dir, 'a.txt'), 'utf8')).toBe("x = 'it''s'\r\ny = 'don'''t' `x`\r\nz\r\n");
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('fails, changing nothing, when the text is missing or not unique, or the file is not there', () => {
      const dir = mkdtempSync(join(tmpdir(), 'sim-edit-'));
      try {
        writeFileSync(join(dir, 'a.txt'), 'ab ab\n');
        const missing = run(dir, edit('a.txt', 'cd', 'x'));
        expect(missing.status).not.toBe(0);
        expect(missing.stderr).toContain('occurs 0 times');
        const twice = run(dir, edit('a.txt', 'ab', 'x'));
        expect(twice.status).not.toBe(0);
        expect(twice.stderr).toContain('occurs 2 times');
        expect(readFileSync(join(dir, 'a.txt'), 'utf8')).toBe('ab ab\n');
        expect(run(dir, edit('a.txt_wrong', 'ab', 'x')).status).not.toBe(0);
        expect(execFileSync('ls', [dir], { encoding: 'utf8' }).trim()).toBe('a.txt');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
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

import { randomUUID } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectToolError } from '../packages/core/src/gateway/tool-results.js';
import { offeredTools } from '../packages/gym/src/agent/builtin.js';
import {
  runTool,
  TOOL_DEFINITIONS,
  type ToolContext,
  type ToolOutcome,
} from '../packages/gym/src/tools/index.js';

/* The agent tools over a real temporary workspace; exec runs in the real sandbox. */

const MOUNT = '/root/.openclaw/workspace';
const SECRET = `host-secret-${randomUUID()}`;
let root: string;
let workspace: string;
let outside: string;
let ctx: ToolContext;

const ws = (...parts: string[]) => join(workspace, ...parts);
const run = (name: string, args: unknown, context: ToolContext = ctx) => runTool(name, args, context);

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'stepwise-tools-test-'));
  workspace = join(root, 'workspace');
  mkdirSync(workspace);
  outside = mkdtempSync(join(tmpdir(), 'stepwise-tools-outside-'));
  writeFileSync(join(outside, 'secret.txt'), SECRET);
  ctx = {
    workspace,
    mountDir: MOUNT,
    sandbox: { workspace, mountDir: MOUNT, limits: { wallMs: 10_000, fileSizeMb: 1 } },
  };
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

function expectFailure(outcome: ToolOutcome, errorType: string) {
  expect(outcome, outcome.content).toMatchObject({ ok: false, errorType });
  expect(outcome.content).toMatch(/^Error: /);
}

describe('TOOL_DEFINITIONS', () => {
  it('offers read, write, edit, exec and ls as OpenAI function tools', () => {
    expect(TOOL_DEFINITIONS.map((t) => t.function.name)).toEqual(['read', 'write', 'edit', 'exec', 'ls']);
    const required = Object.fromEntries(
      TOOL_DEFINITIONS.map((t) => [
        t.function.name,
        (t.function.parameters as { required?: string[] }).required,
      ]),
    );
    expect(required).toEqual({
      read: ['path'],
      write: ['path', 'content'],
      edit: ['path', 'oldText', 'newText'],
      exec: ['command'],
      ls: undefined,
    });
    for (const tool of TOOL_DEFINITIONS) {
      expect(tool.type).toBe('function');
      expect(tool.function.parameters).toMatchObject({ type: 'object' });
      expect(tool.function.description.length).toBeGreaterThan(20);
    }
  });
});

describe('offered tools', () => {
  it('a subset in short form: the first sentence and the required parameters only', () => {
    const short = offeredTools(['write', 'read'], 'short');
    expect(short.map((t) => t.function.name)).toEqual(['read', 'write']);
    expect(short[0]!.function.description).toBe('Read a text file.');
    expect(short[0]!.function.parameters).toEqual({
      type: 'object',
      properties: { path: { type: 'string' } },
      required: ['path'],
    });
    expect(Object.keys(short[1]!.function.parameters.properties as object)).toEqual(['path', 'content']);
    expect(offeredTools(undefined)).toBe(TOOL_DEFINITIONS);
    expect(() => offeredTools(['read', 'rm'])).toThrow(/unknown tool rm/);
  });

  it('a call to a tool that was not offered is an unknown tool, and does nothing', async () => {
    const outcome = await run(
      'write',
      { path: 'not-offered.txt', content: 'x' },
      { ...ctx, offered: ['read'] },
    );
    expect(outcome).toMatchObject({ ok: false, errorType: 'unknown_tool' });
    expect(outcome.content).toBe("Error: unknown tool 'write'. Available tools: read");
    expect(existsSync(ws('not-offered.txt'))).toBe(false);
  });
});

describe('read', () => {
  beforeAll(() => {
    writeFileSync(ws('lines.txt'), Array.from({ length: 10 }, (_, i) => `line ${i + 1}`).join('\n'));
  });

  it('reads by relative path, absolute sandbox path, ~ path and aliases, from an object or JSON', async () => {
    const whole = Array.from({ length: 10 }, (_, i) => `line ${i + 1}`).join('\n');
    for (const args of [
      { path: 'lines.txt' },
      { path: `${MOUNT}/lines.txt` },
      { path: '~/.openclaw/workspace/lines.txt' },
      { file_path: './lines.txt' },
      { filePath: 'lines.txt' },
      JSON.stringify({ path: 'lines.txt' }),
    ]) {
      expect(await run('read', args)).toEqual({
        ok: true,
        content: whole,
        errorType: null,
        truncated: false,
      });
    }
  });

  it('reads a range of lines (1-based offset, limit) and says where to continue', async () => {
    const r = await run('read', { path: 'lines.txt', offset: 3, limit: 2 });
    expect(r.content).toBe('line 3\nline 4\n\n[Showing lines 3-4. Use offset=5 to continue.]');
    expect((await run('read', { path: 'lines.txt', offset: '9', limit: '5' })).content).toBe(
      'line 9\nline 10',
    );
    expectFailure(await run('read', { path: 'lines.txt', offset: 50 }), 'bad_arguments');
  });

  it('truncates a long file with a notice, and cuts an overlong line', async () => {
    writeFileSync(ws('long.txt'), Array.from({ length: 5000 }, (_, i) => `row ${i + 1}`).join('\n'));
    const r = await run('read', { path: 'long.txt' }, { ...ctx, maxOutputChars: 1000 });
    expect(r.truncated).toBe(true);
    expect(r.content.length).toBeLessThan(1100);
    const lastShown = r.content.split('\n\n')[0]!.split('\n').pop();
    expect(r.content).toContain(`Use offset=${Number(lastShown!.split(' ')[1]) + 1} to continue.`);
    writeFileSync(ws('wide.txt'), `${'x'.repeat(5000)}\nnext`);
    const wide = await run('read', { path: 'wide.txt' }, { ...ctx, maxOutputChars: 1000 });
    expect(wide.content.startsWith(`${'x'.repeat(1000)}\n\n[Line 1 is too long`)).toBe(true);
    expect(wide.content).toContain('Use offset=2 to continue.');
  });

  it('reports missing files, directories and binary files', async () => {
    expectFailure(await run('read', { path: 'nope.txt' }), 'not_found');
    mkdirSync(ws('adir'), { recursive: true });
    expectFailure(await run('read', { path: 'adir' }), 'is_directory');
    writeFileSync(ws('blob.bin'), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 1, 2]));
    expect((await run('read', { path: 'blob.bin' })).content).toMatch(/binary file \(8 bytes\)/);
  });
});

describe('write and edit', () => {
  it('write creates parent directories and replaces files', async () => {
    const r = await run('write', { path: 'out/deep/report.md', content: '# Report\n' });
    expect(r).toMatchObject({ ok: true, content: 'Successfully wrote 9 bytes to out/deep/report.md' });
    expect(readFileSync(ws('out/deep/report.md'), 'utf8')).toBe('# Report\n');
    await run('write', { filePath: `${MOUNT}/out/deep/report.md`, contents: 'v2' });
    expect(readFileSync(ws('out/deep/report.md'), 'utf8')).toBe('v2');
  });

  it('write refuses directories and files over the size limit', async () => {
    mkdirSync(ws('somedir'), { recursive: true });
    expectFailure(await run('write', { path: 'somedir', content: 'x' }), 'is_directory');
    expectFailure(
      await run('write', { path: 'huge.txt', content: 'x'.repeat(2 * 1024 * 1024) }),
      'limit_exceeded',
    );
    expect(existsSync(ws('huge.txt'))).toBe(false);
  });

  it('edit replaces one exact, unique match (under any alias)', async () => {
    writeFileSync(ws('config.py'), 'DEBUG = True\nLEVEL = 1\n');
    expect(
      await run('edit', { path: 'config.py', oldText: 'DEBUG = True', newText: 'DEBUG = False' }),
    ).toMatchObject({ ok: true });
    await run('edit', { file_path: 'config.py', old_string: 'LEVEL = 1', new_string: 'LEVEL = $&2' });
    await run('edit', { filePath: 'config.py', oldString: 'DEBUG', newString: 'VERBOSE' });
    expect(readFileSync(ws('config.py'), 'utf8')).toBe('VERBOSE = False\nLEVEL = $&2\n');
  });

  it('edit explains a missing or ambiguous match and leaves the file alone', async () => {
    writeFileSync(ws('dup.txt'), 'a = 1\na = 1\n');
    const none = await run('edit', { path: 'dup.txt', oldText: 'b = 2', newText: 'x' });
    expectFailure(none, 'no_match');
    expect(none.content).toContain('could not find oldText');
    const many = await run('edit', { path: 'dup.txt', oldText: 'a = 1', newText: 'x' });
    expectFailure(many, 'ambiguous_match');
    expect(many.content).toContain('found 2 occurrences');
    expect(readFileSync(ws('dup.txt'), 'utf8')).toBe('a = 1\na = 1\n');
    expectFailure(await run('edit', { path: 'dup.txt', oldText: '', newText: 'x' }), 'bad_arguments');
    expectFailure(await run('edit', { path: 'missing.txt', oldText: 'a', newText: 'b' }), 'not_found');
  });
});

describe('ls', () => {
  it('lists a directory, directories with a slash', async () => {
    mkdirSync(ws('tree/sub'), { recursive: true });
    writeFileSync(ws('tree/b.txt'), '');
    writeFileSync(ws('tree/.hidden'), '');
    expect((await run('ls', { path: 'tree' })).content).toBe('.hidden\nb.txt\nsub/');
    expect((await run('ls', { directory: `${MOUNT}/tree/sub` })).content).toBe('(empty directory)');
    expect((await run('ls', {})).content).toContain('tree/');
    expectFailure(await run('ls', { dir: 'no-such-dir' }), 'not_found');
  });
});

describe('paths outside the workspace', () => {
  beforeAll(() => {
    symlinkSync(join(outside, 'secret.txt'), ws('secret-link'));
    symlinkSync(outside, ws('outside-dir'));
    symlinkSync(join(outside, 'planted.txt'), ws('dangling-out'));
    symlinkSync(`${MOUNT}/lines-target.txt`, ws('inside-abs-link'));
    writeFileSync(ws('lines-target.txt'), 'reachable');
    symlinkSync('loop-b', ws('loop-a'));
    symlinkSync('loop-a', ws('loop-b'));
  });

  it('refuses .., other absolute paths and symlinks that leave the workspace', async () => {
    const attempts: [string, object][] = [
      ['read', { path: '../secret.txt' }],
      ['read', { path: 'tree/../../x' }],
      ['read', { path: '/etc/passwd' }],
      ['read', { path: join(outside, 'secret.txt') }],
      ['read', { path: '/root/.openclaw/other' }],
      ['read', { path: 'secret-link' }],
      ['read', { path: 'outside-dir/secret.txt' }],
      ['ls', { path: 'outside-dir' }],
      ['ls', { path: '..' }],
      ['write', { path: 'outside-dir/planted.txt', content: 'x' }],
      ['write', { path: 'dangling-out', content: 'x' }],
      ['edit', { path: 'secret-link', oldText: 'host', newText: 'x' }],
      ['exec', { command: 'pwd', workdir: '/tmp' }],
      ['exec', { command: 'pwd', workdir: '../' }],
    ];
    for (const [tool, args] of attempts) {
      const r = await run(tool, args);
      expectFailure(r, 'path_outside_workspace');
      expect(r.content).not.toContain(SECRET);
    }
    expect(existsSync(join(outside, 'planted.txt'))).toBe(false);
    expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe(SECRET);
  });

  it('follows symlinks that stay inside (absolute targets under the mount dir included)', async () => {
    expect((await run('read', { path: 'inside-abs-link' })).content).toBe('reachable');
    expectFailure(await run('read', { path: 'loop-a' }), 'bad_arguments');
  });
});

describe('exec', () => {
  it('runs a command in the workspace and returns the exit code, stdout and stderr', async () => {
    await run('write', { path: 'data/n.txt', content: '41' });
    const r = await run('exec', {
      command: 'echo $(( $(cat data/n.txt) + 1 )) > data/m.txt; cat data/m.txt; echo warn >&2',
    });
    expect(r).toEqual({
      ok: true,
      content: 'Exit code: 0\nStdout:\n42\n\nStderr:\nwarn\n',
      errorType: null,
      truncated: false,
    });
    expect((await run('read', { path: 'data/m.txt' })).content).toBe('42');
    expect((await run('exec', { cmd: 'true' })).content).toBe('Exit code: 0\n(no output)');
  });

  it('runs in workdir (under its aliases)', async () => {
    for (const args of [
      { workdir: 'data' },
      { cwd: `${MOUNT}/data` },
      { directory: 'data' },
      { dir: './data/' },
    ]) {
      expect((await run('exec', { command: 'pwd', ...args })).content).toBe(
        `Exit code: 0\nStdout:\n${MOUNT}/data\n`,
      );
    }
    expectFailure(await run('exec', { command: 'pwd', workdir: 'nowhere' }), 'not_found');
  });

  it('reports a non-zero exit, a timeout and a limit as failures', async () => {
    const failed = await run('exec', { command: 'echo partial; exit 3' });
    expectFailure(failed, 'exit_nonzero');
    expect(failed.content).toBe('Error: command exited with code 3\nStdout:\npartial\n');
    const slow = await run('exec', { command: 'sleep 20', timeout: 1 });
    expectFailure(slow, 'timeout');
    expect(slow.content).toMatch(/^Error: command timed out after 1 s/);
    const slowMs = await run('exec', { command: 'sleep 20', timeout_ms: 500 });
    expectFailure(slowMs, 'timeout');
    const big = await run('exec', { command: 'head -c 5M /dev/zero > big.bin' });
    expectFailure(big, 'limit_exceeded');
    expect(big.content).toContain('file size limit');
  });

  it('cuts long output in the middle with a notice', async () => {
    const r = await run('exec', { command: 'seq 1 100000' }, { ...ctx, maxOutputChars: 2000 });
    expect(r.ok).toBe(true);
    expect(r.truncated).toBe(true);
    expect(r.content.length).toBeLessThanOrEqual(2000);
    expect(r.content).toMatch(/^Exit code: 0\nStdout:\n1\n2\n3\n/);
    expect(r.content).toMatch(/characters truncated/);
    expect(r.content.trimEnd().endsWith('100000')).toBe(true);
  });
});

describe('bad calls', () => {
  it('reports unknown tools and unusable arguments', async () => {
    expectFailure(await run('browser', { url: 'x' }), 'unknown_tool');
    expectFailure(await run('read', '{"path": '), 'bad_arguments');
    expectFailure(await run('read', {}), 'bad_arguments');
    expectFailure(await run('read', { path: 42 }), 'bad_arguments');
    expectFailure(await run('write', { path: 'x.txt' }), 'bad_arguments');
    expectFailure(await run('exec', { command: '   ' }), 'bad_arguments');
    expectFailure(await run('read', '[1, 2]'), 'bad_arguments');
    const r = await run('read', { path: 'lines.txt', offset: null, limit: null });
    expect(r.ok).toBe(true);
  });
});

describe('the gateway reads these results the way they are meant', () => {
  it('detectToolError flags every failed result and no successful one', async () => {
    writeFileSync(ws('notes.md'), '# Notes\nAll good.\n');
    const successes = [
      await run('read', { path: 'notes.md' }),
      await run('read', { path: 'lines.txt', offset: 2, limit: 2 }),
      await run('write', { path: 'ok/out.txt', content: 'done' }),
      await run('edit', { path: 'notes.md', oldText: 'All good.', newText: 'Still good.' }),
      await run('ls', {}),
      await run('exec', { command: 'python3 -c "print(6 * 7)"' }),
      await run('exec', { command: 'true' }),
      await run('exec', { command: 'echo "1 file changed" >&2' }),
    ];
    const failures = [
      await run('nope', {}),
      await run('read', { path: 'missing.md' }),
      await run('read', { path: 'tree' }),
      await run('read', { path: '../../etc/passwd' }),
      await run('read', '{bad json'),
      await run('edit', { path: 'notes.md', oldText: 'absent', newText: 'x' }),
      await run('edit', { path: 'dup.txt', oldText: 'a = 1', newText: 'x' }),
      await run('exec', { command: 'exit 1' }),
      await run('exec', { command: 'python3 -c "raise ValueError(1)"' }),
      await run('exec', { command: 'sleep 5', timeout: 0.3 }),
      await run('exec', { command: 'head -c 5M /dev/zero > big2.bin' }),
      await run('write', { path: 'tree', content: 'x' }),
    ];
    for (const outcome of successes) {
      expect(outcome.ok, outcome.content).toBe(true);
      expect(detectToolError(outcome.content), outcome.content).toEqual({ error: false });
    }
    for (const outcome of failures) {
      expect(outcome.ok, outcome.content).toBe(false);
      expect(detectToolError(outcome.content).error, outcome.content).toBe(true);
    }
  });
});

import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  entryTextOf,
  GymTask,
  type GymTaskInput,
  loadTasks,
  readClawGymFolder,
  readTasksJsonl,
  TaskLineError,
  taskFileBytes,
  workspaceFor,
  writeClawGymFolder,
  writeTasksJsonl,
} from '../packages/gym/src/tasks/index.js';
import { detectPythonJsonFormat, pythonJsonDumps } from '../packages/gym/src/tasks/python-json.js';
import { CLAWGYM_SAMPLE } from './support/clawgym-sample.js';

const SAMPLE = CLAWGYM_SAMPLE;

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'gym-tasks-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/** Every file under `root` (relative path → bytes), and its directories. */
async function snapshot(root: string): Promise<{ files: Map<string, Buffer>; dirs: string[] }> {
  const files = new Map<string, Buffer>();
  const dirs: string[] = [];
  async function walk(dir: string, rel: string): Promise<void> {
    for (const name of (await readdir(dir)).sort()) {
      const abs = join(dir, name);
      const r = rel ? `${rel}/${name}` : name;
      const st = await lstat(abs);
      if (st.isDirectory()) {
        dirs.push(r);
        await walk(abs, r);
      } else files.set(r, await readFile(abs));
    }
  }
  await walk(root, '');
  return { files, dirs };
}

async function expectSameTree(expected: string, actual: string): Promise<void> {
  const a = await snapshot(expected);
  const b = await snapshot(actual);
  expect([...b.files.keys()]).toEqual([...a.files.keys()]);
  expect(b.dirs).toEqual(a.dirs);
  for (const [path, bytes] of a.files) {
    expect(Buffer.compare(b.files.get(path)!, bytes), path).toBe(0);
  }
}

function minimalTask(overrides: Partial<GymTaskInput> = {}): GymTaskInput {
  return {
    id: 'mini',
    prompt: 'Write output/x.txt',
    verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'x', path: 'output/x.txt' }] },
    ...overrides,
  };
}

describe('ClawGym sample tasks', () => {
  it('loads all 40 sample tasks, sorted by id, with their prompts, files and verifiers', async () => {
    const tasks = await loadTasks(SAMPLE);
    expect(tasks).toHaveLength(40);
    expect(tasks.map((t) => t.id)).toEqual([...tasks.map((t) => t.id)].sort());
    const first = tasks[0]!;
    expect(first.id).toBe('task_0000');
    expect(first.prompt).toMatch(/^I’m organizing a set of respectful/);
    expect(first.mountDir).toBe('/root/.openclaw/workspace');
    expect(first.files.map((f) => f.path)).toEqual(['input/contacts.csv', 'input/incidents.csv']);
    expect(first.verifier.kind).toBe('script');
    if (first.verifier.kind === 'script') {
      expect(first.verifier.entry).toBe('reward/reward.sh');
      expect(first.verifier.files.map((f) => f.path)).toEqual(['reward/check.py', 'reward/reward.sh']);
    }
    expect(first.provenance.source).toBe('clawgym');
    for (const task of tasks) {
      expect(task.verifier.kind).toBe('script');
      // The sample is a read-only copy: its files must still come out writable (0644: no mode).
      for (const f of task.files) expect(f.mode).toBeUndefined();
      // The entry's layout is recognized: its text is rebuilt, not stored a second time.
      expect(task.provenance.clawgym).not.toHaveProperty('entryRaw');
    }
    // The only task without input_files/ still loads.
    const original = await readFile(join(SAMPLE, 'task_0000', 'input_files', 'input', 'contacts.csv'));
    expect(Buffer.compare(taskFileBytes(first.files[0]!), original)).toBe(0);
  });

  it('loads a single task folder', async () => {
    const tasks = await loadTasks(join(SAMPLE, 'task_1550'));
    expect(tasks.map((t) => t.id)).toEqual(['task_1550']);
  });

  it('round trip folder → GymTask → JSONL → GymTask → folder reproduces every file byte for byte', async () => {
    const tasks = await loadTasks(SAMPLE);
    const jsonl = join(tmp, 'sample.jsonl');
    expect(await writeTasksJsonl(jsonl, tasks)).toBe(40);
    const back = await loadTasks(jsonl);
    expect(back).toEqual(tasks);
    const out = join(tmp, 'roundtrip');
    for (const task of back) await writeClawGymFolder(task, join(out, task.id));
    await expectSameTree(SAMPLE, out);
  });

  it('keeps non-UTF-8 bytes, a BOM, modes, extra entry fields, odd layouts and empty directories', async () => {
    const src = join(tmp, 'odd-src', 'odd_task');
    await mkdir(join(src, 'input_files', 'data'), { recursive: true });
    await mkdir(join(src, 'input_files', 'output'), { recursive: true });
    await mkdir(join(src, 'reward'), { recursive: true });
    // A Python-style entry with a float written as 1.0, an extra field, keys in an unusual order.
    await writeFile(
      join(src, 'data_entry.json'),
      '{"version": 1.0, "user_query": "Do it \\u00e9", "task_id": "odd_task", "metadata": {"x": [1, 2]}}',
    );
    await writeFile(join(src, 'input_files', 'data', 'blob.bin'), Buffer.from([0xff, 0x00, 0xfe, 0x80]));
    await writeFile(join(src, 'input_files', 'data', 'bom.txt'), '\uFEFFhello\r\n');
    await writeFile(join(src, 'reward', 'reward.sh'), 'echo 0\n', { mode: 0o755 });
    await writeFile(join(src, 'README.md'), 'notes\n');
    const task = await readClawGymFolder(src);
    expect(task.provenance.clawgym).toMatchObject({
      extra: { version: 1 },
      emptyDirs: ['input_files/output'],
    });
    const blob = task.files.find((f) => f.path === 'data/blob.bin')!;
    expect(blob.encoding).toBe('base64');
    expect(task.files.find((f) => f.path === 'data/bom.txt')!.encoding).toBe('utf8');
    if (task.verifier.kind === 'script') expect(task.verifier.files[0]!.mode).toBe(0o755);
    const jsonl = join(tmp, 'odd.jsonl');
    await writeTasksJsonl(jsonl, [task]);
    const [back] = await loadTasks(jsonl);
    const out = join(tmp, 'odd-out', 'odd_task');
    await writeClawGymFolder(back!, out);
    await expectSameTree(src, out);
    expect((await stat(join(out, 'reward', 'reward.sh'))).mode & 0o777).toBe(0o755);
  });

  it('writes an edited task with its new values in the original key order', async () => {
    const [task] = await loadTasks(join(SAMPLE, 'task_0000'));
    const edited = { ...task!, prompt: 'A new prompt', category: 'Analysis & Reasoning' };
    const entry = JSON.parse(entryTextOf(edited));
    expect(Object.keys(entry)).toEqual(['task_id', 'user_query', 'metadata', 'input_mount_dir']);
    expect(entry.user_query).toBe('A new prompt');
    expect(entry.metadata).toEqual({ category: 'Analysis & Reasoning', grading_type: 'automated' });
  });

  it('refuses folders that are not tasks, symlinks inside a task, and checks-only tasks as folders', async () => {
    await expect(loadTasks(join(tmp, 'missing'))).rejects.toThrow(/no such file/);
    const empty = join(tmp, 'empty');
    await mkdir(empty);
    await expect(loadTasks(empty)).rejects.toThrow(/neither a JSONL file/);
    const linked = join(tmp, 'linked', 't1');
    await mkdir(join(linked, 'reward'), { recursive: true });
    await writeFile(join(linked, 'data_entry.json'), '{"task_id": "t1", "user_query": "q"}');
    await writeFile(join(linked, 'reward', 'reward.sh'), 'echo 0\n');
    await symlink('/etc/passwd', join(linked, 'reward', 'passwd'));
    await expect(readClawGymFolder(linked)).rejects.toThrow(/only regular files and directories/);
    const noReward = join(tmp, 'noreward', 't2');
    await mkdir(noReward, { recursive: true });
    await writeFile(join(noReward, 'data_entry.json'), '{"task_id": "t2"}');
    await expect(readClawGymFolder(noReward)).rejects.toThrow(/user_query/);
    const checksOnly = GymTask.parse(minimalTask());
    await expect(writeClawGymFolder(checksOnly, join(tmp, 'checks-only'))).rejects.toThrow(/script verifier/);
  });
});

describe('JSONL', () => {
  async function readAll(path: string) {
    const out = [];
    for await (const t of readTasksJsonl(path)) out.push(t);
    return out;
  }

  it('names the line and the field of a bad task', async () => {
    const path = join(tmp, 'bad.jsonl');
    const good = JSON.stringify(minimalTask());
    const badPath = JSON.stringify(minimalTask({ id: 'b', files: [{ path: '../etc/x', content: '' }] }));
    await writeFile(path, `${good}\n\n${badPath}\n`);
    const err = await readAll(path).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskLineError);
    expect((err as TaskLineError).line).toBe(3);
    expect((err as TaskLineError).field).toBe('files.0.path');
    expect((err as Error).message).toMatch(/line 3: files\.0\.path: must be a relative path/);
  });

  it('names the line of invalid JSON and of a missing field', async () => {
    const path = join(tmp, 'bad2.jsonl');
    await writeFile(path, `${JSON.stringify(minimalTask())}\n{"id": "x", \n`);
    await expect(readAll(path)).rejects.toThrow(/line 2: not valid JSON/);
    await writeFile(path, `${JSON.stringify({ id: 'x', prompt: 'p' })}\n`);
    await expect(readAll(path)).rejects.toThrow(/line 1: verifier: /);
  });

  it('streams: tasks before a bad line are yielded first', async () => {
    const path = join(tmp, 'stream.jsonl');
    await writeFile(path, `${JSON.stringify(minimalTask())}\nnot json\n`);
    const seen: string[] = [];
    await expect(
      (async () => {
        for await (const t of readTasksJsonl(path)) seen.push(t.id);
      })(),
    ).rejects.toThrow(/line 2/);
    expect(seen).toEqual(['mini']);
  });

  it('refuses duplicate ids', async () => {
    const path = join(tmp, 'dup.jsonl');
    await writeFile(path, `${JSON.stringify(minimalTask())}\n${JSON.stringify(minimalTask())}\n`);
    await expect(loadTasks(path)).rejects.toThrow(/mini appears twice/);
  });

  it('refuses to write an invalid task', async () => {
    const bad = { ...GymTask.parse(minimalTask()), id: 'has space' };
    await expect(writeTasksJsonl(join(tmp, 'w.jsonl'), [bad])).rejects.toThrow(/id:/);
  });
});

describe('workspaceFor', () => {
  it('writes the task files (with modes) into a fresh directory and refuses a used one', async () => {
    const task = GymTask.parse(
      minimalTask({
        files: [
          { path: 'input/a.csv', content: 'a,b\n1,2\n' },
          { path: 'bin/run.sh', content: 'echo hi\n', mode: 0o755 },
          { path: 'raw.bin', encoding: 'base64', content: Buffer.from([0, 255]).toString('base64') },
        ],
      }),
    );
    const ws = join(tmp, 'ws', 'workspace');
    expect(await workspaceFor(task, ws)).toBe(ws);
    expect(await readFile(join(ws, 'input', 'a.csv'), 'utf8')).toBe('a,b\n1,2\n');
    expect((await stat(join(ws, 'bin', 'run.sh'))).mode & 0o777).toBe(0o755);
    expect([...(await readFile(join(ws, 'raw.bin')))]).toEqual([0, 255]);
    await expect(workspaceFor(task, ws)).rejects.toThrow(/fresh workspace/);
  });

  it('never writes the verifier files into the workspace', async () => {
    const [task] = await loadTasks(join(SAMPLE, 'task_0000'));
    const ws = join(tmp, 'ws2');
    await workspaceFor(task!, ws);
    expect((await readdir(ws)).sort()).toEqual(['input']);
  });
});

describe('Python JSON layout', () => {
  it('reproduces json.dumps layouts and escapes like Python', () => {
    const value = { a: 'é\u007f\u2028😀', b: [], c: {}, d: [1, { e: null }] };
    const text = pythonJsonDumps(value, { indent: null, ensureAscii: true, trailingNewline: false });
    expect(text).toBe(
      '{"a": "\\u00e9\\u007f\\u2028\\ud83d\\ude00", "b": [], "c": {}, "d": [1, {"e": null}]}',
    );
    const indented = pythonJsonDumps(value, { indent: 2, ensureAscii: false, trailingNewline: true });
    expect(indented).toBe(`${JSON.stringify(value, null, 2)}\n`);
    expect(detectPythonJsonFormat(indented, value)).toEqual({
      indent: 2,
      ensureAscii: false,
      trailingNewline: true,
    });
    expect(detectPythonJsonFormat('{"x": 1.0}', { x: 1 })).toBeNull();
  });
});

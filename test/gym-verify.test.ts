import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningSimServer, startSimServer } from '../packages/core/src/engines/sim/serve.js';
import { GymTask, type GymTaskInput, loadTasks, workspaceFor } from '../packages/gym/src/tasks/index.js';
import { Check } from '../packages/gym/src/tasks/schema.js';
import {
  buildJudgeMessages,
  CsvError,
  judgeRubric,
  listOutputFiles,
  parseCsvRecords,
  parseCsvTable,
  parseJudgeReply,
  parsePointer,
  runChecks,
  runScriptVerifier,
  type SandboxRunner,
  scoreFromStdout,
  snapToBand,
  verify,
} from '../packages/gym/src/verify/index.js';
import { CLAWGYM_SAMPLE } from './support/clawgym-sample.js';

const SAMPLE = CLAWGYM_SAMPLE;

// The sandbox is built alongside; its tests run whenever it exists and works on this machine.
const sandboxPath = '../packages/gym/src/sandbox/index.js';
const sandboxModule = (await import(sandboxPath).catch(() => null)) as {
  checkSandbox(): { ok: boolean; reason?: string };
} | null;
const sandboxReady = sandboxModule?.checkSandbox().ok === true;

let tmp: string;
let n = 0;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'gym-verify-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});
const freshDir = async () => {
  const dir = join(tmp, `ws${n++}`);
  await mkdir(dir, { recursive: true });
  return dir;
};

type RunResultLike = Awaited<ReturnType<SandboxRunner>>;
function runResult(over: Partial<RunResultLike> = {}): RunResultLike {
  return {
    exitCode: 0,
    signal: null,
    stdout: '',
    stderr: '',
    timedOut: false,
    durationMs: 5,
    limitHit: null,
    stdoutTruncated: false,
    stderrTruncated: false,
    ...over,
  };
}

function scriptTask(reward: string, over: Partial<GymTaskInput> = {}): GymTask {
  return GymTask.parse({
    id: 'script_task',
    prompt: 'do it',
    verifier: {
      kind: 'script',
      files: [
        { path: 'reward/reward.sh', content: reward, mode: 0o755 },
        { path: 'reward/helper.txt', content: 'h' },
      ],
      timeoutMs: 20_000,
    },
    ...over,
  });
}

describe('scoreFromStdout', () => {
  it("takes the last non-empty line as is, unclamped, as ClawGym's rollout does", () => {
    expect(scoreFromStdout('debug\n0.0175\n\n  \n')).toEqual({ score: 0.0175 });
    expect(scoreFromStdout('1.0')).toEqual({ score: 1 });
    expect(scoreFromStdout('1.5\n')).toEqual({ score: 1.5 });
    expect(scoreFromStdout('-0.25\r\n')).toEqual({ score: -0.25 });
    expect(scoreFromStdout('.5')).toEqual({ score: 0.5 });
    expect(scoreFromStdout('5e-1')).toEqual({ score: 0.5 });
  });

  it("scores NaN and the infinities 0 (ClawGym's set_reward), refuses words and silence", () => {
    for (const out of ['nan\n', 'NaN', 'inf', '-inf', 'Infinity', '1e999'])
      expect(scoreFromStdout(out), out).toEqual({ score: 0 });
    for (const out of ['score: 1', '0x1', '', '\n\n']) {
      expect(scoreFromStdout(out), out).toHaveProperty('reason');
    }
  });
});

describe('script verifier (sandbox stand-in)', () => {
  it('copies reward/ in only for the run, without network, and removes it afterwards', async () => {
    const task = scriptTask('echo 0.4\n');
    const ws = await freshDir();
    await writeFile(join(ws, 'out.txt'), 'agent output');
    let seen: string[] = [];
    let seenOptions: Parameters<SandboxRunner>[0] | undefined;
    let seenCommand = '';
    const fake: SandboxRunner = async (options, command, run) => {
      seenOptions = options;
      seenCommand = command;
      seen = (await readdir(join(options.workspace, 'reward'))).sort();
      expect(run?.timeoutMs).toBe(20_000);
      expect(run?.cwd).toBe(task.mountDir);
      return runResult({ stdout: 'checking\n0.4\n' });
    };
    const verdict = await runScriptVerifier(task, task.verifier as never, ws, {
      sandbox: { gateway: { url: 'http://127.0.0.1:1' }, limits: { memoryMb: 512 } },
      runInSandbox: fake,
    });
    expect(verdict).toMatchObject({ score: 0.4, verifierFailed: false, reason: null });
    expect(seen).toEqual(['helper.txt', 'reward.sh']);
    expect(seenCommand).toBe(`bash '${task.mountDir}/reward/reward.sh'`);
    expect(seenOptions).toMatchObject({ workspace: ws, mountDir: task.mountDir, limits: { memoryMb: 512 } });
    expect(seenOptions).not.toHaveProperty('gateway');
    expect((await readdir(ws)).sort()).toEqual(['out.txt']);
  });

  it("hides an agent's own reward/ (or a symlink named reward) during the run and restores it", async () => {
    const task = scriptTask('echo 1\n');
    const ws = await freshDir();
    await mkdir(join(ws, 'reward'));
    await writeFile(join(ws, 'reward', 'json.py'), 'planted');
    const fake: SandboxRunner = async (options) => {
      expect((await readdir(join(options.workspace, 'reward'))).sort()).toEqual(['helper.txt', 'reward.sh']);
      return runResult({ stdout: '1\n' });
    };
    await runScriptVerifier(task, task.verifier as never, ws, { runInSandbox: fake });
    expect(await readFile(join(ws, 'reward', 'json.py'), 'utf8')).toBe('planted');

    const outside = await freshDir();
    const ws2 = await freshDir();
    await symlink(outside, join(ws2, 'reward'));
    await runScriptVerifier(task, task.verifier as never, ws2, { runInSandbox: fake });
    expect(await readdir(outside)).toEqual([]);
  });

  it('a verifier path written as ./reward/... never removes the workspace itself', async () => {
    const task = GymTask.parse({
      id: 'dot',
      prompt: 'p',
      verifier: { kind: 'script', files: [{ path: './reward/reward.sh', content: 'echo 1\n' }] },
    });
    const ws = await freshDir();
    await writeFile(join(ws, 'keep.txt'), 'agent work');
    const verdict = await runScriptVerifier(task, task.verifier as never, ws, {
      runInSandbox: async () => runResult({ stdout: '1\n' }),
    });
    expect(verdict.score).toBe(1);
    expect(await readdir(ws)).toEqual(['keep.txt']);
  });

  it('maps exit codes, timeouts, limits, signals and bad output to 0 with verifierFailed', async () => {
    const task = scriptTask('echo 1\n');
    const cases: [Partial<RunResultLike>, RegExp][] = [
      [{ exitCode: 2, stdout: '1\n', stderr: 'Traceback: boom' }, /exited with code 2: Traceback: boom/],
      [{ exitCode: null, timedOut: true, stdout: '1\n' }, /timed out after 20000 ms/],
      [{ exitCode: null, signal: 'SIGKILL', limitHit: 'memory' }, /memory limit/],
      [{ exitCode: null, signal: 'SIGSEGV' }, /killed by SIGSEGV/],
      [{ stdout: 'score: 1\n' }, /not a finite number/],
      [{ stdout: '' }, /no score/],
      [{ stdout: '1\n', stdoutTruncated: true }, /more output/],
    ];
    for (const [over, reason] of cases) {
      const verdict = await runScriptVerifier(task, task.verifier as never, await freshDir(), {
        runInSandbox: async () => runResult(over),
      });
      expect(verdict.score).toBe(0);
      expect(verdict.verifierFailed).toBe(true);
      expect(verdict.reason).toMatch(reason);
    }
  });

  it('rethrows an infrastructure failure after cleaning up', async () => {
    const task = scriptTask('echo 1\n');
    const ws = await freshDir();
    class FakeSandboxError extends Error {}
    const err = await runScriptVerifier(task, task.verifier as never, ws, {
      runInSandbox: async () => {
        throw new FakeSandboxError('bwrap: setting up uid map: Permission denied');
      },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FakeSandboxError);
    expect(await readdir(ws)).toEqual([]);
    await expect(
      verify(task, ws, {
        runInSandbox: async () => {
          throw new FakeSandboxError('infra');
        },
      }),
    ).rejects.toThrow('infra');
  });
});

describe('CSV reader', () => {
  it('reads quotes, escaped quotes, commas and line breaks inside quotes, CRLF and a BOM', () => {
    const text = '\uFEFFname,note\r\n"Doe, J","said ""hi""\nand left"\r\n\r\nplain,\n"",x';
    expect(parseCsvRecords(text)).toEqual([
      ['name', 'note'],
      ['Doe, J', 'said "hi"\nand left'],
      ['plain', ''],
      ['', 'x'],
    ]);
  });

  it('refuses an unclosed quote, text after a closing quote and ragged rows, naming the line', () => {
    expect(() => parseCsvRecords('a,b\n"x,y\n')).toThrow(/line 2: a quoted field is never closed/);
    expect(() => parseCsvRecords('a\n"x"y\n')).toThrow(/line 2: unexpected text after a closing quote/);
    expect(() => parseCsvTable('a,b\n"multi\nline",2\n3\n')).toThrow(CsvError);
    expect(() => parseCsvTable('a,b\n"multi\nline",2\n3\n')).toThrow(/line 4: a row has 1 fields/);
    expect(() => parseCsvTable('')).toThrow(/no header/);
  });

  it('reads back whatever a quoting writer writes (property)', () => {
    const field = fc.string({ unit: fc.constantFrom('a', 'b', ',', '"', '\n', '\r', ' ', 'é') });
    const quote = (s: string) => (/[",\r\n]/.test(s) || s === '' ? `"${s.replaceAll('"', '""')}"` : s);
    fc.assert(
      fc.property(
        fc
          .integer({ min: 1, max: 4 })
          .chain((cols) => fc.array(fc.array(field, { minLength: cols, maxLength: cols }), { minLength: 1 })),
        (rows) => {
          const text = rows.map((r) => r.map(quote).join(',')).join('\r\n');
          expect(parseCsvRecords(text)).toEqual(rows);
        },
      ),
    );
  });
});

describe('check DSL', () => {
  let ws: string;
  beforeAll(async () => {
    ws = await freshDir();
    await mkdir(join(ws, 'output'));
    await writeFile(
      join(ws, 'output', 'summary.json'),
      JSON.stringify({ total: 12.0000001, 'a/b': { 'm~n': [10, 20] }, by_role: { Sponsor: 3 }, tags: ['x'] }),
    );
    await writeFile(
      join(ws, 'output', 'people.csv'),
      'name, role\n"Doe, J",Sponsor\n"Lee\nK", Moderator\nAmy,Sponsor\n',
    );
    await writeFile(join(ws, 'output', 'broken.csv'), 'a,b\n"open,1\n');
    await writeFile(join(ws, 'output', 'broken.json'), '{"a": ');
    await writeFile(join(ws, 'output', 'report.md'), 'The Total is 12.\nAll good here\n');
    const outside = await freshDir();
    await writeFile(join(outside, 'secret.txt'), 'secret');
    await symlink(join(outside, 'secret.txt'), join(ws, 'output', 'link.txt'));
    await symlink(outside, join(ws, 'elsewhere'));
    await symlink(join(ws, 'output', 'report.md'), join(ws, 'inner-link.md'));
  });

  const one = async (check: Check) => {
    const result = await runChecks([check], ws, { runInSandbox: async () => runResult({ exitCode: 0 }) });
    return { score: result.subscores[check.name]!, detail: result.details[check.name]! };
  };
  const check = (c: Record<string, unknown>): Check => Check.parse({ name: 'c', ...c });

  it('file_exists / file_absent', async () => {
    expect((await one(check({ kind: 'file_exists', path: 'output/summary.json' }))).score).toBe(1);
    expect((await one(check({ kind: 'file_exists', path: 'output' }))).score).toBe(1);
    expect((await one(check({ kind: 'file_exists', path: 'output/nope.json' }))).score).toBe(0);
    expect((await one(check({ kind: 'file_exists', path: 'inner-link.md' }))).score).toBe(1);
    expect((await one(check({ kind: 'file_absent', path: 'output/nope.json' }))).score).toBe(1);
    expect((await one(check({ kind: 'file_absent', path: 'output/report.md' }))).score).toBe(0);
  });

  it('paths that escape the workspace score 0 (.., absolute, symlinked file or folder)', async () => {
    for (const path of [
      '../outside.txt',
      'output/../../x',
      '/etc/passwd',
      'output/link.txt',
      'elsewhere/secret.txt',
    ]) {
      const exists = await one(check({ kind: 'file_exists', path }));
      expect(exists.score, path).toBe(0);
      expect(exists.detail, path).toMatch(/outside the workspace|absolute or contains \.\./);
      expect((await one(check({ kind: 'text_contains', path, pattern: 'secret' }))).score, path).toBe(0);
    }
    expect((await one(check({ kind: 'file_absent', path: 'elsewhere/missing.txt' }))).score).toBe(0);
    expect((await one(check({ kind: 'file_absent', path: '../nothing-here' }))).score).toBe(0);
  });

  it('parses json / csv', async () => {
    expect((await one(check({ kind: 'parses', path: 'output/summary.json', format: 'json' }))).score).toBe(1);
    expect((await one(check({ kind: 'parses', path: 'output/broken.json', format: 'json' }))).score).toBe(0);
    expect((await one(check({ kind: 'parses', path: 'output/people.csv', format: 'csv' }))).score).toBe(1);
    const broken = await one(check({ kind: 'parses', path: 'output/broken.csv', format: 'csv' }));
    expect(broken).toMatchObject({ score: 0, detail: expect.stringMatching(/never closed/) });
    expect((await one(check({ kind: 'parses', path: 'output', format: 'json' }))).detail).toMatch(
      /directory/,
    );
  });

  it('csv_columns (ordered or not) and json_keys', async () => {
    expect(
      (await one(check({ kind: 'csv_columns', path: 'output/people.csv', columns: ['name', 'role'] }))).score,
    ).toBe(1);
    expect(
      (await one(check({ kind: 'csv_columns', path: 'output/people.csv', columns: ['role', 'name'] }))).score,
    ).toBe(0);
    expect(
      (
        await one(
          check({
            kind: 'csv_columns',
            path: 'output/people.csv',
            columns: ['role', 'name'],
            ordered: false,
          }),
        )
      ).score,
    ).toBe(1);
    expect(
      (await one(check({ kind: 'csv_columns', path: 'output/people.csv', columns: ['name'] }))).score,
    ).toBe(0);
    expect(
      (await one(check({ kind: 'json_keys', path: 'output/summary.json', keys: ['total', 'by_role'] })))
        .score,
    ).toBe(1);
    const missing = await one(
      check({ kind: 'json_keys', path: 'output/summary.json', keys: ['total', 'top_5'] }),
    );
    expect(missing).toMatchObject({ score: 0, detail: 'missing keys ["top_5"]' });
  });

  it('json_value with RFC 6901 pointers (~0, ~1), tolerance and deep values', async () => {
    const jv = (pointer: string, expected: unknown, tolerance?: number) =>
      one(
        check({
          kind: 'json_value',
          path: 'output/summary.json',
          pointer,
          expected,
          ...(tolerance !== undefined ? { tolerance } : {}),
        }),
      );
    expect((await jv('/total', 12)).score).toBe(1);
    expect((await jv('/total', 12, 0)).score).toBe(0);
    expect((await jv('/total', 12.5)).score).toBe(0);
    expect((await jv('/a~1b/m~0n/1', 20)).score).toBe(1);
    expect((await jv('/a~1b/m~0n', [10, 20])).score).toBe(1);
    expect((await jv('/by_role', { Sponsor: 3 })).score).toBe(1);
    expect((await jv('/by_role', { Sponsor: 3, Moderator: 0 })).score).toBe(0);
    expect((await jv('/a~1b/m~0n/2', 20)).score).toBe(0);
    expect((await jv('/a~1b/m~0n/01', 20)).score).toBe(0);
    expect((await jv('/tags/0', 'x')).score).toBe(1);
    expect((await jv('/tags/0', 1)).score).toBe(0);
    expect((await jv('/a~2b', 1)).detail).toMatch(/invalid pointer/);
    expect(parsePointer('/a~01')).toEqual(['a~1']);
    expect(parsePointer('')).toEqual([]);
    expect(() => parsePointer('a')).toThrow(/start with \//);
  });

  it('rows_match: fraction of expected rows, as a multiset or in order, values trimmed', async () => {
    const rm = (expected: string[][], ordered = false) =>
      one(
        check({
          kind: 'rows_match',
          path: 'output/people.csv',
          columns: ['role', 'name'],
          expected,
          ordered,
        }),
      );
    const all = [
      ['Sponsor', 'Doe, J'],
      ['Moderator', 'Lee\nK'],
      ['Sponsor', 'Amy'],
    ];
    expect((await rm(all)).score).toBe(1);
    expect((await rm([...all].reverse())).score).toBe(1);
    expect((await rm([...all].reverse(), true)).score).toBeCloseTo(1 / 3);
    expect((await rm(all, true)).score).toBe(1);
    expect((await rm([all[0]!, ['Sponsor', 'Nobody'], all[2]!])).score).toBeCloseTo(2 / 3);
    // Duplicates count once each; extra rows in the file lower the score (no padding the answer).
    expect((await rm([all[0]!, all[0]!, all[1]!])).score).toBeCloseTo(2 / 3);
    expect((await rm([all[0]!])).score).toBeCloseTo(1 / 3);
    const missingCol = await one(
      check({ kind: 'rows_match', path: 'output/people.csv', columns: ['email'], expected: [['x']] }),
    );
    expect(missingCol).toMatchObject({ score: 0, detail: 'missing columns ["email"]' });
  });

  it('text_contains: literal, regex, ignoreCase, absent', async () => {
    const tc = (c: Record<string, unknown>) =>
      one(check({ kind: 'text_contains', path: 'output/report.md', ...c }));
    expect((await tc({ pattern: 'Total is 12' })).score).toBe(1);
    expect((await tc({ pattern: 'total is 12' })).score).toBe(0);
    expect((await tc({ pattern: 'total is 12', ignoreCase: true })).score).toBe(1);
    expect((await tc({ pattern: 'Total is \\d+\\.', regex: true })).score).toBe(1);
    expect((await tc({ pattern: '^all good', regex: true, ignoreCase: true })).score).toBe(0);
    expect((await tc({ pattern: 'error', absent: true })).score).toBe(1);
    expect((await tc({ pattern: 'good', absent: true })).score).toBe(0);
    expect((await tc({ pattern: '(', regex: true })).detail).toMatch(/invalid regex/);
  });

  it('word_count', async () => {
    const wc = (c: Record<string, unknown>) =>
      one(check({ kind: 'word_count', path: 'output/report.md', ...c }));
    expect((await wc({ min: 7, max: 7 })).score).toBe(1);
    expect((await wc({ min: 8 })).score).toBe(0);
    expect((await wc({ max: 6 })).score).toBe(0);
  });

  it('command: exit code compared, run in the workspace mount (sandbox stand-in)', async () => {
    const calls: { command: string; cwd?: string; mountDir: string }[] = [];
    const fake: SandboxRunner = async (options, command, run) => {
      calls.push({ command, cwd: run?.cwd, mountDir: options.mountDir });
      return runResult({ exitCode: command.includes('fail') ? 1 : 0 });
    };
    const checks = [
      check({ kind: 'command', command: 'test -f output/report.md' }),
      { ...check({ kind: 'command', command: 'fail' }), name: 'd' },
      { ...check({ kind: 'command', command: 'fail', exitCode: 1 }), name: 'e' },
    ];
    const result = await runChecks(checks, ws, { mountDir: '/work', runInSandbox: fake });
    expect(result.subscores).toEqual({ c: 1, d: 0, e: 1 });
    expect(calls[0]).toEqual({ command: 'test -f output/report.md', cwd: '/work', mountDir: '/work' });
  });

  it('the code score is the mean; repeated names are kept apart', async () => {
    const checks = [
      check({ kind: 'file_exists', path: 'output/summary.json' }),
      check({ kind: 'file_exists', path: 'output/nope' }),
      { ...check({ kind: 'file_exists', path: 'output/report.md' }), name: 'other' },
    ];
    const result = await runChecks(checks, ws);
    expect(result.subscores).toEqual({ c: 1, 'c#2': 0, other: 1 });
    expect(result.score).toBeCloseTo(2 / 3);
  });
});

describe('LLM judge against the sim engine (real HTTP)', () => {
  const sims: RunningSimServer[] = [];
  afterAll(async () => {
    await Promise.all(sims.map((s) => s.close()));
  });
  const sim = async (answers: string[]) => {
    const s = await startSimServer({
      port: 0,
      policy: 'scripted',
      script: answers.map((answer) => ({ answer })),
    });
    sims.push(s);
    return { baseURL: `${s.url}/v1`, apiKey: 'sk-test', model: s.model };
  };
  const rubricTask = (over: Partial<GymTaskInput> = {}) =>
    GymTask.parse({
      id: 'judged',
      prompt: 'Write a short report to output/report.md',
      files: [{ path: 'input/data.csv', content: 'a\n1\n' }],
      verifier: {
        kind: 'checks',
        checks: [{ kind: 'file_exists', name: 'report', path: 'output/report.md' }],
      },
      rubric: [
        { name: 'accuracy', description: 'numbers match the input', weight: 3 },
        { name: 'clarity', description: 'reads clearly' },
      ],
      ...over,
    });
  const workspace = async (task: GymTask) => {
    const ws = await workspaceFor(task, join(tmp, `judge${n++}`));
    await mkdir(join(ws, 'output'));
    await writeFile(join(ws, 'output', 'report.md'), 'The total is 1.\n');
    return ws;
  };

  it('snaps bands and weights the rules', async () => {
    const task = rubricTask();
    const verdict = await judgeRubric(
      task,
      await workspace(task),
      await sim(['{"accuracy": 0.8, "clarity": 0.5}']),
    );
    expect(verdict).toMatchObject({
      judgeFailed: false,
      rules: { accuracy: 0.75, clarity: 0.5 },
      reason: null,
    });
    expect(verdict.rubric).toBeCloseTo((3 * 0.75 + 0.5) / 4);
  });

  it('reads a fenced reply with prose; a rule left out scores 0', async () => {
    const task = rubricTask();
    const reply = 'Here is my grading:\n```json\n{"accuracy": 1}\n```';
    const verdict = await judgeRubric(task, await workspace(task), await sim([reply]));
    expect(verdict.rules).toEqual({ accuracy: 1, clarity: 0 });
    expect(verdict.rubric).toBeCloseTo(0.75);
    expect(verdict.reason).toMatch(/left out clarity/);
  });

  it('asks once more after a reply that is not JSON, then gives up with judgeFailed', async () => {
    const task = rubricTask();
    const retried = await judgeRubric(
      task,
      await workspace(task),
      await sim(['I think it is good.', '{"accuracy": 1, "clarity": 1}']),
    );
    expect(retried).toMatchObject({ judgeFailed: false, rubric: 1 });
    expect(retried.replies).toHaveLength(2);
    const failed = await judgeRubric(
      task,
      await workspace(task),
      await sim(['no', 'still no', '{"accuracy": 1}']),
    );
    expect(failed).toMatchObject({ judgeFailed: true, rubric: null });
    expect(failed.replies).toEqual(['no', 'still no']);
  });

  it('a judge that cannot be reached fails the judge, not the episode', async () => {
    const task = rubricTask();
    const verdict = await judgeRubric(task, await workspace(task), {
      baseURL: 'http://127.0.0.1:9/v1',
      apiKey: 'x',
      model: 'm',
      maxRetries: 0,
      timeoutMs: 2_000,
    });
    expect(verdict).toMatchObject({ judgeFailed: true, rubric: null });
    expect(verdict.reason).toMatch(/request failed/);
  });

  it('verify combines code and rubric with the task weights (0.7 / 0.3 by default)', async () => {
    const task = rubricTask();
    const ws = await workspace(task);
    const judge = await sim(['{"accuracy": 1, "clarity": 0}']);
    const result = await verify(task, ws, { judge });
    expect(result).toMatchObject({ code: 1, rubric: 0.75, verifierFailed: false, judgeFailed: false });
    expect(result.score).toBeCloseTo(0.7 * 1 + 0.3 * 0.75);
    expect(result.subscores).toEqual({ report: 1, 'rubric:accuracy': 1, 'rubric:clarity': 0 });
    const weighted = await verify(rubricTask({ weights: { code: 1, rubric: 1 } }), ws, {
      judge: await sim(['{"accuracy": 0, "clarity": 0}']),
    });
    expect(weighted.score).toBeCloseTo(0.5);
    // No judge configured: the code score alone.
    expect(await verify(task, ws)).toMatchObject({ score: 1, rubric: null });
    // The judge fails: code alone, and it says so.
    const failed = await verify(task, ws, { judge: await sim(['x', 'y']) });
    expect(failed).toMatchObject({
      score: 1,
      rubric: null,
      judgeFailed: true,
      reason: expect.stringMatching(/^judge:/),
    });
  });

  it('shows the judge the task, the rules and only the files the agent made or changed, bounded', async () => {
    const task = rubricTask();
    const ws = await workspace(task);
    await writeFile(join(ws, 'output', 'big.txt'), 'x'.repeat(50_000));
    await writeFile(join(ws, 'output', 'blob.bin'), Buffer.from([0, 1, 2, 255]));
    await writeFile(join(ws, 'output', 'fenced.md'), 'a ``` fence\n');
    const listing = await listOutputFiles(task, ws, { maxFileChars: 1000, maxListingChars: 1500 });
    expect(listing).toContain('### output/report.md (16 bytes)');
    expect(listing).toContain('### output/blob.bin (4 bytes)\n(binary, not shown)');
    expect(listing).toContain('… (truncated)');
    expect(listing).toContain('````\na ``` fence');
    expect(listing).not.toContain('input/data.csv');
    expect(listing.length).toBeLessThan(2_500);
    await writeFile(join(ws, 'input', 'data.csv'), 'a\n2\n');
    expect(await listOutputFiles(task, ws)).toContain('### input/data.csv (4 bytes, changed input file)');
    const [system, user] = buildJudgeMessages(task, listing);
    expect(system!.content).toMatch(/0, 0.25, 0.5, 0.75, 1/);
    expect(user!.content).toContain(task.prompt);
    expect(user!.content).toContain('"accuracy" (weight 3): numbers match the input');
  });

  it('parses replies robustly', () => {
    const rules = rubricTask().rubric;
    expect(
      parseJudgeReply('<think>{"accuracy": 0}</think>{"accuracy": "0.6", "Clarity ": 2}', rules),
    ).toEqual({
      bands: { accuracy: 0.5, clarity: 1 },
      missing: [],
    });
    expect(parseJudgeReply('[1, 2]', rules)).toHaveProperty('error');
    expect(parseJudgeReply('{"accuracy": }', rules)).toHaveProperty('error');
    expect([0.1, 0.13, 0.37, 0.9, -3, 7].map(snapToBand)).toEqual([0, 0.25, 0.25, 1, 0, 1]);
  });
});

describe('in the real sandbox', () => {
  it.skipIf(!sandboxReady)(
    'all 40 sample verifiers on the untouched workspace: 39 score exactly 0, task_1550 about 0.0175',
    async () => {
      const tasks = await loadTasks(SAMPLE);
      expect(tasks).toHaveLength(40);
      const scores: Record<string, number> = {};
      const failures: string[] = [];
      let next = 0;
      const worker = async () => {
        while (next < tasks.length) {
          const task = tasks[next++]!;
          const ws = await workspaceFor(task, join(tmp, 'samples', task.id));
          const result = await verify(task, ws, {});
          scores[task.id] = result.score;
          if (result.verifierFailed) failures.push(`${task.id}: ${result.reason}`);
          expect(await readdir(ws)).not.toContain('reward');
        }
      };
      await Promise.all([worker(), worker(), worker()]);
      expect(failures).toEqual([]);
      const nonZero = Object.entries(scores).filter(([, s]) => s !== 0);
      expect(nonZero.map(([id]) => id)).toEqual(['task_1550']);
      expect(scores.task_1550).toBeCloseTo(0.0175, 3);
    },
    180_000,
  );

  it.skipIf(!sandboxReady)(
    'a verifier that exits non-zero, prints words or runs too long scores 0 with verifierFailed; NaN scores 0',
    async () => {
      const cases: [string, RegExp, number?][] = [
        ['echo 0.9\nexit 3\n', /exited with code 3/],
        ['echo score: 0.9\n', /not a finite number: "score: 0.9"/],
        ['sleep 30\necho 1\n', /timed out/, 1_500],
      ];
      for (const [script, reason, timeoutMs] of cases) {
        const task = scriptTask(script);
        if (timeoutMs && task.verifier.kind === 'script') task.verifier.timeoutMs = timeoutMs;
        const result = await verify(task, await freshDir(), {});
        expect(result, script).toMatchObject({ score: 0, code: 0, verifierFailed: true });
        expect(result.reason, script).toMatch(reason);
      }
      // ClawGym's set_reward turns a non-finite reward into 0; it is the agent's score, not masked.
      const nan = await verify(scriptTask('python3 -c "print(float(\'nan\'))"\n'), await freshDir(), {});
      expect(nan).toMatchObject({ score: 0, code: 0, verifierFailed: false });
      const ok = await verify(scriptTask('echo progress\necho 0.8\n'), await freshDir(), {});
      expect(ok).toMatchObject({ score: 0.8, verifierFailed: false, reason: null });
    },
  );

  it.skipIf(!sandboxReady)(
    'the verifier sees the workspace at mountDir and its reward files, without network',
    async () => {
      const task = scriptTask(
        [
          'cd /root/.openclaw/workspace',
          'test -f reward/helper.txt || { echo 0; exit 0; }',
          'test -f output/answer.txt || { echo 0; exit 0; }',
          // No network: a connection attempt must fail.
          'if python3 -c "import socket; socket.create_connection((\'1.1.1.1\', 53), timeout=2)" 2>/dev/null; then echo 0.1; else echo 1; fi',
          '',
        ].join('\n'),
      );
      const ws = await freshDir();
      await mkdir(join(ws, 'output'));
      await writeFile(join(ws, 'output', 'answer.txt'), '42');
      expect(await verify(task, ws, {})).toMatchObject({ score: 1, verifierFailed: false });
      expect((await readdir(ws)).sort()).toEqual(['output']);
    },
  );

  it.skipIf(!sandboxReady)('command checks run in the sandbox, in the workspace', async () => {
    const task = GymTask.parse({
      id: 'cmd',
      prompt: 'p',
      verifier: {
        kind: 'checks',
        checks: [
          { kind: 'command', name: 'has_answer', command: 'grep -q 42 output/answer.txt' },
          { kind: 'command', name: 'wrong', command: 'grep -q 43 output/answer.txt' },
          { kind: 'command', name: 'exit2', command: 'exit 2', exitCode: 2 },
        ],
      },
    });
    const ws = await freshDir();
    await mkdir(join(ws, 'output'));
    await writeFile(join(ws, 'output', 'answer.txt'), '42');
    const result = await verify(task, ws, {});
    expect(result.subscores).toEqual({ has_answer: 1, wrong: 0, exit2: 1 });
    expect(result.code).toBeCloseTo(2 / 3);
  });
});

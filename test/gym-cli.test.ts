import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { CLAWGYM_SAMPLE } from './support/clawgym-sample.js';
import { runCli, startServerProcess } from './support/server-process.js';

/* The gym's commands as real processes: synth → validate → bench, and validate on ClawGym tasks. */

describe.skipIf(!checkSandbox().ok)('stepwise gym / bench CLI', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-gym-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('synthesizes tasks that pass validate, then benchmarks the built-in agent on them', async () => {
    const tasks = join(dir, 'tasks');
    const synth = await runCli(['gym', 'synth', '--n', '6', '--seed', '4', '--out', tasks], {}, 60_000);
    expect(synth.code, synth.stderr).toBe(0);
    // Every command that reads tasks takes the folder `gym synth --out` wrote.
    const validate = await runCli(['gym', 'validate', tasks, '--json'], {}, 60_000);
    expect(validate.code, validate.stderr).toBe(0);
    const gate = JSON.parse(validate.stdout) as { tasks: { ok: boolean; reference_score: number }[] };
    expect(gate.tasks).toHaveLength(6);
    expect(gate.tasks.every((t) => t.ok && t.reference_score === 1)).toBe(true);

    const out = join(dir, 'bench');
    const bench = await runCli(
      [
        'bench',
        '--tasks',
        tasks,
        '--samples',
        '2',
        '--concurrency',
        '4',
        '--out',
        out,
        '--give-up-rate',
        '0',
      ],
      {},
      120_000,
    );
    expect(bench.code, bench.stderr).toBe(0);
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8'));
    expect(report.overall).toMatchObject({ mean: 1, coverage: 1, pass_at_k: 1, samples: 12, tasks: 6 });
    expect(report.manifest).toMatchObject({ agent: 'builtin', samples_per_task: 2, tasks: 6 });
    expect(Object.keys(report.categories).length).toBe(6);
    expect(existsSync(join(out, 'report.html')) && existsSync(join(out, 'report.md'))).toBe(true);
    expect(bench.stdout).toMatch(/\| \*\*overall\*\* \| 6 \| 12 \| 1\.000/);
    // A re-run resumes: nothing left to run.
    const again = await runCli(
      ['bench', '--tasks', join(tasks, 'tasks.jsonl'), '--samples', '2', '--out', out, '--give-up-rate', '0'],
      {},
      60_000,
    );
    expect(again.stdout).toMatch(/samples: 12 \(12 already done\)/);
    // Its own bound is the sum of its four commands' bounds, not vitest's default per test.
  }, 300_000);

  it('gym run and serve --sim-tasks read the folder gym synth wrote', async () => {
    const tasks = join(dir, 'run-tasks');
    const synth = await runCli(['gym', 'synth', '--n', '2', '--seed', '9', '--out', tasks], {}, 60_000);
    expect(synth.code, synth.stderr).toBe(0);
    const out = join(dir, 'run');
    const run = await runCli(
      ['gym', 'run', '--tasks', tasks, '--samples', '1', '--out', out, '--give-up-rate', '0'],
      {},
      120_000,
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/samples: 2 \(0 already done\), mean score 1\.000/);

    const server = await startServerProcess(join(dir, 'serve.db'), [
      '--sim-policy',
      'reference',
      '--sim-tasks',
      tasks,
    ]);
    try {
      expect((await fetch(`${server.url}/ready`)).status).toBe(200);
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
    }
    // A folder holding both forms is two task sets: refused, naming both.
    const both = join(dir, 'both');
    const folders = await runCli(
      ['gym', 'synth', '--n', '1', '--out', both, '--format', 'folders'],
      {},
      60_000,
    );
    expect(folders.code, folders.stderr).toBe(0);
    copyFileSync(join(tasks, 'tasks.jsonl'), join(both, 'tasks.jsonl'));
    const refused = await runCli(['gym', 'validate', both], {}, 60_000);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/both tasks\.jsonl and 1 task folder/);
  });

  it('validate reports the flawed ClawGym task and exits non-zero', async () => {
    const result = await runCli(['gym', 'validate', join(CLAWGYM_SAMPLE, 'task_1550'), '--json'], {}, 60_000);
    expect(result.code).toBe(1);
    const [row] = (
      JSON.parse(result.stdout) as {
        tasks: { task_id: string; ok: boolean; noop_score: number; problems: string[] }[];
      }
    ).tasks;
    expect(row).toMatchObject({ task_id: 'task_1550', ok: false });
    expect(row!.noop_score).toBeCloseTo(0.0175, 3);
    expect(row!.problems.join(' ')).toMatch(/no-op/);
    const good = await runCli(['gym', 'validate', join(CLAWGYM_SAMPLE, 'task_0000')], {}, 60_000);
    expect(good.code, good.stdout + good.stderr).toBe(0);
    expect(good.stdout).toMatch(/1 of 1 tasks pass the gate/);
  });

  // ClawGym sample task_0250's checker gives 0.125 to empty files at the paths its prompt names: the
  // scaffold probe's finding is a warning with a summary line, and the task still passes the gate.
  it('validate reports scaffold-probe findings as warnings, not problems, with a summary line', async () => {
    const json = await runCli(['gym', 'validate', join(CLAWGYM_SAMPLE, 'task_0250'), '--json'], {}, 60_000);
    expect(json.code, json.stderr).toBe(0);
    const out = JSON.parse(json.stdout) as {
      tasks: {
        task_id: string;
        ok: boolean;
        scaffold_score: number;
        problems: string[];
        warnings: string[];
      }[];
      summary: Record<string, number>;
    };
    expect(out.tasks[0]).toMatchObject({ task_id: 'task_0250', ok: true, problems: [] });
    expect(out.tasks[0]!.scaffold_score).toBe(0.125);
    expect(out.tasks[0]!.warnings.join(' ')).toMatch(/^scaffold \(\d+ placeholders\): scored 0\.125/);
    expect(out.summary).toEqual({ tasks: 1, passed: 1, failed: 0, scaffold_warnings: 1 });
    const text = await runCli(['gym', 'validate', join(CLAWGYM_SAMPLE, 'task_0250')], {}, 60_000);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/task_0250: warning: scaffold/);
    expect(text.stdout).toMatch(/1 of 1 tasks pass the gate; 0 fail; 1 with scaffold warnings/);
  });

  it('names a bad flag and changes nothing', async () => {
    const out = join(dir, 'bad');
    const result = await runCli(['gym', 'run', '--tasks', 'x.jsonl', '--samples', '0', '--out', out]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/--samples/);
    expect(existsSync(out)).toBe(false);
  });
});

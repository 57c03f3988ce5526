/**
 * The commands that start their own server (`gym run`, `demo`; `train` in train-loop.test.ts) with
 * `--db postgres://…`: the run's data lands in the schema named, nothing in a SQLite file beside it,
 * and `rewards reverify` reads the evidence back from there. A store that holds another run's
 * trajectories is refused before `demo` starts, and `--db` beside `--gateway` is refused.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DataPool } from '../packages/core/src/pool/data-pool.js';
import { openPostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import { verifierVersion } from '../packages/gym/src/evidence.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { writeTasksJsonl } from '../packages/gym/src/tasks/jsonl.js';
import { runDemo } from '../src/cli/demo.js';
import { okTask } from './support/gym-tasks.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { killAllServerProcesses, runCli } from './support/server-process.js';

/** What a schema holds: its trajectories' task ids and rewards, and how many kept evidence. */
async function stored(
  schema: string,
): Promise<{ tasks: string[]; rewards: (number | null)[]; evidence: number }> {
  const pool = new DataPool({ store: await openPostgresStore({ url: pgUrl!, schema, existing: true }) });
  try {
    const { items } = await pool.listTrajectories({ limit: 1000, offset: 0 });
    const evidence = await Promise.all(items.map((t) => pool.getEvidence(t.id)));
    return {
      tasks: items.map((t) => String(t.metadata.task_id)).sort(),
      rewards: items.map((t) => t.reward),
      evidence: evidence.filter((e) => e !== null).length,
    };
  } finally {
    await pool.close();
  }
}

describe.skipIf(!pgUrl || !checkSandbox().ok)(
  'commands with an embedded server on PostgreSQL (--db postgres://…)',
  () => {
    let dir: string;
    const gymSchema = freshSchema('stepwise_gymrun');
    const demoSchema = freshSchema('stepwise_demo');
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), 'stepwise-embedded-pg-'));
    });
    afterAll(async () => {
      await killAllServerProcesses();
      await dropSchema(gymSchema);
      await dropSchema(demoSchema);
      rmSync(dir, { recursive: true, force: true });
    });

    it('gym run stores its samples and their evidence in the schema; rewards reverify reads them from there', async () => {
      const v1 = join(dir, 'v1.jsonl');
      await writeTasksJsonl(v1, [okTask('alpha', 'ok'), okTask('gamma', 'ok')]);
      const out = join(dir, 'gym');
      const run = await runCli(
        [
          'gym',
          'run',
          '--tasks',
          v1,
          '--samples',
          '2',
          '--give-up-rate',
          '0',
          '--error-rate',
          '0',
          '--out',
          out,
          '--db',
          pgUrl!,
          '--pg-schema',
          gymSchema,
        ],
        {},
        120_000,
      );
      expect(run.code, run.stderr).toBe(0);
      expect(existsSync(join(out, 'stepwise.db'))).toBe(false);
      expect(await stored(gymSchema)).toEqual({
        tasks: ['alpha', 'alpha', 'gamma', 'gamma'],
        rewards: [1, 1, 1, 1],
        evidence: 4,
      });

      // A changed verifier for alpha: the dry run reads the kept workspaces from PostgreSQL.
      const v2 = join(dir, 'v2.jsonl');
      await writeTasksJsonl(v2, [okTask('alpha', 'okay'), okTask('gamma', 'ok')]);
      const dry = await runCli(
        ['rewards', 'reverify', '--db', pgUrl!, '--pg-schema', gymSchema, '--tasks', v2, '--dry-run'],
        {},
        120_000,
      );
      expect(dry.code, dry.stderr).toBe(0);
      expect(JSON.parse(dry.stdout)).toMatchObject({ dry_run: true, rescored: 4, down: 2, unchanged: 2 });
      expect(JSON.parse(dry.stdout).version).not.toBe(
        verifierVersion([okTask('alpha', 'ok'), okTask('gamma', 'ok')]),
      );

      // --db is the in-process server's store: beside --gateway it names nothing, and is refused.
      const both = await runCli(
        [
          'gym',
          'run',
          '--tasks',
          v1,
          '--out',
          join(dir, 'both'),
          '--gateway',
          'http://127.0.0.1:9',
          '--db',
          pgUrl!,
        ],
        {},
        60_000,
      );
      expect(both.code).not.toBe(0);
      expect(both.stderr).toContain("--db is the in-process server's store");
    }, 300_000);

    it("demo runs on the schema; `stepwise demo` there again is refused before it starts (the first run's data unchanged)", async () => {
      const lines: string[] = [];
      const out = join(dir, 'demo');
      const result = await runDemo({
        out,
        db: pgUrl!,
        pgSchema: demoSchema,
        port: 0,
        tasks: 2,
        rollouts: 2,
        concurrency: 4,
        batchSize: 1,
        seed: 3,
        errorRate: 0.5,
        giveUpRate: 0,
        cleanerTasks: 0,
        guideTasks: 0,
        print: (line) => lines.push(line),
      });
      expect(result.samples).toBe(4);
      expect(result.consumedGroups).toBe(2);
      expect(lines.join('\n')).toMatch(/store: PostgreSQL at postgres:\/\/.*\(schema stepwise_demo/);
      expect(existsSync(join(out, 'stepwise.db'))).toBe(false);
      const before = await stored(demoSchema);
      expect(before.tasks).toHaveLength(4);

      const again = await runCli(
        ['demo', '--out', join(dir, 'demo-again'), '--db', pgUrl!, '--pg-schema', demoSchema],
        {},
        120_000,
      );
      expect(again.code).toBe(1);
      expect(again.stderr).toContain("already holds another run's trajectories");
      expect(again.stdout).toBe('');
      expect(existsSync(join(dir, 'demo-again', 'stepwise.db'))).toBe(false);
      expect(await stored(demoSchema)).toEqual(before);
    }, 300_000);
  },
);

/**
 * `stepwise export`, `import` and `purify` with `--db postgres://…`: the same fixture loaded into
 * PostgreSQL (through `stepwise import`) gives byte-identical exports and the same purify summary
 * as the SQLite file it came from. Each run gets a schema of its own.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildFixture } from './export-fixture.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { killAllServerProcesses, runCli } from './support/server-process.js';

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

describe.skipIf(!pgUrl)('store commands on PostgreSQL (--db postgres://…)', () => {
  let dir: string;
  let db: string;
  const schema = freshSchema('stepwise_cli');
  const pg = () => ['--db', pgUrl!, '--pg-schema', schema];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-store-cli-pg-'));
    db = join(dir, 'pool.db');
    await (await buildFixture(db)).close();
    const out = join(dir, 'seed');
    expect((await runCli(['export', 'trajectories', '--db', db, '--out', out], {}, 60_000)).code).toBe(0);
    const imported = await runCli(['import', join(out, 'trajectories.jsonl'), ...pg()], {}, 60_000);
    expect(imported.stderr).toBe('');
    expect(imported.stdout).toContain('imported 12 trajectories (20 steps, 4 labels) into postgres://');
    expect(imported.stdout).toContain(`(schema ${schema})`);
  }, 120_000);

  afterAll(async () => {
    await killAllServerProcesses();
    await dropSchema(schema);
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [kind, file, extra] of [
    ['trajectories', 'trajectories.jsonl', []],
    ['sft', 'sft.jsonl', []],
    ['dpo', 'dpo.jsonl', []],
    ['rl', 'rl.parquet', ['--channel', 'train', '--advantage', 'rloo']],
  ] as const) {
    it(`export ${kind} writes the same file from PostgreSQL as from SQLite`, async () => {
      const fromSqlite = await runCli(
        ['export', kind, ...extra, '--db', db, '--out', join(dir, `sqlite-${kind}`)],
        {},
        60_000,
      );
      const fromPg = await runCli(
        ['export', kind, ...extra, ...pg(), '--out', join(dir, `pg-${kind}`)],
        {},
        60_000,
      );
      expect(fromPg.stderr).toBe('');
      expect(fromPg.code).toBe(0);
      expect(fromPg.stdout.replaceAll(`pg-${kind}`, 'OUT')).toBe(
        fromSqlite.stdout.replaceAll(`sqlite-${kind}`, 'OUT'),
      );
      expect(sha256(join(dir, `pg-${kind}`, file))).toBe(sha256(join(dir, `sqlite-${kind}`, file)));
      // The same manifest but for its id, its time and its source.
      const manifest = (side: string) => {
        const read = JSON.parse(readFileSync(join(dir, `${side}-${kind}`, 'manifest.json'), 'utf8'));
        return { ...read, id: null, created_at: null, source: read.source.store };
      };
      expect(manifest('pg')).toEqual({ ...manifest('sqlite'), source: 'postgres' });
    }, 120_000);
  }

  it('purify prints the same summary and derives the same trajectories', async () => {
    const args = ['--details', '--into', 'purified'];
    const fromSqlite = await runCli(['purify', '--db', db, ...args], {}, 60_000);
    const fromPg = await runCli(['purify', ...pg(), ...args], {}, 60_000);
    expect(fromPg.code, fromPg.stderr).toBe(0);
    expect(fromSqlite.code, fromSqlite.stderr).toBe(0);
    expect(JSON.parse(fromPg.stdout)).toEqual(JSON.parse(fromSqlite.stdout));
    const out = (side: string) => join(dir, `purified-${side}`);
    await runCli(
      ['export', 'trajectories', '--channel', 'purified', '--db', db, '--out', out('sqlite')],
      {},
      60_000,
    );
    await runCli(
      ['export', 'trajectories', '--channel', 'purified', ...pg(), '--out', out('pg')],
      {},
      60_000,
    );
    // The derived trajectories are the same but for when each was written.
    const derived = (side: string) =>
      readFileSync(join(out(side), 'trajectories.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((line) =>
          JSON.stringify(JSON.parse(line), (key, value) =>
            key === 'created_at' || key === 'completed_at' ? undefined : value,
          ),
        );
    expect(derived('pg')).toHaveLength(8);
    expect(derived('pg')).toEqual(derived('sqlite'));
  }, 180_000);

  it('a bad PostgreSQL URL is one error line, nothing written', async () => {
    const result = await runCli(
      ['export', 'sft', '--db', 'postgres://nobody@127.0.0.1:1/none', '--out', join(dir, 'never')],
      {},
      60_000,
    );
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^stepwise: .*postgres:\/\/nobody@127\.0\.0\.1:1\/none.*ECONNREFUSED/m);
  }, 60_000);

  it('a mistyped --pg-schema is refused, naming the schemas that hold a store, and none is created', async () => {
    const typo = `${schema}_typo`;
    for (const args of [
      ['export', 'sft', '--db', pgUrl!, '--pg-schema', typo, '--out', join(dir, 'typo')],
      ['purify', '--db', pgUrl!, '--pg-schema', typo],
    ]) {
      const result = await runCli(args, {}, 60_000);
      expect(result.code, args.join(' ')).toBe(1);
      expect(result.stderr).toContain(`--pg-schema: the schema ${typo} of postgres://`);
      expect(result.stderr).toMatch(new RegExp(`schemas that do: .*\\b${schema}\\b`));
    }
    const pgClient = new (await import('pg')).default.Client({ connectionString: pgUrl! });
    await pgClient.connect();
    try {
      const { rows } = await pgClient.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [typo]);
      expect(rows).toHaveLength(0);
    } finally {
      await pgClient.end();
    }
  }, 120_000);
});

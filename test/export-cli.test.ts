/**
 * `stepwise export` and `stepwise import` as people run them (child processes over a real SQLite
 * file): help, flag errors that name the flag and write nothing, progress lines when stdout is not
 * a terminal, and the trajectories round trip through a fresh database.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildFixture } from './export-fixture.js';
import { killAllServerProcesses, runCli } from './support/server-process.js';

let dir: string;
let db: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-export-cli-'));
  db = join(dir, 'pool.db');
  const fixture = await buildFixture(db);
  await fixture.close();
});
afterAll(async () => {
  await killAllServerProcesses();
  rmSync(dir, { recursive: true, force: true });
});

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

describe('stepwise export / import --help', () => {
  it('documents every flag', async () => {
    const help = await runCli(['export', '--help']);
    expect(help.code).toBe(0);
    for (const flag of [
      '<kind>',
      '--db',
      '--out',
      '--channel',
      '--status',
      '--min-reward',
      '--max-reward',
      '--trainable',
      '--quality',
      '--tag',
      '--group',
      '--min-margin',
      '--advantage',
      '--force',
    ]) {
      expect(help.stdout).toContain(flag);
    }
    const importHelp = await runCli(['import', '--help']);
    expect(importHelp.code).toBe(0);
    expect(importHelp.stdout).toMatch(/<file>[\s\S]*--db/);
  });
});

describe('bad flags name the flag and change nothing', () => {
  const cases: [string, string[], RegExp][] = [
    ['a number that is not one', ['sft', '--min-reward', 'abc'], /--min-reward/],
    ['an option of another kind', ['sft', '--advantage', 'rloo'], /--advantage: applies to kind rl only/],
    [
      'an inverted reward range',
      ['rl', '--min-reward', '2', '--max-reward', '1'],
      /--max-reward: must be >= min_reward/,
    ],
    ['an unknown kind', ['csv'], /<kind>/],
    ['an unknown status', ['sft', '--status', 'done'], /--status/],
  ];
  for (const [what, args, message] of cases) {
    it(`rejects ${what}`, async () => {
      const out = join(dir, `bad-${args.join('-')}`);
      const result = await runCli(['export', ...args, '--db', db, '--out', out]);
      expect(result.code).not.toBe(0);
      expect(result.stderr).toMatch(message);
      expect(existsSync(out)).toBe(false);
    });
  }

  it('never creates the database it was asked to read', async () => {
    const missing = join(dir, 'missing.db');
    const result = await runCli(['export', 'sft', '--db', missing, '--out', join(dir, 'never')]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`--db: ${missing} does not exist`);
    expect(existsSync(missing)).toBe(false);
    expect(existsSync(join(dir, 'never'))).toBe(false);
  });

  it('imports nothing from a bad file, and creates no database for it', async () => {
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, '{"trajectory_uid": "t1"}\n');
    const target = join(dir, 'target.db');
    const result = await runCli(['import', bad, '--db', target]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^stepwise: line 1: prompt_uid: /m);
    expect(existsSync(target)).toBe(false);
  });
});

describe('stepwise export and import', () => {
  it('round-trips every trajectory through a fresh database, with progress lines', async () => {
    const first = join(dir, 'first');
    const exported = await runCli(['export', 'trajectories', '--db', db, '--out', first]);
    expect(exported.stderr).toBe('');
    expect(exported.code).toBe(0);
    expect(exported.stdout).toContain('export trajectories: 0/12 trajectories');
    expect(exported.stdout).toContain('export trajectories: 12/12 trajectories');
    expect(exported.stdout).toContain(
      `exported 12 lines from 12 trajectories (20 steps) to ${join(first, 'trajectories.jsonl')}`,
    );
    const manifest = JSON.parse(readFileSync(join(first, 'manifest.json'), 'utf8'));
    expect(manifest.files[0].sha256).toBe(sha256(join(first, 'trajectories.jsonl')));

    const copy = join(dir, 'copy.db');
    const imported = await runCli(['import', join(first, 'trajectories.jsonl'), '--db', copy]);
    expect(imported.code).toBe(0);
    expect(imported.stdout).toContain(
      `imported 12 trajectories (20 steps, 4 labels) into ${copy}; sha256 matches the manifest`,
    );
    const second = join(dir, 'second');
    const again = await runCli(['export', 'trajectories', '--db', copy, '--out', second]);
    expect(again.code).toBe(0);
    expect(sha256(join(second, 'trajectories.jsonl'))).toBe(manifest.files[0].sha256);

    // Importing the same file again would duplicate every trajectory: refused, nothing written.
    const twice = await runCli(['import', join(first, 'trajectories.jsonl'), '--db', copy]);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toContain('line 1: trajectory a1 already exists in the store');
  });

  it('writes rl.parquet and refuses to overwrite it without --force', async () => {
    const out = join(dir, 'rl');
    const args = ['export', 'rl', '--db', db, '--out', out, '--channel', 'train', '--advantage', 'rloo'];
    const first = await runCli(args);
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/exported 15 rows from 9 trajectories/);
    const manifest = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8'));
    expect(manifest).toMatchObject({
      kind: 'rl',
      options: { advantage: 'rloo' },
      filters: { channel: 'train' },
    });
    const again = await runCli(args);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`--out: ${join(out, 'rl.parquet')} exists`);
    expect(JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')).id).toBe(manifest.id);
    const forced = await runCli([...args, '--force']);
    expect(forced.code).toBe(0);
    expect(JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')).id).not.toBe(manifest.id);
  });
});

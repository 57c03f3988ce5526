import { createHash } from 'node:crypto';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { readlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { newTrajectoryId } from '../packages/core/src/domain/ids.js';
import { LeaseRequest } from '../packages/core/src/domain/lease.js';
import { type PoolOps, poolOps } from '../packages/core/src/pool/core.js';
import { DataPool } from '../packages/core/src/pool/data-pool.js';
import { WorkerPool } from '../packages/core/src/pool/worker-pool.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { openPostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import { captureWorkspace, materializeWorkspace, verifierVersion } from '../packages/gym/src/evidence.js';
import { reverify } from '../packages/gym/src/reverify.js';
import { runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { writeTasksJsonl } from '../packages/gym/src/tasks/jsonl.js';
import { referenceTasks } from '../packages/gym/src/tasks/reference.js';
import { GymTask } from '../packages/gym/src/tasks/schema.js';
import { okTask } from './support/gym-tasks.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { runCli } from './support/server-process.js';

/*
 * Re-verification (issue 42, item 4) on every store: what a verifier read is kept once,
 * content-addressed; `reverify` scores it again under a new verifier version without inference,
 * writes the new scores beside the old and changes only what the new verifier scores differently;
 * a channel pinned to a version serves that version's scores and waits for them.
 */

const sandbox = checkSandbox();
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
const tempDir = (prefix: string) => {
  const dir = mkdtempSync(join(tmpdir(), `stepwise-reverify-${prefix}-`));
  dirs.push(dir);
  return dir;
};

interface Harness {
  pool: DataPool;
  /** The operations under the pool (previews are not a DataPool method). */
  ops: PoolOps;
  cleanup(): Promise<void>;
}

const backends: [string, () => Promise<Harness>][] = [
  [
    'SQLite',
    async () => {
      const dir = tempDir('db');
      const ops = poolOps(await openSqliteStore({ path: join(dir, 'pool.db') }));
      const pool = new DataPool({ store: ops });
      return { pool, ops, cleanup: () => pool.close() };
    },
  ],
  [
    'SQLite on its worker thread',
    async () => {
      const dir = tempDir('db');
      const ops = await WorkerPool.open({ path: join(dir, 'pool.db') });
      const pool = new DataPool({ store: ops });
      return { pool, ops, cleanup: () => pool.close() };
    },
  ],
];
if (pgUrl)
  backends.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_reverify');
      const ops = poolOps(await openPostgresStore({ url: pgUrl!, schema, poolSize: 4 }));
      const pool = new DataPool({ store: ops });
      return {
        pool,
        ops,
        cleanup: async () => {
          await pool.close();
          await dropSchema(schema);
        },
      };
    },
  ]);

/** A task whose verifier passes when answer.txt holds `word` (a command check, run in the sandbox). */
const task = (id: string, word: string) =>
  GymTask.parse({
    id,
    prompt: `Write ${word} to answer.txt.`,
    files: [{ path: 'input.txt', content: 'shared input\n' }],
    verifier: {
      kind: 'checks',
      checks: [{ kind: 'command', name: 'says', command: `grep -qx ${word} answer.txt` }],
    },
    category: 'Analysis & Reasoning',
  });

/** A workspace as an agent left it: the task's input and its answer. */
function workspace(answer: string): string {
  const dir = tempDir('ws');
  writeFileSync(join(dir, 'input.txt'), 'shared input\n');
  writeFileSync(join(dir, 'answer.txt'), `${answer}\n`);
  return dir;
}

/** Stores an episode of `taskId` in `group` with the workspace it left as its evidence. */
async function episode(pool: DataPool, group: string, taskId: string, answer: string, channel = 'train') {
  const t = await pool.createTrajectory({
    id: newTrajectoryId(),
    channel,
    groupId: group,
    nRollouts: 2,
    metadata: { task_id: taskId },
  });
  const captured = await captureWorkspace(workspace(answer));
  if (!captured.kept) throw new Error(captured.reason);
  for (const sha of await pool.missingEvidenceBlobs([...captured.blobs.keys()]))
    await pool.putEvidenceBlob(sha, captured.blobs.get(sha)!);
  await pool.keepEvidence(t.id, { entries: captured.entries, final_message: `I wrote ${answer}.` });
  return t;
}

/** An open trajectory of a group of 2, with no metadata. */
const open2 = (pool: DataPool, channel: string, groupId: string) =>
  pool.createTrajectory({ id: newTrajectoryId(), channel, groupId, nRollouts: 2, metadata: {} });

const leaseOf = (channel: string) => LeaseRequest.parse({ channel, batch_size: 1, wait_ms: 0 });

const sha = (text: string) => createHash('sha256').update(text).digest('hex');

for (const [name, open] of backends) {
  describe(`evidence and reverify: ${name}`, () => {
    let h: Harness;
    let pool: DataPool;
    beforeEach(async () => {
      h = await open();
      pool = h.pool;
    });
    afterEach(() => h.cleanup());

    it('keeps evidence once, content-addressed: shared files are stored once, a bad blob or manifest changes nothing', async () => {
      const first = await episode(pool, 'g1', 'alpha', 'red');
      // The second episode's input file is already stored: only its answer is missing.
      expect(await pool.missingEvidenceBlobs([sha('shared input\n'), sha('blue\n'), sha('red\n')])).toEqual([
        sha('blue\n'),
      ]);
      await expect(pool.putEvidenceBlob(sha('blue\n'), Buffer.from('bleu\n'))).rejects.toMatchObject({
        status: 400,
        field: 'sha256',
      });
      expect(await pool.missingEvidenceBlobs([sha('blue\n')])).toEqual([sha('blue\n')]);
      const second = await open2(pool, 'train', 'g1');
      const entries = [
        { type: 'file', path: 'input.txt', mode: 0o644, size: 13, sha256: sha('shared input\n') },
        { type: 'file', path: 'answer.txt', mode: 0o644, size: 5, sha256: sha('blue\n') },
      ];
      await expect(pool.keepEvidence(second.id, { entries, final_message: null })).rejects.toMatchObject({
        status: 400,
        field: 'entries.1.sha256',
      });
      expect(await pool.getEvidence(second.id)).toBeNull();
      await expect(
        pool.keepEvidence(second.id, {
          entries: [
            { type: 'file', path: '../escape', mode: 0o644, size: 13, sha256: sha('shared input\n') },
          ],
          final_message: null,
        }),
      ).rejects.toMatchObject({ status: 400, field: 'entries.0.path' });
      await expect(pool.keepEvidence(first.id, { entries: [], final_message: null })).rejects.toMatchObject({
        status: 409,
      });
      const kept = (await pool.getEvidence(first.id))!;
      expect(kept).toMatchObject({ files: 2, bytes: 13 + 4, finalMessage: 'I wrote red.', channel: 'train' });
      const blobs = await pool.evidenceBlobs(
        kept.entries.flatMap((e) => (e.type === 'file' ? [e.sha256] : [])),
      );
      expect(Buffer.from(blobs.get(sha('red\n'))!).toString()).toBe('red\n');
      expect((await pool.listEvidence({ channel: 'train' })).map((e) => e.trajectoryId)).toEqual([first.id]);
      expect(await pool.listEvidence({ channel: 'other' })).toEqual([]);
    });

    it.skipIf(!sandbox.ok)(
      'reverify scores again from evidence under a new version, beside the old scores, and changes only what the new verifier scores differently',
      async () => {
        const v1 = [task('alpha', 'red'), task('beta', 'ok')];
        // The new version changes alpha's verifier only.
        const v2 = [task('alpha', 'blue'), task('beta', 'ok')];
        const a1 = await episode(pool, 'ga', 'alpha', 'red');
        const a2 = await episode(pool, 'ga', 'alpha', 'blue');
        const b1 = await episode(pool, 'gb', 'beta', 'ok');
        const b2 = await episode(pool, 'gb', 'beta', 'no');
        const stray = await episode(pool, 'gc', 'gamma', 'ok');
        const workDir = tempDir('work');
        const first = await reverify(pool, { tasks: v1, workDir });
        expect(first).toMatchObject({
          version: verifierVersion(v1),
          examined: 5,
          rescored: 4,
          first_score: 4,
          skipped: { not_in_task_set: 1, already_at_version: 0, no_task: 0 },
          failed: [],
        });
        const scoreOf = async (id: string, version: string) =>
          (await pool.getSignals(id)).find((s) => s.name === 'score' && s.version === version)?.value;
        const V1 = verifierVersion(v1);
        expect([
          await scoreOf(a1.id, V1),
          await scoreOf(a2.id, V1),
          await scoreOf(b1.id, V1),
          await scoreOf(b2.id, V1),
        ]).toEqual([1, 0, 1, 0]);

        const dry = await reverify(pool, { tasks: v2, workDir, dryRun: true });
        expect(dry).toMatchObject({ rescored: 4, up: 1, down: 1, unchanged: 2 });
        const V2 = verifierVersion(v2);
        expect(V2).not.toBe(V1);
        expect(await scoreOf(a1.id, V2)).toBeUndefined();

        const second = await reverify(pool, { tasks: v2, workDir });
        expect(second).toMatchObject({
          version: V2,
          rescored: 4,
          up: 1,
          down: 1,
          unchanged: 2,
          first_score: 0,
        });
        expect(second.changes).toEqual(
          [
            { trajectory_uid: a1.id, task_id: 'alpha', before: 1, after: 0 },
            { trajectory_uid: a2.id, task_id: 'alpha', before: 0, after: 1 },
          ].sort((x, y) => (x.trajectory_uid < y.trajectory_uid ? -1 : 1)),
        );
        // Both versions stay: the old scores as history, the new ones beside them.
        expect([await scoreOf(a1.id, V1), await scoreOf(a1.id, V2)]).toEqual([1, 0]);
        expect([await scoreOf(b2.id, V1), await scoreOf(b2.id, V2)]).toEqual([0, 0]);
        const details = (await pool.getSignals(a1.id)).find(
          (s) => s.name === 'score' && s.version === V2,
        )!.details;
        expect(details).toMatchObject({ reverified: true, previous: { value: 1, version: V1 } });
        // The stored reward is not touched.
        expect((await pool.getTrajectory(a1.id))!.reward).toBeNull();
        expect(await pool.getSignals(stray.id)).toEqual([]);

        // Run again: nothing left to do; --force scores again, and compares against v1 when asked.
        expect(await reverify(pool, { tasks: v2, workDir })).toMatchObject({
          rescored: 0,
          skipped: { already_at_version: 4 },
        });
        const against = await reverify(pool, { tasks: v2, workDir, force: true, dryRun: true, against: V1 });
        expect(against).toMatchObject({ rescored: 4, up: 1, down: 1, unchanged: 2 });
      },
    );

    it("a channel pinned to a verifier version serves that version's scores, and its groups wait for them", async () => {
      await expect(
        pool.configureChannel('pinned', {
          reward_pin: { signal: 'score', source: 'agent', version: 'v2' },
        } as never),
      ).rejects.toMatchObject({ status: 400, field: 'reward_pin.source' });
      await pool.configureChannel('pinned', {
        reward_pin: { signal: 'score', source: 'verifier', version: 'v2' },
        curation: { zero_variance: 'drop' },
      });
      const a = await open2(pool, 'pinned', 'g');
      const b = await open2(pool, 'pinned', 'g');
      // Stored rewards all equal: unpinned, zero_variance would drop this group.
      await pool.completeTrajectory(a.id, { reward: 0, status: 'complete' });
      await pool.completeTrajectory(b.id, { reward: 0, status: 'complete' });
      const lease = () => pool.lease(leaseOf('pinned'));
      expect(await lease()).toBeNull();
      const score = (id: string, value: number, version: string, source: 'verifier' | 'agent' = 'verifier') =>
        pool.addSignals([{ trajectoryId: id, stepIndex: null, name: 'score', value, source, version }]);
      // The old version's scores, or the agent's word, do not count.
      await score(a.id, 1, 'v1');
      await score(b.id, 1, 'v1');
      await score(a.id, 1, 'v2', 'agent');
      await score(a.id, 0.25, 'v2');
      const state = async () =>
        (await pool.listGroups({ channel: 'pinned', limit: 5, offset: 0 })).items[0]!.state;
      // Every rollout is in, but not every pinned score: the group is still collecting.
      expect(await state()).toBe('collecting');
      expect(await lease()).toBeNull();
      await score(b.id, 0.5, 'v2');
      expect(await state()).toBe('ready');
      await score(b.id, 0.75, 'v2');
      const batch = (await lease())!;
      expect(batch.groups).toHaveLength(1);
      const served = new Map(
        batch.groups[0]!.trajectories.map((t) => [t.trajectory.id, t.trajectory.reward]),
      );
      // The latest score of the pinned version, never the stored reward.
      expect(served).toEqual(
        new Map([
          [a.id, 0.25],
          [b.id, 0.75],
        ]),
      );
      expect((await pool.getTrajectory(a.id))!.reward).toBe(0);
    });

    it('a group ready before the pin waits in the queue for the pinned scores, then is served with them', async () => {
      const a = await open2(pool, 'late', 'g');
      const b = await open2(pool, 'late', 'g');
      await pool.completeTrajectory(a.id, { reward: 1, status: 'complete' });
      await pool.completeTrajectory(b.id, { reward: 0, status: 'complete' });
      await pool.configureChannel('late', {
        reward_pin: { signal: 'score', source: 'verifier', version: 'v2' },
      });
      const preview = await h.ops.previewBatch({
        channel: 'late',
        batchSize: 1,
        nRollouts: null,
        maxStaleness: null,
        consumer: 'trainer',
        ttlMs: 60_000,
      });
      expect(preview.map((p) => p.decision)).toEqual(['awaiting_pin']);
      expect(await pool.lease(leaseOf('late'))).toBeNull();
      await pool.addSignals(
        [a, b].map((t, i) => ({
          trajectoryId: t.id,
          stepIndex: null,
          name: 'score',
          value: i,
          source: 'verifier',
          version: 'v2',
        })),
      );
      const batch = (await pool.lease(leaseOf('late')))!;
      expect(batch.groups[0]!.trajectories.map((t) => t.trajectory.reward).sort()).toEqual([0, 1]);
      expect(
        new Map(batch.groups[0]!.trajectories.map((t) => [t.trajectory.id, t.trajectory.reward])),
      ).toEqual(
        new Map([
          [a.id, 0],
          [b.id, 1],
        ]),
      );
    });
  });
}

describe('a workspace as evidence', () => {
  it('captures files, folders, modes and links without following them, and rebuilds the same tree', async () => {
    const dir = tempDir('cap');
    mkdirSync(join(dir, 'out/deep'), { recursive: true });
    writeFileSync(join(dir, 'out/deep/a.txt'), 'a');
    writeFileSync(join(dir, 'run.sh'), '#!/bin/sh\n');
    chmodSync(join(dir, 'run.sh'), 0o755);
    symlinkSync('/etc/passwd', join(dir, 'link'));
    mkdirSync(join(dir, 'empty'));
    chmodSync(join(dir, 'out'), 0o555);
    const captured = await captureWorkspace(dir);
    chmodSync(join(dir, 'out'), 0o755);
    if (!captured.kept) throw new Error(captured.reason);
    expect(captured.entries.map((e) => [e.type, e.path]).sort()).toEqual(
      [
        ['dir', 'empty'],
        ['dir', 'out'],
        ['dir', 'out/deep'],
        ['file', 'out/deep/a.txt'],
        ['file', 'run.sh'],
        ['symlink', 'link'],
      ].sort(),
    );
    // The link is kept as a link: /etc/passwd's bytes are not read.
    expect(captured.bytes).toBe(1 + 10);
    const back = join(tempDir('back'), 'ws');
    mkdirSync(back);
    await materializeWorkspace(back, captured.entries, captured.blobs);
    expect(readFileSync(join(back, 'out/deep/a.txt'), 'utf8')).toBe('a');
    expect(statSync(join(back, 'run.sh')).mode & 0o777).toBe(0o755);
    expect(statSync(join(back, 'out')).mode & 0o777).toBe(0o555);
    expect(await readlink(join(back, 'link'))).toBe('/etc/passwd');
    chmodSync(join(back, 'out'), 0o755);
  });

  it('keeps nothing past its bounds, and says why', async () => {
    const dir = tempDir('big');
    writeFileSync(join(dir, 'a.bin'), Buffer.alloc(600));
    writeFileSync(join(dir, 'b.bin'), Buffer.alloc(600));
    expect(await captureWorkspace(dir, { maxBytes: 1000, maxEntries: 10 })).toEqual({
      kept: false,
      reason: 'the workspace holds more than 1000 bytes',
    });
    expect(await captureWorkspace(dir, { maxBytes: 10_000, maxEntries: 1 })).toEqual({
      kept: false,
      reason: 'the workspace holds more than 1 entries',
    });
    expect((await captureWorkspace(dir, { maxBytes: 1200, maxEntries: 2 })).kept).toBe(true);
  });
});

describe.skipIf(!sandbox.ok)('gym samples keep their evidence over HTTP, and reverify reads it', () => {
  const RUNNER = 'runner-key-7f3a9e41c0d2';
  const AGENT = 'agent-key-91c25b7e0a4f';
  const v1 = [okTask('alpha', 'ok'), okTask('gamma', 'ok')];
  // The new verifier wants what nobody wrote: alpha's samples go down, gamma's stay.
  const v2 = [okTask('alpha', 'okay'), okTask('gamma', 'ok')];
  let server: RunningServer;
  let dir: string;
  beforeAll(async () => {
    dir = tempDir('http');
    server = await startServer({
      dbPath: join(dir, 'pool.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks(v1) },
      apiKeys: [`${RUNNER}:runner,trainer,agent`, `${AGENT}:agent`],
    });
  });
  afterAll(() => server?.close());

  it('every verified sample keeps its final workspace and message; only a runner reaches them; reverify and a pin follow', async () => {
    const { results } = await runGym({
      tasks: v1,
      samples: 2,
      concurrency: 2,
      gatewayUrl: server.url,
      apiKey: RUNNER,
      model: 'sim-qwen3',
      agent: { kind: 'builtin', maxTurns: 6 },
      runId: 'run-ev',
      channel: 'ev',
      stateFile: join(dir, 'state.jsonl'),
      workDir: join(dir, 'work'),
      sampleTimeoutMs: 60_000,
    });
    expect(results.map((r) => r.score)).toEqual([1, 1, 1, 1]);
    const V1 = verifierVersion(v1);
    const as = (key: string) => ({ authorization: `Bearer ${key}` });
    for (const r of results) {
      const got = await fetch(`${server.url}/v1/trajectories/${r.trajectoryUid}/evidence`, {
        headers: as(RUNNER),
      });
      expect(got.status).toBe(200);
      const evidence = (await got.json()) as { entries: { path: string }[]; final_message: string | null };
      expect(evidence.entries.map((e) => e.path)).toContain(`output/${r.taskId}.txt`);
      expect(typeof evidence.final_message).toBe('string');
      const signals = await server.pool.getSignals(r.trajectoryUid!);
      expect(signals.find((s) => s.name === 'score')).toMatchObject({ value: 1, version: V1 });
      // The agent's key reaches neither the evidence nor the blobs.
      const denied = await fetch(`${server.url}/v1/trajectories/${r.trajectoryUid}/evidence`, {
        method: 'PUT',
        headers: { ...as(AGENT), 'content-type': 'application/json' },
        body: JSON.stringify({ entries: [], final_message: 'I did it' }),
      });
      expect(denied.status).toBe(403);
    }
    const blob = await fetch(`${server.url}/v1/evidence/blobs/${sha('ok')}`, {
      method: 'PUT',
      headers: { ...as(AGENT), 'content-type': 'application/octet-stream' },
      body: 'ok',
    });
    expect(blob.status).toBe(403);

    const report = await reverify(server.pool, { tasks: v2, workDir: join(dir, 'reverify') });
    expect(report).toMatchObject({ examined: 4, rescored: 4, down: 2, up: 0, unchanged: 2, failed: [] });
    expect(new Set(report.changes.map((c) => c.task_id))).toEqual(new Set(['alpha']));
    await server.pool.configureChannel('ev', {
      reward_pin: { signal: 'score', source: 'verifier', version: report.version },
    });
    const batch = (await server.pool.lease(
      LeaseRequest.parse({ channel: 'ev', batch_size: 2, wait_ms: 0 }),
    ))!;
    const served = Object.fromEntries(
      batch.groups.map((g) => [
        g.trajectories[0]!.trajectory.metadata.task_id,
        g.trajectories.map((t) => t.trajectory.reward),
      ]),
    );
    expect(served).toEqual({ alpha: [0, 0], gamma: [1, 1] });
  });

  it('`stepwise rewards reverify` on the store file: a dry run writes nothing, a run with --pin pins the channel', async () => {
    await server.close();
    const tasks = join(dir, 'v3.jsonl');
    // v3 takes alpha back to v1's verifier and changes gamma's: against v1's scores only gamma moves.
    await writeTasksJsonl(tasks, [okTask('alpha', 'ok'), okTask('gamma', 'nope')]);
    const args = ['rewards', 'reverify', '--db', join(dir, 'pool.db'), '--tasks', tasks, '--channel', 'ev'];
    const dry = await runCli([...args, '--dry-run', '--against', verifierVersion(v1)], {}, 60_000);
    expect(dry.code, dry.stderr).toBe(0);
    expect(JSON.parse(dry.stdout)).toMatchObject({
      dry_run: true,
      rescored: 4,
      down: 2,
      unchanged: 2,
      changed: 2,
    });
    const run = await runCli([...args, '--pin', '--details'], {}, 60_000);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    // Against each one's current score (v2's): alpha goes up again, gamma goes down.
    expect(report).toMatchObject({ dry_run: false, rescored: 4, up: 2, down: 2, pinned: { channel: 'ev' } });
    expect(report.changes.map((c: { task_id: string }) => c.task_id).sort()).toEqual([
      'alpha',
      'alpha',
      'gamma',
      'gamma',
    ]);
    const pool = new DataPool({ store: await openSqliteStore({ path: join(dir, 'pool.db') }) });
    try {
      expect((await pool.channelConfig('ev')).reward_pin).toEqual({
        signal: 'score',
        source: 'verifier',
        version: report.version,
      });
    } finally {
      await pool.close();
    }
    const bad = await runCli(
      ['rewards', 'reverify', '--db', join(dir, 'pool.db'), '--tasks', tasks, '--pin'],
      {},
      60_000,
    );
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--pin needs --channel');
  });
});

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HINT_HEADING, promptViews, renderHint } from '../packages/core/src/curation/actguide/index.js';
import { batchToJson } from '../packages/core/src/serving/json-batch.js';
import { batchToPadded } from '../packages/core/src/serving/padded-batch.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import { type GuidedRunOptions, REPLACED_TAG, runGuided } from '../packages/gym/src/guide.js';
import { runGym } from '../packages/gym/src/runner.js';
import { referenceTasks } from '../packages/gym/src/tasks/index.js';
import { GymTask } from '../packages/gym/src/tasks/schema.js';
import { runCli } from './support/server-process.js';
import { simServerFixture } from './support/sim-server.js';

/*
 * ActGuide on a real gym run: a Stepwise server in process (gateway + SQLite), the built-in agent, and
 * the sim's reference policy with `needsPlan: 0.75`: a rollout finishes a task only when a reference
 * plan in its prompt shows at least 3 of its 4 actions, so the unguided group is hard, probes find
 * k = 3, and the guided group replaces it. The tasks only write files and check that they exist:
 * nothing runs a command, so the agents run without the sandbox.
 */

const plan4 = GymTask.parse({
  id: 'plan-4',
  prompt: 'Write the three parts, then output/report.txt. Paths are relative to the workspace.',
  verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'report', path: 'output/report.txt' }] },
  referenceActions: [
    { name: 'write', arguments: { path: 'parts/a.txt', content: 'a\n' } },
    { name: 'write', arguments: { path: 'parts/b.txt', content: 'b\n' } },
    { name: 'write', arguments: { path: 'parts/c.txt', content: 'c\n' } },
    { name: 'write', arguments: { path: 'output/report.txt', content: 'abc\n' } },
  ],
});
/** Solved by doing nothing: never hard. */
const easy = GymTask.parse({
  id: 'easy-0',
  prompt: 'Check that input/ready.txt is there.',
  files: [{ path: 'input/ready.txt', content: 'yes\n' }],
  verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'ready', path: 'input/ready.txt' }] },
});
/** Unsolvable, and with no reference actions: hard, re-run with the hint None (as the paper does). */
const stuck = GymTask.parse({
  id: 'stuck-0',
  prompt: 'Write output/never.txt.',
  verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'never', path: 'output/never.txt' }] },
});
const tasks = [plan4, easy, stuck];

describe('ActGuide on a gym run', () => {
  const fx = simServerFixture('actguide', {
    policy: 'reference',
    tasks: referenceTasks(tasks),
    needsPlan: 0.75,
  });

  const options = (): GuidedRunOptions => ({
    tasks,
    samples: 3,
    concurrency: 3,
    gatewayUrl: fx.server.url,
    model: 'sim-qwen3',
    agent: { kind: 'builtin', maxTurns: 12 },
    runId: 'run-g',
    stateFile: join(fx.dir, 'state-g.jsonl'),
    workDir: join(fx.dir, 'work'),
    sampleTimeoutMs: 60_000,
    unsafeNoSandbox: true,
    guide: { strategy: 'adaptive', probeRollouts: 2, maxProbeSteps: 5 },
  });

  it('finds the hard group, chooses k by probes, and serves guided rollouts in its place', async () => {
    // While its probes and guided rollouts run, the hard group waits in pending_guidance: no lease takes it.
    const whileGuided: Promise<string>[] = [];
    const base = options();
    const run = await runGuided({
      ...base,
      guide: {
        ...base.guide,
        onSample: (r) => {
          if (r.taskId !== 'plan-4') return;
          whileGuided.push(fx.server.pool.store.getGroup('train', 'run-g.plan-4').then((g) => g!.state));
        },
      },
    });
    expect(whileGuided.length).toBeGreaterThan(0);
    expect(new Set(await Promise.all(whileGuided))).toEqual(new Set(['pending_guidance']));
    // The unguided pass: plan-4 and stuck-0 score 0 throughout, easy-0 scores 1.
    expect(run.summary.groups).toEqual({ allZero: 2, allOne: 1, mixed: 0 });
    const byTask = Object.fromEntries(run.guidance.decisions.map((d) => [d.taskId, d]));
    expect(byTask['easy-0']).toMatchObject({ hard: false, guidance: null });
    expect(byTask['stuck-0']).toMatchObject({
      hard: true,
      reason: null,
      guidance: {
        k: 0,
        hint: 'None',
        planSource: 'none',
        actions: 0,
        probes: [],
        groupId: 'run-g.stuck-0.guided',
        rewards: [0, 0, 0],
        rescued: false,
      },
    });
    const decision = byTask['plan-4']!;
    expect(decision).toMatchObject({ groupId: 'run-g.plan-4', rewards: [0, 0, 0], hard: true });
    // Binary search over 0..4: k = 2 fails (2 of the 3 needed actions shown), k = 3 succeeds.
    expect(decision.guidance).toMatchObject({
      k: 3,
      strategy: 'adaptive',
      actions: 4,
      probes: [
        { k: 2, rewards: [0, 0] },
        { k: 3, rewards: [1, 1] },
      ],
      groupId: 'run-g.plan-4.guided',
      rewards: [1, 1, 1],
      rescued: true,
    });
    expect(decision.guidance!.hint).toBe(renderHint(plan4.referenceActions!, 3));
    expect(decision.guidance!.replaced).toHaveLength(3);
    expect(run.guidance.summary).toEqual({
      groups: 3,
      hard: 2,
      guided: 2,
      rescued: 1,
      hardFraction: 2 / 3,
      rescuedFraction: 0.5,
      probeRollouts: 4,
      guidedRollouts: 6,
    });
    // Every hold was released once its replacement landed: nothing waits in pending_guidance.
    expect((await fx.server.pool.stats('train')).groups.pending_guidance).toBe(0);

    // What a trainer leases from the training channel.
    const batch = await fx.server.pool.lease({
      channel: 'train',
      batch_size: 5,
      n_rollouts: 3,
      wait_ms: 0,
      consumer: 'trainer',
      ttl_ms: 60_000,
    });
    expect(batch?.groups.map((g) => g.group.id).sort()).toEqual([
      'run-g.easy-0',
      'run-g.plan-4',
      'run-g.plan-4.guided',
      'run-g.stuck-0',
      'run-g.stuck-0.guided',
    ]);
    const served = (id: string) => batch!.groups.find((g) => g.group.id === id)!.trajectories;
    // The replaced rollouts are kept but carry no trainable step, and say why.
    for (const t of served('run-g.plan-4')) {
      expect(decision.guidance!.replaced).toContain(t.trajectory.id);
      expect(t.steps).toEqual([]);
      expect(t.labels).toEqual([
        expect.objectContaining({ stepIndex: null, trainable: false, tags: [REPLACED_TAG] }),
      ]);
      expect((await fx.server.pool.getTrajectorySteps(t.trajectory.id)).length).toBeGreaterThan(0);
    }
    // The guided group: n rollouts that solved the task, marked off-policy with their guidance.
    const guided = served('run-g.plan-4.guided');
    expect(guided).toHaveLength(3);
    for (const t of guided) {
      expect(t.trajectory).toMatchObject({ guided: true, guidanceK: 3, probe: false });
      expect(t.trajectory.reward).toBe(1);
      expect(t.steps.length).toBeGreaterThanOrEqual(4);
      expect(t.trajectory.metadata).toMatchObject({
        task_id: 'plan-4',
        guidance: {
          k: 3,
          strategy: 'adaptive',
          hint: decision.guidance!.hint,
          off_policy: true,
          replaces: 'run-g.plan-4',
        },
      });
    }
    // Probes live in their own channel and groups: nothing leased from `train` is a probe.
    const leased = batch!.groups.flatMap((g) => g.trajectories);
    expect(
      leased.some((t) => (t.trajectory.metadata.guidance as { probe?: boolean } | undefined)?.probe),
    ).toBe(false);
    const probes = await fx.server.pool.listTrajectories({ channel: 'train-probe', limit: 100, offset: 0 });
    expect(probes.items).toHaveLength(4);
    expect(new Set(probes.items.map((t) => t.groupId))).toEqual(
      new Set(['run-g.plan-4.probe-2', 'run-g.plan-4.probe-3']),
    );
    expect(probes.items.every((t) => (t.metadata.guidance as { probe: boolean }).probe)).toBe(true);
    expect(probes.items.every((t) => t.probe && !t.guided)).toBe(true);
    expect(probes.items.map((t) => t.guidanceK).sort()).toEqual([2, 2, 3, 3]);

    // The batch as a trainer reads it: both prompt views of each guided step and the off-policy mask.
    const tokenizer = loadQwen3Tokenizer();
    const json = batchToJson(batch!);
    const unguidedFirst = (await fx.server.pool.getTrajectorySteps(decision.guidance!.replaced[0]!))[0]!;
    for (const g of json.groups) {
      for (const t of g.trajectories) {
        // The None re-run is guided too (off-policy, its prompt carries the paper's two lines).
        expect(t.off_policy).toBe(g.group_id.endsWith('.guided'));
        const isGuided = g.group_id === 'run-g.plan-4.guided';
        if (g.group_id === 'run-g.stuck-0.guided') continue;
        expect(t.recompute_log_probs).toBe(false);
        for (const step of t.steps) {
          if (!isGuided) {
            expect(step.training_prompt_ids).toBeNull();
            continue;
          }
          const stored = await fx.server.pool.getStep(t.trajectory_uid, step.step_index);
          // The behaviour prompt is what the engine saw (hint included); the response is the generated ids.
          expect(tokenizer.decode(step.prompt_ids)).toContain(HINT_HEADING);
          expect(step.response_ids).toEqual(stored!.responseIds);
          expect(stored!.tokenSource).toBe('engine');
          const training = step.training_prompt_ids!;
          expect(tokenizer.decode(training)).not.toContain(HINT_HEADING);
          expect(tokenizer.decode(training)).not.toContain('1. write: ');
          expect(training).toEqual(
            promptViews(stored!, decision.guidance!.hint, tokenizer).trainingPromptIds,
          );
          // The first call's training prompt is the unguided rollout's prompt, to the token.
          if (step.step_index === 0) expect(training).toEqual(unguidedFirst.promptIds);
        }
      }
    }
    const padded = batchToPadded(batch!, { overlong: 'reject', padTokenId: 0 });
    const offPolicy = padded.arrays.off_policy!.data as Uint8Array;
    const trajectoryIndex = padded.arrays.trajectory_index!.data as Int32Array;
    const uids = padded.arrays.trajectory_uids!.data as string[];
    const guidedUids = new Set([...guided, ...served('run-g.stuck-0.guided')].map((t) => t.trajectory.id));
    expect(offPolicy.length).toBeGreaterThan(0);
    offPolicy.forEach((flag, row) => {
      expect(flag).toBe(guidedUids.has(uids[trajectoryIndex[row]!]!) ? 1 : 0);
    });
    await fx.server.pool.ack(batch!.lease.id);
    expect(
      await fx.server.pool.lease({
        channel: 'train',
        batch_size: 1,
        wait_ms: 0,
        consumer: 'trainer',
        ttl_ms: 60_000,
      }),
    ).toBeNull();

    // The template reproduces every captured guided prompt, so the stored views differ by the hint alone.
    for (const t of guided)
      for (const step of await fx.server.pool.getTrajectorySteps(t.trajectory.id)) {
        expect(promptViews(step, decision.guidance!.hint, tokenizer).behaviourReproduced).toBe(true);
        expect(step.metadata.training_prompt_unavailable).toBeUndefined();
      }
  });

  it('guides a task without reference actions by an action log, or else by a stored rollout that solved it', async () => {
    // plan-4 as a task set without its reference actions (the sim still knows how to act on it).
    const bare = { ...plan4, referenceActions: null };
    const logged = await runGuided({
      ...options(),
      tasks: [bare],
      runId: 'run-l',
      stateFile: join(fx.dir, 'state-l.jsonl'),
      guide: {
        strategy: 'fixed_k',
        k: 3,
        actionLogs: new Map([['plan-4', plan4.referenceActions!]]),
      },
    });
    expect(logged.guidance.decisions[0]!.guidance).toMatchObject({
      planSource: 'action_log',
      planFrom: null,
      k: 3,
      rescued: true,
    });

    // No log: the plan is read from the most recent stored rollout of plan-4 that scored above 0.
    const stored = await runGuided({
      ...options(),
      tasks: [bare],
      runId: 'run-s',
      stateFile: join(fx.dir, 'state-s.jsonl'),
      guide: { strategy: 'fixed_k', k: 3 },
    });
    const guidance = stored.guidance.decisions[0]!.guidance!;
    expect(guidance).toMatchObject({ planSource: 'stored', k: 3, actions: 4, rescued: true });
    const source = await fx.server.pool.getTrajectory(guidance.planFrom!);
    expect(source).toMatchObject({ taskId: 'plan-4', status: 'complete', reward: 1 });
    // The plan is that rollout's successful calls: the same 4 writes as the reference.
    expect(guidance.hint).toBe(renderHint(plan4.referenceActions!, 3));
    const guided = await fx.server.pool.getTrajectory(stored.guidance.guided[0]!.trajectoryUid!);
    expect(guided!.metadata.guidance).toMatchObject({ plan_source: 'stored', plan_from: guidance.planFrom });

    // Neither: re-run with the hint None under the paper's two lines, and replaced like any hard group.
    const none = await runGuided({
      ...options(),
      tasks: [{ ...stuck }],
      runId: 'run-n',
      stateFile: join(fx.dir, 'state-n.jsonl'),
      guide: { strategy: 'fixed_k', k: 1, actionLogs: new Map([['other', plan4.referenceActions!]]) },
    });
    expect(none.guidance.decisions[0]).toMatchObject({
      hard: true,
      guidance: { k: 0, hint: 'None', planSource: 'none', groupId: 'run-n.stuck-0.guided' },
    });
    for (const r of none.results)
      expect(await fx.server.pool.labels(r.trajectoryUid!)).toEqual([
        expect.objectContaining({ trainable: false, tags: [REPLACED_TAG] }),
      ]);
    const [rerun] = await fx.server.pool.getTrajectorySteps(none.guidance.guided[0]!.trajectoryUid!);
    const user = (rerun!.messages as { role: string; content: string }[]).find((m) => m.role === 'user')!;
    expect(user.content).toBe(
      `${stuck.prompt}\nFollow the partial action trajectory hint to take acttions, note that the trajectory may not complete and you still need do some extra tool calls to finish the task.\nReference action trajectory hint:\nNone`,
    );
  });

  it('resumes: a re-run decides nothing again and runs no rollout', async () => {
    const before = (await fx.server.pool.listTrajectories({ limit: 1, offset: 0 })).total;
    const run = await runGuided(options());
    expect(run.summary.skipped).toBe(9);
    expect(run.guidance.probes).toEqual([]);
    expect(run.guidance.guided).toEqual([]);
    expect(run.guidance.summary).toMatchObject({ hard: 2, rescued: 1 });
    expect((await fx.server.pool.listTrajectories({ limit: 1, offset: 0 })).total).toBe(before);
  });
});

describe('ActGuide: holds while the guide works, and when it fails', () => {
  const fx = simServerFixture('actguide-hold', {
    policy: 'reference',
    tasks: referenceTasks(tasks),
    needsPlan: 0.75,
  });

  it('re-holds the groups it is working on (restarting their timeout), and a failed guide releases every undecided group', async () => {
    const group = (task: string) => fx.server.pool.store.getGroup('train', `run-h.${task}`);
    let first = true;
    let refreshed = false;
    // The unguided pass runs for real; the guide's first pass (a probe of plan-4) waits for the
    // refresher to hold plan-4 again, then fails as a dead engine would.
    const runSamples: typeof runGym = async (o) => {
      if (first) {
        first = false;
        return runGym(o);
      }
      const since = (await group('plan-4'))!.pendingSince!;
      for (let i = 0; i < 200 && !refreshed; i++) {
        await new Promise((r) => setTimeout(r, 50));
        const g = (await group('plan-4'))!;
        refreshed = g.state === 'pending_guidance' && g.pendingSince! > since;
      }
      expect((await group('stuck-0'))!.state).toBe('pending_guidance');
      throw new Error('probe engine down');
    };
    await expect(
      runGuided(
        {
          tasks,
          samples: 3,
          concurrency: 3,
          gatewayUrl: fx.server.url,
          model: 'sim-qwen3',
          agent: { kind: 'builtin', maxTurns: 12 },
          runId: 'run-h',
          stateFile: join(fx.dir, 'state-h.jsonl'),
          workDir: join(fx.dir, 'work'),
          sampleTimeoutMs: 60_000,
          unsafeNoSandbox: true,
          guide: { strategy: 'adaptive', probeRollouts: 2, maxProbeSteps: 5, holdRefreshMs: 100 },
        },
        runSamples,
      ),
    ).rejects.toThrow(/probe engine down/);
    expect(refreshed).toBe(true);
    // plan-4 (whose guide failed) and stuck-0 (never reached) are both released, ready to lease.
    expect((await group('plan-4'))!.state).toBe('ready');
    expect((await group('stuck-0'))!.state).toBe('ready');
    expect((await fx.server.pool.stats('train')).groups.pending_guidance).toBe(0);
  });
});

describe('stepwise gym run --guide', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-actguide-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('guides the hard groups of an in-process run and writes guide-summary.json', async () => {
    const file = join(dir, 'tasks.jsonl');
    writeFileSync(file, `${[plan4, easy].map((t) => JSON.stringify(t)).join('\n')}\n`);
    const out = join(dir, 'out');
    const result = await runCli(
      [
        'gym',
        'run',
        '--tasks',
        file,
        '--out',
        out,
        '--samples',
        '2',
        '--guide',
        'fixed_ratio',
        '--guide-ratio',
        '0.75',
        '--sim-needs-plan',
        '0.75',
        '--error-rate',
        '0',
        '--give-up-rate',
        '0',
        '--unsafe-no-sandbox',
      ],
      {},
      120_000,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/guide: plan-4 hard; k=3\/4 after 0 probes, rescued/);
    expect(result.stderr).toMatch(/guide: 1 of 2 groups hard \(50\.0%\), 1 rescued \(100\.0%\)/);
    const report = JSON.parse(readFileSync(join(out, 'guide-summary.json'), 'utf8'));
    expect(report.summary).toMatchObject({
      groups: 2,
      hard: 1,
      rescued: 1,
      guidedRollouts: 2,
      probeRollouts: 0,
    });
  });

  it('`stepwise guide` guides the hard groups of a finished run without running its samples again', async () => {
    const file = join(dir, 'tasks-2.jsonl');
    writeFileSync(file, `${[plan4, easy].map((t) => JSON.stringify(t)).join('\n')}\n`);
    const common = [
      '--tasks',
      file,
      '--out',
      join(dir, 'out-2'),
      '--run-id',
      'r2',
      '--samples',
      '2',
      '--sim-needs-plan',
      '0.75',
      '--error-rate',
      '0',
      '--give-up-rate',
      '0',
      '--unsafe-no-sandbox',
    ];
    const plain = await runCli(['gym', 'run', ...common], {}, 120_000);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stdout).toMatch(/samples: 4 \(0 already done\)/);
    const guided = await runCli(['guide', ...common], {}, 120_000);
    expect(guided.code, guided.stderr).toBe(0);
    // The unguided samples are the first run's; adaptive probes k = 2 (fails) and k = 3 (succeeds).
    expect(guided.stdout).toMatch(/samples: 4 \(4 already done\)/);
    expect(guided.stderr).toMatch(/guide: plan-4 hard; k=3\/4 after 2 probes, rescued/);
    const report = JSON.parse(readFileSync(join(dir, 'out-2', 'guide-summary.json'), 'utf8'));
    expect(report.summary).toMatchObject({
      groups: 2,
      hard: 1,
      rescued: 1,
      probeRollouts: 4,
      guidedRollouts: 2,
    });
  });

  it('names a strategy without its parameter', async () => {
    const result = await runCli([
      'gym',
      'run',
      '--tasks',
      'x.jsonl',
      '--out',
      join(dir, 'bad'),
      '--guide',
      'fixed_k',
    ]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/--guide fixed_k needs --guide-k N/);
  });
});

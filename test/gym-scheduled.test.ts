import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ScheduledPrompt } from '../packages/core/src/sdk/client.js';
import type { GymRunOptions } from '../packages/gym/src/runner.js';
import { scheduledRunner } from '../packages/gym/src/scheduled.js';
import { referenceTasks } from '../packages/gym/src/tasks/reference.js';
import { GymTask } from '../packages/gym/src/tasks/schema.js';
import { simServerFixture } from './support/sim-server.js';

/*
 * A gym run that takes its work from the pool's prompt scheduler (issue 42): the run registers its
 * tasks as the channel's prompts and runs the groups the pool hands out, under the channel's policy.
 * A real server in process (SQLite, the sim's reference policy), the built-in agent, real HTTP.
 */

const task = (id: string, solvable: boolean) =>
  GymTask.parse({
    id,
    prompt: `Write output/${id}.txt containing ok. All file paths are relative to the workspace directory.`,
    verifier: {
      kind: 'checks',
      checks: [{ kind: 'text_contains', name: 'ok', path: `output/${id}.txt`, pattern: 'ok' }],
    },
    // The sim's reference policy runs these; without them it never writes the file.
    referenceActions: solvable
      ? [{ name: 'write', arguments: { path: `output/${id}.txt`, content: 'ok' } }]
      : [],
    category: 'Analysis & Reasoning',
  });

const tasks = [task('alpha', true), task('beta', false), task('gamma', true)];

describe('a gym run on the prompt scheduler', () => {
  const fx = simServerFixture('gym-scheduled', { policy: 'reference', tasks: referenceTasks(tasks) });

  const options = (channel: string, runId: string): GymRunOptions => ({
    tasks,
    samples: 2,
    concurrency: 2,
    gatewayUrl: fx.server.url,
    model: 'sim-qwen3',
    agent: { kind: 'builtin', maxTurns: 6 },
    runId,
    channel,
    stateFile: join(fx.dir, `state-${runId}.jsonl`),
    workDir: join(fx.dir, 'work'),
    sampleTimeoutMs: 60_000,
    unsafeNoSandbox: true,
  });

  it('in_order: runs the groups the pool hands out, a round at a time, and the pool keeps their history', async () => {
    await fx.server.pool.configureChannel('ordered', { schedule: { n_rollouts: 2 } });
    const handed: ScheduledPrompt[] = [];
    const run = scheduledRunner({ groups: 5, onPrompt: (p) => handed.push(p) });
    const { results } = await run(options('ordered', 'run-o'));
    expect(results).toHaveLength(10);
    // Two workers, three prompts: each round hands every prompt once before any twice.
    expect(
      handed
        .slice(0, 3)
        .map((p) => p.taskId)
        .sort(),
    ).toEqual(['alpha', 'beta', 'gamma']);
    expect(handed.map((p) => p.nRollouts)).toEqual([2, 2, 2, 2, 2]);
    const groups = new Set(results.map((r) => r.groupId));
    expect(groups.size).toBe(5);
    const prompts = await fx.server.pool.listPrompts('ordered');
    expect(prompts.reduce((n, p) => n + p.groups, 0)).toBe(5);
    expect(prompts.every((p) => !p.inFlight)).toBe(true);
    const beta = prompts.find((p) => p.taskId === 'beta')!;
    expect(beta.lastPassRate).toBe(0);
    expect(prompts.find((p) => p.taskId === 'alpha')!.lastPassRate).toBe(1);
    // Every trajectory says which pool its prompt was drawn from.
    const stored = await fx.server.pool.listTrajectories({ channel: 'ordered', limit: 100, offset: 0 });
    expect(stored.items.every((t) => typeof t.metadata.schedule_pool === 'string')).toBe(true);
  });

  it('runs exactly the groups asked for, however many workers ask at once', async () => {
    await fx.server.pool.configureChannel('exact', { schedule: { n_rollouts: 1 } });
    const run = scheduledRunner({ groups: 2 });
    const { results } = await run({ ...options('exact', 'run-x'), concurrency: 6, samples: 1 });
    expect(results).toHaveLength(2);
    const prompts = await fx.server.pool.listPrompts('exact');
    expect(prompts.reduce((n, p) => n + p.handed, 0)).toBe(2);
  });

  it('difficulty: prompts always or never solved are retired; the run stops when none is left to learn from', async () => {
    await fx.server.pool.configureChannel('graded', { schedule: { n_rollouts: 2, policy: 'difficulty' } });
    const handed: string[] = [];
    let idleAfter: number | null = null;
    const run = scheduledRunner({
      groups: 9,
      onPrompt: (p) => handed.push(p.taskId),
      onIdle: (n) => {
        idleAfter = n;
      },
    });
    const { results } = await run(options('graded', 'run-d'));
    // Each prompt ran once (unseen), scored all-pass or all-fail, and was retired.
    expect(handed.sort()).toEqual(['alpha', 'beta', 'gamma']);
    expect(results).toHaveLength(6);
    expect(idleAfter).toBe(3);
    const pools = Object.fromEntries(
      (await fx.server.pool.listPrompts('graded')).map((p) => [p.taskId, p.pool]),
    );
    expect(pools).toEqual({ alpha: 'easy', beta: 'hard', gamma: 'easy' });
  });
});

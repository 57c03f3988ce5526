import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  ConflictError,
  Group,
  Label,
  Lease,
  type NewStep,
  NotFoundError,
  PoolEvent,
  Signal,
  Step,
  StepwiseError,
  Trajectory,
} from '../../packages/core/src/domain/index.js';
import { type PoolOps, poolOps } from '../../packages/core/src/pool/core.js';
import type { LeaseParams } from '../../packages/core/src/pool/types.js';
import type { Store, TrajectoryQuery } from '../../packages/core/src/store/store.js';
import { episode, makeStep } from './steps.js';

export { episode, makeStep };

/** How a backend under test is opened; `reopen` closes it and opens the same database again. */
export interface StoreHarness {
  store: Store | PoolOps;
  reopen(): Promise<Store | PoolOps>;
  cleanup(): Promise<void>;
}

/**
 * The behaviour every Store must have, whatever database is behind it. Run it against each backend
 * with a harness factory; the Postgres store runs the very same suite.
 */
export function runStoreConformance(name: string, open: () => Promise<StoreHarness>): void {
  describe(`Store conformance: ${name}`, () => {
    let h: StoreHarness;
    let store: PoolOps;
    let now = 1_000_000;
    const tick = (ms = 1) => {
      now += ms;
      return now;
    };
    const submit = async (steps: NewStep[], channel = 'train', nRollouts: number | null = null) => {
      const [outcome] = await store.submitBatch([{ channel, nRollouts, steps }], tick());
      if (!outcome!.ok) throw outcome!.error;
      return outcome!;
    };
    const lease = (over: Partial<LeaseParams> = {}) =>
      store.leaseBatch(
        {
          channel: 'train',
          batchSize: 1,
          nRollouts: null,
          maxStaleness: null,
          consumer: 'c1',
          ttlMs: 60_000,
          ...over,
        },
        tick(),
      );
    /** Submits `rollouts` complete episodes to each group id, in order. */
    const fillGroups = async (groupIds: string[], rollouts: number, channel = 'train') => {
      for (const g of groupIds) {
        for (let r = 0; r < rollouts; r++)
          await submit(episode(`${channel}-${g}-r${r}`, g, 2, r % 2), channel, rollouts);
      }
    };

    beforeEach(async () => {
      h = await open();
      store = poolOps(h.store);
    });
    afterEach(async () => {
      await h.cleanup();
    });

    describe('ingestion', () => {
      it('reads back the exact token arrays of every step, however the prompts were shared', async () => {
        const steps = episode('t1', 'g1', 6, 1);
        // Step 3 rewrites its history: a prefix break.
        steps[3] = { ...steps[3]!, promptIds: steps[3]!.promptIds.slice(0, 4).concat([77, 78, 79]) };
        const result = await submit(steps);
        expect(result.inserted).toBe(6);
        const back = await store.getTrajectorySteps('t1');
        expect(back.map((s) => s.promptIds)).toEqual(steps.map((s) => s.promptIds));
        expect(back.map((s) => s.responseIds)).toEqual(steps.map((s) => s.responseIds));
        // Step 3 breaks from step 2, and step 4 (which extends step 2's history, not step 3's) breaks again.
        expect((await store.getTrajectory('t1'))!.prefixBreaks).toBe(2);
        expect((await store.stats('train')).prefixBreaks).toBe(2);
        expect((await store.getStep('t1', 4))!.promptIds).toEqual(steps[4]!.promptIds);
      });

      it('keeps logprobs, views, tool results, timings and metadata', async () => {
        const messages = [
          { role: 'system', content: 'You are an agent.' },
          { role: 'user', content: 'list files' },
        ];
        const tools = [{ type: 'function', function: { name: 'ls', parameters: { type: 'object' } } }];
        const step0 = makeStep('tv', 'gv', 0, [1, 2], [3, 4], {
          responseLogprobs: [-0.5, -1.25],
          messages,
          tools,
          toolCalls: [{ id: 'call_1', type: 'function', function: { name: 'ls', arguments: '{}' } }],
          responseText: '',
          latencyMs: 12.5,
          ttftMs: 3,
          engineId: 'sim-0',
          tokenSource: 'engine',
          finishReason: 'tool_calls',
          metadata: { task: 'x', n: 0, flag: false },
        });
        const step1 = makeStep('tv', 'gv', 1, [1, 2, 3, 4, 5], [6], {
          messages: [...messages, { role: 'assistant', content: null }, { role: 'tool', content: 'a.txt' }],
          tools,
          toolResults: [{ tool_call_id: 'call_1', name: 'ls', content: 'a.txt', error: false }],
          isLast: true,
        });
        await submit([step0, step1]);
        const [a, b] = await store.getTrajectorySteps('tv');
        expect(a!.responseLogprobs).toEqual([-0.5, -1.25]);
        expect(a!.messages).toEqual(messages);
        expect(a!.tools).toEqual(tools);
        expect(a!.toolCalls).toEqual(step0.toolCalls);
        expect(a!.responseText).toBe('');
        expect(a!.metadata).toEqual({ task: 'x', n: 0, flag: false });
        expect([a!.latencyMs, a!.ttftMs, a!.engineId, a!.tokenSource, a!.finishReason]).toEqual([
          12.5,
          3,
          'sim-0',
          'engine',
          'tool_calls',
        ]);
        expect(b!.messages).toEqual(step1.messages);
        expect(b!.toolResults).toEqual(step1.toolResults);
        expect(b!.isLast).toBe(true);
      });

      it("keeps a guided step's training prompt, whatever edit it is of the prompt", async () => {
        // Hint removed from the middle, from the end, a prompt with no common part, and an empty one.
        const cases = [
          { prompt: [1, 2, 90, 91, 92, 3, 4], training: [1, 2, 3, 4] },
          { prompt: [1, 2, 3, 90, 91], training: [1, 2, 3] },
          { prompt: [7, 8], training: [5, 6, 5] },
          { prompt: [1, 1, 1], training: [1, 1] },
          { prompt: [4, 5], training: [] },
        ];
        const steps = cases.map((c, i) =>
          makeStep('tg', 'gg', i, c.prompt, [100 + i], { trainingPromptIds: c.training }),
        );
        await submit([...steps, makeStep('tg', 'gg', cases.length, [1], [2])]);
        const back = await store.getTrajectorySteps('tg');
        expect(back.map((s) => s.trainingPromptIds)).toEqual([...cases.map((c) => c.training), null]);
        expect(back.map((s) => s.promptIds)).toEqual([...cases.map((c) => c.prompt), [1]]);
      });

      it('treats a retried submission as a no-op and counts it', async () => {
        const steps = episode('t1', 'g1', 3);
        await submit(steps.slice(0, 2));
        const again = await submit(steps);
        expect(again).toMatchObject({ inserted: 1, duplicates: 2 });
        expect(await store.getTrajectorySteps('t1')).toHaveLength(3);
        expect((await store.stats('train')).produced.steps).toBe(3);
        expect((await store.stats('train')).duplicateSteps).toBe(2);
      });

      it('rejects a whole submission when one step conflicts with a stored one, storing nothing of it', async () => {
        await submit([makeStep('t1', 'g1', 0, [1, 2], [3])]);
        const [outcome] = await store.submitBatch(
          [
            {
              channel: 'train',
              nRollouts: null,
              steps: [makeStep('t2', 'g2', 0, [5], [6]), makeStep('t1', 'g1', 0, [1, 2], [4])],
            },
          ],
          tick(),
        );
        expect(outcome!.ok).toBe(false);
        if (!outcome!.ok) {
          expect(outcome!.error).toBeInstanceOf(ConflictError);
          expect(outcome!.error.field).toBe('steps.1');
        }
        expect(await store.getTrajectory('t2')).toBeNull();
        expect((await store.getTrajectorySteps('t1'))[0]!.responseIds).toEqual([3]);
      });

      it('commits good submissions of a batch even when another one in it is rejected', async () => {
        await submit([makeStep('t1', 'g1', 0, [1], [2])]);
        const outcomes = await store.submitBatch(
          [
            { channel: 'train', nRollouts: null, steps: [makeStep('a', 'ga', 0, [1], [2])] },
            { channel: 'val', nRollouts: null, steps: [makeStep('t1', 'g1', 1, [1, 2, 3], [4])] },
            { channel: 'train', nRollouts: null, steps: [makeStep('b', 'gb', 0, [1], [2])] },
          ],
          tick(),
        );
        expect(outcomes.map((o) => o.ok)).toEqual([true, false, true]);
        expect(await store.getTrajectory('a')).not.toBeNull();
        expect(await store.getTrajectory('b')).not.toBeNull();
        expect(await store.getTrajectorySteps('t1')).toHaveLength(1);
      });

      it('accepts steps out of order and completes only when every step up to the last is in', async () => {
        const steps = episode('t1', 'g1', 4);
        await submit([steps[3]!, steps[1]!]);
        expect((await store.getTrajectory('t1'))!.status).toBe('open');
        await submit([steps[0]!]);
        await submit([steps[2]!]);
        expect((await store.getTrajectory('t1'))!.status).toBe('complete');
        const back = await store.getTrajectorySteps('t1');
        expect(back.map((s) => s.promptIds)).toEqual(steps.map((s) => s.promptIds));
      });

      it('refuses new steps for a finished trajectory and steps beyond its last', async () => {
        await submit(episode('t1', 'g1', 2));
        await expect(submit([makeStep('t1', 'g1', 2, [1], [2])])).rejects.toThrow(/complete|beyond/);
        await submit([makeStep('t2', 'g2', 1, [1], [2], { isLast: true })]);
        await expect(submit([makeStep('t2', 'g2', 5, [1], [2])])).rejects.toThrow(/beyond/);
      });

      it('keeps a trajectory in its channel and its prompt group', async () => {
        await submit([makeStep('t1', 'g1', 0, [1], [2])], 'train');
        await expect(submit([makeStep('t1', 'g1', 1, [1, 2], [3])], 'val')).rejects.toMatchObject({
          field: 'channel',
        });
        await expect(submit([makeStep('t1', 'other', 1, [1, 2], [3])], 'train')).rejects.toMatchObject({
          field: 'steps.0.prompt_uid',
        });
      });

      it('stamps steps without a policy version with the current one', async () => {
        await store.setPolicyVersion(7, tick());
        await submit([
          makeStep('t1', 'g1', 0, [1], [2]),
          makeStep('t1', 'g1', 1, [1, 2], [3], { policyVersion: 5 }),
        ]);
        const steps = await store.getTrajectorySteps('t1');
        expect(steps.map((s) => s.policyVersion)).toEqual([7, 5]);
        expect(await store.getPolicyVersion()).toBe(7);
      });

      it('survives closing and reopening the database', async () => {
        await submit(episode('t1', 'g1', 3, 1));
        await store.setPolicyVersion(3, tick());
        store = poolOps(await h.reopen());
        expect((await store.getTrajectorySteps('t1')).map((s) => s.promptIds)).toEqual(
          episode('t1', 'g1', 3, 1).map((s) => s.promptIds),
        );
        expect(await store.getPolicyVersion()).toBe(3);
        // The encoding base of the next step is rebuilt from the database, not from memory.
        await store.createTrajectory(
          { id: 't9', groupId: 'g9', channel: 'train', nRollouts: 1, metadata: {} },
          tick(),
        );
        const ep = episode('t9', 'g9', 3);
        await submit(ep.slice(0, 2));
        store = poolOps(await h.reopen());
        await submit(ep.slice(2));
        expect((await store.getTrajectorySteps('t9')).map((s) => s.promptIds)).toEqual(
          ep.map((s) => s.promptIds),
        );
        expect((await store.getTrajectory('t9'))!.status).toBe('complete');
      });
    });

    it('keeps messages shared with the previous step even when no token is shared', async () => {
      const m0 = [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'U' },
      ];
      const m1 = [...m0, { role: 'assistant', content: 'A' }];
      await submit([
        makeStep('tm', 'gm', 0, [1, 2], [3], { messages: m0 }),
        makeStep('tm', 'gm', 1, [9, 9], [4], { messages: m1 }),
      ]);
      expect((await store.getTrajectorySteps('tm'))[1]!.messages).toEqual(m1);
    });

    it('treats a retry that changes is_last or the reward as a conflict, not a duplicate', async () => {
      await submit([makeStep('t', 'g', 0, [1], [2], { reward: 0 })]);
      await expect(
        submit([makeStep('t', 'g', 0, [1], [2], { reward: 0, isLast: true })]),
      ).rejects.toBeInstanceOf(ConflictError);
      await expect(submit([makeStep('t', 'g', 0, [1], [2], { reward: 1 })])).rejects.toBeInstanceOf(
        ConflictError,
      );
      expect((await store.getTrajectory('t'))!.status).toBe('open');
    });

    it('ignores a group size in step metadata that is not a whole number from 1 to 4096', async () => {
      await submit([makeStep('t', 'g', 0, [1], [2], { isLast: true, metadata: { n_rollouts: 0.5 } })]);
      expect((await store.getGroup('train', 'g'))!).toMatchObject({ expected: null, state: 'collecting' });
      await submit([makeStep('u', 'h', 0, [1], [2], { isLast: true, metadata: { n_rollouts: 1 } })]);
      expect((await store.getGroup('train', 'h'))!.state).toBe('ready');
    });

    describe('admission control (max_staleness and batch_groups)', () => {
      const init = (id: string, groupId: string) =>
        store.createTrajectory({ id, groupId, channel: 'train', nRollouts: 2, metadata: {} }, tick());
      /** Two rollouts of a group, both finished with a step made at `version`. */
      const finish = async (groupId: string, version: number, reward = 0) => {
        for (const r of [0, 1]) {
          const id = `${groupId}-r${r}`;
          if (!(await store.getTrajectory(id))) await init(id, groupId);
          await submit([
            makeStep(id, groupId, 0, [1, 2], [3], {
              isLast: true,
              reward: r === 0 ? reward : 1 - reward,
              policyVersion: version,
            }),
          ]);
        }
      };

      it('admits a new group only while fewer than (max_staleness + 1) x batch_groups are ahead of it', async () => {
        await store.setChannelConfig('train', { max_staleness: 1, batch_groups: 2, n_rollouts: 2 }, tick());
        for (const g of ['g1', 'g2', 'g3', 'g4']) await init(`${g}-r0`, g);
        const refused = await store
          .createTrajectory(
            { id: 'g5-r0', groupId: 'g5', channel: 'train', nRollouts: 2, metadata: {} },
            tick(),
          )
          .catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(StepwiseError);
        expect(refused).toMatchObject({ status: 429, code: 'staleness_budget', isRetryable: true });
        // Nothing was changed by the refusal; a later rollout of an admitted group still joins it.
        expect(await store.getTrajectory('g5-r0')).toBeNull();
        expect(await store.getGroup('train', 'g5')).toBeNull();
        await init('g1-r1', 'g1');
        expect((await store.getGroup('train', 'g1'))!.nTrajectories).toBe(2);
        // A consumed batch is the update in progress: its groups count until the version the update
        // publishes is set (a group started before would be trained two versions on, too stale).
        await finish('g1', 0);
        await finish('g2', 0);
        const batch = await lease({ batchSize: 2 });
        expect(batch!.groups.map((g) => g.group.id).sort()).toEqual(['g1', 'g2']);
        await store.ackLease(batch!.lease.id, tick());
        await expect(init('g5-r0', 'g5')).rejects.toMatchObject({ status: 429, code: 'staleness_budget' });
        // The new version frees budget for as many new groups as the batch held.
        await store.setPolicyVersion(1, tick());
        await init('g5-r0', 'g5');
        await init('g6-r0', 'g6');
        await expect(init('g7-r0', 'g7')).rejects.toMatchObject({ status: 429 });
        // A batch leased under the new version counts until the next one, acked or not.
        await finish('g3', 1);
        await finish('g4', 1);
        const next = await lease({ batchSize: 2 });
        await expect(init('g7-r0', 'g7')).rejects.toMatchObject({ status: 429 });
        await store.ackLease(next!.lease.id, tick());
        await expect(init('g7-r0', 'g7')).rejects.toMatchObject({ status: 429 });
        await store.setPolicyVersion(2, tick());
        await init('g7-r0', 'g7');
      });

      it('without batch_groups or max_staleness nothing is refused', async () => {
        await store.setChannelConfig('train', { max_staleness: 0 }, tick());
        for (let g = 0; g < 6; g++) await init(`h${g}`, `h${g}`);
        expect((await store.stats('train')).groups.collecting).toBe(6);
      });

      it('serves groups at the edge of max_staleness first, and a patient lease waits for an open straggler', async () => {
        await store.setChannelConfig('train', { max_staleness: 1, batch_groups: 2, n_rollouts: 2 }, tick());
        await store.setPolicyVersion(4, tick());
        await finish('fresh', 4);
        await finish('old', 3);
        // In queue order `fresh` is first; `old` would be stale after this update: it goes first.
        const first = await lease({ batchSize: 1 });
        expect(first!.groups.map((g) => g.group.id)).toEqual(['old']);
        await store.ackLease(first!.lease.id, tick());
        // An open rollout with a step at version 3: the next update would leave it stale.
        await init('slow-r0', 'slow');
        await submit([makeStep('slow-r0', 'slow', 0, [1], [2], { policyVersion: 3 })]);
        expect(await lease({ batchSize: 1, patient: true })).toBeNull();
        // Once it finishes (with its group), it is served, not dropped.
        await submit([
          makeStep('slow-r0', 'slow', 1, [1, 2, 5], [6], { isLast: true, reward: 1, policyVersion: 4 }),
        ]);
        await init('slow-r1', 'slow');
        await submit([
          makeStep('slow-r1', 'slow', 0, [1], [2], { isLast: true, reward: 0, policyVersion: 4 }),
        ]);
        const next = await lease({ batchSize: 1, patient: true });
        expect(next!.groups.map((g) => g.group.id)).toEqual(['slow']);
        expect((await store.stats('train')).dropped.stale ?? 0).toBe(0);
        // An impatient lease (its wait is over) does not wait for stragglers.
        await init('late-r0', 'late');
        await submit([makeStep('late-r0', 'late', 0, [1], [2], { policyVersion: 3 })]);
        expect(await lease({ batchSize: 1, patient: true })).toBeNull();
        expect((await lease({ batchSize: 1 }))!.groups.map((g) => g.group.id)).toEqual(['fresh']);
      });
    });

    describe('trajectories and groups', () => {
      it('creates a trajectory once, with its guidance and provenance fields', async () => {
        const t = await store.createTrajectory(
          {
            id: 'abc',
            groupId: 'g',
            channel: 'train',
            nRollouts: 2,
            metadata: { task: 1 },
            taskId: 'task-1',
            guided: true,
            guidanceK: 2,
            derivedFrom: 'xyz',
            derivation: { op: 'cleaner' },
          },
          tick(),
        );
        expect(t).toMatchObject({
          status: 'open',
          guided: true,
          guidanceK: 2,
          derivedFrom: 'xyz',
          taskId: 'task-1',
        });
        await expect(
          store.createTrajectory(
            { id: 'abc', groupId: 'g', channel: 'train', nRollouts: 2, metadata: {} },
            tick(),
          ),
        ).rejects.toBeInstanceOf(ConflictError);
        expect((await store.getGroup('train', 'g'))!.expected).toBe(2);
      });

      it('sets a trajectory reward explicitly, or sums its step rewards', async () => {
        const a = episode('a', 'g', 2, 1);
        a[0] = { ...a[0]!, reward: 0.5 };
        await submit(a);
        expect((await store.getTrajectory('a'))!.reward).toBe(1.5);
        await submit([makeStep('b', 'g', 0, [1], [2])]);
        const done = await store.completeTrajectory('b', { reward: 0.25, status: 'complete' }, tick());
        expect(done.reward).toBe(0.25);
        await submit([makeStep('c', 'g', 0, [1], [2])]);
        expect(
          (await store.completeTrajectory('c', { reward: null, status: 'complete' }, tick())).reward,
        ).toBeNull();
      });

      it('treats a repeated completion as a retry, a contradicting one as a conflict, an unknown id as not found', async () => {
        await submit([makeStep('t', 'g', 0, [1], [2])]);
        await store.completeTrajectory('t', { reward: 1, status: 'complete' }, tick());
        await expect(
          store.completeTrajectory('t', { reward: 1, status: 'complete' }, tick()),
        ).resolves.toMatchObject({
          status: 'complete',
        });
        await expect(
          store.completeTrajectory('t', { reward: null, status: 'aborted' }, tick()),
        ).rejects.toBeInstanceOf(ConflictError);
        await expect(
          store.completeTrajectory('nope', { reward: null, status: 'complete' }, tick()),
        ).rejects.toBeInstanceOf(NotFoundError);
      });

      it('makes a group ready only when n_rollouts trajectories are finished', async () => {
        await submit(episode('r0', 'g', 2), 'train', 3);
        await submit(episode('r1', 'g', 2), 'train', 3);
        expect((await store.getGroup('train', 'g'))!.state).toBe('collecting');
        expect(await lease({ nRollouts: 3 })).toBeNull();
        await submit(episode('r2', 'g', 2), 'train', 3);
        expect((await store.getGroup('train', 'g'))!.state).toBe('ready');
        const batch = await lease({ nRollouts: 3 });
        expect(batch!.groups[0]!.trajectories.map((t) => t.trajectory.id).sort()).toEqual(['r0', 'r1', 'r2']);
      });

      it('serves the complete rollouts of a group with an aborted one as partial, and drops an all-failed group', async () => {
        await submit(episode('ok', 'g', 2), 'train', 2);
        await submit([makeStep('bad', 'g', 0, [1], [2])], 'train', 2);
        await store.completeTrajectory('bad', { reward: null, status: 'aborted' }, tick());
        const batch = await lease({ nRollouts: 2 });
        expect(batch!.groups[0]!.group.partial).toBe(true);
        expect(batch!.groups[0]!.trajectories.map((t) => t.trajectory.id)).toEqual(['ok']);

        await store.createTrajectory(
          { id: 'x', groupId: 'h', channel: 'train', nRollouts: 1, metadata: {} },
          tick(),
        );
        await store.completeTrajectory('x', { reward: null, status: 'infra_failed' }, tick());
        expect((await store.getGroup('train', 'h'))!).toMatchObject({
          state: 'dropped',
          dropReason: 'no_complete_trajectories',
        });
        const stats = await store.stats('train');
        expect(stats.dropped.no_complete_trajectories).toBe(1);
        expect(stats.completed).toMatchObject({ aborted: 1, infraFailed: 1 });
      });

      it('never serves a trajectory that finished after its group was settled', async () => {
        await submit(episode('a', 'g', 1), 'train', 2);
        await submit([makeStep('b', 'g', 0, [1], [2])], 'train', 2);
        await store.completeTrajectory('b', { reward: null, status: 'aborted' }, tick());
        expect((await store.getGroup('train', 'g'))!.state).toBe('ready');
        await submit(episode('late', 'g', 1), 'train', 2);
        const batch = await lease({ nRollouts: 2 });
        expect(batch!.groups[0]!.trajectories.map((t) => t.trajectory.id)).toEqual(['a']);
        expect((await store.stats('train')).lateTrajectories).toBe(1);
      });

      it('settles a group as soon as a late-declared size is already reached', async () => {
        await submit(episode('a', 'g', 1));
        expect((await store.getGroup('train', 'g'))!.expected).toBeNull();
        await submit([makeStep('b', 'g', 0, [1], [2])], 'train', 1);
        expect((await store.getGroup('train', 'g'))!.state).toBe('ready');
      });

      it('takes a reward after an is_last completion until the group is handed out', async () => {
        await submit(episode('a', 'g', 2, 0), 'train', 1);
        expect(
          (await store.completeTrajectory('a', { reward: 0.75, status: 'complete' }, tick())).reward,
        ).toBe(0.75);
        const batch = await lease({ nRollouts: 1 });
        expect(batch!.groups[0]!.trajectories[0]!.trajectory.reward).toBe(0.75);
        await expect(
          store.completeTrajectory('a', { reward: 1, status: 'complete' }, tick()),
        ).rejects.toBeInstanceOf(ConflictError);
      });

      it('records a new channel even when another submission of the same batch is rejected', async () => {
        await submit([makeStep('x', 'px', 0, [1], [2])], 'train');
        const outcomes = await store.submitBatch(
          [
            { channel: 'newch', nRollouts: 3, steps: [makeStep('y', 'p1', 0, [1], [2])] },
            { channel: 'newch', nRollouts: 3, steps: [makeStep('x', 'wrong', 1, [1, 2], [3])] },
            { channel: 'newch', nRollouts: 3, steps: [makeStep('z', 'p2', 0, [1], [2])] },
          ],
          tick(),
        );
        expect(outcomes.map((o) => o.ok)).toEqual([true, false, true]);
        await store.setChannelConfig('newch', { group_timeout_ms: 1_000 }, tick());
        tick(5_000);
        expect((await store.sweep(tick())).dropped).toBe(2);
      });

      it('sizes unsized groups from the first lease that declares n_rollouts', async () => {
        await submit(episode('a', 'g', 1));
        await submit(episode('b', 'g', 1));
        expect((await store.getGroup('train', 'g'))!.expected).toBeNull();
        const batch = await lease({ nRollouts: 2 });
        expect(batch!.groups[0]!.group.id).toBe('g');
        expect((await store.getChannelConfig('train')).n_rollouts).toBe(2);
      });
    });

    describe('leases', () => {
      it('serves ready groups FIFO by readiness time, not creation time', async () => {
        await submit(episode('a0', 'A', 1), 'train', 2); // A starts first...
        await fillGroups(['B'], 2);
        await submit(episode('a1', 'A', 1), 'train', 2); // ...but is ready last
        await fillGroups(['C'], 2);
        const order: string[] = [];
        for (let i = 0; i < 3; i++) {
          const b = await lease({ nRollouts: 2 });
          order.push(b!.groups[0]!.group.id);
          await store.ackLease(b!.lease.id, tick());
        }
        expect(order).toEqual(['B', 'A', 'C']);
      });

      it('waits for a full batch and never leases a group twice', async () => {
        await fillGroups(['g1', 'g2', 'g3'], 2);
        expect(await lease({ batchSize: 4, nRollouts: 2 })).toBeNull();
        const first = await lease({ batchSize: 2, nRollouts: 2 });
        const second = await lease({ batchSize: 2, nRollouts: 2, consumer: 'c2' });
        expect(second).toBeNull();
        const third = await lease({ batchSize: 1, nRollouts: 2, consumer: 'c2' });
        const ids = [...first!.groups, ...third!.groups].map((g) => g.group.id);
        expect(new Set(ids).size).toBe(3);
        expect(first!.lease).toMatchObject({ consumer: 'c1', state: 'active' });
      });

      it('curation judges an online CLEANER trajectory by the rows it serves, not its failed attempts', async () => {
        await store.setChannelConfig(
          'cl',
          { curation: { repetition: { ngram: 2, max_fraction: 0.5 } } },
          tick(),
        );
        // Rolled back online (runner-written record): step 0 looped before its failed call, step 1
        // regenerated it with the error in view; the lease serves step 1's response at step 0's prompt.
        await store.createTrajectory(
          {
            id: 'cl-r0',
            groupId: 'G',
            channel: 'cl',
            nRollouts: 2,
            metadata: { cleaner: { repairs: [{ failed_step: 0, retry_step: 1, mode: 'deep' }] } },
          },
          tick(),
        );
        const looped = Array.from({ length: 20 }, () => 7);
        await submit(
          [
            makeStep('cl-r0', 'G', 0, [1, 2, 3], looped),
            makeStep('cl-r0', 'G', 1, [1, 2, 3, ...looped, 9, 9], [50, 51, 52, 53]),
            makeStep('cl-r0', 'G', 2, [1, 2, 3, 50, 51, 52, 53, 60], [70, 71], { isLast: true, reward: 1 }),
          ],
          'cl',
          2,
        );
        await submit(episode('cl-r1', 'G', 2, 0), 'cl', 2);
        const batch = await lease({ channel: 'cl', nRollouts: 2 });
        expect(batch!.groups[0]!.excluded ?? []).toEqual([]);
        const served = batch!.groups[0]!.trajectories.find((t) => t.trajectory.id === 'cl-r0')!;
        expect(served.steps.map((s) => [s.index, s.responseIds])).toEqual([
          [0, [50, 51, 52, 53]],
          [2, [70, 71]],
        ]);
      });

      it('never serves an acked group again; a retried ack is harmless', async () => {
        await fillGroups(['g1'], 2);
        const b = await lease({ nRollouts: 2 });
        await store.ackLease(b!.lease.id, tick());
        await expect(store.ackLease(b!.lease.id, tick())).resolves.toMatchObject({ state: 'acked' });
        expect(await lease({ nRollouts: 2 })).toBeNull();
        expect((await store.getGroup('train', 'g1'))!.state).toBe('consumed');
        const stats = await store.stats('train');
        expect(stats.consumed).toEqual({ groups: 1, steps: 4 });
      });

      it('serves a nacked group again before newer ones', async () => {
        await fillGroups(['g1', 'g2'], 2);
        const b = await lease({ nRollouts: 2 });
        expect(b!.groups[0]!.group.id).toBe('g1');
        await store.nackLease(b!.lease.id, tick());
        const again = await lease({ nRollouts: 2 });
        expect(again!.groups[0]!.group.id).toBe('g1');
        await expect(store.ackLease(b!.lease.id, tick())).rejects.toBeInstanceOf(ConflictError);
      });

      it('serves an expired lease’s groups again and refuses to ack it', async () => {
        await fillGroups(['g1'], 2);
        const b = await lease({ nRollouts: 2, ttlMs: 1_000 });
        tick(5_000);
        const swept = await store.sweep(tick());
        expect(swept.expiredLeases).toBe(1);
        await expect(store.ackLease(b!.lease.id, tick())).rejects.toBeInstanceOf(ConflictError);
        const again = await lease({ nRollouts: 2, consumer: 'c2' });
        expect(again!.groups[0]!.group.id).toBe('g1');
        expect((await store.getLease(b!.lease.id))!.state).toBe('expired');
      });

      it('expires overdue leases by itself when the next lease is taken', async () => {
        await fillGroups(['g1'], 2);
        const b = await lease({ nRollouts: 2, ttlMs: 1_000 });
        tick(2_000);
        const again = await lease({ nRollouts: 2, consumer: 'c2' });
        expect(again!.groups[0]!.group.id).toBe('g1');
        await expect(store.ackLease(b!.lease.id, tick())).rejects.toBeInstanceOf(ConflictError);
      });

      it('refusing an overdue ack expires every overdue lease, as a sweep would', async () => {
        await fillGroups(['g1', 'g2'], 2);
        const a = await lease({ nRollouts: 2, ttlMs: 1_000 });
        const b = await lease({ nRollouts: 2, ttlMs: 1_000, consumer: 'c2' });
        tick(5_000);
        await expect(store.nackLease(a!.lease.id, tick())).rejects.toBeInstanceOf(ConflictError);
        for (const l of [a!, b!]) expect((await store.getLease(l.lease.id))!.state).toBe('expired');
        for (const g of ['g1', 'g2']) expect((await store.getGroup('train', g))!.state).toBe('ready');
      });

      it('reports an unknown lease as not found', async () => {
        await expect(store.ackLease('lease_nope', tick())).rejects.toBeInstanceOf(NotFoundError);
      });

      it('keeps channels fully isolated', async () => {
        await fillGroups(['g1'], 2, 'train');
        await fillGroups(['g1'], 2, 'val');
        const val = await lease({ channel: 'val', nRollouts: 2 });
        expect(val!.groups[0]!.trajectories.every((t) => t.trajectory.channel === 'val')).toBe(true);
        expect(await lease({ channel: 'val', nRollouts: 2 })).toBeNull();
        const train = await lease({ channel: 'train', nRollouts: 2 });
        expect(train!.groups[0]!.trajectories.every((t) => t.trajectory.channel === 'train')).toBe(true);
        expect((await store.stats('val')).produced.steps).toBe(4);
        expect((await store.stats(null)).produced.steps).toBe(8);
      });

      it('drops the oldest ready group beyond max_queue_size and counts it', async () => {
        await store.setChannelConfig('train', { max_queue_size: 2 }, tick());
        await fillGroups(['g1', 'g2', 'g3'], 1);
        expect((await store.getGroup('train', 'g1'))!).toMatchObject({
          state: 'dropped',
          dropReason: 'queue_full',
        });
        const stats = await store.stats('train');
        expect(stats.dropped.queue_full).toBe(1);
        expect(stats.queueDepth).toBe(2);
        expect((await lease({ nRollouts: 1 }))!.groups[0]!.group.id).toBe('g2');
      });

      it('drops or flags groups older than max_staleness, as configured', async () => {
        await fillGroups(['old'], 1);
        await store.setPolicyVersion(3, tick());
        await fillGroups(['new'], 1);
        const fresh = await lease({ nRollouts: 1, maxStaleness: 1 });
        expect(fresh!.groups[0]!.group.id).toBe('new');
        expect((await store.getGroup('train', 'old'))!).toMatchObject({
          state: 'dropped',
          dropReason: 'stale',
        });

        await store.setChannelConfig('train', { stale_policy: 'flag', max_staleness: 0 }, tick());
        await fillGroups(['older'], 1);
        await store.setPolicyVersion(5, tick());
        const flagged = await lease({ nRollouts: 1 });
        expect(flagged!.groups[0]).toMatchObject({ stale: true, staleness: 2 });
        expect((await store.stats('train')).dropped.stale).toBe(1);
      });

      it('drops or serves partially a group that stays incomplete past its timeout', async () => {
        await store.setChannelConfig(
          'train',
          { group_timeout_ms: 10_000, incomplete_policy: 'drop' },
          tick(),
        );
        await submit(episode('a', 'g1', 1), 'train', 3);
        await store.setChannelConfig(
          'val',
          { group_timeout_ms: 10_000, incomplete_policy: 'serve_partial' },
          tick(),
        );
        await submit(episode('b', 'g2', 1), 'val', 3);
        await submit([makeStep('c', 'g2', 0, [1], [2])], 'val', 3);
        tick(5_000);
        expect(await store.sweep(tick())).toMatchObject({ dropped: 0, servedPartial: 0 });
        tick(6_000);
        expect(await store.sweep(tick())).toMatchObject({ dropped: 1, servedPartial: 1 });
        expect((await store.getGroup('train', 'g1'))!.dropReason).toBe('incomplete_timeout');
        const partial = await lease({ channel: 'val', nRollouts: 3 });
        expect(partial!.groups[0]!.group.partial).toBe(true);
        expect(partial!.groups[0]!.trajectories.map((t) => t.trajectory.id)).toEqual(['b']);
      });
    });

    describe('gateway sessions', () => {
      it('closes open trajectories idle past the channel timeout as aborted, and only those', async () => {
        await store.setChannelConfig('train', { idle_timeout_ms: 10_000 }, tick());
        await store.setChannelConfig('val', { idle_timeout_ms: null }, tick());
        await store.createTrajectory(
          { id: 'quiet', groupId: 'g1', channel: 'train', nRollouts: 2, metadata: {} },
          tick(),
        );
        await submit([makeStep('busy', 'g1', 0, [1, 2], [3])], 'train', 2);
        await submit(episode('done', 'g2', 1), 'train', 1);
        await submit([makeStep('forever', 'g3', 0, [1], [2])], 'val', 1);
        tick(6_000);
        await submit([makeStep('busy', 'g1', 1, [1, 2, 3, 4], [5])], 'train', 2); // activity resets the clock
        expect((await store.sweep(tick())).idleAborted).toBe(0);
        tick(5_000);
        expect((await store.sweep(tick())).idleAborted).toBe(1);
        expect((await store.getTrajectory('quiet'))!.status).toBe('aborted');
        expect((await store.getTrajectory('busy'))!.status).toBe('open');
        tick(6_000);
        expect((await store.sweep(tick())).idleAborted).toBe(1);
        expect((await store.getTrajectory('busy'))!.status).toBe('aborted');
        expect((await store.getTrajectory('busy'))!.nSteps).toBe(2);
        expect((await store.getTrajectory('done'))!.status).toBe('complete');
        tick(1_000_000);
        expect((await store.sweep(tick())).idleAborted).toBe(0);
        expect((await store.getTrajectory('forever'))!.status).toBe('open');
        const stats = await store.stats('train');
        expect(stats.completed).toMatchObject({ aborted: 2, idleAborted: 2, trajectories: 1 });
        // Both rollouts of g1 finished (aborted): the group is settled, not left collecting.
        expect((await store.getGroup('train', 'g1'))!.nFinished).toBe(2);
        const events = await store.readEvents({ after: 0, limit: 100, types: ['trajectory_completed'] });
        expect(events.filter((e) => e.data.reason === 'idle').map((e) => e.data.trajectory_uid)).toEqual([
          'quiet',
          'busy',
        ]);
      });

      it('attaches tool results to the stored step they answer, in the same commit as the next step', async () => {
        const toolCalls = [{ id: 'call_1', type: 'function', function: { name: 'ls', arguments: '{}' } }];
        await submit([makeStep('t', 'g', 0, [1, 2], [3], { toolCalls, responseText: 'x' })]);
        const results = [{ tool_call_id: 'call_1', name: 'ls', content: 'No such file', error: true }];
        const [outcome] = await store.submitBatch(
          [
            {
              channel: 'train',
              nRollouts: null,
              steps: [makeStep('t', 'g', 1, [1, 2, 3, 9], [4])],
              toolResults: [
                { trajectoryId: 't', index: 0, results },
                { trajectoryId: 't', index: 7, results }, // no such step: skipped
                { trajectoryId: 'nobody', index: 0, results },
              ],
            },
          ],
          tick(),
        );
        expect(outcome!.ok).toBe(true);
        const [first, second] = await store.getTrajectorySteps('t');
        expect(first!.toolResults).toEqual(results);
        expect(first!.toolCalls).toEqual(toolCalls);
        expect(first!.responseText).toBe('x');
        expect(second!.toolResults).toBeNull();
        // Attachments alone (no step) commit too; a retried step stays a duplicate, not a conflict.
        await store.submitBatch(
          [
            {
              channel: 'train',
              nRollouts: null,
              steps: [],
              toolResults: [{ trajectoryId: 't', index: 1, results }],
            },
          ],
          tick(),
        );
        expect((await store.getStep('t', 1))!.toolResults).toEqual(results);
        expect((await submit([makeStep('t', 'g', 0, [1, 2], [3], { toolCalls })])).duplicates).toBe(1);
      });

      it('merges metadata into open trajectories only', async () => {
        await store.createTrajectory(
          { id: 't', groupId: 'g', channel: 'train', nRollouts: null, metadata: { a: 1, b: 2 } },
          tick(),
        );
        const merged = await store.mergeTrajectoryMetadata('t', { b: 3, c: 'x' }, tick());
        expect(merged.metadata).toEqual({ a: 1, b: 3, c: 'x' });
        expect((await store.getTrajectory('t'))!.metadata).toEqual({ a: 1, b: 3, c: 'x' });
        await store.completeTrajectory('t', { status: 'complete', reward: 1 }, tick());
        await expect(store.mergeTrajectoryMetadata('t', { d: 1 }, tick())).rejects.toBeInstanceOf(
          ConflictError,
        );
        await expect(store.mergeTrajectoryMetadata('nope', {}, tick())).rejects.toBeInstanceOf(NotFoundError);
      });

      it('records failed calls as events and counts them per channel', async () => {
        const base = { trajectoryId: 't', groupId: 'g', engineId: 'sim', partial: null };
        await store.recordCallFailure(
          {
            ...base,
            channel: 'train',
            kind: 'aborted',
            status: null,
            message: 'client went away',
            partial: { promptTokens: 12, responseIds: [5, 6], responseText: 'he' },
          },
          tick(),
        );
        await store.recordCallFailure(
          { ...base, channel: 'train', kind: 'upstream_error', status: 502, message: 'engine down' },
          tick(),
        );
        await store.recordCallFailure(
          { ...base, channel: 'val', kind: 'upstream_error', status: 504, message: 'slow' },
          tick(),
        );
        await store.recordCallFailure(
          { ...base, channel: 'val', kind: 'capture_failed', status: 503, message: 'disk full' },
          tick(),
        );
        expect((await store.stats('train')).failedCalls).toEqual({
          aborted: 1,
          upstreamError: 1,
          captureFailed: 0,
        });
        expect((await store.stats(null)).failedCalls).toEqual({
          aborted: 1,
          upstreamError: 2,
          captureFailed: 1,
        });
        const events = await store.readEvents({
          after: 0,
          limit: 10,
          types: ['call_failed'],
          channel: 'train',
        });
        expect(events.map((e) => e.data)).toEqual([
          expect.objectContaining({ kind: 'aborted', response_ids: [5, 6], prompt_tokens: 12 }),
          expect.objectContaining({ kind: 'upstream_error', status: 502, message: 'engine down' }),
        ]);
      });

      it('records refusals as events, and opens a trajectory in a new group only when asked to', async () => {
        await store.recordRefusal(
          {
            channel: 'train',
            trajectoryId: 't',
            by: 'bridge',
            attempts: ['GET /v1/stats'],
            count: 3,
            reason: 'outside the LLM routes',
          },
          tick(),
        );
        const [event] = await store.readEvents({ after: 0, limit: 10, types: ['access_refused'] });
        expect(event).toMatchObject({
          channel: 'train',
          data: { trajectory_uid: 't', by: 'bridge', attempts: ['GET /v1/stats'], count: 3 },
        });
        const open = (id: string, newGroup: boolean) =>
          store.createTrajectory(
            { id, groupId: 'shared', channel: 'train', nRollouts: 2, metadata: {}, newGroup },
            tick(),
          );
        await open('first', true);
        await expect(open('second', true)).rejects.toMatchObject({ field: 'group_id' });
        expect(await store.getTrajectory('second')).toBeNull();
        await open('third', false);
        expect((await store.getGroup('train', 'shared'))?.nTrajectories).toBe(2);
      });
    });

    describe('labels', () => {
      it('excludes untrainable steps and trajectories from served batches, keeping the audit trail', async () => {
        await fillGroups(['g'], 2);
        await store.addLabels(
          [{ trajectory_uid: 'train-g-r0', step_index: 0, trainable: false, tags: ['loop'] }],
          tick(),
        );
        await store.addLabels(
          [{ trajectory_uid: 'train-g-r1', trainable: false, note: 'reward hack' }],
          tick(),
        );
        // A later label on the same step changes only what it names.
        await store.addLabels([{ trajectory_uid: 'train-g-r0', step_index: 0, quality: 'bad' }], tick());
        const b = await lease({ nRollouts: 2 });
        const served = b!.groups[0]!.trajectories;
        const r0 = served.find((t) => t.trajectory.id === 'train-g-r0')!;
        expect(r0.steps.map((s) => s.index)).toEqual([1]);
        expect(served.find((t) => t.trajectory.id === 'train-g-r1')!.steps).toEqual([]);
        const label = r0.labels.find((l) => l.stepIndex === 0)!;
        expect(label).toMatchObject({ trainable: false, quality: 'bad', tags: ['loop'] });
        expect(await store.getLabels('train-g-r0')).toHaveLength(2);
      });

      it('lets a step label override its trajectory label', async () => {
        await fillGroups(['g'], 1);
        await store.addLabels(
          [
            { trajectory_uid: 'train-g-r0', trainable: false },
            { trajectory_uid: 'train-g-r0', step_index: 1, trainable: true },
          ],
          tick(),
        );
        const b = await lease({ nRollouts: 1 });
        expect(b!.groups[0]!.trajectories[0]!.steps.map((s) => s.index)).toEqual([1]);
      });

      it('filters steps by the label in force: a step label overrides its trajectory label', async () => {
        await fillGroups(['g'], 1);
        await store.addLabels(
          [
            { trajectory_uid: 'train-g-r0', trainable: false, quality: 'bad' },
            { trajectory_uid: 'train-g-r0', step_index: 1, trainable: true },
          ],
          tick(),
        );
        const page = { limit: 50, offset: 0 };
        expect((await store.listSteps({ trainable: false, ...page })).items.map((s) => s.index)).toEqual([0]);
        expect((await store.listSteps({ trainable: true, ...page })).items.map((s) => s.index)).toEqual([1]);
        expect((await store.listSteps({ quality: 'bad', ...page })).items.map((s) => s.index).sort()).toEqual(
          [0, 1],
        );
      });

      it('refuses a label on a step index beyond any trajectory', async () => {
        await fillGroups(['g'], 1);
        await fillGroups(['h'], 1);
        await expect(
          store.addLabels([{ trajectory_uid: 'train-g-r0', step_index: 2 ** 20, quality: 'bad' }], tick()),
        ).rejects.toBeInstanceOf(NotFoundError);
      });

      it('refuses labels for unknown trajectories or steps, storing none of the batch', async () => {
        await fillGroups(['g'], 1);
        await expect(
          store.addLabels(
            [
              { trajectory_uid: 'train-g-r0', trainable: false },
              { trajectory_uid: 'train-g-r0', step_index: 9, trainable: false },
            ],
            tick(),
          ),
        ).rejects.toBeInstanceOf(NotFoundError);
        expect(await store.getLabels('train-g-r0')).toEqual([]);
      });
    });

    describe('signals', () => {
      const signalEvents = async () =>
        (await store.readEvents({ after: 0, limit: 1000, types: ['signal_added'] })).map((e) => e.data);

      it('stores trajectory-level and step-level signals and reads them back, details included', async () => {
        await submit(episode('t', 'g', 2));
        const at = tick();
        const details = {
          checks: [
            { id: 'exists', ok: true },
            { id: 'size', ok: false },
          ],
          note: 'ok',
          x: null,
        };
        const added = await store.addSignals(
          [
            { trajectoryId: 't', stepIndex: null, name: 'outcome', value: 0.5, source: 'verifier', details },
            { trajectoryId: 't', stepIndex: 1, name: 'format', value: -1, source: 'rule', version: 'fmt-2' },
          ],
          at,
        );
        expect(added).toEqual([
          {
            trajectoryId: 't',
            stepIndex: null,
            name: 'outcome',
            value: 0.5,
            source: 'verifier',
            version: '1',
            details,
            createdAt: at,
          },
          {
            trajectoryId: 't',
            stepIndex: 1,
            name: 'format',
            value: -1,
            source: 'rule',
            version: 'fmt-2',
            details: {},
            createdAt: at,
          },
        ]);
        expect(await store.getSignals('t')).toEqual(added);
        for (const signal of await store.getSignals('t')) Signal.parse(signal);
        expect(await store.getSignals('unknown')).toEqual([]);
        store = poolOps(await h.reopen());
        expect(await store.getSignals('t', { current: true })).toEqual(added);
      });

      it('accepts signals on open and finished trajectories alike', async () => {
        await submit([makeStep('open', 'g', 0, [1], [2])]);
        await store.createTrajectory(
          { id: 'empty', groupId: 'h', channel: 'val', nRollouts: 1, metadata: {} },
          tick(),
        );
        await store.addSignals(
          [
            { trajectoryId: 'open', stepIndex: 0, name: 'r', value: 1, source: 'env' },
            { trajectoryId: 'empty', stepIndex: null, name: 'r', value: 0, source: 'human' },
          ],
          tick(),
        );
        expect(await store.getSignals('open')).toHaveLength(1);
        expect(await store.getSignals('empty')).toHaveLength(1);
      });

      it('refuses a batch naming an unknown trajectory, storing none of it', async () => {
        await submit(episode('t', 'g', 1));
        const error = await store
          .addSignals(
            [
              { trajectoryId: 't', stepIndex: null, name: 'ok', value: 1, source: 'judge' },
              { trajectoryId: 'nope', stepIndex: null, name: 'ok', value: 1, source: 'judge' },
            ],
            tick(),
          )
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(NotFoundError);
        expect((error as Error).message).toMatch(/signals\.1\.trajectory_uid: .*nope/);
        expect(await store.getSignals('t')).toEqual([]);
        expect(await signalEvents()).toEqual([]);
      });

      it('refuses a batch naming an unknown step, storing none of it', async () => {
        await submit(episode('t', 'g', 2));
        const mixed = (stepIndex: number) =>
          store.addSignals(
            [
              { trajectoryId: 't', stepIndex: 0, name: 'ok', value: 1, source: 'rule' },
              { trajectoryId: 't', stepIndex: null, name: 'ok', value: 1, source: 'rule' },
              { trajectoryId: 't', stepIndex, name: 'ok', value: 1, source: 'rule' },
            ],
            tick(),
          );
        await expect(mixed(2)).rejects.toBeInstanceOf(NotFoundError);
        await expect(mixed(2)).rejects.toThrow(/signals\.2\.step_index: step 2 of trajectory t/);
        await expect(mixed(2 ** 20)).rejects.toBeInstanceOf(NotFoundError);
        expect(await store.getSignals('t')).toEqual([]);
        expect(await signalEvents()).toEqual([]);
      });

      it('refuses a signal that breaks the schema, naming the field', async () => {
        await submit(episode('t', 'g', 1));
        await expect(
          store.addSignals(
            [{ trajectoryId: 't', stepIndex: null, name: 'x', value: Number.NaN, source: 'rule' }],
            tick(),
          ),
        ).rejects.toMatchObject({ field: 'signals.0.value' });
        expect(await store.getSignals('t')).toEqual([]);
      });

      it('keeps every signal as history; current holds the latest per step, name and source', async () => {
        await submit(episode('t', 'g', 2));
        const judge = (value: number, stepIndex: number | null = null, version = '1') =>
          ({ trajectoryId: 't', stepIndex, name: 'quality', value, source: 'judge', version }) as const;
        await store.addSignals([judge(0.1), judge(0.2, 0)], tick());
        // Another source with the same name is another key; within one call the later one wins.
        await store.addSignals(
          [{ ...judge(1), source: 'human' }, judge(0.3, null, 'judge-v2'), judge(0.4, null, 'judge-v3')],
          tick(),
        );
        const history = await store.getSignals('t');
        expect(history.map((s) => s.value)).toEqual([0.1, 0.2, 1, 0.3, 0.4]);
        const current = await store.getSignals('t', { current: true });
        expect(current.map((s) => [s.stepIndex, s.source, s.value, s.version])).toEqual([
          [0, 'judge', 0.2, '1'],
          [null, 'human', 1, '1'],
          [null, 'judge', 0.4, 'judge-v3'],
        ]);
        expect(await store.getSignals('t', { current: false })).toEqual(history);
        // Order is by createdAt, then insertion: a signal stamped earlier (another process's clock)
        // sorts before, and so does not supersede a later one.
        await store.addSignals([judge(0.9)], now - 10);
        expect((await store.getSignals('t'))[0]!.value).toBe(0.9);
        expect((await store.getSignals('t', { current: true })).map((s) => s.value)).toEqual([0.2, 1, 0.4]);
      });

      it('logs a signal_added event per signal in the same commit', async () => {
        await submit(episode('t', 'g', 2), 'val');
        await store.addSignals(
          [
            {
              trajectoryId: 't',
              stepIndex: 1,
              name: 'tests',
              value: 0.75,
              source: 'verifier',
              version: 'v9',
            },
            { trajectoryId: 't', stepIndex: null, name: 'outcome', value: 1, source: 'env' },
          ],
          tick(),
        );
        const events = await store.readEvents({ after: 0, limit: 100, types: ['signal_added'] });
        expect(events.map((e) => [e.channel, e.data])).toEqual([
          [
            'val',
            {
              trajectory_uid: 't',
              step_index: 1,
              name: 'tests',
              value: 0.75,
              source: 'verifier',
              version: 'v9',
            },
          ],
          [
            'val',
            { trajectory_uid: 't', step_index: null, name: 'outcome', value: 1, source: 'env', version: '1' },
          ],
        ]);
        for (const event of events) PoolEvent.parse(event);
      });

      it('serves the current signals of each trajectory with a leased batch', async () => {
        await fillGroups(['g'], 2);
        await store.addSignals(
          [
            { trajectoryId: 'train-g-r0', stepIndex: null, name: 'judge', value: 0.2, source: 'judge' },
            {
              trajectoryId: 'train-g-r0',
              stepIndex: 1,
              name: 'fmt',
              value: 1,
              source: 'rule',
              details: { a: [1] },
            },
          ],
          tick(),
        );
        await store.addSignals(
          [{ trajectoryId: 'train-g-r0', stepIndex: null, name: 'judge', value: 0.7, source: 'judge' }],
          tick(),
        );
        const b = await lease({ nRollouts: 2 });
        const served = new Map(b!.groups[0]!.trajectories.map((t) => [t.trajectory.id, t.signals]));
        expect(served.get('train-g-r0')!.map((s) => [s.name, s.value, s.details])).toEqual([
          ['fmt', 1, { a: [1] }],
          ['judge', 0.7, {}],
        ]);
        expect(served.get('train-g-r1')).toEqual([]);
      });
    });

    describe('required signals', () => {
      const signal = (trajectoryId: string, name: string, stepIndex: number | null = null) => ({
        trajectoryId,
        stepIndex,
        name,
        value: 1,
        source: 'rule' as const,
      });

      it('holds a finished group back until every complete rollout has each required signal', async () => {
        await store.setChannelConfig('train', { required_signals: ['reward', 'judge'] }, tick());
        await submit(episode('a', 'g', 2), 'train', 3);
        await submit(episode('b', 'g', 2), 'train', 3);
        await submit([makeStep('c', 'g', 0, [1], [2])], 'train', 3);
        await store.completeTrajectory('c', { reward: null, status: 'aborted' }, tick());
        // Every rollout is in; none is scored.
        expect((await store.getGroup('train', 'g'))!.state).toBe('collecting');
        expect(await lease({ nRollouts: 3 })).toBeNull();
        expect((await store.stats('train')).awaitingSignals).toBe(1);

        // A step-level signal, a signal of another name, and one of two names for one rollout: not yet.
        await store.addSignals([signal('a', 'reward', 0), signal('a', 'other')], tick());
        await store.addSignals([signal('a', 'reward'), signal('a', 'judge'), signal('b', 'reward')], tick());
        expect((await store.getGroup('train', 'g'))!.state).toBe('collecting');
        expect(await lease({ nRollouts: 3 })).toBeNull();

        // The last one: ready at once (the aborted rollout needs none), served with its signals.
        await store.addSignals([signal('b', 'judge')], tick());
        expect((await store.getGroup('train', 'g'))!.state).toBe('ready');
        expect((await store.stats('train')).awaitingSignals).toBe(0);
        const batch = await lease({ nRollouts: 3 });
        expect(batch!.groups[0]!.group.partial).toBe(true);
        for (const t of batch!.groups[0]!.trajectories)
          expect(t.signals.map((x) => x.name).sort()).toEqual(
            t.trajectory.id === 'a' ? ['judge', 'other', 'reward', 'reward'] : ['judge', 'reward'],
          );
      });

      it('makes a group ready at completion when its signals came first; other channels are not gated', async () => {
        await store.setChannelConfig('train', { required_signals: ['reward'] }, tick());
        await submit([makeStep('a', 'g', 0, [1], [2])], 'train', 1);
        await store.addSignals([signal('a', 'reward')], tick());
        expect((await store.getGroup('train', 'g'))!.state).toBe('collecting');
        await store.completeTrajectory('a', { reward: 1, status: 'complete' }, tick());
        expect((await store.getGroup('train', 'g'))!.state).toBe('ready');
        await submit(episode('v', 'h', 1), 'val', 1);
        expect((await store.getGroup('val', 'h'))!.state).toBe('ready');
      });

      it('drops a group still missing signals at its timeout, whatever the incomplete policy', async () => {
        await store.setChannelConfig(
          'train',
          { required_signals: ['reward'], group_timeout_ms: 10_000, incomplete_policy: 'serve_partial' },
          tick(),
        );
        await submit(episode('a', 'g', 1), 'train', 1);
        tick(11_000);
        expect(await store.sweep(tick())).toMatchObject({ dropped: 1, servedPartial: 0 });
        expect((await store.getGroup('train', 'g'))!).toMatchObject({
          state: 'dropped',
          dropReason: 'signals_missing',
        });
        expect((await store.stats('train')).dropped.signals_missing).toBe(1);
      });

      it('refuses a bad required_signals list, naming the field, and keeps the config', async () => {
        const before = await store.getChannelConfig('train');
        await expect(
          store.setChannelConfig('train', { required_signals: ['a', 'a'] }, tick()),
        ).rejects.toMatchObject({ field: expect.stringContaining('required_signals') });
        await expect(
          store.setChannelConfig('train', { required_signals: [''] } as never, tick()),
        ).rejects.toMatchObject({ field: expect.stringContaining('required_signals') });
        expect(await store.getChannelConfig('train')).toEqual(before);
      });

      it('releases held groups when the requirement is lifted', async () => {
        await store.setChannelConfig('train', { required_signals: ['reward'] }, tick());
        await submit(episode('a', 'g', 1), 'train', 1);
        expect((await store.getGroup('train', 'g'))!.state).toBe('collecting');
        await store.setChannelConfig('train', { required_signals: [] }, tick());
        expect((await store.getGroup('train', 'g'))!.state).toBe('ready');
      });
    });

    describe('dashboard reads', () => {
      it('filters trajectories by guidance, provenance and policy version', async () => {
        await fillGroups(['g1'], 2);
        await store.createTrajectory(
          {
            id: 'guided',
            groupId: 'gg',
            channel: 'train',
            nRollouts: 1,
            metadata: {},
            guided: true,
            guidanceK: 2,
          },
          tick(),
        );
        await store.createTrajectory(
          { id: 'probe', groupId: 'gp', channel: 'train-probe', nRollouts: 1, metadata: {}, probe: true },
          tick(),
        );
        await store.createTrajectory(
          {
            id: 'derived',
            groupId: 'g1',
            channel: 'p',
            nRollouts: 1,
            metadata: {},
            derivedFrom: 'train-g1-r0',
          },
          tick(),
        );
        await store.setPolicyVersion(3, tick());
        await submit([makeStep('guided', 'gg', 0, [1], [2])], 'train', 1);
        const ids = async (q: Partial<TrajectoryQuery>) =>
          (await store.listTrajectories({ limit: 50, offset: 0, ...q })).items.map((t) => t.id).sort();
        expect(await ids({ guided: true })).toEqual(['guided']);
        expect(await ids({ guided: false, channel: 'train' })).toEqual(['train-g1-r0', 'train-g1-r1']);
        expect(await ids({ probe: true })).toEqual(['probe']);
        expect(await ids({ derived: true })).toEqual(['derived']);
        expect((await ids({ derived: false })).includes('derived')).toBe(false);
        // Steps stamped with version 3: only the guided trajectory's (written after the switch).
        expect(await ids({ policyVersion: 3 })).toEqual(['guided']);
        expect(await ids({ policyVersion: 0 })).toEqual(['train-g1-r0', 'train-g1-r1']);
      });

      it('summarises rewards and group outcomes over settled groups', async () => {
        const group = async (id: string, rewards: (number | null)[]) => {
          for (const [r, reward] of rewards.entries())
            await submit(
              [makeStep(`${id}-r${r}`, id, 0, [1, r], [2], { isLast: true, reward })],
              'train',
              rewards.length,
            );
        };
        await group('zero', [0, 0]);
        await group('one', [1, 1]);
        await group('mixed', [0, 1]);
        await group('half', [0.5, 0.5]);
        await group('unscored', [1, null]);
        await submit(episode('open-r0', 'open', 1, 1), 'train', 3); // still collecting: not counted
        const s = await store.dashboardSummary('train', 4);
        expect(s.outcomes).toEqual({ allZero: 1, allOne: 1, mixed: 2, unscored: 1 });
        expect(s.rewards.min).toBe(0);
        expect(s.rewards.max).toBe(1);
        // Rewarded complete trajectories: 0 ×3, 0.5 ×2, 1 ×5 over 4 bins of 0.25 (1 falls in the last).
        expect(s.rewards.bins.map((b) => b.count)).toEqual([3, 0, 2, 5]);
        expect(s.rewards.bins[1]).toMatchObject({ from: 0.25, to: 0.5 });
        expect((await store.dashboardSummary('none')).rewards).toEqual({ min: null, max: null, bins: [] });
      });
    });

    describe('queries, events and stats', () => {
      it('lists steps and trajectories with filters and pagination', async () => {
        await fillGroups(['g1', 'g2'], 2);
        await fillGroups(['g1'], 1, 'val');
        await store.addLabels(
          [{ trajectory_uid: 'train-g2-r1', step_index: 1, trainable: false, tags: ['x'] }],
          tick(),
        );
        const all = await store.listSteps({ channel: 'train', limit: 3, offset: 0 });
        expect(all.total).toBe(8);
        expect(all.items).toHaveLength(3);
        const next = await store.listSteps({ channel: 'train', limit: 10, offset: 3 });
        expect(next.items).toHaveLength(5);
        const keys = [...all.items, ...next.items].map((s) => `${s.trajectoryId}#${s.index}`);
        expect(new Set(keys).size).toBe(8);
        expect((await store.listSteps({ groupId: 'g1', limit: 50, offset: 0 })).total).toBe(6);
        expect(
          (await store.listSteps({ trajectoryId: 'train-g1-r0', limit: 50, offset: 0 })).items[0]!.promptIds,
        ).toEqual(episode('train-g1-r0', 'g1', 2, 0).at(-1)!.promptIds);
        expect((await store.listSteps({ channel: 'train', rewardMin: 1, limit: 50, offset: 0 })).total).toBe(
          2,
        );
        expect(
          (await store.listSteps({ trainable: false, limit: 50, offset: 0 })).items.map((s) => s.index),
        ).toEqual([1]);
        expect((await store.listSteps({ tag: 'x', limit: 50, offset: 0 })).total).toBe(1);
        const trajectories = await store.listTrajectories({
          channel: 'train',
          rewardMin: 1,
          limit: 50,
          offset: 0,
        });
        expect(trajectories.items.map((t) => t.id).sort()).toEqual(['train-g1-r1', 'train-g2-r1']);
        expect((await store.listTrajectories({ status: 'complete', limit: 1, offset: 0 })).total).toBe(5);
        // A trajectory matches a label filter when it or any of its steps carries that label.
        expect(
          (await store.listTrajectories({ trainable: false, limit: 50, offset: 0 })).items.map((t) => t.id),
        ).toEqual(['train-g2-r1']);
        expect((await store.listTrajectories({ tag: 'x', limit: 50, offset: 0 })).items[0]!.id).toBe(
          'train-g2-r1',
        );
      });

      it('scans trajectories oldest first by cursor, with the list filters, unshaken by new arrivals', async () => {
        await fillGroups(['g1', 'g2', 'g3'], 2);
        await fillGroups(['g1'], 1, 'val');
        await store.createTrajectory(
          { id: 'open-1', groupId: 'g9', channel: 'train', nRollouts: null, metadata: {} },
          tick(),
        );
        const seen: string[] = [];
        let after: string | null = null;
        let pages = 0;
        do {
          const page: Awaited<ReturnType<Store['scanTrajectories']>> = await store.scanTrajectories({
            channel: 'train',
            status: 'complete',
            after,
            limit: 2,
          });
          seen.push(...page.items.map((t) => t.id));
          after = page.cursor;
          pages++;
          // Arrivals during the walk land after the cursor and never shift what is still to come.
          if (pages === 1) await fillGroups(['g4'], 1);
        } while (after !== null);
        expect(seen).toEqual([
          'train-g1-r0',
          'train-g1-r1',
          'train-g2-r0',
          'train-g2-r1',
          'train-g3-r0',
          'train-g3-r1',
          'train-g4-r0',
        ]);
        const anyChannel = await store.scanTrajectories({ status: 'complete', after: null, limit: 100 });
        expect(anyChannel.items.map((t) => t.id)).toContain('val-g1-r0');
        expect(anyChannel.items.map((t) => t.id)).not.toContain('open-1');
        expect(anyChannel.cursor).toBeNull();
        const rewarded = await store.scanTrajectories({
          rewardMin: 1,
          groupId: 'g2',
          after: null,
          limit: 100,
        });
        expect(rewarded.items.map((t) => t.id)).toEqual(['train-g2-r1']);
        await expect(store.scanTrajectories({ after: 'x1', limit: 10 })).rejects.toMatchObject({
          field: 'after',
        });
      });

      it('reads the label state in force beside the audit trail', async () => {
        await fillGroups(['g'], 1);
        await store.addLabels(
          [{ trajectory_uid: 'train-g-r0', quality: 'good', tags: ['a'], note: 'first' }],
          tick(),
        );
        // A patch: quality is cleared, tags replaced, the note stays.
        await store.addLabels(
          [
            { trajectory_uid: 'train-g-r0', quality: null, tags: ['b'] },
            { trajectory_uid: 'train-g-r0', step_index: 1, trainable: false },
          ],
          tick(),
        );
        const current = await store.getCurrentLabels('train-g-r0');
        expect(current.sort((a, b) => (a.stepIndex ?? -1) - (b.stepIndex ?? -1))).toEqual([
          {
            trajectoryId: 'train-g-r0',
            stepIndex: null,
            quality: null,
            trainable: null,
            tags: ['b'],
            note: 'first',
          },
          { trajectoryId: 'train-g-r0', stepIndex: 1, quality: null, trainable: false, tags: [], note: null },
        ]);
        expect(await store.getLabels('train-g-r0')).toHaveLength(3);
        expect(await store.getCurrentLabels('unknown')).toEqual([]);
      });

      it('describes where it keeps its data', async () => {
        const info = await store.describe();
        expect(info.kind).toBe(store.kind);
        if (info.path !== null) expect(info.path.startsWith('/')).toBe(true);
      });

      it('logs events with a monotonic cursor, filterable by channel and type', async () => {
        await fillGroups(['g1'], 1);
        await fillGroups(['g1'], 1, 'val');
        const b = await lease({ nRollouts: 1 });
        await store.ackLease(b!.lease.id, tick());
        const events = await store.readEvents({ after: 0, limit: 100 });
        const seqs = events.map((e) => e.seq);
        expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
        expect(new Set(seqs).size).toBe(seqs.length);
        expect(events.map((e) => e.type)).toEqual(
          expect.arrayContaining([
            'steps_submitted',
            'trajectory_completed',
            'group_ready',
            'batch_leased',
            'batch_acked',
          ]),
        );
        const submitted = events.find((e) => e.type === 'steps_submitted' && e.channel === 'train')!;
        expect(submitted.data).toMatchObject({
          count: 2,
          trajectories: [{ trajectory_uid: 'train-g1-r0', created: true }],
        });
        const later = await store.readEvents({ after: seqs[2]!, limit: 100 });
        expect(later[0]!.seq).toBeGreaterThan(seqs[2]!);
        const val = await store.readEvents({ after: 0, limit: 100, channel: 'val', types: ['group_ready'] });
        expect(val).toHaveLength(1);
        expect(val[0]!.data.group_id).toBe('g1');
        expect(await store.lastEventSeq()).toBe(seqs.at(-1));
      });

      it('returns objects that satisfy the domain schemas', async () => {
        await fillGroups(['g1'], 2);
        await store.addLabels(
          [{ trajectory_uid: 'train-g1-r0', step_index: 0, quality: 'good', tags: ['a'] }],
          tick(),
        );
        const batch = await lease({ nRollouts: 2 });
        Lease.parse(batch!.lease);
        Group.parse(batch!.groups[0]!.group);
        for (const t of batch!.groups[0]!.trajectories) {
          Trajectory.parse(t.trajectory);
          for (const step of t.steps) Step.parse(step);
        }
        const trajectory = await store.getTrajectory('train-g1-r0');
        Trajectory.parse(trajectory);
        for (const label of await store.getLabels('train-g1-r0')) Label.parse(label);
        for (const event of await store.readEvents({ after: 0, limit: 100 })) PoolEvent.parse(event);
        expect(() => Trajectory.parse({ ...trajectory, status: 'done' })).toThrow();
      });

      it('reports statistics per channel', async () => {
        await fillGroups(['g1', 'g2', 'g3'], 2);
        await store.setPolicyVersion(2, tick());
        const b = await lease({ nRollouts: 2 });
        const s = await store.stats('train');
        expect(s.produced).toEqual({ steps: 12, trajectories: 6 });
        expect(s.groups).toMatchObject({ ready: 2, leased: 1, collecting: 0 });
        expect(s.activeLeases).toBe(1);
        expect(s.leased).toEqual({ batches: 1, groups: 1 });
        expect(s.stalenessHistogram).toEqual({ '2': 2 });
        expect(s.policyVersion).toBe(2);
        await store.ackLease(b!.lease.id, tick());
        expect((await store.stats('train')).groups.consumed).toBe(1);
      });
    });
  });
}

/**
 * Property tests: random interleavings of submissions, completions, leases, acks, nacks, clock jumps,
 * sweeps and policy bumps against a real SQLite store behind a DataPool with a fake clock.
 *
 * Every operation is checked against a small reference model written here (independently of the
 * store), and every run ends with model-free checks of the event log (FIFO, exclusive leases,
 * at-most-once acks, channel isolation) and of the stored steps (nothing lost or duplicated).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type DropReason,
  type GroupState,
  type LeaseState,
  type NewStep,
  type PoolEvent,
  StepWire,
  StepwiseError,
  stepFromWire,
} from '../packages/core/src/domain/index.js';
import { DataPool } from '../packages/core/src/pool/data-pool.js';
import type { LeasedBatch } from '../packages/core/src/pool/types.js';
import { openPostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import type { Store } from '../packages/core/src/store/store.js';
import { seededRandom, syntheticTrajectory } from '../src/cli/synthetic.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

// ---- the world a run plays in -------------------------------------------------------------------

const CHANNELS = ['train', 'val'] as const;
type Channel = (typeof CHANNELS)[number];

interface ChannelPlan {
  /** rollouts per group (every group of the channel has this many trajectories) */
  size: number;
  /** whether n_rollouts is configured up front (else groups learn it from submissions or leases) */
  sized: boolean;
  maxQueue: number | null;
  maxStaleness: number | null;
  groups: number;
}

interface World {
  channels: Record<Channel, ChannelPlan>;
  seed: number;
  /** steps per trajectory, taken in order */
  lengths: number[];
}

interface PlannedTrajectory {
  id: string;
  channel: Channel;
  groupId: string;
  groupKey: string;
  steps: NewStep[];
}

interface PlannedGroup {
  key: string;
  channel: Channel;
  id: string;
  size: number;
  trajectoryIds: string[];
}

interface Plan {
  trajectories: PlannedTrajectory[];
  groups: PlannedGroup[];
  byTrajectory: Map<string, PlannedTrajectory>;
  byGroup: Map<string, PlannedGroup>;
}

const groupKey = (channel: string, id: string) => `${channel}/${id}`;

function buildPlan(world: World): Plan {
  const trajectories: PlannedTrajectory[] = [];
  const groups: PlannedGroup[] = [];
  let n = 0;
  for (const channel of CHANNELS) {
    const c = world.channels[channel];
    for (let g = 0; g < c.groups; g++) {
      // Both channels use the same prompt ids: groups are keyed by (channel, id), so isolation matters.
      const id = `p${g}`;
      const group: PlannedGroup = {
        key: groupKey(channel, id),
        channel,
        id,
        size: c.size,
        trajectoryIds: [],
      };
      for (let r = 0; r < c.size; r++) {
        const trajectoryId = `${channel}.p${g}.r${r}`;
        const wire = syntheticTrajectory({
          trajectoryUid: trajectoryId,
          promptUid: id,
          steps: world.lengths[n % world.lengths.length]!,
          systemTokens: 4,
          observationTokens: 2,
          responseTokens: 3,
          breakProbability: 0.3,
          random: seededRandom(world.seed + 7919 * n),
        });
        n++;
        trajectories.push({
          id: trajectoryId,
          channel,
          groupId: id,
          groupKey: group.key,
          steps: wire.map((w) => stepFromWire(StepWire.parse(w))),
        });
        group.trajectoryIds.push(trajectoryId);
      }
      groups.push(group);
    }
  }
  return {
    trajectories,
    groups,
    byTrajectory: new Map(trajectories.map((t) => [t.id, t])),
    byGroup: new Map(groups.map((g) => [g.key, g])),
  };
}

// ---- operations ---------------------------------------------------------------------------------

type SubmitVariant = 'plain' | 'conflict' | 'wrongChannel';

interface SubmitPart {
  traj: number;
  pick: 'all' | number[];
  variant: SubmitVariant;
  withN: boolean;
}

type Op =
  | { kind: 'submit'; parts: SubmitPart[] }
  | { kind: 'complete'; traj: number; status: 'complete' | 'aborted'; reward: number | null }
  | { kind: 'lease'; channel: Channel; batchSize: number; nMode: 'match' | 'omit' | 'wrong'; ttl: number }
  | { kind: 'ack' | 'nack'; lease: number }
  | { kind: 'advance'; ms: number }
  /** moves the clock to a lease's expiry, one millisecond before or after it (boundary of the TTL) */
  | { kind: 'advanceTo'; lease: number; delta: -1 | 0 | 1 }
  | { kind: 'expire' }
  | { kind: 'sweep' }
  | { kind: 'bump' };

const MAX_TTL = 3_000;

const submitPartArb: fc.Arbitrary<SubmitPart> = fc.record({
  traj: fc.nat(),
  pick: fc.oneof(
    { arbitrary: fc.constant<'all'>('all'), weight: 2 },
    { arbitrary: fc.array(fc.nat({ max: 7 }), { minLength: 1, maxLength: 4 }), weight: 3 },
  ),
  variant: fc.constantFrom<SubmitVariant>('plain', 'plain', 'plain', 'plain', 'conflict', 'wrongChannel'),
  withN: fc.boolean(),
});

const submitArb: fc.Arbitrary<Op> = fc
  .array(submitPartArb, { minLength: 1, maxLength: 3 })
  .map((parts) => ({ kind: 'submit' as const, parts }));
const completeArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constant('complete' as const),
  traj: fc.nat(),
  status: fc.constantFrom<'complete' | 'aborted'>('complete', 'complete', 'aborted'),
  reward: fc.constantFrom<number | null>(null, null, 0.5),
});
const leaseArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constant('lease' as const),
  channel: fc.constantFrom<Channel>(...CHANNELS),
  batchSize: fc.integer({ min: 1, max: 3 }),
  nMode: fc.constantFrom<'match' | 'omit' | 'wrong'>('match', 'match', 'omit', 'wrong'),
  ttl: fc.integer({ min: 1_000, max: MAX_TTL }),
});
const endLeaseArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constantFrom<'ack' | 'nack'>('ack', 'ack', 'ack', 'nack'),
  lease: fc.nat({ max: 4 }),
});
const advanceArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 2_500 }) }),
  fc.record({
    kind: fc.constant('advanceTo' as const),
    lease: fc.nat({ max: 4 }),
    delta: fc.constantFrom<-1 | 0 | 1>(-1, 0, 1),
  }),
);
const constOp = (kind: 'expire' | 'sweep' | 'bump'): fc.Arbitrary<Op> => fc.constant({ kind });

function opsArb(
  weights: Partial<Record<Exclude<Op['kind'], 'nack' | 'advanceTo'>, number>>,
  maxLength: number,
): fc.Arbitrary<Op[]> {
  // weights.ack weighs ack and nack together (3:1), weights.advance both kinds of clock moves.
  const table: [fc.Arbitrary<Op>, number][] = [
    [submitArb, weights.submit ?? 0],
    [completeArb, weights.complete ?? 0],
    [leaseArb, weights.lease ?? 0],
    [endLeaseArb, weights.ack ?? 0],
    [advanceArb, weights.advance ?? 0],
    [constOp('expire'), weights.expire ?? 0],
    [constOp('sweep'), weights.sweep ?? 0],
    [constOp('bump'), weights.bump ?? 0],
  ];
  const op = fc.oneof(
    ...table.filter(([, w]) => w > 0).map(([arbitrary, weight]) => ({ arbitrary, weight })),
  );
  return fc.array(op, { minLength: 5, maxLength, size: 'max' });
}

function channelPlanArb(drops: boolean): fc.Arbitrary<ChannelPlan> {
  return fc.record({
    size: fc.integer({ min: 1, max: 3 }),
    sized: fc.boolean(),
    maxQueue: drops ? fc.option(fc.integer({ min: 1, max: 3 }), { nil: null }) : fc.constant(null),
    maxStaleness: drops ? fc.option(fc.integer({ min: 0, max: 2 }), { nil: null }) : fc.constant(null),
    groups: fc.integer({ min: 1, max: 4 }),
  });
}

function worldArb(drops: boolean): fc.Arbitrary<World> {
  return fc.record({
    channels: fc.record({ train: channelPlanArb(drops), val: channelPlanArb(drops) }),
    seed: fc.integer({ min: 1, max: 1_000_000 }),
    lengths: fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 8 }),
  });
}

// ---- the reference model ------------------------------------------------------------------------

interface MStep {
  prompt: number[];
  response: number[];
  isLast: boolean;
  reward: number | null;
  version: number;
}

interface MTrajectory {
  status: 'none' | 'open' | 'complete' | 'aborted';
  stored: Map<number, MStep>;
  lastIndex: number | null;
  maxIndex: number;
  reward: number | null;
}

interface MGroup {
  created: boolean;
  createdOrder: number;
  expected: number | null;
  nFinished: number;
  nComplete: number;
  state: GroupState;
  dropReason: DropReason | null;
  partial: boolean;
  readyRank: number;
  minVersion: number | null;
  leaseId: string | null;
}

interface MLease {
  id: string;
  channel: Channel;
  groupKeys: string[];
  state: LeaseState;
  expiresAt: number;
  nSteps: number;
}

interface MChannelConfig {
  n_rollouts: number | null;
  max_queue_size: number | null;
  max_staleness: number | null;
}

interface MCounters {
  stepsProduced: number;
  duplicates: number;
  trajectoriesCreated: number;
  complete: number;
  aborted: number;
  batchesLeased: number;
  groupsLeased: number;
  groupsConsumed: number;
  stepsConsumed: number;
  dropped: Partial<Record<DropReason, number>>;
}

interface ModelState {
  now: number;
  policyVersion: number;
  readyCounter: number;
  createdCounter: number;
  trajectories: Map<string, MTrajectory>;
  groups: Map<string, MGroup>;
  leases: MLease[];
  config: Record<Channel, MChannelConfig>;
  counters: Record<Channel, MCounters>;
}

class Rejected extends Error {}

const zeroCounters = (): MCounters => ({
  stepsProduced: 0,
  duplicates: 0,
  trajectoriesCreated: 0,
  complete: 0,
  aborted: 0,
  batchesLeased: 0,
  groupsLeased: 0,
  groupsConsumed: 0,
  stepsConsumed: 0,
  dropped: {},
});

const sameTokens = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((x, i) => x === b[i]);

class Model {
  constructor(
    readonly plan: Plan,
    public s: ModelState,
  ) {}

  static initial(plan: Plan, world: World): Model {
    const trajectories = new Map<string, MTrajectory>();
    for (const t of plan.trajectories)
      trajectories.set(t.id, {
        status: 'none',
        stored: new Map(),
        lastIndex: null,
        maxIndex: -1,
        reward: null,
      });
    const groups = new Map<string, MGroup>();
    for (const g of plan.groups)
      groups.set(g.key, {
        created: false,
        createdOrder: 0,
        expected: null,
        nFinished: 0,
        nComplete: 0,
        state: 'collecting',
        dropReason: null,
        partial: false,
        readyRank: 0,
        minVersion: null,
        leaseId: null,
      });
    const config = {} as Record<Channel, MChannelConfig>;
    const counters = {} as Record<Channel, MCounters>;
    for (const c of CHANNELS) {
      const p = world.channels[c];
      config[c] = {
        n_rollouts: p.sized ? p.size : null,
        max_queue_size: p.maxQueue,
        max_staleness: p.maxStaleness,
      };
      counters[c] = zeroCounters();
    }
    return new Model(plan, {
      now: 1_000_000,
      policyVersion: 0,
      readyCounter: 0,
      createdCounter: 0,
      trajectories,
      groups,
      leases: [],
      config,
      counters,
    });
  }

  trajectory(id: string): MTrajectory {
    return this.s.trajectories.get(id)!;
  }

  group(key: string): MGroup {
    return this.s.groups.get(key)!;
  }

  groupsOf(channel: Channel): [PlannedGroup, MGroup][] {
    return this.plan.groups.filter((g) => g.channel === channel).map((g) => [g, this.group(g.key)]);
  }

  readyQueue(channel: Channel): [PlannedGroup, MGroup][] {
    return this.groupsOf(channel)
      .filter(([, g]) => g.state === 'ready')
      .sort(([, a], [, b]) => a.readyRank - b.readyRank);
  }

  staleness(g: MGroup): number {
    return Math.max(0, this.s.policyVersion - (g.minVersion ?? this.s.policyVersion));
  }

  private drop(pg: PlannedGroup, g: MGroup, reason: DropReason): void {
    g.state = 'dropped';
    g.dropReason = reason;
    g.leaseId = null;
    const dropped = this.s.counters[pg.channel].dropped;
    dropped[reason] = (dropped[reason] ?? 0) + 1;
  }

  private markReady(pg: PlannedGroup, g: MGroup, partial: boolean): void {
    g.state = 'ready';
    g.partial = partial;
    g.readyRank = ++this.s.readyCounter;
    const limit = this.s.config[pg.channel].max_queue_size;
    if (limit === null) return;
    const queue = this.readyQueue(pg.channel);
    for (const [opg, og] of queue.slice(0, Math.max(0, queue.length - limit)))
      this.drop(opg, og, 'queue_full');
  }

  private settle(pg: PlannedGroup, g: MGroup): void {
    if (g.state !== 'collecting' || g.expected === null || g.nFinished < g.expected) return;
    if (g.nComplete === 0) this.drop(pg, g, 'no_complete_trajectories');
    else this.markReady(pg, g, g.nComplete < g.expected);
  }

  private finish(id: string, status: 'complete' | 'aborted', reward: number | null): void {
    const t = this.trajectory(id);
    const pt = this.plan.byTrajectory.get(id)!;
    if (reward === null) {
      const rewards = [...t.stored.values()].map((s) => s.reward).filter((r): r is number => r !== null);
      reward = rewards.length > 0 ? rewards.reduce((a, b) => a + b, 0) : null;
    }
    t.status = status;
    t.reward = reward;
    this.s.counters[pt.channel][status]++;
    const g = this.group(pt.groupKey);
    if (g.state !== 'collecting') return; // a late trajectory: does not happen in these worlds
    g.nFinished++;
    if (status === 'complete') g.nComplete++;
    this.settle(this.plan.byGroup.get(pt.groupKey)!, g);
  }

  /** Runs fn on a copy of the state; keeps the copy only when fn does not reject (a transaction). */
  transaction<T>(fn: () => T): T | Rejected {
    const saved = structuredClone(this.s);
    try {
      return fn();
    } catch (error) {
      if (!(error instanceof Rejected)) throw error;
      this.s = saved;
      return error;
    }
  }

  /** What one submission request does; throws Rejected when the store must refuse all of it. */
  submit(
    channel: Channel,
    nRollouts: number | null,
    steps: NewStep[],
  ): { inserted: number; duplicates: number; completed: string[] } {
    const byTrajectory = new Map<string, NewStep[]>();
    for (const step of steps) {
      const list = byTrajectory.get(step.trajectoryId);
      if (list) list.push(step);
      else byTrajectory.set(step.trajectoryId, [step]);
    }
    let inserted = 0;
    let duplicates = 0;
    const completed: string[] = [];
    for (const [id, list] of byTrajectory) {
      list.sort((a, b) => a.index - b.index);
      const pt = this.plan.byTrajectory.get(id)!;
      const t = this.trajectory(id);
      const g = this.group(pt.groupKey);
      if (t.status === 'none') {
        if (pt.channel !== channel)
          throw new Error('test bug: a wrong-channel submission creating a trajectory');
        t.status = 'open';
        this.s.counters[channel].trajectoriesCreated++;
        if (!g.created) {
          g.created = true;
          g.createdOrder = ++this.s.createdCounter;
          g.expected = nRollouts ?? this.s.config[channel].n_rollouts;
        } else {
          g.expected = g.expected ?? nRollouts;
        }
      } else if (pt.channel !== channel) {
        throw new Rejected('wrong channel');
      }
      let added = 0;
      for (const step of list) {
        const prior = t.stored.get(step.index);
        if (prior) {
          if (!sameTokens(prior.prompt, step.promptIds) || !sameTokens(prior.response, step.responseIds))
            throw new Rejected('different tokens');
          duplicates++;
          continue;
        }
        if (t.status !== 'open') throw new Rejected('trajectory finished');
        if ((t.lastIndex !== null && step.index > t.lastIndex) || (step.isLast && t.maxIndex > step.index))
          throw new Rejected('beyond the last step');
        t.stored.set(step.index, {
          prompt: [...step.promptIds],
          response: [...step.responseIds],
          isLast: step.isLast,
          reward: step.reward,
          version: this.s.policyVersion,
        });
        t.maxIndex = Math.max(t.maxIndex, step.index);
        if (step.isLast) t.lastIndex = step.index;
        added++;
      }
      if (added === 0) continue;
      inserted += added;
      g.minVersion = Math.min(g.minVersion ?? this.s.policyVersion, this.s.policyVersion);
      if (t.lastIndex !== null && t.stored.size === t.lastIndex + 1) {
        this.finish(id, 'complete', null);
        completed.push(id);
      }
    }
    this.s.counters[channel].stepsProduced += inserted;
    this.s.counters[channel].duplicates += duplicates;
    return { inserted, duplicates, completed };
  }

  /** completeTrajectory: 'missing' (404), 'conflict' (409) or the resulting status and reward. */
  complete(
    id: string,
    status: 'complete' | 'aborted',
    reward: number | null,
  ): 'missing' | 'conflict' | { status: string; reward: number | null } {
    const t = this.trajectory(id);
    if (t.status === 'none') return 'missing';
    if (t.status !== 'open') {
      if (t.status === status && (reward === null || reward === t.reward))
        return { status: t.status, reward: t.reward };
      // A reward may follow an is_last completion until the group is handed out.
      const g = this.group(this.plan.byTrajectory.get(id)!.groupKey);
      if (
        t.status === 'complete' &&
        status === 'complete' &&
        reward !== null &&
        ['collecting', 'ready'].includes(g.state)
      ) {
        t.reward = reward;
        return { status: t.status, reward };
      }
      return 'conflict';
    }
    this.finish(id, status, reward);
    return { status: t.status, reward: t.reward };
  }

  expireOverdue(): void {
    for (const lease of this.s.leases) {
      if (lease.state !== 'active' || !(lease.expiresAt < this.s.now)) continue;
      lease.state = 'expired';
      for (const key of lease.groupKeys) {
        const g = this.group(key);
        if (g.state === 'leased' && g.leaseId === lease.id) {
          g.state = 'ready';
          g.leaseId = null;
        }
      }
    }
  }

  /** The groups a lease must return, in order, or null; applies the drops it makes on the way. */
  lease(channel: Channel, batchSize: number, nRollouts: number | null): PlannedGroup[] | null {
    this.expireOverdue();
    const config = this.s.config[channel];
    if (nRollouts !== null && config.n_rollouts === null) {
      config.n_rollouts = nRollouts;
      const unsized = this.groupsOf(channel)
        .filter(([, g]) => g.created && g.state === 'collecting' && g.expected === null)
        .sort(([, a], [, b]) => a.createdOrder - b.createdOrder);
      for (const [pg, g] of unsized) {
        g.expected = nRollouts;
        this.settle(pg, g);
      }
    }
    const chosen: PlannedGroup[] = [];
    for (const [pg, g] of this.readyQueue(channel)) {
      if (nRollouts !== null && g.expected !== nRollouts) continue;
      if (config.max_staleness !== null && this.staleness(g) > config.max_staleness) {
        this.drop(pg, g, 'stale');
        continue;
      }
      chosen.push(pg);
      if (chosen.length === batchSize) break;
    }
    return chosen.length < batchSize ? null : chosen;
  }

  /** The complete trajectories a served group carries (there are no late ones in these worlds). */
  servedTrajectories(pg: PlannedGroup): string[] {
    return pg.trajectoryIds.filter((id) => this.trajectory(id).status === 'complete').sort();
  }

  recordLease(id: string, channel: Channel, groups: PlannedGroup[], ttl: number): MLease {
    let nSteps = 0;
    for (const pg of groups) {
      const g = this.group(pg.key);
      g.state = 'leased';
      g.leaseId = id;
      for (const t of this.servedTrajectories(pg)) nSteps += this.trajectory(t).stored.size;
    }
    const lease: MLease = {
      id,
      channel,
      groupKeys: groups.map((g) => g.key),
      state: 'active',
      expiresAt: this.s.now + ttl,
      nSteps,
    };
    this.s.leases.push(lease);
    this.s.counters[channel].batchesLeased++;
    this.s.counters[channel].groupsLeased += groups.length;
    return lease;
  }

  /**
   * ack or nack: 'conflict' (409) or the lease state it returns. An overdue lease is refused; whether
   * the refusal also expires it at once is left to the caller (see the dedicated property below).
   */
  endLease(lease: MLease, outcome: 'acked' | 'nacked'): 'conflict' | 'overdue' | LeaseState {
    if (lease.state === outcome) return outcome;
    if (lease.state === 'active' && lease.expiresAt < this.s.now) return 'overdue';
    if (lease.state !== 'active') return 'conflict';
    lease.state = outcome;
    for (const key of lease.groupKeys) {
      const g = this.group(key);
      if (g.state !== 'leased' || g.leaseId !== lease.id) continue;
      g.leaseId = null;
      if (outcome === 'acked') {
        g.state = 'consumed';
        this.s.counters[lease.channel].groupsConsumed++;
      } else {
        g.state = 'ready';
      }
    }
    if (outcome === 'acked') this.s.counters[lease.channel].stepsConsumed += lease.nSteps;
    return outcome;
  }
}

// ---- running a scenario -------------------------------------------------------------------------

const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

function otherChannel(c: Channel): Channel {
  return c === 'train' ? 'val' : 'train';
}

/** The n-th most recent lease (0: the newest), wrapping around. */
function recent(leases: MLease[], n: number): MLease {
  return leases[leases.length - 1 - (n % leases.length)]!;
}

function pickSteps(pt: PlannedTrajectory, pick: SubmitPart['pick']): NewStep[] {
  if (pick === 'all') return [...pt.steps].reverse(); // the store must not depend on arrival order
  return pick.map((i) => pt.steps[i % pt.steps.length]!);
}

async function expectRejected(promise: Promise<unknown>, status: number, what: string): Promise<void> {
  let error: unknown = null;
  try {
    await promise;
  } catch (e) {
    error = e;
  }
  expect(error, `${what} must be refused`).toBeInstanceOf(StepwiseError);
  expect((error as StepwiseError).status, `${what}: ${(error as Error).message}`).toBe(status);
}

/** All leases the store holds active now must hold disjoint groups (checked by the store's own state). */
async function checkExclusiveLeases(store: Store, leaseIds: string[], where: string): Promise<void> {
  const holder = new Map<string, string>();
  for (const id of leaseIds) {
    const lease = await store.getLease(id);
    expect(lease, `lease ${id} exists`).not.toBeNull();
    if (lease!.state !== 'active') continue;
    for (const gid of lease!.groupIds) {
      const key = groupKey(lease!.channel, gid);
      expect(holder.get(key), `${where}: group ${key} held by two active leases`).toBeUndefined();
      holder.set(key, id);
    }
  }
}

async function checkGroups(store: Store, model: Model, where: string): Promise<void> {
  for (const pg of model.plan.groups) {
    const g = model.group(pg.key);
    const actual = await store.getGroup(pg.channel, pg.id);
    if (!g.created) {
      expect(actual, `${where}: group ${pg.key} must not exist yet`).toBeNull();
      continue;
    }
    expect(actual, `${where}: group ${pg.key} exists`).not.toBeNull();
    expect(
      {
        channel: actual!.channel,
        state: actual!.state,
        expected: actual!.expected,
        nFinished: actual!.nFinished,
        nComplete: actual!.nComplete,
        dropReason: actual!.dropReason,
        leaseId: actual!.leaseId,
        minPolicyVersion: actual!.minPolicyVersion,
      },
      `${where}: group ${pg.key}`,
    ).toEqual({
      channel: pg.channel,
      state: g.state,
      expected: g.expected,
      nFinished: g.nFinished,
      nComplete: g.nComplete,
      dropReason: g.dropReason,
      leaseId: g.leaseId,
      minPolicyVersion: g.minVersion,
    });
    if (g.state === 'ready' || g.state === 'leased' || g.state === 'consumed')
      expect(actual!.partial, `${where}: group ${pg.key} partial`).toBe(g.partial);
  }
}

function checkServedBatch(
  model: Model,
  channel: Channel,
  batch: LeasedBatch,
  expected: PlannedGroup[],
): void {
  expect(batch.lease.channel).toBe(channel);
  expect(batch.lease.state).toBe('active');
  expect(batch.policyVersion).toBe(model.s.policyVersion);
  expect(
    batch.groups.map((g) => groupKey(g.group.channel, g.group.id)),
    'served groups (FIFO over ready groups)',
  ).toEqual(expected.map((g) => g.key));
  expect(batch.lease.groupIds).toEqual(expected.map((g) => g.id));
  for (const [i, served] of batch.groups.entries()) {
    const pg = expected[i]!;
    // Channel isolation: the group, its trajectories and their steps all belong to the leased channel.
    expect(served.group.channel).toBe(channel);
    expect(served.group.state).toBe('leased');
    expect(served.group.leaseId).toBe(batch.lease.id);
    expect(served.staleness).toBe(model.staleness(model.group(pg.key)));
    expect(served.stale).toBe(false);
    const ids = served.trajectories.map((t) => t.trajectory.id).sort();
    expect(ids, `trajectories served with ${pg.key}`).toEqual(model.servedTrajectories(pg));
    for (const st of served.trajectories) {
      expect(st.trajectory.channel).toBe(channel);
      expect(st.trajectory.groupId).toBe(pg.id);
      expect(st.trajectory.status).toBe('complete');
      const mt = model.trajectory(st.trajectory.id);
      const want = [...mt.stored.entries()].sort(([a], [b]) => a - b);
      expect(st.steps.map((s) => s.index)).toEqual(want.map(([i]) => i));
      for (const [k, s] of st.steps.entries()) {
        expect(s.channel).toBe(channel);
        expect(s.trajectoryId).toBe(st.trajectory.id);
        expect(s.promptIds).toEqual(want[k]![1].prompt);
        expect(s.responseIds).toEqual(want[k]![1].response);
      }
    }
  }
}

async function readAllEvents(store: Store): Promise<PoolEvent[]> {
  const all: PoolEvent[] = [];
  let after = 0;
  for (;;) {
    const page = await store.readEvents({ after, limit: 1_000 });
    all.push(...page);
    if (page.length < 1_000) return all;
    after = page.at(-1)!.seq;
  }
}

/**
 * Replays the event log alone (no model): every group is leased only while it is ready and held by
 * no other lease, each lease takes the oldest ready groups of its own channel (groups handed back by
 * a nack or an expiry keep their place), a group is acked at most once and never leased after.
 */
function checkEventLog(events: PoolEvent[], plan: Plan): void {
  const rank = new Map<string, number>();
  const available = new Set<string>();
  const leaseGroups = new Map<string, string[]>();
  const holder = new Map<string, string>();
  const acks = new Map<string, number>();
  let counter = 0;
  let lastSeq = 0;
  for (const e of events) {
    expect(e.seq).toBeGreaterThan(lastSeq);
    lastSeq = e.seq;
    const channel = e.channel ?? '';
    const data = e.data as Record<string, unknown>;
    switch (e.type) {
      case 'group_ready': {
        const key = groupKey(channel, String(data.group_id));
        expect(plan.byGroup.get(key)?.channel, `group_ready ${key} in its own channel`).toBe(channel);
        expect(rank.has(key), `group ${key} became ready twice`).toBe(false);
        rank.set(key, counter++);
        available.add(key);
        break;
      }
      case 'group_dropped': {
        const key = groupKey(channel, String(data.group_id));
        expect(holder.has(key), `group ${key} dropped while leased`).toBe(false);
        expect(acks.has(key), `group ${key} dropped after it was consumed`).toBe(false);
        available.delete(key);
        break;
      }
      case 'batch_leased': {
        const leaseId = String(data.lease_id);
        const keys = (data.group_ids as string[]).map((id) => groupKey(channel, id));
        for (const key of keys) {
          expect(plan.byGroup.get(key)?.channel, `lease on ${channel} served ${key}`).toBe(channel);
          expect(acks.has(key), `group ${key} served again after its ack`).toBe(false);
          expect(holder.get(key), `group ${key} held by two active leases`).toBeUndefined();
          expect(available.has(key), `group ${key} leased while not ready`).toBe(true);
        }
        const oldest = [...available]
          .filter((k) => k.startsWith(`${channel}/`))
          .sort((a, b) => rank.get(a)! - rank.get(b)!)
          .slice(0, keys.length);
        expect(keys, `lease ${leaseId} on ${channel} takes the oldest ready groups`).toEqual(oldest);
        for (const key of keys) {
          available.delete(key);
          holder.set(key, leaseId);
        }
        leaseGroups.set(leaseId, keys);
        break;
      }
      case 'batch_acked': {
        const leaseId = String(data.lease_id);
        const keys = leaseGroups.get(leaseId);
        expect(keys, `acked lease ${leaseId} was leased`).toBeDefined();
        expect(data.groups).toBe(keys!.length);
        for (const key of keys!) {
          expect(holder.get(key), `acked group ${key} held by its lease`).toBe(leaseId);
          holder.delete(key);
          acks.set(key, (acks.get(key) ?? 0) + 1);
          expect(acks.get(key), `group ${key} acked more than once`).toBe(1);
        }
        break;
      }
      case 'batch_nacked':
      case 'lease_expired': {
        const leaseId = String(data.lease_id);
        const keys = leaseGroups.get(leaseId);
        expect(keys, `returned lease ${leaseId} was leased`).toBeDefined();
        for (const key of keys!) {
          expect(holder.get(key), `returned group ${key} held by its lease`).toBe(leaseId);
          holder.delete(key);
          available.add(key);
        }
        break;
      }
      default:
        break;
    }
  }
}

async function checkFinalState(store: Store, model: Model, events: PoolEvent[]): Promise<void> {
  // No step lost or duplicated: exactly the steps of accepted submissions, once each, same tokens.
  const distinct: Record<Channel, number> = { train: 0, val: 0 };
  for (const pt of model.plan.trajectories) {
    const mt = model.trajectory(pt.id);
    const steps = await store.getTrajectorySteps(pt.id);
    const trajectory = await store.getTrajectory(pt.id);
    if (mt.status === 'none') {
      expect(trajectory, `trajectory ${pt.id} must not exist`).toBeNull();
      expect(steps).toEqual([]);
      continue;
    }
    expect(trajectory?.status, `trajectory ${pt.id} status`).toBe(mt.status);
    expect(trajectory?.channel).toBe(pt.channel);
    expect(trajectory?.nSteps).toBe(mt.stored.size);
    if (mt.status !== 'open') expect(trajectory?.reward, `trajectory ${pt.id} reward`).toBe(mt.reward);
    const indexes = steps.map((s) => s.index);
    expect(new Set(indexes).size, `steps of ${pt.id} are unique`).toBe(indexes.length);
    const want = [...mt.stored.entries()].sort(([a], [b]) => a - b);
    expect(indexes, `steps of ${pt.id}`).toEqual(want.map(([i]) => i));
    for (const [k, s] of steps.entries()) {
      const w = want[k]![1];
      const where = `${pt.id}#${s.index}`;
      expect(s.promptIds, `${where} prompt_ids`).toEqual(w.prompt);
      expect(s.responseIds, `${where} response_ids`).toEqual(w.response);
      expect(s.isLast, `${where} is_last`).toBe(w.isLast);
      expect(s.reward, `${where} reward`).toBe(w.reward);
      expect(s.policyVersion, `${where} policy_version`).toBe(w.version);
      expect(s.channel, `${where} channel`).toBe(pt.channel);
      expect(s.groupId, `${where} prompt_uid`).toBe(pt.groupId);
    }
    distinct[pt.channel] += steps.length;
  }

  const total = await store.views.stats(null);
  expect(total.produced.steps, 'stats produced.steps (all channels)').toBe(distinct.train + distinct.val);
  for (const c of CHANNELS) {
    const stats = await store.views.stats(c);
    const k = model.s.counters[c];
    const groups = { collecting: 0, pending_guidance: 0, ready: 0, leased: 0, consumed: 0, dropped: 0 };
    for (const [, g] of model.groupsOf(c)) if (g.created) groups[g.state]++;
    expect(
      {
        steps: stats.produced.steps,
        trajectories: stats.produced.trajectories,
        duplicates: stats.duplicateSteps,
        complete: stats.completed.trajectories,
        aborted: stats.completed.aborted,
        leased: stats.leased,
        consumed: stats.consumed,
        dropped: stats.dropped,
        groups: stats.groups,
        queueDepth: stats.queueDepth,
        activeLeases: stats.activeLeases,
      },
      `stats of ${c}`,
    ).toEqual({
      steps: distinct[c],
      trajectories: k.trajectoriesCreated,
      duplicates: k.duplicates,
      complete: k.complete,
      aborted: k.aborted,
      leased: { batches: k.batchesLeased, groups: k.groupsLeased },
      consumed: { groups: k.groupsConsumed, steps: k.stepsConsumed },
      dropped: k.dropped,
      groups,
      queueDepth: groups.ready,
      activeLeases: model.s.leases.filter((l) => l.channel === c && l.state === 'active').length,
    });
    expect(k.stepsProduced, `model steps of ${c}`).toBe(distinct[c]);
  }

  checkEventLog(events, model.plan);
}

type Backend = 'sqlite' | 'postgres';

/**
 * A DataPool over a fresh database (a SQLite file, or a PostgreSQL schema); cleanup (also run by
 * afterEach) closes it and deletes the file or drops the schema.
 */
async function openPool(
  clock: () => number,
  backend: Backend,
): Promise<{ store: Store; pool: DataPool; cleanup: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-props-'));
  const schema = freshSchema('stepwise_props');
  const store =
    backend === 'sqlite'
      ? await openSqliteStore({ path: join(dir, 'pool.db'), synchronous: 'NORMAL' })
      : await openPostgresStore({ url: pgUrl!, schema, poolSize: 4 });
  const pool = new DataPool({ store, clock });
  let done = false;
  const cleanup = async () => {
    if (done) return;
    done = true;
    const i = cleanups.indexOf(cleanup);
    if (i >= 0) cleanups.splice(i, 1);
    try {
      await pool.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
      if (backend === 'postgres') await dropSchema(schema);
    }
  };
  cleanups.push(cleanup);
  return { store, pool, cleanup };
}

async function runScenario(world: World, ops: Op[], backend: Backend): Promise<void> {
  const plan = buildPlan(world);
  const model = Model.initial(plan, world);
  const { store, pool, cleanup } = await openPool(() => model.s.now, backend);
  try {
    for (const c of CHANNELS) {
      const cfg = model.s.config[c];
      await pool.configureChannel(c, { ...cfg });
    }
    for (const [step, op] of ops.entries()) {
      const where = `op ${step} ${JSON.stringify(op)}`;
      switch (op.kind) {
        case 'submit': {
          // Several parts are submitted at once: they share one commit, in call order.
          const calls: { promise: Promise<unknown>; expected: ReturnType<Model['submit']> | Rejected }[] = [];
          for (const part of op.parts) {
            const pt = plan.trajectories[part.traj % plan.trajectories.length]!;
            const mt = model.trajectory(pt.id);
            let steps = pickSteps(pt, part.pick);
            let channel = pt.channel;
            if (part.variant === 'wrongChannel' && mt.status !== 'none') channel = otherChannel(pt.channel);
            if (part.variant === 'conflict' && mt.stored.size > 0) {
              // A retry of a stored step with different tokens: the whole request must be refused.
              const index = steps.find((s) => mt.stored.has(s.index))?.index ?? [...mt.stored.keys()][0]!;
              const original = pt.steps[index]!;
              steps = [
                ...steps.filter((s) => s.index !== index),
                { ...original, responseIds: [...original.responseIds, 7] },
              ];
            }
            const nRollouts = part.withN ? plan.byGroup.get(pt.groupKey)!.size : null;
            const expected = model.transaction(() => model.submit(channel, nRollouts, steps));
            const promise = pool.submitSteps(steps, { channel, nRollouts });
            promise.catch(() => {});
            calls.push({ promise, expected });
          }
          for (const [i, call] of calls.entries()) {
            if (call.expected instanceof Rejected) {
              await expectRejected(call.promise, 409, `${where} part ${i} (${call.expected.message})`);
            } else {
              expect(await call.promise, `${where} part ${i}`).toEqual(call.expected);
            }
          }
          break;
        }
        case 'complete': {
          const pt = plan.trajectories[op.traj % plan.trajectories.length]!;
          const expected = model.complete(pt.id, op.status, op.reward);
          const promise = pool.completeTrajectory(pt.id, { status: op.status, reward: op.reward });
          if (expected === 'missing') await expectRejected(promise, 404, where);
          else if (expected === 'conflict') await expectRejected(promise, 409, where);
          else {
            const t = await promise;
            expect({ status: t.status, reward: t.reward }, where).toEqual(expected);
          }
          break;
        }
        case 'lease': {
          const size = world.channels[op.channel].size;
          let mode = op.nMode;
          // A wrong size on a channel that has none would set the channel's size: not what we test.
          if (mode === 'wrong' && model.s.config[op.channel].n_rollouts === null) mode = 'omit';
          const nRollouts = mode === 'match' ? size : mode === 'wrong' ? (size % 3) + 1 : null;
          const expected = model.lease(op.channel, op.batchSize, nRollouts);
          const batch = await pool.lease({
            channel: op.channel,
            batch_size: op.batchSize,
            ...(nRollouts === null ? {} : { n_rollouts: nRollouts }),
            wait_ms: 0,
            consumer: `c${step}`,
            ttl_ms: op.ttl,
          });
          if (expected === null) {
            expect(batch, `${where}: no lease expected`).toBeNull();
          } else {
            expect(batch, `${where}: a lease expected`).not.toBeNull();
            checkServedBatch(model, op.channel, batch!, expected);
            expect(batch!.lease.expiresAt).toBe(model.s.now + op.ttl);
            // An acked group is never served again.
            for (const pg of expected) {
              for (const l of model.s.leases)
                if (l.state === 'acked')
                  expect(l.groupKeys, `${where}: served an acked group`).not.toContain(pg.key);
            }
            model.recordLease(batch!.lease.id, op.channel, expected, op.ttl);
          }
          break;
        }
        case 'ack':
        case 'nack': {
          if (model.s.leases.length === 0) break;
          const lease = recent(model.s.leases, op.lease);
          const expected = model.endLease(lease, op.kind === 'ack' ? 'acked' : 'nacked');
          const promise = op.kind === 'ack' ? pool.ack(lease.id) : pool.nack(lease.id);
          if (expected === 'conflict') await expectRejected(promise, 409, where);
          else if (expected === 'overdue') {
            await expectRejected(promise, 409, where);
            // Refused as expired: the store may expire overdue leases now or at the next sweep/lease.
            // Both are accepted here; the last property below demands the former (see its comment).
            const state = (await store.getLease(lease.id))?.state;
            expect(['active', 'expired'], `${where}: lease state after refusal`).toContain(state);
            if (state === 'expired') model.expireOverdue();
          } else expect((await promise).state, where).toBe(expected);
          break;
        }
        case 'advance':
          model.s.now += op.ms;
          break;
        case 'advanceTo': {
          if (model.s.leases.length === 0) break;
          const target = recent(model.s.leases, op.lease).expiresAt + op.delta;
          model.s.now = Math.max(model.s.now, target);
          break;
        }
        case 'expire':
          model.s.now += MAX_TTL + 1;
          model.expireOverdue();
          await pool.sweepNow();
          break;
        case 'sweep':
          model.expireOverdue();
          await pool.sweepNow();
          break;
        case 'bump':
          model.s.policyVersion++;
          await pool.setPolicyVersion(model.s.policyVersion);
          break;
      }
      await checkGroups(store, model, where);
      await checkExclusiveLeases(
        store,
        model.s.leases.map((l) => l.id),
        where,
      );
    }
    await checkFinalState(store, model, await readAllEvents(store));
  } finally {
    await cleanup();
  }
}

// ---- the properties -----------------------------------------------------------------------------

/** Shrinking replays whole scenarios: cap a failing property's time (a failure found is still reported). */
const BOUNDED = { interruptAfterTimeLimit: 45_000 };

/**
 * The properties, for one backend. PostgreSQL runs fewer cases per property (each opens a schema
 * and commits over the network); both run the same scenarios.
 */
function properties(backend: Backend, runs: (n: number) => number): void {
  describe(`DataPool over ${backend === 'sqlite' ? 'SQLite' : 'PostgreSQL'}: random interleavings`, () => {
    it('loses and duplicates no step under retried, out-of-order, concurrent and refused submissions', async () => {
      await fc.assert(
        fc.asyncProperty(
          worldArb(false),
          opsArb({ submit: 10, complete: 1, bump: 1, lease: 1 }, 60),
          (world, ops) => runScenario(world, ops, backend),
        ),
        { numRuns: runs(60), ...BOUNDED },
      );
    }, 90_000);

    it('serves groups FIFO per channel, to one lease at a time, and consumes each at most once', async () => {
      await fc.assert(
        fc.asyncProperty(
          worldArb(false),
          opsArb({ submit: 8, complete: 2, lease: 5, ack: 4, advance: 2, expire: 1, sweep: 1, bump: 1 }, 100),
          (world, ops) => runScenario(world, ops, backend),
        ),
        { numRuns: runs(50), ...BOUNDED },
      );
    }, 90_000);

    it('drops the oldest ready group on a full queue and stale groups on lease, keeping FIFO', async () => {
      await fc.assert(
        fc.asyncProperty(
          worldArb(true),
          opsArb({ submit: 8, complete: 2, lease: 4, ack: 3, advance: 2, expire: 1, sweep: 1, bump: 3 }, 100),
          (world, ops) => runScenario(world, ops, backend),
        ),
        { numRuns: runs(50), ...BOUNDED },
      );
    }, 90_000);

    // Known failure (a bug in SqliteStore.endLease, not fixed here): an ack/nack of an overdue lease calls
    // expireLeasesTx and then throws ConflictError('... is expired; its groups may be served again') inside
    // the same this.write() transaction, so the throw rolls the expiry back: the lease stays 'active', its
    // groups stay 'leased', no lease_expired event is written, until a later sweep or lease expires it.
    it('hands the groups of an overdue lease back when its ack or nack is refused as expired', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1, max: 3 }),
          fc.integer({ min: 1_000, max: 5_000 }),
          fc.integer({ min: 1, max: 1_000 }),
          fc.constantFrom<'ack' | 'nack'>('ack', 'nack'),
          async (nGroups, ttl, overshoot, how) => {
            let now = 1_000_000;
            const { store, pool, cleanup } = await openPool(() => now, backend);
            try {
              for (let g = 0; g < nGroups; g++) {
                const wire = { trajectory_uid: `t${g}`, prompt_uid: `p${g}`, step_index: 0, is_last: true };
                const step = stepFromWire(StepWire.parse({ ...wire, prompt_ids: [1, g], response_ids: [2] }));
                await pool.submitSteps([step], { channel: 'train', nRollouts: 1 });
              }
              const request = {
                channel: 'train',
                batch_size: nGroups,
                wait_ms: 0,
                consumer: 'c',
                ttl_ms: ttl,
              };
              const batch = await pool.lease({ ...request, n_rollouts: 1 });
              expect(batch?.groups.length).toBe(nGroups);
              const leaseId = batch!.lease.id;
              now += ttl + overshoot;
              await expectRejected(how === 'ack' ? pool.ack(leaseId) : pool.nack(leaseId), 409, how);
              // The store refused the lease because it is expired: its groups must be ready again now,
              // not only after the next sweep or lease happens to expire it.
              expect((await store.getLease(leaseId))?.state, `lease after the refused ${how}`).toBe(
                'expired',
              );
              for (let g = 0; g < nGroups; g++)
                expect((await store.getGroup('train', `p${g}`))?.state, `group p${g}`).toBe('ready');
              const events = await store.readEvents({ after: 0, limit: 1_000, types: ['lease_expired'] });
              expect(events.map((e) => e.data.lease_id)).toEqual([leaseId]);
            } finally {
              await cleanup();
            }
          },
        ),
        { numRuns: runs(20) },
      );
    });
  });
}

properties('sqlite', (n) => n);
if (pgUrl) properties('postgres', (n) => Math.ceil(n / 2));

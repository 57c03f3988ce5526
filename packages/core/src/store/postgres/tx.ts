import type pg from 'pg';
import type { ChannelConfig, EventType, LabelInput, NewStep, Signal, Step } from '../../domain/index.js';
import type { EvidenceTx } from '../evidence.js';
import type { MismatchRow, StepOrigin, StepRef } from '../mismatch.js';
import type { PromptTx } from '../prompts.js';
import {
  type GroupRow,
  type LabelCurrentRow,
  type LabelRow,
  type LeaseRow,
  type PriorStep,
  type TrajectoryRow,
  TxLog,
} from '../rows.js';
import { encodeStep, STEP_KEY_SPAN, type StepRow, type StepTail, stepKey } from '../step-codec.js';
import type { GroupPatch, Join, PoolTx, Rule, TrajectoryPatch } from '../tx.js';
import type { CurrentLabel, ToolResultAttachment } from '../types.js';
import { postgresEvidenceTx } from './evidence.js';
import {
  currentLabel,
  currentLabels,
  currentSignals,
  insertLabel,
  insertSignal,
  setCurrentLabel,
} from './labels.js';
import { endLeaseRow, insertLease, lease, overdueLeases, releaseLeasedGroups } from './leases.js';
import { saveMismatch, stepOrigins } from './mismatch.js';
import { postgresPromptTx } from './prompts.js';
import { prepared } from './queries.js';

export interface PgTxContext {
  channelDefaults: ChannelConfig;
  /** Writes the transaction's pending step rows (reads of steps must see them). */
  flushSteps(tx: PgTx): Promise<void>;
  /** Steps of many trajectories (by seq, each up to its max index), decoded. */
  decodeMany(tx: PgTx, ranges: Map<number, number>): Promise<Map<number, Step[]>>;
  /** The full sequence of a stored step (what the next step is encoded against). */
  decodeTail(tx: PgTx, seq: number, index: number): Promise<StepTail | null>;
  /** The step tail the store keeps for a trajectory between transactions. */
  cachedTail(trajectoryId: string): StepTail | undefined;
}

/**
 * One PostgreSQL transaction: its connection, the events and counters it writes at commit, and the
 * pool rules' primitives, which lock the rows they read for change (others' locked rows are skipped
 * where a sweep or a queue walk may pass them by).
 */
export class PgTx implements PoolTx {
  readonly events: { ts: number; type: EventType; channel: string | null; data: string }[];
  readonly channels: Map<string, ChannelConfig>;
  /** Channels whose row this transaction made sure of. */
  readonly ensured: Set<string>;
  /** Step rows (and tool documents) encoded but not yet inserted: written in one statement. */
  readonly pendingSteps: StepRow[];
  readonly pendingDocs: Map<string, string>;

  /** A read-only snapshot takes no row locks. */
  readonly readOnly: boolean;
  readonly prompts: PromptTx;
  readonly evidence: EvidenceTx;

  constructor(
    readonly client: pg.PoolClient,
    private readonly context?: PgTxContext,
    readonly log = new TxLog(),
    shared?: PgTx,
    readOnly = false,
  ) {
    this.readOnly = shared?.readOnly ?? readOnly;
    this.events = shared?.events ?? [];
    this.channels = shared?.channels ?? new Map();
    this.ensured = shared?.ensured ?? new Set();
    this.pendingSteps = shared?.pendingSteps ?? [];
    this.pendingDocs = shared?.pendingDocs ?? new Map();
    this.prompts = postgresPromptTx(this);
    this.evidence = postgresEvidenceTx(this);
  }

  /** The same transaction, counting into `log` (a submission's own, kept only if it commits). */
  withLog(log: TxLog): PgTx {
    return new PgTx(this.client, this.context, log, this);
  }

  *savepoint<T>(rule: (tx: PoolTx) => Rule<T>): Rule<T> {
    const events = this.events.length;
    yield this.client.query('SAVEPOINT submission');
    const inner = this.withLog(new TxLog(this.log));
    try {
      const value = yield* rule(inner);
      yield this.client.query('RELEASE SAVEPOINT submission');
      this.log.absorb(inner.log);
      return value;
    } catch (error) {
      // A refused submission leaves no row, event or pending step behind.
      yield this.client.query('ROLLBACK TO SAVEPOINT submission');
      this.events.length = events;
      this.pendingSteps.length = 0;
      this.pendingDocs.clear();
      throw error;
    }
  }

  *lockTrajectories(ids: readonly string[]): Rule<Map<string, TrajectoryRow>> {
    const rows = yield* this.select<TrajectoryRow>(
      'SELECT * FROM trajectories WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE',
      [ids],
    );
    return new Map(rows.map((r) => [r.id, r]));
  }

  *priorStep(row: TrajectoryRow, index: number): Rule<PriorStep | undefined> {
    yield* this.flushSteps();
    return yield* this.one<PriorStep>(
      'SELECT content_hash, prompt_len, response_len, is_last, reward FROM steps WHERE key = $1',
      [stepKey(row.seq, index)],
    );
  }

  *appendStep(
    row: TrajectoryRow,
    step: NewStep,
    channel: string,
    policyVersion: number,
    now: number,
  ): Rule<boolean> {
    const base = yield* this.baseTail(row, step.index);
    const encoded = encodeStep(step, stepKey(row.seq, step.index), channel, policyVersion, base, now);
    this.pendingSteps.push(encoded.row);
    if (encoded.toolsDoc) this.pendingDocs.set(encoded.toolsDoc.hash, encoded.toolsDoc.body);
    const current = this.log.tail(row.id) ?? this.context!.cachedTail(row.id);
    if (!current || current.index < step.index) this.log.tails.set(row.id, encoded.tail);
    return encoded.prefixBreak;
  }

  /** The full sequence of the step a new step at `index` is encoded against (the highest below it). */
  private *baseTail(row: TrajectoryRow, index: number): Rule<StepTail | null> {
    const known = this.log.tail(row.id) ?? this.context!.cachedTail(row.id);
    if (known && known.index === index - 1) return known;
    yield* this.flushSteps();
    const first = stepKey(row.seq, 0);
    const below = yield* this.one<{ key: number | null }>(
      'SELECT max(key) AS key FROM steps WHERE key >= $1 AND key < $2',
      [first, first + index],
    );
    if (below?.key == null) return null;
    const belowIndex = below.key - first;
    if (known && known.index === belowIndex) return known;
    return (yield this.context!.decodeTail(this, row.seq, belowIndex)) as StepTail | null;
  }

  *flushSteps(): Rule<void> {
    if (this.pendingSteps.length > 0 || this.pendingDocs.size > 0) yield this.context!.flushSteps(this);
  }

  *attachToolResults(attachment: ToolResultAttachment): Rule<void> {
    const row = yield* this.one<{ seq: number }>('SELECT seq FROM trajectories WHERE id = $1', [
      attachment.trajectoryId,
    ]);
    if (!row || attachment.index >= STEP_KEY_SPAN) return;
    const key = stepKey(row.seq, attachment.index);
    yield* this.flushSteps();
    const step = yield* this.one<{ view: string | null }>('SELECT view FROM steps WHERE key = $1', [key]);
    if (!step) return;
    const view = step.view ? JSON.parse(step.view) : {};
    view.tr = attachment.results;
    yield* this.update('UPDATE steps SET view = $1 WHERE key = $2', [JSON.stringify(view), key]);
  }

  async rows<T>(text: string, values: unknown[] = []): Promise<T[]> {
    return (await this.client.query(prepared(text, values))).rows as T[];
  }

  async row<T>(text: string, values: unknown[] = []): Promise<T | undefined> {
    return (await this.rows<T>(text, values))[0];
  }

  async run(text: string, values: unknown[] = []): Promise<number> {
    return (await this.client.query(prepared(text, values))).rowCount ?? 0;
  }

  emit(type: EventType, channel: string | null, data: Record<string, unknown>, ts: number): void {
    this.events.push({ ts, type, channel, data: JSON.stringify(data) });
  }

  // ---- PoolTx: each primitive yields its query and resumes with the rows ------------------------

  private *select<T>(text: string, values: unknown[] = []): Rule<T[]> {
    return (yield this.rows<T>(text, values)) as T[];
  }

  private *one<T>(text: string, values: unknown[] = []): Rule<T | undefined> {
    return (yield* this.select<T>(text, values))[0];
  }

  private *update(text: string, values: unknown[] = []): Rule<number> {
    return (yield this.run(text, values)) as number;
  }

  parseConfig(row: { config: string } | undefined): ChannelConfig {
    const defaults = this.context!.channelDefaults;
    return row ? { ...defaults, ...JSON.parse(row.config) } : defaults;
  }

  *channelConfig(channel: string): Rule<ChannelConfig> {
    const cached = this.channels.get(channel);
    if (cached) return cached;
    const row = yield* this.one<{ config: string }>('SELECT config FROM channels WHERE name = $1', [channel]);
    const config = this.parseConfig(row);
    this.channels.set(channel, config);
    return config;
  }

  *channelNames(): Rule<string[]> {
    const rows = yield* this.select<{ name: string; config: string }>(
      'SELECT name, config FROM channels ORDER BY name',
    );
    for (const row of rows) this.channels.set(row.name, this.channels.get(row.name) ?? this.parseConfig(row));
    return rows.map((r) => r.name);
  }

  *ensureChannel(channel: string, now: number): Rule<void> {
    if (this.ensured.has(channel)) return;
    yield* this.update(
      'INSERT INTO channels (name, config, created_at, updated_at) VALUES ($1, $2, $3, $3) ON CONFLICT DO NOTHING',
      [channel, JSON.stringify(this.context!.channelDefaults), now],
    );
    this.ensured.add(channel);
  }

  *lockChannel(channel: string, now: number): Rule<ChannelConfig> {
    yield* this.ensureChannel(channel, now);
    const config = this.parseConfig(
      yield* this.one<{ config: string }>('SELECT config FROM channels WHERE name = $1 FOR UPDATE', [
        channel,
      ]),
    );
    this.channels.set(channel, config);
    return config;
  }

  *saveChannelConfig(channel: string, config: ChannelConfig, now: number): Rule<void> {
    this.channels.set(channel, config);
    yield* this.update(
      `INSERT INTO channels (name, config, created_at, updated_at) VALUES ($1, $2, $3, $3)
       ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at`,
      [channel, JSON.stringify(config), now],
    );
  }

  *policyVersion(): Rule<number> {
    const row = yield* this.one<{ value: string }>("SELECT value FROM meta WHERE key = 'policy_version'");
    return Number(row?.value ?? 0);
  }

  *setPolicyVersion(version: number): Rule<number> {
    yield* this.update("INSERT INTO meta (key, value) VALUES ('policy_version', '0') ON CONFLICT DO NOTHING");
    const previous = yield* this.one<{ value: string }>(
      "SELECT value FROM meta WHERE key = 'policy_version' FOR UPDATE",
    );
    yield* this.update("UPDATE meta SET value = $1 WHERE key = 'policy_version'", [String(version)]);
    return Number(previous?.value ?? 0);
  }

  readyGroups(channel: string, after: number, limit: number): Rule<GroupRow[]> {
    // Groups another consumer is leasing right now are skipped, not waited for.
    return this.select<GroupRow>(
      `SELECT * FROM groups WHERE channel = $1 AND state = 'ready' AND ready_seq > $2 ORDER BY ready_seq LIMIT $3
       ${this.readOnly ? '' : 'FOR UPDATE SKIP LOCKED'}`,
      [channel, after, limit],
    );
  }

  groupMembers(row: GroupRow): Rule<TrajectoryRow[]> {
    return this.select<TrajectoryRow>(
      `SELECT * FROM trajectories WHERE group_id = $1 AND channel = $2 AND status = 'complete' AND counted = 1
       ORDER BY completed_at, seq`,
      [row.id, row.channel],
    );
  }

  group(channel: string, id: string): Rule<GroupRow | undefined> {
    return this.one<GroupRow>('SELECT * FROM groups WHERE channel = $1 AND id = $2 FOR UPDATE', [
      channel,
      id,
    ]);
  }

  *updateGroup(row: GroupRow, patch: GroupPatch): Rule<void> {
    const keys = Object.keys(patch) as (keyof GroupPatch)[];
    const sets = keys.map((k, i) => `${k} = $${i + 3}`).join(', ');
    yield* this.update(`UPDATE groups SET ${sets} WHERE channel = $1 AND id = $2`, [
      row.channel,
      row.id,
      ...keys.map((k) => patch[k]),
    ]);
    Object.assign(row, patch);
  }

  *joinGroup(
    channel: string,
    id: string,
    join: Join,
    now: number,
  ): Rule<{ group: GroupRow; created: boolean }> {
    yield* this.ensureChannel(channel, now);
    const row = (yield* this.one<GroupRow & { inserted: boolean }>(
      `INSERT INTO groups (channel, id, expected, n_trajectories, state, created_at)
       VALUES ($1, $2, $3, 1, 'collecting', $4)
       ON CONFLICT (channel, id) DO UPDATE
         SET n_trajectories = groups.n_trajectories + 1, expected = coalesce(groups.expected, $5::int)
       RETURNING *, (xmax = 0) AS inserted`,
      [channel, id, join.size, now, join.nRollouts],
    ))!;
    const { inserted, ...group } = row;
    return { group, created: inserted };
  }

  *deleteGroup(row: GroupRow): Rule<void> {
    yield* this.update('DELETE FROM groups WHERE channel = $1 AND id = $2', [row.channel, row.id]);
  }

  *nextReadySeq(): Rule<number> {
    return Number((yield* this.one<{ seq: string }>("SELECT nextval('ready_seq') AS seq"))!.seq);
  }

  *completeWithoutSignals(row: GroupRow, names: readonly string[]): Rule<number> {
    const missing = yield* this.one<{ n: number }>(
      `SELECT count(*) AS n FROM trajectories t
       WHERE t.group_id = $1 AND t.channel = $2 AND t.status = 'complete'
         AND (SELECT count(DISTINCT s.name) FROM signals s
              WHERE s.trajectory_id = t.id AND s.step_index IS NULL AND s.source NOT IN ('agent', 'user')
                AND s.name = ANY($3::text[])) < $4`,
      [row.id, row.channel, names, names.length],
    );
    return Number(missing!.n);
  }

  *completeAbove(row: GroupRow, threshold: number): Rule<number> {
    const above = yield* this.one<{ n: number }>(
      `SELECT count(*) AS n FROM trajectories
       WHERE group_id = $1 AND channel = $2 AND counted = 1 AND status = 'complete' AND reward > $3`,
      [row.id, row.channel, threshold],
    );
    return Number(above!.n);
  }

  *countReady(channel: string): Rule<number> {
    const ready = yield* this.one<{ n: number }>(
      "SELECT count(*) AS n FROM groups WHERE channel = $1 AND state = 'ready'",
      [channel],
    );
    return Number(ready!.n);
  }

  *groupsAhead(channel: string, version: number): Rule<number> {
    const row = yield* this.one<{ n: number }>(
      // Three counts, each on an index: one OR over the channel would walk every consumed group it had.
      `SELECT (SELECT count(*) FROM groups WHERE channel = $1 AND state IN ('collecting', 'pending_guidance', 'ready'))
         + (SELECT count(*) FROM groups WHERE channel = $1 AND leased_version >= $2 AND state IN ('leased', 'consumed'))
         + (SELECT count(*) FROM groups WHERE channel = $1 AND state = 'leased' AND leased_version IS NULL) AS n`,
      [channel, version],
    );
    return Number(row!.n);
  }

  *oldestOpenVersion(channel: string): Rule<number | null> {
    const row = yield* this.one<{ v: number | null }>(
      "SELECT min(min_policy_version) AS v FROM trajectories WHERE channel = $1 AND status = 'open'",
      [channel],
    );
    return row?.v == null ? null : Number(row.v);
  }

  oldestReady(channel: string, n: number): Rule<GroupRow[]> {
    // Groups another transaction is leasing right now are not waiting in the queue: skip them.
    return this.select<GroupRow>(
      `SELECT * FROM groups WHERE channel = $1 AND state = 'ready' ORDER BY ready_seq LIMIT $2
       FOR UPDATE SKIP LOCKED`,
      [channel, n],
    );
  }

  collecting(channel: string, which: 'unsized' | 'full'): Rule<GroupRow[]> {
    const where =
      which === 'unsized' ? 'expected IS NULL' : 'expected IS NOT NULL AND n_finished >= expected';
    return this.select<GroupRow>(
      `SELECT * FROM groups WHERE channel = $1 AND state = 'collecting' AND ${where} ORDER BY seq FOR UPDATE`,
      [channel],
    );
  }

  collectingSince(channel: string, before: number): Rule<GroupRow[]> {
    return this.select<GroupRow>(
      `SELECT * FROM groups WHERE state = 'collecting' AND created_at < $1 AND channel = $2
       ORDER BY created_at, seq FOR UPDATE SKIP LOCKED`,
      [before, channel],
    );
  }

  pendingGuidance(): Rule<GroupRow[]> {
    return this.select<GroupRow>(
      `SELECT * FROM groups WHERE state = 'pending_guidance' ORDER BY pending_since, seq FOR UPDATE SKIP LOCKED`,
    );
  }

  trajectory(id: string, lock = true): Rule<TrajectoryRow | undefined> {
    return this.one<TrajectoryRow>(
      lock && !this.readOnly
        ? 'SELECT * FROM trajectories WHERE id = $1 FOR UPDATE'
        : 'SELECT * FROM trajectories WHERE id = $1',
      [id],
    );
  }

  *stepExists(row: TrajectoryRow, index: number): Rule<boolean> {
    if (index >= STEP_KEY_SPAN) return false;
    yield* this.flushSteps();
    return (yield* this.one('SELECT 1 FROM steps WHERE key = $1', [stepKey(row.seq, index)])) !== undefined;
  }

  /** One statement: the group joined or created (its row locked by the upsert), the trajectory inserted. */
  *insertTrajectory(
    row: TrajectoryRow,
    join: Join,
    now: number,
  ): Rule<{ group: GroupRow; created: boolean }> {
    yield* this.ensureChannel(row.channel, now);
    const joined = (yield* this.one<GroupRow & { inserted: boolean; trajectory_seq: number }>(
      `WITH g AS (
         INSERT INTO groups (channel, id, expected, n_trajectories, state, created_at)
         VALUES ($1, $2, $3, 1, 'collecting', $4)
         ON CONFLICT (channel, id) DO UPDATE
           SET n_trajectories = groups.n_trajectories + 1, expected = coalesce(groups.expected, $5::int)
         RETURNING *, (xmax = 0) AS inserted
       ), t AS (
         INSERT INTO trajectories (id, channel, group_id, task_id, status, metadata, created_at, touched_at,
           guided, guidance_k, probe, derived_from, derivation)
         VALUES ($6, $1, $2, $7, $8, $9, $4, $4, $10, $11, $12, $13, $14)
         RETURNING seq
       )
       SELECT g.*, t.seq AS trajectory_seq FROM g, t`,
      [
        row.channel,
        row.group_id,
        join.size,
        now,
        join.nRollouts,
        row.id,
        row.task_id,
        row.status,
        row.metadata,
        row.guided,
        row.guidance_k,
        row.probe,
        row.derived_from,
        row.derivation,
      ],
    ))!;
    const { inserted, trajectory_seq, ...group } = joined;
    row.seq = trajectory_seq;
    return { group, created: inserted };
  }

  *updateTrajectory(row: TrajectoryRow, patch: TrajectoryPatch): Rule<void> {
    const keys = Object.keys(patch) as (keyof TrajectoryPatch)[];
    const sets = keys.map((k, i) => `${k} = $${i + 2}`).join(', ');
    yield* this.update(`UPDATE trajectories SET ${sets} WHERE id = $1`, [
      row.id,
      ...keys.map((k) => patch[k]),
    ]);
    Object.assign(row, patch);
  }

  idleTrajectories(channel: string, before: number): Rule<TrajectoryRow[]> {
    return this.select<TrajectoryRow>(
      `SELECT * FROM trajectories WHERE status = 'open' AND channel = $1 AND touched_at < $2
       ORDER BY id FOR UPDATE SKIP LOCKED`,
      [channel, before],
    );
  }

  *stepRewardSum(row: TrajectoryRow): Rule<number | null> {
    yield* this.flushSteps();
    const sum = (yield* this.one<{ total: number | null; n: number }>(
      'SELECT sum(reward) AS total, count(reward) AS n FROM steps WHERE key BETWEEN $1 AND $2',
      [stepKey(row.seq, 0), stepKey(row.seq, STEP_KEY_SPAN - 1)],
    ))!;
    return Number(sum.n) > 0 ? sum.total : null;
  }

  *finishTrajectoryRow(row: TrajectoryRow, lowerVersion: boolean): Rule<GroupRow | undefined> {
    // The group's counts and the trajectory's row change in one statement.
    return yield* this.one<GroupRow>(
      `WITH g AS (
         UPDATE groups SET n_finished = n_finished + 1, n_complete = n_complete + $1,
           min_policy_version = CASE WHEN $2::int IS NULL THEN min_policy_version
                                     ELSE least(coalesce(min_policy_version, $2), $2) END
         WHERE channel = $3 AND id = $4 AND state = 'collecting' RETURNING *
       ), t AS (
         UPDATE trajectories SET status = $5, reward = $6, completed_at = $7,
           counted = (SELECT count(*) FROM g), n_steps = $8, max_index = $9, last_index = $10,
           prefix_breaks = $11, min_policy_version = $12 WHERE id = $13
       )
       SELECT * FROM g`,
      [
        row.status === 'complete' ? 1 : 0,
        lowerVersion ? row.min_policy_version : null,
        row.channel,
        row.group_id,
        row.status,
        row.reward,
        row.completed_at,
        row.n_steps,
        row.max_index,
        row.last_index,
        row.prefix_breaks,
        row.min_policy_version,
        row.id,
      ],
    );
  }

  *lowerGroupVersion(row: TrajectoryRow): Rule<void> {
    yield* this.update(
      'UPDATE groups SET min_policy_version = least(coalesce(min_policy_version, $1), $1) WHERE channel = $2 AND id = $3',
      [row.min_policy_version, row.channel, row.group_id],
    );
  }

  *capturedSteps(rows: readonly TrajectoryRow[]): Rule<Map<string, Step[]>> {
    const ranges = new Map(rows.map((row) => [row.seq, STEP_KEY_SPAN - 1]));
    const bySeq = (yield this.context!.decodeMany(this, ranges)) as Map<number, Step[]>;
    return new Map(rows.map((row) => [row.id, bySeq.get(row.seq) ?? []]));
  }

  currentLabels(ids: readonly string[]): Rule<Map<string, CurrentLabel[]>> {
    return currentLabels(this, ids);
  }

  currentSignals(ids: readonly string[]): Rule<Map<string, Signal[]>> {
    return currentSignals(this, ids);
  }

  insertLabel(
    trajectoryId: string,
    stepIndex: number | null,
    input: LabelInput,
    now: number,
  ): Rule<LabelRow> {
    return insertLabel(this, trajectoryId, stepIndex, input, now);
  }

  currentLabel(trajectoryId: string, key: number): Rule<LabelCurrentRow | undefined> {
    return currentLabel(this, trajectoryId, key);
  }

  setCurrentLabel(row: LabelCurrentRow, tags: readonly string[] | undefined): Rule<void> {
    return setCurrentLabel(this, row, tags);
  }

  insertSignal(trajectoryId: string, signal: Omit<Signal, 'createdAt'>, now: number): Rule<void> {
    return insertSignal(this, trajectoryId, signal, now);
  }

  lease(id: string): Rule<LeaseRow | undefined> {
    return lease(this, id);
  }

  insertLease(row: LeaseRow): Rule<void> {
    return insertLease(this, row);
  }

  overdueLeases(now: number): Rule<LeaseRow[]> {
    return overdueLeases(this, now);
  }

  endLeaseRow(id: string, state: LeaseRow['state'], now: number): Rule<void> {
    return endLeaseRow(this, id, state, now);
  }

  releaseLeasedGroups(leaseId: string, to: 'consumed' | 'ready', now: number): Rule<number> {
    return releaseLeasedGroups(this, leaseId, to, now);
  }

  stepOrigins(steps: readonly StepRef[]): Rule<(StepOrigin | undefined)[]> {
    return stepOrigins(this, steps);
  }

  saveMismatch(lease: LeaseRow, rows: readonly MismatchRow[], now: number): Rule<void> {
    return saveMismatch(this, lease, rows, now);
  }
}

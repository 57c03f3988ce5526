import type { ChannelConfig, EventType, LabelInput, NewStep, Signal, Step } from '../../domain/index.js';
import type { EvidenceTx } from '../evidence.js';
import {
  MISMATCH_COLUMNS,
  MISMATCH_UPSERT,
  type MismatchRow,
  mismatchRollupSql,
  mismatchValues,
  type StepOrigin,
  type StepRef,
} from '../mismatch.js';
import type { PromptTx } from '../prompts.js';
import {
  currentSignalsByTrajectory,
  type GroupRow,
  type LabelCurrentRow,
  type LabelRow,
  type LeaseRow,
  labelValues,
  type PriorStep,
  type SignalRow,
  type TrajectoryRow,
  TxLog,
  toCurrentLabel,
} from '../rows.js';
import {
  encodeStep,
  INSERT_STEP_SQL,
  STEP_KEY_SPAN,
  type StepTail,
  stepKey,
  stepRowValues,
} from '../step-codec.js';
import {
  done,
  type GroupPatch,
  type Join,
  type PoolTx,
  type Rule,
  runSync,
  type TrajectoryPatch,
} from '../tx.js';
import type { CurrentLabel, ToolResultAttachment } from '../types.js';
import { sqliteEvidenceTx } from './evidence.js';
import { sqlitePromptTx } from './prompts.js';
import type { Statement } from './statements.js';

/** What a SQLite transaction reads from its store: statements, settings, the event log. */
export interface SqliteTxContext {
  stmt(source: string): Statement;
  channelConfig(channel: string): ChannelConfig;
  /** Writes a channel's settings (creating its row) and caches them for the transaction. */
  saveChannelConfig(channel: string, config: ChannelConfig, now: number): void;
  ensureChannel(channel: string, now: number): void;
  policyVersion(): number;
  /** A trajectory's steps as captured (by its seq). */
  decodeRange(seq: number): Step[];
  /** The full sequence of a stored step (what the next step is encoded against). */
  decodeTail(seq: number, index: number): StepTail | null;
  /** The step tail the store keeps for a trajectory between transactions. */
  cachedTail(trajectoryId: string): StepTail | undefined;
  /** Runs fn in a savepoint of the open transaction. */
  savepoint<T>(fn: () => T): T;
  emit(type: EventType, channel: string | null, data: Record<string, unknown>, now: number): void;
}

/** PoolTx on one better-sqlite3 connection: every primitive runs synchronously in its transaction. */
export class SqliteTx implements PoolTx {
  readonly prompts: PromptTx;
  readonly evidence: EvidenceTx;

  constructor(
    private readonly context: SqliteTxContext,
    readonly log: TxLog,
  ) {
    this.prompts = sqlitePromptTx((source) => context.stmt(source));
    this.evidence = sqliteEvidenceTx((source) => context.stmt(source));
  }

  private stmt(source: string): Statement {
    return this.context.stmt(source);
  }

  emit(type: EventType, channel: string | null, data: Record<string, unknown>, now: number): void {
    this.context.emit(type, channel, data, now);
  }

  channelConfig(channel: string): Rule<ChannelConfig> {
    return done(this.context.channelConfig(channel));
  }

  channelNames(): Rule<string[]> {
    return done((this.stmt('SELECT name FROM channels').all() as { name: string }[]).map((r) => r.name));
  }

  savepoint<T>(rule: (tx: PoolTx) => Rule<T>): Rule<T> {
    const inner = new SqliteTx(this.context, new TxLog(this.log));
    const value = this.context.savepoint(() => runSync(rule(inner)));
    this.log.absorb(inner.log);
    return done(value);
  }

  lockTrajectories(ids: readonly string[]): Rule<Map<string, TrajectoryRow>> {
    // One writer at a time: the IMMEDIATE transaction is the lock.
    const get = this.stmt('SELECT * FROM trajectories WHERE id = ?');
    const out = new Map<string, TrajectoryRow>();
    for (const id of ids) {
      const row = get.get(id) as TrajectoryRow | undefined;
      if (row) out.set(id, row);
    }
    return done(out);
  }

  priorStep(row: TrajectoryRow, index: number): Rule<PriorStep | undefined> {
    return done(
      this.stmt(
        'SELECT content_hash, prompt_len, response_len, is_last, reward FROM steps WHERE key = ?',
      ).get(stepKey(row.seq, index)) as PriorStep | undefined,
    );
  }

  appendStep(
    row: TrajectoryRow,
    step: NewStep,
    channel: string,
    policyVersion: number,
    now: number,
  ): Rule<boolean> {
    const base = this.baseTail(row, step.index);
    const encoded = encodeStep(step, stepKey(row.seq, step.index), channel, policyVersion, base, now);
    this.stmt(INSERT_STEP_SQL).run(stepRowValues(encoded.row));
    if (encoded.toolsDoc)
      this.stmt('INSERT INTO docs (hash, body) VALUES (?, ?) ON CONFLICT DO NOTHING').run(
        encoded.toolsDoc.hash,
        encoded.toolsDoc.body,
      );
    const current = this.log.tail(row.id) ?? this.context.cachedTail(row.id);
    if (!current || current.index < step.index) this.log.tails.set(row.id, encoded.tail);
    return done(encoded.prefixBreak);
  }

  /** The full sequence of the step a new step at `index` is encoded against (the highest below it). */
  private baseTail(row: TrajectoryRow, index: number): StepTail | null {
    const known = this.log.tail(row.id) ?? this.context.cachedTail(row.id);
    if (known && known.index === index - 1) return known;
    const first = stepKey(row.seq, 0);
    const below = this.stmt('SELECT max(key) AS key FROM steps WHERE key >= ? AND key < ?').get(
      first,
      first + index,
    ) as { key: number | null };
    if (below.key === null) return null;
    const belowIndex = below.key - first;
    if (known && known.index === belowIndex) return known;
    return this.context.decodeTail(row.seq, belowIndex);
  }

  flushSteps(): Rule<void> {
    return done(undefined);
  }

  attachToolResults(attachment: ToolResultAttachment): Rule<void> {
    const row = this.stmt('SELECT seq FROM trajectories WHERE id = ?').get(attachment.trajectoryId) as
      | { seq: number }
      | undefined;
    if (!row || attachment.index >= STEP_KEY_SPAN) return done(undefined);
    this.stmt(`UPDATE steps SET view = json_set(coalesce(view, '{}'), '$.tr', json(?)) WHERE key = ?`).run(
      JSON.stringify(attachment.results),
      stepKey(row.seq, attachment.index),
    );
    return done(undefined);
  }

  ensureChannel(channel: string, now: number): Rule<void> {
    this.context.ensureChannel(channel, now);
    return done(undefined);
  }

  lockChannel(channel: string, now: number): Rule<ChannelConfig> {
    // One writer at a time: the IMMEDIATE transaction is the lock.
    this.context.ensureChannel(channel, now);
    return done(this.context.channelConfig(channel));
  }

  saveChannelConfig(channel: string, config: ChannelConfig, now: number): Rule<void> {
    this.context.saveChannelConfig(channel, config, now);
    return done(undefined);
  }

  policyVersion(): Rule<number> {
    return done(this.context.policyVersion());
  }

  setPolicyVersion(version: number): Rule<number> {
    const previous = this.context.policyVersion();
    this.stmt(
      "INSERT INTO meta (key, value) VALUES ('policy_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    ).run(String(version));
    return done(previous);
  }

  readyGroups(channel: string, after: number, limit: number): Rule<GroupRow[]> {
    return done(
      this.stmt(
        "SELECT * FROM groups WHERE channel = ? AND state = 'ready' AND ready_seq > ? ORDER BY ready_seq LIMIT ?",
      ).all(channel, after, limit) as GroupRow[],
    );
  }

  groupMembers(row: GroupRow): Rule<TrajectoryRow[]> {
    return done(
      this.stmt(
        "SELECT * FROM trajectories WHERE group_id = ? AND channel = ? AND status = 'complete' AND counted = 1 ORDER BY completed_at, seq",
      ).all(row.id, row.channel) as TrajectoryRow[],
    );
  }

  group(channel: string, id: string): Rule<GroupRow | undefined> {
    return done(
      this.stmt('SELECT * FROM groups WHERE channel = ? AND id = ?').get(channel, id) as GroupRow | undefined,
    );
  }

  updateGroup(row: GroupRow, patch: GroupPatch): Rule<void> {
    const keys = Object.keys(patch) as (keyof GroupPatch)[];
    this.stmt(`UPDATE groups SET ${keys.map((k) => `${k} = ?`).join(', ')} WHERE channel = ? AND id = ?`).run(
      ...keys.map((k) => patch[k]),
      row.channel,
      row.id,
    );
    Object.assign(row, patch);
    return done(undefined);
  }

  joinGroup(
    channel: string,
    id: string,
    join: Join,
    now: number,
  ): Rule<{ group: GroupRow; created: boolean }> {
    const existing = this.stmt('SELECT * FROM groups WHERE channel = ? AND id = ?').get(channel, id) as
      | GroupRow
      | undefined;
    if (existing) {
      this.stmt(
        'UPDATE groups SET n_trajectories = n_trajectories + 1, expected = coalesce(expected, ?) WHERE channel = ? AND id = ?',
      ).run(join.nRollouts, channel, id);
      existing.n_trajectories++;
      existing.expected ??= join.nRollouts;
      return done({ group: existing, created: false });
    }
    this.context.ensureChannel(channel, now);
    const group = this.stmt(
      "INSERT INTO groups (channel, id, expected, n_trajectories, state, created_at) VALUES (?, ?, ?, 1, 'collecting', ?) RETURNING *",
    ).get(channel, id, join.size, now) as GroupRow;
    return done({ group, created: true });
  }

  deleteGroup(row: GroupRow): Rule<void> {
    this.stmt('DELETE FROM groups WHERE channel = ? AND id = ?').run(row.channel, row.id);
    return done(undefined);
  }

  nextReadySeq(): Rule<number> {
    const row = this.stmt(
      `INSERT INTO meta (key, value) VALUES ('ready_seq', '1')
       ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) RETURNING value`,
    ).get() as { value: string };
    return done(Number(row.value));
  }

  completeWithoutSignals(row: GroupRow, names: readonly string[]): Rule<number> {
    const { n } = this.stmt(
      `SELECT count(*) AS n FROM trajectories t
       WHERE t.group_id = ? AND t.channel = ? AND t.status = 'complete'
         AND (SELECT count(DISTINCT s.name) FROM signals s
              WHERE s.trajectory_id = t.id AND s.step_index IS NULL AND s.source NOT IN ('agent', 'user')
                AND s.name IN (SELECT value FROM json_each(?))) < ?`,
    ).get(row.id, row.channel, JSON.stringify(names), names.length) as { n: number };
    return done(n);
  }

  completeAbove(row: GroupRow, threshold: number): Rule<number> {
    const { n } = this.stmt(
      `SELECT count(*) AS n FROM trajectories
       WHERE group_id = ? AND channel = ? AND counted = 1 AND status = 'complete' AND reward > ?`,
    ).get(row.id, row.channel, threshold) as { n: number };
    return done(n);
  }

  countReady(channel: string): Rule<number> {
    const { n } = this.stmt("SELECT count(*) AS n FROM groups WHERE channel = ? AND state = 'ready'").get(
      channel,
    ) as { n: number };
    return done(n);
  }

  groupsAhead(channel: string, version: number): Rule<number> {
    // Three counts, each on an index: one OR over the channel would walk every consumed group it ever had.
    const { n } = this.stmt(
      `SELECT (SELECT count(*) FROM groups WHERE channel = @channel AND state IN ('collecting', 'pending_guidance', 'ready'))
         + (SELECT count(*) FROM groups WHERE channel = @channel AND leased_version >= @version AND state IN ('leased', 'consumed'))
         + (SELECT count(*) FROM groups WHERE channel = @channel AND state = 'leased' AND leased_version IS NULL) AS n`,
    ).get({ channel, version }) as { n: number };
    return done(n);
  }

  oldestOpenVersion(channel: string): Rule<number | null> {
    const { v } = this.stmt(
      "SELECT min(min_policy_version) AS v FROM trajectories WHERE channel = ? AND status = 'open'",
    ).get(channel) as { v: number | null };
    return done(v);
  }

  oldestReady(channel: string, n: number): Rule<GroupRow[]> {
    return done(
      this.stmt("SELECT * FROM groups WHERE channel = ? AND state = 'ready' ORDER BY ready_seq LIMIT ?").all(
        channel,
        n,
      ) as GroupRow[],
    );
  }

  collecting(channel: string, which: 'unsized' | 'full'): Rule<GroupRow[]> {
    const where =
      which === 'unsized' ? 'expected IS NULL' : 'expected IS NOT NULL AND n_finished >= expected';
    return done(
      this.stmt(`SELECT * FROM groups WHERE channel = ? AND state = 'collecting' AND ${where}`).all(
        channel,
      ) as GroupRow[],
    );
  }

  collectingSince(channel: string, before: number): Rule<GroupRow[]> {
    return done(
      this.stmt("SELECT * FROM groups WHERE state = 'collecting' AND created_at < ? AND channel = ?").all(
        before,
        channel,
      ) as GroupRow[],
    );
  }

  pendingGuidance(): Rule<GroupRow[]> {
    return done(this.stmt("SELECT * FROM groups WHERE state = 'pending_guidance'").all() as GroupRow[]);
  }

  trajectory(id: string): Rule<TrajectoryRow | undefined> {
    return done(this.stmt('SELECT * FROM trajectories WHERE id = ?').get(id) as TrajectoryRow | undefined);
  }

  stepExists(row: TrajectoryRow, index: number): Rule<boolean> {
    if (index >= STEP_KEY_SPAN) return done(false);
    return done(this.stmt('SELECT 1 FROM steps WHERE key = ?').get(stepKey(row.seq, index)) !== undefined);
  }

  insertTrajectory(row: TrajectoryRow, join: Join, now: number): Rule<{ group: GroupRow; created: boolean }> {
    const joined = runSync(this.joinGroup(row.channel, row.group_id, join, now));
    const info = this.stmt(
      `INSERT INTO trajectories (id, channel, group_id, task_id, status, metadata, created_at, touched_at, guided,
         guidance_k, probe, derived_from, derivation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run(
      row.id,
      row.channel,
      row.group_id,
      row.task_id,
      row.status,
      row.metadata,
      row.created_at,
      row.touched_at,
      row.guided,
      row.guidance_k,
      row.probe,
      row.derived_from,
      row.derivation,
    );
    row.seq = Number(info.lastInsertRowid);
    return done(joined);
  }

  updateTrajectory(row: TrajectoryRow, patch: TrajectoryPatch): Rule<void> {
    const keys = Object.keys(patch) as (keyof TrajectoryPatch)[];
    this.stmt(`UPDATE trajectories SET ${keys.map((k) => `${k} = ?`).join(', ')} WHERE id = ?`).run(
      ...keys.map((k) => patch[k]),
      row.id,
    );
    Object.assign(row, patch);
    return done(undefined);
  }

  idleTrajectories(channel: string, before: number): Rule<TrajectoryRow[]> {
    return done(
      this.stmt("SELECT * FROM trajectories WHERE status = 'open' AND channel = ? AND touched_at < ?").all(
        channel,
        before,
      ) as TrajectoryRow[],
    );
  }

  stepRewardSum(row: TrajectoryRow): Rule<number | null> {
    const sum = this.stmt(
      'SELECT sum(reward) AS total, count(reward) AS n FROM steps WHERE key BETWEEN ? AND ?',
    ).get(stepKey(row.seq, 0), stepKey(row.seq, STEP_KEY_SPAN - 1)) as { total: number | null; n: number };
    return done(sum.n > 0 ? sum.total : null);
  }

  finishTrajectoryRow(row: TrajectoryRow, lowerVersion: boolean): Rule<GroupRow | undefined> {
    const group = this.stmt('SELECT * FROM groups WHERE channel = ? AND id = ?').get(
      row.channel,
      row.group_id,
    ) as GroupRow | undefined;
    const counted = group?.state === 'collecting';
    this.stmt(
      `UPDATE trajectories SET status = ?, reward = ?, completed_at = ?, counted = ?, n_steps = ?, max_index = ?,
         last_index = ?, prefix_breaks = ?, min_policy_version = ? WHERE id = ?`,
    ).run(
      row.status,
      row.reward,
      row.completed_at,
      counted ? 1 : 0,
      row.n_steps,
      row.max_index,
      row.last_index,
      row.prefix_breaks,
      row.min_policy_version,
      row.id,
    );
    if (!counted) return done(undefined);
    group.n_finished++;
    if (row.status === 'complete') group.n_complete++;
    const version = lowerVersion ? row.min_policy_version : null;
    this.stmt(
      `UPDATE groups SET n_finished = ?, n_complete = ?,
         min_policy_version = CASE WHEN ? IS NULL THEN min_policy_version ELSE min(coalesce(min_policy_version, ?), ?) END
       WHERE channel = ? AND id = ?`,
    ).run(group.n_finished, group.n_complete, version, version, version, group.channel, group.id);
    if (version !== null) group.min_policy_version = Math.min(group.min_policy_version ?? version, version);
    return done(group);
  }

  lowerGroupVersion(row: TrajectoryRow): Rule<void> {
    this.stmt(
      'UPDATE groups SET min_policy_version = min(coalesce(min_policy_version, ?), ?) WHERE channel = ? AND id = ?',
    ).run(row.min_policy_version, row.min_policy_version, row.channel, row.group_id);
    return done(undefined);
  }

  capturedSteps(rows: readonly TrajectoryRow[]): Rule<Map<string, Step[]>> {
    return done(new Map(rows.map((row) => [row.id, this.context.decodeRange(row.seq)])));
  }

  currentLabels(ids: readonly string[]): Rule<Map<string, CurrentLabel[]>> {
    const out = new Map<string, CurrentLabel[]>();
    if (ids.length === 0) return done(out);
    const rows = this.stmt(
      `SELECT * FROM label_current WHERE trajectory_id IN (SELECT value FROM json_each(?))
       ORDER BY trajectory_id, step_index`,
    ).all(JSON.stringify(ids)) as LabelCurrentRow[];
    for (const row of rows) {
      const list = out.get(row.trajectory_id);
      if (list) list.push(toCurrentLabel(row));
      else out.set(row.trajectory_id, [toCurrentLabel(row)]);
    }
    return done(out);
  }

  currentSignals(ids: readonly string[]): Rule<Map<string, Signal[]>> {
    if (ids.length === 0) return done(new Map());
    const rows = this.stmt(
      `SELECT * FROM signals WHERE trajectory_id IN (SELECT value FROM json_each(?))
       ORDER BY trajectory_id, created_at, id`,
    ).all(JSON.stringify(ids)) as SignalRow[];
    return done(currentSignalsByTrajectory(rows));
  }

  insertLabel(
    trajectoryId: string,
    stepIndex: number | null,
    input: LabelInput,
    now: number,
  ): Rule<LabelRow> {
    return done(
      this.stmt(
        `INSERT INTO labels (trajectory_id, step_index, quality, trainable, tags, note, author, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`,
      ).get(...labelValues(trajectoryId, stepIndex, input, now)) as LabelRow,
    );
  }

  currentLabel(trajectoryId: string, key: number): Rule<LabelCurrentRow | undefined> {
    return done(
      this.stmt('SELECT * FROM label_current WHERE trajectory_id = ? AND step_index = ?').get(
        trajectoryId,
        key,
      ) as LabelCurrentRow | undefined,
    );
  }

  setCurrentLabel(row: LabelCurrentRow, tags: readonly string[] | undefined): Rule<void> {
    this.stmt(
      `INSERT INTO label_current (trajectory_id, step_index, quality, trainable, tags, note, updated_at)
       VALUES (@trajectory_id, @step_index, @quality, @trainable, @tags, @note, @updated_at)
       ON CONFLICT (trajectory_id, step_index) DO UPDATE SET quality = excluded.quality,
         trainable = excluded.trainable, tags = excluded.tags, note = excluded.note, updated_at = excluded.updated_at`,
    ).run(row);
    if (tags !== undefined) {
      this.stmt('DELETE FROM label_tags WHERE trajectory_id = ? AND step_index = ?').run(
        row.trajectory_id,
        row.step_index,
      );
      const addTag = this.stmt(
        'INSERT OR IGNORE INTO label_tags (tag, trajectory_id, step_index) VALUES (?, ?, ?)',
      );
      for (const tag of tags) addTag.run(tag, row.trajectory_id, row.step_index);
    }
    return done(undefined);
  }

  insertSignal(trajectoryId: string, signal: Omit<Signal, 'createdAt'>, now: number): Rule<void> {
    const details = Object.keys(signal.details).length > 0 ? JSON.stringify(signal.details) : null;
    this.stmt(
      `INSERT INTO signals (trajectory_id, step_index, name, value, source, version, details, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run(
      trajectoryId,
      signal.stepIndex,
      signal.name,
      signal.value,
      signal.source,
      signal.version,
      details,
      now,
    );
    return done(undefined);
  }

  lease(id: string): Rule<LeaseRow | undefined> {
    return done(this.stmt('SELECT * FROM leases WHERE id = ?').get(id) as LeaseRow | undefined);
  }

  insertLease(row: LeaseRow): Rule<void> {
    this.stmt(
      `INSERT INTO leases (id, channel, consumer, state, group_ids, n_steps, created_at, expires_at)
       VALUES (@id, @channel, @consumer, @state, @group_ids, @n_steps, @created_at, @expires_at)`,
    ).run(row);
    return done(undefined);
  }

  overdueLeases(now: number): Rule<LeaseRow[]> {
    return done(
      this.stmt("SELECT * FROM leases WHERE state = 'active' AND expires_at < ?").all(now) as LeaseRow[],
    );
  }

  endLeaseRow(id: string, state: LeaseRow['state'], now: number): Rule<void> {
    this.stmt('UPDATE leases SET state = ?, ended_at = ? WHERE id = ?').run(state, now, id);
    return done(undefined);
  }

  releaseLeasedGroups(leaseId: string, to: 'consumed' | 'ready', now: number): Rule<number> {
    const result =
      to === 'consumed'
        ? this.stmt(
            "UPDATE groups SET state = 'consumed', consumed_at = ?, lease_id = NULL WHERE lease_id = ? AND state = 'leased'",
          ).run(now, leaseId)
        : this.stmt(
            "UPDATE groups SET state = 'ready', lease_id = NULL WHERE lease_id = ? AND state = 'leased'",
          ).run(leaseId);
    return done(result.changes);
  }

  stepOrigins(steps: readonly StepRef[]): Rule<(StepOrigin | undefined)[]> {
    const get = this.stmt(
      `SELECT t.group_id, t.channel, s.key IS NOT NULL AS found, s.engine_id, s.policy_version
       FROM trajectories t LEFT JOIN steps s ON s.key = t.seq * ${STEP_KEY_SPAN} + ? WHERE t.id = ?`,
    );
    return done(
      steps.map((ref) => {
        const row = get.get(ref.index, ref.trajectoryId) as StepOrigin | undefined;
        return row && { ...row, found: Boolean(row.found) };
      }),
    );
  }

  saveMismatch(lease: LeaseRow, rows: readonly MismatchRow[], now: number): Rule<void> {
    const upsert = this.stmt(
      `INSERT INTO mismatch (${MISMATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ${MISMATCH_UPSERT}`,
    );
    for (const r of rows) upsert.run(...mismatchValues(lease, r, now));
    this.stmt('DELETE FROM mismatch_leases WHERE lease_id = ?').run(lease.id);
    this.stmt(mismatchRollupSql('?', '?')).run(lease.created_at, lease.id);
    return done(undefined);
  }
}

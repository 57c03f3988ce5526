import { type Kysely, type RawBuilder, type SqlBool, sql } from 'kysely';
import { ValidationError } from '../domain/index.js';
import { type LabelCurrentRow, TRAJECTORY_LABEL, type TrajectoryRow } from './rows.js';
import { STEP_KEY_SPAN, type StepRow } from './step-codec.js';
import type { LabelFilter, StepQuery, TrajectoryQuery, TrajectoryScan } from './store.js';

/** Tables as Kysely sees them; used to build the filtered list queries. */
export interface ListSchema {
  steps: StepRow;
  trajectories: TrajectoryRow;
  label_current: LabelCurrentRow;
  label_tags: { tag: string; trajectory_id: string; step_index: number };
}

/** The trajectory columns toTrajectory reads, metadata aside. */
const TRAJECTORY_COLUMNS = [
  'seq',
  'id',
  'channel',
  'group_id',
  'task_id',
  'status',
  'reward',
  'n_steps',
  'max_index',
  'last_index',
  'prefix_breaks',
  'min_policy_version',
  'created_at',
  'touched_at',
  'completed_at',
  'guided',
  'guidance_k',
  'probe',
  'derived_from',
  'derivation',
] as const;

/**
 * A trajectory's columns with its metadata read only up to `maxBytes` (else NULL) and its size beside
 * it, so that a row holding megabytes costs the reader nothing (rows.ts's toTrajectory).
 */
export function compactColumns(maxBytes: number) {
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) throw new Error(`inlineMetadataBytes: ${maxBytes}`);
  return [
    ...TRAJECTORY_COLUMNS.map((c) => `trajectories.${c}` as const),
    sql<
      string | null
    >`CASE WHEN octet_length(trajectories.metadata) <= ${sql.lit(maxBytes)} THEN trajectories.metadata END`.as(
      'metadata',
    ),
    sql<number>`octet_length(trajectories.metadata)`.as('metadata_bytes'),
  ];
}

/** SQL text of compactColumns for the stores' own single-row reads. */
export function compactColumnsSql(maxBytes: number): string {
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) throw new Error(`inlineMetadataBytes: ${maxBytes}`);
  return `${TRAJECTORY_COLUMNS.join(', ')}, CASE WHEN octet_length(metadata) <= ${maxBytes} THEN metadata END AS metadata, octet_length(metadata) AS metadata_bytes`;
}

/**
 * The filtered list and scan queries of steps and trajectories, one definition for SQLite and
 * PostgreSQL (both key steps by trajectory seq * STEP_KEY_SPAN + index). Builds SQL; runs none.
 */
export class ListQueries {
  constructor(
    private readonly db: Kysely<ListSchema>,
    private readonly dialect: 'sqlite' | 'postgres',
  ) {}

  /**
   * Conditions for label filters, driven from the label tables' indexes. A step's own label wins
   * over its trajectory's (as when serving), so a trajectory-level match skips steps whose own
   * label sets the same field otherwise. Tags add up instead.
   */
  labelConditions(query: LabelFilter, forSteps: boolean): RawBuilder<SqlBool>[] {
    const span = STEP_KEY_SPAN;
    const within = (
      table: 'label_current' | 'label_tags',
      where: RawBuilder<unknown>,
      overridable?: string,
    ) => {
      if (!forSteps) {
        return sql<SqlBool>`trajectories.id IN (SELECT l.trajectory_id FROM ${sql.table(table)} AS l WHERE ${where})`;
      }
      const overridden = overridable
        ? sql`AND NOT EXISTS (SELECT 1 FROM label_current AS o WHERE o.trajectory_id = lt.id AND o.step_index = ls.idx
            AND o.${sql.ref(overridable)} IS NOT NULL AND o.${sql.ref(overridable)} IS DISTINCT FROM l.${sql.ref(overridable)})`
        : sql``;
      // Step keys of labelled steps, plus the step keys of labelled trajectories: rowid lookups.
      return sql<SqlBool>`steps.key IN (
        SELECT lt.seq * ${span} + l.step_index FROM ${sql.table(table)} AS l
          JOIN trajectories AS lt ON lt.id = l.trajectory_id WHERE l.step_index >= 0 AND ${where}
        UNION ALL
        SELECT ls.key FROM ${sql.table(table)} AS l JOIN trajectories AS lt ON lt.id = l.trajectory_id
          JOIN steps AS ls ON ls.key BETWEEN lt.seq * ${span} AND lt.seq * ${span} + ${span - 1}
          WHERE l.step_index = ${TRAJECTORY_LABEL} AND ${where} ${overridden})`;
    };
    const conditions: RawBuilder<SqlBool>[] = [];
    if (query.trainable !== undefined) {
      conditions.push(within('label_current', sql`l.trainable = ${query.trainable ? 1 : 0}`, 'trainable'));
    }
    if (query.quality) conditions.push(within('label_current', sql`l.quality = ${query.quality}`, 'quality'));
    if (query.tag) conditions.push(within('label_tags', sql`l.tag = ${query.tag}`));
    return conditions;
  }

  stepFilter(query: StepQuery) {
    const span = STEP_KEY_SPAN;
    let q = this.db.selectFrom('steps');
    if (query.channel !== undefined) q = q.where('steps.channel', '=', query.channel);
    // Trajectory, group and status filters go through the trajectories table and reach the steps
    // as rowid ranges: the hot steps table carries no index for them.
    const { trajectoryId, groupId, status, channel } = query;
    if (trajectoryId !== undefined || groupId !== undefined || status !== undefined) {
      let joined = q.innerJoin('trajectories as t', (join) =>
        join.on(sql<SqlBool>`steps.key BETWEEN t.seq * ${span} AND t.seq * ${span} + ${span - 1}`),
      );
      if (trajectoryId !== undefined) joined = joined.where('t.id', '=', trajectoryId);
      if (groupId !== undefined) joined = joined.where('t.group_id', '=', groupId);
      if (status !== undefined) joined = joined.where('t.status', '=', status);
      if (channel !== undefined) joined = joined.where('t.channel', '=', channel);
      q = joined as unknown as typeof q;
    }
    if (query.rewardMin !== undefined) q = q.where('steps.reward', '>=', query.rewardMin);
    if (query.rewardMax !== undefined) q = q.where('steps.reward', '<=', query.rewardMax);
    for (const condition of this.labelConditions(query, true)) q = q.where(condition);
    return q;
  }

  trajectoryFilter(query: TrajectoryQuery) {
    let q = this.db.selectFrom('trajectories');
    if (query.channel !== undefined) q = q.where('trajectories.channel', '=', query.channel);
    if (query.groupId !== undefined) q = q.where('trajectories.group_id', '=', query.groupId);
    if (query.taskId !== undefined) q = q.where('trajectories.task_id', '=', query.taskId);
    if (query.rewardMin !== undefined) q = q.where('trajectories.reward', '>=', query.rewardMin);
    if (query.rewardMax !== undefined) q = q.where('trajectories.reward', '<=', query.rewardMax);
    if (query.status !== undefined) q = q.where('trajectories.status', '=', query.status);
    if (query.guided !== undefined) q = q.where('trajectories.guided', '=', query.guided ? 1 : 0);
    if (query.probe !== undefined) q = q.where('trajectories.probe', '=', query.probe ? 1 : 0);
    if (query.derived !== undefined)
      q = q.where('trajectories.derived_from', query.derived ? 'is not' : 'is', null);
    if (query.policyVersion !== undefined) {
      const version = query.policyVersion;
      q = q.where(({ exists, selectFrom }) =>
        exists(
          selectFrom('steps')
            .select(sql`1`.as('one'))
            .whereRef('steps.trajectory_id', '=', 'trajectories.id')
            .where('steps.policy_version', '=', version),
        ),
      );
    }
    for (const condition of this.labelConditions(query, false)) q = q.where(condition);
    return q;
  }

  stepPageQuery(query: StepQuery) {
    return this.stepFilter(query)
      .select(['steps.key'])
      .orderBy('steps.key', 'desc')
      .limit(query.limit)
      .offset(query.offset)
      .compile();
  }

  trajectoryPageQuery(query: TrajectoryQuery) {
    const q = this.trajectoryFilter(query);
    const n = query.inlineMetadataBytes;
    if (n !== undefined)
      return q
        .select(compactColumns(n))
        .orderBy('trajectories.seq', 'desc')
        .limit(query.limit)
        .offset(query.offset)
        .compile();
    return q
      .selectAll()
      .orderBy('trajectories.seq', 'desc')
      .limit(query.limit)
      .offset(query.offset)
      .compile();
  }

  trajectoryScanQuery(query: TrajectoryScan) {
    const after = query.after === null ? 0 : Number(query.after);
    if (!Number.isSafeInteger(after) || after < 0 || (query.after !== null && !/^\d+$/.test(query.after)))
      throw new ValidationError('after: not a cursor returned by a previous page', 'after');
    // Status alone would pick SQLite's (status, channel) index and sort every match for each page;
    // `+` keeps it on the rowid order instead, so a whole scan reads the table once.
    const statusAlone =
      this.dialect === 'sqlite' && query.status !== undefined && query.channel === undefined;
    let q = this.trajectoryFilter({ ...query, offset: 0, status: statusAlone ? undefined : query.status });
    if (statusAlone) q = q.where(sql<SqlBool>`+trajectories.status = ${query.status}`);
    return q
      .selectAll()
      .where('trajectories.seq', '>', after)
      .orderBy('trajectories.seq')
      .limit(query.limit)
      .compile();
  }

  stepCountQuery(query: StepQuery) {
    return this.stepFilter(query)
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .compile();
  }

  trajectoryCountQuery(query: TrajectoryQuery) {
    return this.trajectoryFilter(query)
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .compile();
  }
}

import { ByteWriter, type ColumnSource, ParquetWriter, type SchemaElement } from 'hyparquet-writer';
import { type Step, StepwiseError, type Trajectory } from '../domain/index.js';
import { type AdvantageEstimator, groupAdvantages } from '../serving/advantages.js';
import { type ExportContext, scanAll, trainable } from './context.js';
import type { FileSink } from './sink.js';

/** One row of `rl.parquet`: a step with its tokens and the group-relative signal to train it with. */
export interface RlRow {
  trajectory_uid: string;
  group_id: string;
  channel: string;
  step_index: number;
  prompt_ids: number[];
  response_ids: number[];
  /** One per response token; null when the step carries none. */
  response_logprobs: number[] | null;
  /** The step's own reward. */
  reward: number | null;
  trajectory_reward: number | null;
  /** The trajectory's advantage within its group; null for trajectories that are not complete. */
  advantage: number | null;
  policy_version: number;
  is_last: boolean;
  token_source: string;
  finish_reason: string | null;
}

const string = (name: string, optional = false): SchemaElement => ({
  name,
  type: 'BYTE_ARRAY',
  converted_type: 'UTF8',
  repetition_type: optional ? 'OPTIONAL' : 'REQUIRED',
});
const scalar = (name: string, type: 'INT32' | 'DOUBLE' | 'BOOLEAN', optional = false): SchemaElement => ({
  name,
  type,
  repetition_type: optional ? 'OPTIONAL' : 'REQUIRED',
});
/** The standard three-level LIST: without it, arrays would be written as JSON strings. */
const list = (name: string, element: 'INT32' | 'FLOAT', optional = false): SchemaElement[] => [
  { name, repetition_type: optional ? 'OPTIONAL' : 'REQUIRED', converted_type: 'LIST', num_children: 1 },
  { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
  { name: 'element', type: element, repetition_type: 'REQUIRED' },
];

const COLUMNS: SchemaElement[][] = [
  [string('trajectory_uid')],
  [string('group_id')],
  [string('channel')],
  [scalar('step_index', 'INT32')],
  list('prompt_ids', 'INT32'),
  list('response_ids', 'INT32'),
  list('response_logprobs', 'FLOAT', true),
  [scalar('reward', 'DOUBLE', true)],
  [scalar('trajectory_reward', 'DOUBLE', true)],
  [scalar('advantage', 'DOUBLE', true)],
  [scalar('policy_version', 'INT32')],
  [scalar('is_last', 'BOOLEAN')],
  [string('token_source')],
  [string('finish_reason', true)],
];
export const RL_COLUMNS = COLUMNS.map((c) => c[0]!.name) as (keyof RlRow)[];
export const RL_SCHEMA: SchemaElement[] = [{ name: 'root', num_children: COLUMNS.length }, ...COLUMNS.flat()];

const INT32_MAX = 0x7fffffff;
/** A row group is written when it holds this many tokens or rows: encoding one costs ~50 bytes a token. */
export const RL_ROW_GROUP = { tokens: 1_000_000, rows: 4_096 };
/** Groups whose advantages are kept while the walk may meet more of their trajectories. */
const CACHED_GROUPS = 512;

/**
 * Steps of matching trajectories as Parquet rows. Advantages are computed per prompt group over all
 * of the group's complete trajectories (whatever the filters keep), with the trainer's estimators;
 * steps that curation marks untrainable are left out, as when a batch is served.
 */
export async function writeRl(
  ctx: ExportContext,
  sink: FileSink,
  estimator: AdvantageEstimator,
  rowGroup = RL_ROW_GROUP,
): Promise<void> {
  const writer = new ByteWriter() as ByteWriter & { flush(): void };
  // Each row group goes to the file as soon as it is encoded; only offsets stay in memory.
  writer.flush = () => {
    sink.writeBytes(new Uint8Array(writer.buffer, 0, writer.index));
    writer.index = 0;
  };
  writer.finish = writer.flush;
  const parquet = new ParquetWriter({ writer, schema: RL_SCHEMA, createdBy: 'stepwise export rl' });
  const advantages = new GroupAdvantageCache(ctx, estimator);
  let rows: RlRow[] = [];
  let tokens = 0;
  const flush = () => {
    if (rows.length === 0) return;
    parquet.write({ columnData: toColumns(rows), rowGroupSize: rows.length });
    sink.records += rows.length;
    rows = [];
    tokens = 0;
  };
  for await (const trajectory of ctx.trajectories()) {
    const steps = await ctx.trainingStepsOf(trajectory);
    const labels = steps.length > 0 ? await ctx.store.getCurrentLabels(trajectory.id) : [];
    const advantage = trajectory.status === 'complete' ? await advantages.of(trajectory) : null;
    for (const step of steps) {
      if (!trainable(labels, step.index)) {
        ctx.skip('untrainable_steps');
        continue;
      }
      rows.push(toRow(trajectory, step, advantage));
      tokens += step.promptIds.length + step.responseIds.length;
      if (tokens >= rowGroup.tokens || rows.length >= rowGroup.rows) flush();
    }
    ctx.onTrajectory();
  }
  flush();
  parquet.finish();
}

function checkInt32(ids: readonly number[], what: string, step: Step): void {
  for (const id of ids) {
    if (id > INT32_MAX)
      throw new StepwiseError(
        `${what} of step ${step.index} of trajectory ${step.trajectoryId}: token id ${id} does not fit INT32`,
        422,
        'unexportable',
      );
  }
}

function toRow(trajectory: Trajectory, step: Step, advantage: number | null): RlRow {
  checkInt32(step.promptIds, 'prompt_ids', step);
  checkInt32(step.responseIds, 'response_ids', step);
  return {
    trajectory_uid: trajectory.id,
    group_id: trajectory.groupId,
    channel: trajectory.channel,
    step_index: step.index,
    prompt_ids: step.promptIds,
    response_ids: step.responseIds,
    response_logprobs: step.responseLogprobs,
    reward: step.reward,
    trajectory_reward: trajectory.reward,
    advantage,
    policy_version: step.policyVersion,
    is_last: step.isLast,
    token_source: step.tokenSource,
    finish_reason: step.finishReason,
  };
}

function toColumns(rows: RlRow[]): ColumnSource[] {
  return RL_COLUMNS.map((name) => ({ name, data: rows.map((r) => r[name]) }));
}

/** Advantages of recently met groups, computed once per group from its complete trajectories. */
class GroupAdvantageCache {
  private readonly groups = new Map<string, Map<string, number>>();

  constructor(
    private readonly ctx: ExportContext,
    private readonly estimator: AdvantageEstimator,
  ) {}

  async of(trajectory: Trajectory): Promise<number | null> {
    const key = `${trajectory.channel}\u0000${trajectory.groupId}`;
    let group = this.groups.get(key);
    if (group) {
      this.groups.delete(key); // most recently used goes last
    } else {
      group = await this.compute(trajectory);
      if (this.groups.size >= CACHED_GROUPS) this.groups.delete(this.groups.keys().next().value!);
    }
    this.groups.set(key, group);
    return group.get(trajectory.id) ?? null;
  }

  private async compute(trajectory: Trajectory): Promise<Map<string, number>> {
    const members: Trajectory[] = [];
    const query = { channel: trajectory.channel, groupId: trajectory.groupId, status: 'complete' as const };
    for await (const m of scanAll(this.ctx.store, query, this.ctx.pageSize)) members.push(m);
    const { advantages, missingRewards } = groupAdvantages(
      members.map((m) => m.reward),
      this.estimator,
    );
    this.ctx.note('groups');
    this.ctx.note('rewards_missing_read_as_zero', missingRewards);
    return new Map(members.map((m, i) => [m.id, advantages[i]!]));
  }
}

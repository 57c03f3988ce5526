import {
  Bool,
  type DataType,
  Field,
  Float32,
  Float64,
  Int32,
  List,
  makeData,
  makeVector,
  Table,
  tableToIPC,
  Utf8,
  type Vector,
  vectorFromArray,
} from 'apache-arrow';
import type { Step } from '../domain/index.js';
import type { LeasedBatch } from '../store/store.js';
import { type AdvantageEstimator, groupAdvantages } from './advantages.js';

/*
 * The `arrow` batch format: an Arrow IPC stream, one row per step (docs/serving.md). Token columns
 * are List<Int32> built straight from one offsets array and one values array per column.
 */

/** A List<child> vector over per-row arrays (a null row where `values(i)` is null). */
function listVector<T extends Int32 | Float32>(
  child: T,
  rows: readonly (readonly number[] | null)[],
): Vector<List<T>> {
  const offsets = new Int32Array(rows.length + 1);
  let total = 0;
  let nulls = 0;
  for (const [i, row] of rows.entries()) {
    total += row?.length ?? 0;
    offsets[i + 1] = total;
    if (row === null) nulls++;
  }
  const values = child instanceof Int32 ? new Int32Array(total) : new Float32Array(total);
  for (const [i, row] of rows.entries()) if (row) values.set(row, offsets[i]!);
  let nullBitmap: Uint8Array | undefined;
  if (nulls > 0) {
    nullBitmap = new Uint8Array((rows.length + 7) >> 3);
    for (const [i, row] of rows.entries()) if (row !== null) nullBitmap[i >> 3]! |= 1 << (i & 7);
  }
  const type = new List(new Field('item', child, false));
  const childData = makeData({ type: child as DataType, length: total, data: values } as never);
  return makeVector(
    makeData({
      type,
      length: rows.length,
      nullCount: nulls,
      nullBitmap,
      valueOffsets: offsets,
      child: childData,
    } as never),
  ) as unknown as Vector<List<T>>;
}

export function batchToArrow(batch: LeasedBatch, options: { advantage?: AdvantageEstimator }): Uint8Array {
  const steps: Step[] = [];
  const rowGroup: string[] = [];
  const trajectoryReward: (number | null)[] = [];
  const advantage: number[] = [];
  const guided: boolean[] = [];
  const guidanceK: (number | null)[] = [];
  const probe: boolean[] = [];
  const derivedFrom: (string | null)[] = [];
  const stale: boolean[] = [];
  const staleness: number[] = [];
  const partial: boolean[] = [];
  for (const served of batch.groups) {
    const { advantages } = groupAdvantages(
      served.trajectories.map((t) => t.trajectory.reward),
      options.advantage ?? 'grpo',
    );
    served.trajectories.forEach((t, i) => {
      for (const step of t.steps) {
        steps.push(step);
        rowGroup.push(served.group.id);
        trajectoryReward.push(t.trajectory.reward);
        advantage.push(advantages[i]!);
        guided.push(t.trajectory.guided);
        guidanceK.push(t.trajectory.guidanceK);
        probe.push(t.trajectory.probe);
        derivedFrom.push(t.trajectory.derivedFrom);
        stale.push(served.stale);
        staleness.push(served.staleness);
        partial.push(served.group.partial);
      }
    });
  }
  const columns: Record<string, Vector> = {
    group_id: vectorFromArray(rowGroup, new Utf8()),
    trajectory_uid: vectorFromArray(
      steps.map((s) => s.trajectoryId),
      new Utf8(),
    ),
    step_index: vectorFromArray(Int32Array.from(steps, (s) => s.index)),
    prompt_ids: listVector(
      new Int32(),
      steps.map((s) => s.promptIds),
    ),
    response_ids: listVector(
      new Int32(),
      steps.map((s) => s.responseIds),
    ),
    response_logprobs: listVector(
      new Float32(),
      steps.map((s) => s.responseLogprobs),
    ),
    reward: vectorFromArray(
      steps.map((s) => s.reward),
      new Float64(),
    ),
    trajectory_reward: vectorFromArray(trajectoryReward, new Float64()),
  };
  if (options.advantage) columns.advantage = vectorFromArray(Float32Array.from(advantage));
  Object.assign(columns, {
    policy_version: vectorFromArray(Int32Array.from(steps, (s) => s.policyVersion)),
    is_last: vectorFromArray(
      steps.map((s) => s.isLast),
      new Bool(),
    ),
    token_source: vectorFromArray(
      steps.map((s) => s.tokenSource),
      new Utf8(),
    ),
    finish_reason: vectorFromArray(
      steps.map((s) => s.finishReason),
      new Utf8(),
    ),
    guided: vectorFromArray(guided, new Bool()),
    guidance_k: vectorFromArray(guidanceK, new Int32()),
    probe: vectorFromArray(probe, new Bool()),
    derived_from: vectorFromArray(derivedFrom, new Utf8()),
    stale: vectorFromArray(stale, new Bool()),
    staleness: vectorFromArray(Int32Array.from(staleness)),
    partial: vectorFromArray(partial, new Bool()),
  });
  return tableToIPC(new Table(columns), 'stream');
}

import { Worker } from 'node:worker_threads';
import type { Step } from '../domain/index.js';
import type { LeasedBatch, ServedTrajectory } from '../pool/types.js';
import { type AdvantageEstimator, groupAdvantages } from './advantages.js';
import { isOffPolicy } from './off-policy.js';
import { type RowKind, stitchTrajectory, type TrajectoryRow } from './trajectory-rows.js';
import { type PartialRollouts, responseLossMask, responseVersions } from './versions.js';

/*
 * The `arrow` batch format: an Arrow IPC stream, one row per step (docs/serving.md). The columns are
 * laid out here as plain and typed arrays (token columns as one offsets array and one values array
 * each) and encoded by apache-arrow on a worker thread (packages/core/src/serving/arrow-worker.mjs): loading
 * apache-arrow switches off V8's fast Array.prototype.concat for the whole thread it runs in.
 */

export type ArrowColumn = { name: string } & (
  | { kind: 'utf8'; values: (string | null)[] }
  | { kind: 'bool'; values: (boolean | null)[] }
  | { kind: 'int32'; values: (number | null)[] | Int32Array }
  | { kind: 'float32'; values: Float32Array }
  | { kind: 'float64'; values: (number | null)[] }
  | {
      kind: 'list_int32' | 'list_float32' | 'list_uint8';
      offsets: Int32Array;
      values: Int32Array | Float32Array | Uint8Array;
      validity: Uint8Array;
      nullCount: number;
    }
);

/** A List column over per-row arrays (a null row where the array is null). */
function listColumn(
  name: string,
  kind: 'list_int32' | 'list_float32' | 'list_uint8',
  rows: readonly (ArrayLike<number> | null)[],
): ArrowColumn {
  const offsets = new Int32Array(rows.length + 1);
  const validity = new Uint8Array((rows.length + 7) >> 3);
  let total = 0;
  let nullCount = 0;
  for (const [i, row] of rows.entries()) {
    total += row?.length ?? 0;
    offsets[i + 1] = total;
    if (row === null) nullCount++;
    else validity[i >> 3]! |= 1 << (i & 7);
  }
  const values =
    kind === 'list_int32'
      ? new Int32Array(total)
      : kind === 'list_float32'
        ? new Float32Array(total)
        : new Uint8Array(total);
  for (const [i, row] of rows.entries()) if (row) values.set(row, offsets[i]!);
  return { name, kind, offsets, values, validity, nullCount };
}

/** What every row of a trajectory repeats: its group's and its own fields. */
interface SharedColumns {
  group: string[];
  trajectoryReward: (number | null)[];
  advantage: number[];
  guided: boolean[];
  guidanceK: (number | null)[];
  probe: boolean[];
  derivedFrom: (string | null)[];
  offPolicy: boolean[];
  stale: boolean[];
  staleness: number[];
  partial: boolean[];
}

/** Walks the batch's trajectories; `rowsOf` lays out one trajectory's rows, and the shared columns
 * get one entry per row it returns. */
function eachTrajectory(
  batch: LeasedBatch,
  estimator: AdvantageEstimator,
  rowsOf: (t: ServedTrajectory) => number,
): SharedColumns {
  const shared: SharedColumns = {
    group: [],
    trajectoryReward: [],
    advantage: [],
    guided: [],
    guidanceK: [],
    probe: [],
    derivedFrom: [],
    offPolicy: [],
    stale: [],
    staleness: [],
    partial: [],
  };
  for (const served of batch.groups) {
    const { advantages } = groupAdvantages(
      served.trajectories.map((t) => t.trajectory.reward),
      estimator,
    );
    served.trajectories.forEach((t, i) => {
      const off = isOffPolicy(t.trajectory);
      const n = rowsOf(t);
      for (let r = 0; r < n; r++) {
        shared.group.push(served.group.id);
        shared.trajectoryReward.push(t.trajectory.reward);
        shared.advantage.push(advantages[i]!);
        shared.guided.push(t.trajectory.guided);
        shared.guidanceK.push(t.trajectory.guidanceK);
        shared.probe.push(t.trajectory.probe);
        shared.derivedFrom.push(t.trajectory.derivedFrom);
        shared.offPolicy.push(off);
        shared.stale.push(served.stale);
        shared.staleness.push(served.staleness);
        shared.partial.push(served.group.partial);
      }
    });
  }
  return shared;
}

function sharedTail(shared: SharedColumns): ArrowColumn[] {
  return [
    { name: 'guided', kind: 'bool', values: shared.guided },
    { name: 'guidance_k', kind: 'int32', values: shared.guidanceK },
    { name: 'probe', kind: 'bool', values: shared.probe },
    { name: 'derived_from', kind: 'utf8', values: shared.derivedFrom },
    { name: 'off_policy', kind: 'bool', values: shared.offPolicy },
    { name: 'stale', kind: 'bool', values: shared.stale },
    { name: 'staleness', kind: 'int32', values: Int32Array.from(shared.staleness) },
    { name: 'partial', kind: 'bool', values: shared.partial },
  ];
}

export function arrowColumns(
  batch: LeasedBatch,
  options: { advantage?: AdvantageEstimator; rows?: RowKind; partialRollouts?: PartialRollouts },
): ArrowColumn[] {
  if (options.rows === 'trajectory') return trajectoryRowColumns(batch, options);
  const steps: Step[] = [];
  const shared = eachTrajectory(batch, options.advantage ?? 'grpo', (t) => {
    for (const step of t.steps) steps.push(step);
    return t.steps.length;
  });
  const columns: ArrowColumn[] = [
    { name: 'group_id', kind: 'utf8', values: shared.group },
    { name: 'trajectory_uid', kind: 'utf8', values: steps.map((s) => s.trajectoryId) },
    { name: 'step_index', kind: 'int32', values: Int32Array.from(steps, (s) => s.index) },
    listColumn(
      'prompt_ids',
      'list_int32',
      steps.map((s) => s.promptIds),
    ),
    listColumn(
      'response_ids',
      'list_int32',
      steps.map((s) => s.responseIds),
    ),
    listColumn(
      'response_logprobs',
      'list_float32',
      steps.map((s) => s.responseLogprobs),
    ),
    listColumn('response_versions', 'list_int32', steps.map(responseVersions)),
    listColumn(
      'response_mask',
      'list_uint8',
      steps.map(
        (s) =>
          responseLossMask(s, options.partialRollouts ?? 'train') ??
          new Uint8Array(s.responseIds.length).fill(1),
      ),
    ),
    listColumn(
      'training_prompt_ids',
      'list_int32',
      steps.map((s) => s.trainingPromptIds),
    ),
    { name: 'reward', kind: 'float64', values: steps.map((s) => s.reward) },
    { name: 'trajectory_reward', kind: 'float64', values: shared.trajectoryReward },
  ];
  if (options.advantage)
    columns.push({ name: 'advantage', kind: 'float32', values: Float32Array.from(shared.advantage) });
  columns.push(
    { name: 'policy_version', kind: 'int32', values: Int32Array.from(steps, (s) => s.policyVersion) },
    { name: 'is_last', kind: 'bool', values: steps.map((s) => s.isLast) },
    { name: 'token_source', kind: 'utf8', values: steps.map((s) => s.tokenSource) },
    { name: 'finish_reason', kind: 'utf8', values: steps.map((s) => s.finishReason) },
    ...sharedTail(shared),
  );
  return columns;
}

/** `rows: "trajectory"`: one row per stitched sequence (trajectory-rows.ts). */
function trajectoryRowColumns(
  batch: LeasedBatch,
  options: { advantage?: AdvantageEstimator; partialRollouts?: PartialRollouts },
): ArrowColumn[] {
  const rows: TrajectoryRow[] = [];
  const uids: string[] = [];
  const isLast: boolean[] = [];
  const finishReason: (string | null)[] = [];
  const shared = eachTrajectory(batch, options.advantage ?? 'grpo', (t) => {
    const stitched = stitchTrajectory(t.trajectory, t.steps, options.partialRollouts);
    const byIndex = new Map(t.steps.map((s) => [s.index, s]));
    for (const row of stitched) {
      const last = byIndex.get(row.lastStep)!;
      rows.push(row);
      uids.push(t.trajectory.id);
      isLast.push(last.isLast);
      finishReason.push(last.finishReason);
    }
    return stitched.length;
  });
  const columns: ArrowColumn[] = [
    { name: 'group_id', kind: 'utf8', values: shared.group },
    { name: 'trajectory_uid', kind: 'utf8', values: uids },
    { name: 'first_step', kind: 'int32', values: Int32Array.from(rows, (r) => r.firstStep) },
    { name: 'last_step', kind: 'int32', values: Int32Array.from(rows, (r) => r.lastStep) },
    listColumn(
      'input_ids',
      'list_int32',
      rows.map((r) => r.tokens),
    ),
    listColumn(
      'loss_mask',
      'list_uint8',
      rows.map((r) => r.lossMask),
    ),
    listColumn(
      'logprobs',
      'list_float32',
      rows.map((r) => (r.hasLogprobs ? r.logprobs : null)),
    ),
    listColumn(
      'versions',
      'list_int32',
      rows.map((r) => r.versions),
    ),
    { name: 'prompt_length', kind: 'int32', values: Int32Array.from(rows, (r) => r.promptLength) },
    { name: 'reward', kind: 'float64', values: rows.map((r) => r.reward) },
    { name: 'trajectory_reward', kind: 'float64', values: shared.trajectoryReward },
  ];
  if (options.advantage)
    columns.push({ name: 'advantage', kind: 'float32', values: Float32Array.from(shared.advantage) });
  columns.push(
    { name: 'policy_version', kind: 'int32', values: Int32Array.from(rows, (r) => r.policyVersion) },
    { name: 'is_last', kind: 'bool', values: isLast },
    { name: 'finish_reason', kind: 'utf8', values: finishReason },
    ...sharedTail(shared),
  );
  return columns;
}

/** One worker for the process, started on first use; it does not keep the process alive. */
class ArrowEncoder {
  private worker: Worker | null = null;
  private nextId = 0;
  private readonly pending = new Map<
    number,
    { resolve: (b: Uint8Array) => void; reject: (e: Error) => void }
  >();

  encode(columns: ArrowColumn[]): Promise<Uint8Array> {
    const worker = this.start();
    const id = this.nextId++;
    const transfer: ArrayBuffer[] = [];
    for (const c of columns) {
      if (c.kind === 'list_int32' || c.kind === 'list_float32' || c.kind === 'list_uint8')
        transfer.push(
          c.offsets.buffer as ArrayBuffer,
          c.values.buffer as ArrayBuffer,
          c.validity.buffer as ArrayBuffer,
        );
    }
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (this.pending.size === 1) worker.ref();
      worker.postMessage({ id, columns }, transfer);
    });
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(new URL('./arrow-worker.mjs', import.meta.url));
    worker.unref();
    worker.on('message', (m: { id: number; bytes?: Uint8Array; error?: string }) => {
      const waiting = this.pending.get(m.id);
      if (!waiting) return;
      this.pending.delete(m.id);
      if (this.pending.size === 0) worker.unref();
      if (m.bytes) waiting.resolve(m.bytes);
      else waiting.reject(new Error(`Arrow encoding failed: ${m.error}`));
    });
    const fail = (error: Error) => {
      for (const waiting of this.pending.values()) waiting.reject(error);
      this.pending.clear();
      this.worker = null;
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`the Arrow worker exited (${code})`)));
    this.worker = worker;
    return worker;
  }
}

const encoder = new ArrowEncoder();

/** Encodes laid-out columns as an Arrow IPC stream (their buffers move to the worker). */
export function encodeArrow(columns: ArrowColumn[]): Promise<Uint8Array> {
  return encoder.encode(columns);
}

/** How many rows the columns hold (read before encoding: the buffers are transferred). */
export function arrowRows(columns: readonly ArrowColumn[]): number {
  const first = columns[0];
  if (!first) return 0;
  return 'offsets' in first ? first.offsets.length - 1 : first.values.length;
}

import { Worker } from 'node:worker_threads';
import type { Step } from '../domain/index.js';
import type { LeasedBatch } from '../store/store.js';
import { type AdvantageEstimator, groupAdvantages } from './advantages.js';
import { isOffPolicy } from './off-policy.js';

/*
 * The `arrow` batch format: an Arrow IPC stream, one row per step (docs/serving.md). The columns are
 * laid out here as plain and typed arrays (token columns as one offsets array and one values array
 * each) and encoded by apache-arrow on a worker thread (src/serving/arrow-worker.mjs): loading
 * apache-arrow switches off V8's fast Array.prototype.concat for the whole thread it runs in.
 */

export type ArrowColumn = { name: string } & (
  | { kind: 'utf8'; values: (string | null)[] }
  | { kind: 'bool'; values: (boolean | null)[] }
  | { kind: 'int32'; values: (number | null)[] | Int32Array }
  | { kind: 'float32'; values: Float32Array }
  | { kind: 'float64'; values: (number | null)[] }
  | {
      kind: 'list_int32' | 'list_float32';
      offsets: Int32Array;
      values: Int32Array | Float32Array;
      validity: Uint8Array;
      nullCount: number;
    }
);

/** A List column over per-row arrays (a null row where the array is null). */
function listColumn(
  name: string,
  kind: 'list_int32' | 'list_float32',
  rows: readonly (readonly number[] | null)[],
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
  const values = kind === 'list_int32' ? new Int32Array(total) : new Float32Array(total);
  for (const [i, row] of rows.entries()) if (row) values.set(row, offsets[i]!);
  return { name, kind, offsets, values, validity, nullCount };
}

export function arrowColumns(batch: LeasedBatch, options: { advantage?: AdvantageEstimator }): ArrowColumn[] {
  const steps: Step[] = [];
  const rowGroup: string[] = [];
  const trajectoryReward: (number | null)[] = [];
  const advantage: number[] = [];
  const guided: boolean[] = [];
  const guidanceK: (number | null)[] = [];
  const probe: boolean[] = [];
  const derivedFrom: (string | null)[] = [];
  const offPolicy: boolean[] = [];
  const stale: boolean[] = [];
  const staleness: number[] = [];
  const partial: boolean[] = [];
  for (const served of batch.groups) {
    const { advantages } = groupAdvantages(
      served.trajectories.map((t) => t.trajectory.reward),
      options.advantage ?? 'grpo',
    );
    served.trajectories.forEach((t, i) => {
      const off = isOffPolicy(t.trajectory);
      for (const step of t.steps) {
        steps.push(step);
        rowGroup.push(served.group.id);
        trajectoryReward.push(t.trajectory.reward);
        advantage.push(advantages[i]!);
        guided.push(t.trajectory.guided);
        guidanceK.push(t.trajectory.guidanceK);
        probe.push(t.trajectory.probe);
        derivedFrom.push(t.trajectory.derivedFrom);
        offPolicy.push(off);
        stale.push(served.stale);
        staleness.push(served.staleness);
        partial.push(served.group.partial);
      }
    });
  }
  const columns: ArrowColumn[] = [
    { name: 'group_id', kind: 'utf8', values: rowGroup },
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
    listColumn(
      'training_prompt_ids',
      'list_int32',
      steps.map((s) => s.trainingPromptIds),
    ),
    { name: 'reward', kind: 'float64', values: steps.map((s) => s.reward) },
    { name: 'trajectory_reward', kind: 'float64', values: trajectoryReward },
  ];
  if (options.advantage)
    columns.push({ name: 'advantage', kind: 'float32', values: Float32Array.from(advantage) });
  columns.push(
    { name: 'policy_version', kind: 'int32', values: Int32Array.from(steps, (s) => s.policyVersion) },
    { name: 'is_last', kind: 'bool', values: steps.map((s) => s.isLast) },
    { name: 'token_source', kind: 'utf8', values: steps.map((s) => s.tokenSource) },
    { name: 'finish_reason', kind: 'utf8', values: steps.map((s) => s.finishReason) },
    { name: 'guided', kind: 'bool', values: guided },
    { name: 'guidance_k', kind: 'int32', values: guidanceK },
    { name: 'probe', kind: 'bool', values: probe },
    { name: 'derived_from', kind: 'utf8', values: derivedFrom },
    { name: 'off_policy', kind: 'bool', values: offPolicy },
    { name: 'stale', kind: 'bool', values: stale },
    { name: 'staleness', kind: 'int32', values: Int32Array.from(staleness) },
    { name: 'partial', kind: 'bool', values: partial },
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
      if (c.kind === 'list_int32' || c.kind === 'list_float32')
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

export function batchToArrow(
  batch: LeasedBatch,
  options: { advantage?: AdvantageEstimator },
): Promise<Uint8Array> {
  return encoder.encode(arrowColumns(batch, options));
}

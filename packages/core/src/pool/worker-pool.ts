import { Worker } from 'node:worker_threads';
import { deserializeError, type SerializedError } from '../domain/errors.js';
import { type NewStep, StepwiseError } from '../domain/index.js';
import type { SqliteStoreOptions } from '../store/sqlite/sqlite-store.js';
import type { SubmitOutcome, SubmitRequest } from '../store/store.js';
import type { PoolOps } from './core.js';
import type { PoolMethod, WorkerReply } from './worker-protocol.js';

// biome-ignore lint/suspicious/noExplicitAny: each call resolves with its own method's result type
type Pending = { resolve: (value: any) => void; reject: (error: unknown) => void };

/**
 * The pool's operations on a SQLite connection that lives on a worker thread: every call is a
 * message, answered when the worker's pool answers. Token arrays travel as transferred typed arrays
 * (no per-number copy).
 */
export class WorkerPool implements PoolOps {
  readonly kind = 'sqlite' as const;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private failure: Error | null = null;

  private constructor(private readonly worker: Worker) {
    worker.on('message', (reply: WorkerReply) => {
      const waiting = this.pending.get(reply.id);
      if (!waiting) return;
      this.pending.delete(reply.id);
      if (reply.ok) waiting.resolve(reply.value);
      else waiting.reject(deserializeError(reply.error));
    });
    const fail = (error: Error) => {
      this.failure ??= error;
      for (const waiting of this.pending.values()) waiting.reject(this.failure);
      this.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new StepwiseError(`pool worker exited (${code})`, 503, 'unavailable')));
  }

  static async open(options: SqliteStoreOptions): Promise<WorkerPool> {
    const worker = new Worker(new URL('./pool-worker-entry.mjs', import.meta.url), { workerData: options });
    await new Promise<void>((resolve, reject) => {
      const onMessage = (message: { ready?: boolean; error?: SerializedError }) => {
        if (message.ready === undefined) return;
        worker.off('message', onMessage);
        worker.off('error', reject);
        if (message.ready) resolve();
        else {
          void worker.terminate();
          reject(deserializeError(message.error!));
        }
      };
      worker.on('message', onMessage);
      worker.once('error', reject);
    });
    return new WorkerPool(worker);
  }

  private call<M extends PoolMethod>(
    method: M,
    args: Parameters<PoolOps[M]>,
    transfer: ArrayBuffer[] = [],
  ): ReturnType<PoolOps[M]> {
    if (this.failure) return Promise.reject(this.failure) as ReturnType<PoolOps[M]>;
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, method, args }, transfer);
    }) as ReturnType<PoolOps[M]>;
  }

  async submitBatch(requests: SubmitRequest[], now: number): Promise<SubmitOutcome[]> {
    const transfer: ArrayBuffer[] = [];
    const moving = new Set<ArrayBufferLike>();
    const packed = (ids: number[]) => {
      // Ids that already fill a Uint32Array of their own (a big batch parsed off the event loop)
      // move as they are; a request's steps are not read again once submitted.
      const given = ids as unknown;
      const typed =
        given instanceof Uint32Array &&
        given.byteLength === given.buffer.byteLength &&
        !moving.has(given.buffer)
          ? given
          : Uint32Array.from(ids);
      moving.add(typed.buffer);
      transfer.push(typed.buffer as ArrayBuffer);
      return typed as unknown as number[]; // the store reads token arrays as ArrayLike
    };
    const sent = requests.map((r) => ({
      ...r,
      steps: r.steps.map(
        (s): NewStep => ({ ...s, promptIds: packed(s.promptIds), responseIds: packed(s.responseIds) }),
      ),
    }));
    const outcomes = (await this.call('submitBatch', [sent, now], transfer)) as unknown as (
      | SubmitOutcome
      | { ok: false; error: SerializedError }
    )[];
    return outcomes.map((o) =>
      o.ok ? o : { ok: false, error: deserializeError(o.error as SerializedError) as StepwiseError },
    );
  }

  createTrajectory: PoolOps['createTrajectory'] = (...a) => this.call('createTrajectory', a);
  completeTrajectory: PoolOps['completeTrajectory'] = (...a) => this.call('completeTrajectory', a);
  mergeTrajectoryMetadata: PoolOps['mergeTrajectoryMetadata'] = (...a) =>
    this.call('mergeTrajectoryMetadata', a);
  moveTrajectory: PoolOps['moveTrajectory'] = (...a) => this.call('moveTrajectory', a);
  recordCallFailure: PoolOps['recordCallFailure'] = (...a) => this.call('recordCallFailure', a);
  recordRefusal: PoolOps['recordRefusal'] = (...a) => this.call('recordRefusal', a);
  getTrajectory: PoolOps['getTrajectory'] = (...a) => this.call('getTrajectory', a);
  getTrajectorySteps: PoolOps['getTrajectorySteps'] = (...a) => this.call('getTrajectorySteps', a);
  getTrajectoryStepsPacked: PoolOps['getTrajectoryStepsPacked'] = (...a) =>
    this.call('getTrajectoryStepsPacked', a);
  getStep: PoolOps['getStep'] = (...a) => this.call('getStep', a);
  getGroup: PoolOps['getGroup'] = (...a) => this.call('getGroup', a);
  listGroups: PoolOps['listGroups'] = (...a) => this.call('listGroups', a);
  holdGroupForGuidance: PoolOps['holdGroupForGuidance'] = (...a) => this.call('holdGroupForGuidance', a);
  releaseGuidanceHold: PoolOps['releaseGuidanceHold'] = (...a) => this.call('releaseGuidanceHold', a);
  listSteps: PoolOps['listSteps'] = (...a) => this.call('listSteps', a);
  listTrajectories: PoolOps['listTrajectories'] = (...a) => this.call('listTrajectories', a);
  scanTrajectories: PoolOps['scanTrajectories'] = (...a) => this.call('scanTrajectories', a);
  getPolicyVersion: PoolOps['getPolicyVersion'] = (...a) => this.call('getPolicyVersion', a);
  setPolicyVersion: PoolOps['setPolicyVersion'] = (...a) => this.call('setPolicyVersion', a);
  getChannelConfig: PoolOps['getChannelConfig'] = (...a) => this.call('getChannelConfig', a);
  setChannelConfig: PoolOps['setChannelConfig'] = (...a) => this.call('setChannelConfig', a);
  leaseBatch: PoolOps['leaseBatch'] = (...a) => this.call('leaseBatch', a);
  ackLease: PoolOps['ackLease'] = (...a) => this.call('ackLease', a);
  nackLease: PoolOps['nackLease'] = (...a) => this.call('nackLease', a);
  getLease: PoolOps['getLease'] = (...a) => this.call('getLease', a);
  sweep: PoolOps['sweep'] = (...a) => this.call('sweep', a);
  registerPrompts: PoolOps['registerPrompts'] = (...a) => this.call('registerPrompts', a);
  nextPrompts: PoolOps['nextPrompts'] = (...a) => this.call('nextPrompts', a);
  listPrompts: PoolOps['listPrompts'] = (...a) => this.call('listPrompts', a);
  missingEvidenceBlobs: PoolOps['missingEvidenceBlobs'] = (...a) => this.call('missingEvidenceBlobs', a);
  putEvidenceBlob: PoolOps['putEvidenceBlob'] = (...a) => this.call('putEvidenceBlob', a);
  keepEvidence: PoolOps['keepEvidence'] = (...a) => this.call('keepEvidence', a);
  getEvidence: PoolOps['getEvidence'] = (...a) => this.call('getEvidence', a);
  evidenceBlobs: PoolOps['evidenceBlobs'] = (...a) => this.call('evidenceBlobs', a);
  listEvidence: PoolOps['listEvidence'] = (...a) => this.call('listEvidence', a);
  recordMismatch: PoolOps['recordMismatch'] = (...a) => this.call('recordMismatch', a);
  mismatch: PoolOps['mismatch'] = (...a) => this.call('mismatch', a);
  addLabels: PoolOps['addLabels'] = (...a) => this.call('addLabels', a);
  getLabels: PoolOps['getLabels'] = (...a) => this.call('getLabels', a);
  getCurrentLabels: PoolOps['getCurrentLabels'] = (...a) => this.call('getCurrentLabels', a);
  addSignals: PoolOps['addSignals'] = (...a) => this.call('addSignals', a);
  getSignals: PoolOps['getSignals'] = (...a) => this.call('getSignals', a);
  dashboardSummary: PoolOps['dashboardSummary'] = (...a) => this.call('dashboardSummary', a);
  listLeases: PoolOps['listLeases'] = (...a) => this.call('listLeases', a);
  gymRuns: PoolOps['gymRuns'] = (...a) => this.call('gymRuns', a);
  previewBatch: PoolOps['previewBatch'] = (...a) => this.call('previewBatch', a);
  readEvents: PoolOps['readEvents'] = (...a) => this.call('readEvents', a);
  lastEventSeq: PoolOps['lastEventSeq'] = (...a) => this.call('lastEventSeq', a);
  stats: PoolOps['stats'] = (...a) => this.call('stats', a);
  describe: PoolOps['describe'] = (...a) => this.call('describe', a);

  async close(): Promise<void> {
    if (this.failure) return;
    await this.call('close', []);
    await this.worker.terminate();
  }
}

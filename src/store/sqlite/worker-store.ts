import { Worker } from 'node:worker_threads';
import { deserializeError, type SerializedError } from '../../domain/errors.js';
import { type NewStep, StepwiseError } from '../../domain/index.js';
import type { Store, SubmitOutcome, SubmitRequest } from '../store.js';
import type { SqliteStoreOptions } from './sqlite-store.js';
import type { StoreMethod, WorkerReply } from './worker-protocol.js';

// biome-ignore lint/suspicious/noExplicitAny: each call resolves with its own method's result type
type Pending = { resolve: (value: any) => void; reject: (error: unknown) => void };

/**
 * A Store whose SQLite connection lives on a worker thread: every call is a message, answered when
 * the worker's store answers. Token arrays travel as transferred typed arrays (no per-number copy).
 */
export class WorkerStore implements Store {
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
    worker.on('exit', (code) => fail(new StepwiseError(`store worker exited (${code})`, 503, 'unavailable')));
  }

  static async open(options: SqliteStoreOptions): Promise<WorkerStore> {
    const worker = new Worker(new URL('./store-worker-entry.mjs', import.meta.url), { workerData: options });
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
    return new WorkerStore(worker);
  }

  private call<M extends StoreMethod>(
    method: M,
    args: Parameters<Store[M]>,
    transfer: ArrayBuffer[] = [],
  ): ReturnType<Store[M]> {
    if (this.failure) return Promise.reject(this.failure) as ReturnType<Store[M]>;
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, method, args }, transfer);
    }) as ReturnType<Store[M]>;
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

  createTrajectory: Store['createTrajectory'] = (...a) => this.call('createTrajectory', a);
  completeTrajectory: Store['completeTrajectory'] = (...a) => this.call('completeTrajectory', a);
  mergeTrajectoryMetadata: Store['mergeTrajectoryMetadata'] = (...a) =>
    this.call('mergeTrajectoryMetadata', a);
  moveTrajectory: Store['moveTrajectory'] = (...a) => this.call('moveTrajectory', a);
  recordCallFailure: Store['recordCallFailure'] = (...a) => this.call('recordCallFailure', a);
  recordRefusal: Store['recordRefusal'] = (...a) => this.call('recordRefusal', a);
  getTrajectory: Store['getTrajectory'] = (...a) => this.call('getTrajectory', a);
  getTrajectorySteps: Store['getTrajectorySteps'] = (...a) => this.call('getTrajectorySteps', a);
  getStep: Store['getStep'] = (...a) => this.call('getStep', a);
  getGroup: Store['getGroup'] = (...a) => this.call('getGroup', a);
  listGroups: Store['listGroups'] = (...a) => this.call('listGroups', a);
  holdGroupForGuidance: Store['holdGroupForGuidance'] = (...a) => this.call('holdGroupForGuidance', a);
  releaseGuidanceHold: Store['releaseGuidanceHold'] = (...a) => this.call('releaseGuidanceHold', a);
  listSteps: Store['listSteps'] = (...a) => this.call('listSteps', a);
  listTrajectories: Store['listTrajectories'] = (...a) => this.call('listTrajectories', a);
  scanTrajectories: Store['scanTrajectories'] = (...a) => this.call('scanTrajectories', a);
  getPolicyVersion: Store['getPolicyVersion'] = (...a) => this.call('getPolicyVersion', a);
  setPolicyVersion: Store['setPolicyVersion'] = (...a) => this.call('setPolicyVersion', a);
  getChannelConfig: Store['getChannelConfig'] = (...a) => this.call('getChannelConfig', a);
  setChannelConfig: Store['setChannelConfig'] = (...a) => this.call('setChannelConfig', a);
  leaseBatch: Store['leaseBatch'] = (...a) => this.call('leaseBatch', a);
  ackLease: Store['ackLease'] = (...a) => this.call('ackLease', a);
  nackLease: Store['nackLease'] = (...a) => this.call('nackLease', a);
  getLease: Store['getLease'] = (...a) => this.call('getLease', a);
  sweep: Store['sweep'] = (...a) => this.call('sweep', a);
  addLabels: Store['addLabels'] = (...a) => this.call('addLabels', a);
  getLabels: Store['getLabels'] = (...a) => this.call('getLabels', a);
  getCurrentLabels: Store['getCurrentLabels'] = (...a) => this.call('getCurrentLabels', a);
  addSignals: Store['addSignals'] = (...a) => this.call('addSignals', a);
  getSignals: Store['getSignals'] = (...a) => this.call('getSignals', a);
  dashboardSummary: Store['dashboardSummary'] = (...a) => this.call('dashboardSummary', a);
  listLeases: Store['listLeases'] = (...a) => this.call('listLeases', a);
  gymRuns: Store['gymRuns'] = (...a) => this.call('gymRuns', a);
  previewBatch: Store['previewBatch'] = (...a) => this.call('previewBatch', a);
  readEvents: Store['readEvents'] = (...a) => this.call('readEvents', a);
  lastEventSeq: Store['lastEventSeq'] = (...a) => this.call('lastEventSeq', a);
  stats: Store['stats'] = (...a) => this.call('stats', a);
  describe: Store['describe'] = (...a) => this.call('describe', a);

  async close(): Promise<void> {
    if (this.failure) return;
    await this.call('close', []);
    await this.worker.terminate();
  }
}

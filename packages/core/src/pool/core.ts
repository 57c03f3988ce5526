import {
  type ChannelConfig,
  ChannelConfigPatch,
  type Evidence,
  type EvidenceBody,
  type EvidenceSummary,
  type Group,
  type Label,
  type LabelInput,
  type Lease,
  type MismatchReport,
  parseOrThrow,
  type Signal,
  type SignalInput,
  type Step,
  type Trajectory,
} from '../domain/index.js';
import type { ReadModels } from '../store/read-models.js';
import { toGroup, toTrajectory } from '../store/rows.js';
import type {
  CallFailure,
  CompleteInput,
  CreateTrajectoryInput,
  Refusal,
  Store,
  SubmitOutcome,
  SubmitRequest,
} from '../store/store.js';
import { configureChannel, setPolicyVersion } from './channels.js';
import { keepEvidence, toEvidence, toSummary } from './evidence.js';
import { addLabels, addSignals } from './feedback.js';
import { holdForGuidance, releaseGuidance } from './groups.js';
import { isRefusal, submitAll, submitEach } from './ingest.js';
import { leaseGroups, previewLease, serveLease } from './lease.js';
import { endLease } from './leases.js';
import { recordMismatch } from './mismatch.js';
import { listPrompts, nextPrompts, registerPrompts } from './schedule.js';
import { sweep } from './sweep.js';
import {
  completeTrajectory,
  createTrajectory,
  mergeMetadata,
  moveTrajectory,
  recordCallFailure,
  recordRefusal,
} from './trajectories.js';
import type {
  GroupSweepResult,
  GuidanceRelease,
  LeasedBatch,
  LeaseParams,
  NextPrompt,
  PreviewGroup,
  PromptView,
} from './types.js';

/**
 * The pool's operations: its rules, each run in one transaction of the store, and the store's reads.
 * PoolCore runs them in this process; WorkerPool on the thread that owns a SQLite connection.
 */
export interface PoolOps extends Omit<Store, 'write' | 'read' | 'views'>, ReadModels {
  /**
   * Stores submissions in one commit, each all or nothing: a refused one (outcome `ok: false`)
   * leaves no trace and the others still commit.
   */
  submitBatch(requests: SubmitRequest[], now: number): Promise<SubmitOutcome[]>;
  createTrajectory(input: CreateTrajectoryInput, now: number): Promise<Trajectory>;
  completeTrajectory(id: string, input: CompleteInput, now: number): Promise<Trajectory>;
  /** Merges keys into an open trajectory's metadata. */
  mergeTrajectoryMetadata(id: string, metadata: Record<string, unknown>, now: number): Promise<Trajectory>;
  /**
   * Moves an open trajectory with no steps, alone in its group, into another group and/or channel
   * (Claw-R1 names its GRPO group, the `prompt_uid`, in the base_url after init). Its old group,
   * which held only it, is removed; the target group is joined or created as on creation.
   */
  moveTrajectory(id: string, target: { groupId: string; channel: string }, now: number): Promise<Trajectory>;
  recordCallFailure(failure: CallFailure, now: number): Promise<void>;
  recordRefusal(refusal: Refusal, now: number): Promise<void>;
  setPolicyVersion(version: number, now: number): Promise<void>;
  setChannelConfig(channel: string, patch: ChannelConfigPatch, now: number): Promise<ChannelConfig>;
  /**
   * Holds a group for guidance (ActGuide-RL): a ready one moves to `pending_guidance` (not leasable),
   * a collecting one will whatever its rewards; a pending one stays, its timeout restarted (the guide
   * re-holds the groups it is still working on). A group already leased, consumed or dropped cannot
   * be held (ConflictError on `state`).
   */
  holdGroupForGuidance(channel: string, id: string, now: number): Promise<Group>;
  /** Ends a guidance hold: a pending group goes on to `ready`, a collecting one is no longer held. */
  releaseGuidanceHold(channel: string, id: string, why: GuidanceRelease, now: number): Promise<Group>;
  addLabels(labels: LabelInput[], now: number): Promise<Label[]>;
  /**
   * Appends signals atomically (all or none): the trajectory, and the step when one is named, must
   * exist. A newer signal with the same (step, name, source) supersedes an older one; both are kept.
   */
  addSignals(signals: SignalInput[], now: number): Promise<Signal[]>;
  ackLease(leaseId: string, now: number): Promise<Lease>;
  nackLease(leaseId: string, now: number): Promise<Lease>;
  /**
   * Stores a trainer's rollout-vs-trainer mismatch for steps of a lease (each must be in one of its
   * groups), with each step's engine and policy version as stored.
   */
  recordMismatch(
    leaseId: string,
    reports: MismatchReport[],
    now: number,
  ): Promise<{ leaseId: string; steps: number }>;
  /** Expires overdue leases, applies incomplete-group timeouts and closes idle open trajectories. */
  sweep(now: number): Promise<GroupSweepResult>;
  /** Registers a channel's prompts for the scheduler (pool/schedule.ts); known ones are kept. */
  registerPrompts(
    channel: string,
    prompts: { taskId: string; taskSet: string }[],
    now: number,
  ): Promise<{ added: number; total: number }>;
  /** Hands out up to `count` prompts not in flight (of `taskSet` only, when given), under the channel's policy. */
  nextPrompts(channel: string, count: number, now: number, taskSet?: string | null): Promise<NextPrompt[]>;
  /** The channel's prompts with their history and difficulty pool. */
  listPrompts(channel: string, now: number): Promise<PromptView[]>;
  /** Which of these evidence blobs the store lacks. */
  missingEvidenceBlobs(sha256s: string[]): Promise<string[]>;
  /** Stores an evidence blob (its hash checked by the caller); true when it was new. */
  putEvidenceBlob(sha256: string, content: Uint8Array, now: number): Promise<boolean>;
  /** Keeps what a trajectory's verifier read, once (pool/evidence.ts). */
  keepEvidence(trajectoryId: string, body: EvidenceBody, now: number): Promise<Evidence>;
  getEvidence(trajectoryId: string): Promise<Evidence | null>;
  /** Stored evidence blobs by hash. */
  evidenceBlobs(sha256s: string[]): Promise<Map<string, Uint8Array>>;
  /** Trajectories with evidence, in id order after `after`, of one channel or all. */
  listEvidence(channel: string | null, after: string | null, limit: number): Promise<EvidenceSummary[]>;
  /** Leases up to batchSize ready groups FIFO; null (and nothing leased) when fewer are ready. */
  leaseBatch(params: LeaseParams, now: number): Promise<LeasedBatch | null>;
  /**
   * The groups the next lease of this shape would look at, in order, each with what curation,
   * staleness and labels would make of it; stops after `batchSize` served groups. Changes nothing.
   */
  previewBatch(params: LeaseParams): Promise<PreviewGroup[]>;
  /**
   * A trajectory's steps with their token ids as Uint32Arrays (ids past 32 bits stay an array):
   * from SQLite's thread they move, where number arrays would be cloned number by number.
   */
  getTrajectoryStepsPacked(id: string): Promise<PackedStep[]>;
}

/** A step whose token id arrays may be Uint32Arrays (getTrajectoryStepsPacked). */
export type PackedStep = Omit<Step, 'promptIds' | 'responseIds' | 'trainingPromptIds'> & {
  promptIds: number[] | Uint32Array;
  responseIds: number[] | Uint32Array;
  trainingPromptIds: number[] | Uint32Array | null;
};

/** A step's token id arrays as Uint32Arrays, each with its own buffer (added to `buffers`, to move). */
export function packStepIds(step: Step, buffers: ArrayBuffer[]): PackedStep {
  const pack = (ids: number[]): number[] | Uint32Array => {
    for (const id of ids) if (id > 0xffff_ffff) return ids;
    const typed = Uint32Array.from(ids);
    buffers.push(typed.buffer);
    return typed;
  };
  return {
    ...step,
    promptIds: pack(step.promptIds),
    responseIds: pack(step.responseIds),
    trainingPromptIds: step.trainingPromptIds && pack(step.trainingPromptIds),
  };
}

/** The pool's operations: given, or run in this process over the given store. */
export function poolOps(store: Store | PoolOps): PoolOps {
  return 'write' in store ? new PoolCore(store as Store) : store;
}

/** The pool's operations over a store in this process. */
export class PoolCore implements PoolOps {
  readonly kind: Store['kind'];

  constructor(readonly store: Store) {
    this.kind = store.kind;
  }

  async submitBatch(requests: SubmitRequest[], now: number): Promise<SubmitOutcome[]> {
    try {
      // Most commits hold no refused submission: all of them at once, without savepoints.
      return await this.store.write((tx) => submitAll(tx, requests, now));
    } catch (error) {
      if (!isRefusal(error)) throw error;
    }
    // Something was refused: the commit was rolled back; again, with a savepoint per submission.
    return this.store.write((tx) => submitEach(tx, requests, now));
  }

  async createTrajectory(input: CreateTrajectoryInput, now: number): Promise<Trajectory> {
    return toTrajectory(await this.store.write((tx) => createTrajectory(tx, input, now)));
  }

  async mergeTrajectoryMetadata(
    id: string,
    metadata: Record<string, unknown>,
    now: number,
  ): Promise<Trajectory> {
    return toTrajectory(await this.store.write((tx) => mergeMetadata(tx, id, metadata, now)));
  }

  async moveTrajectory(
    id: string,
    target: { groupId: string; channel: string },
    now: number,
  ): Promise<Trajectory> {
    return toTrajectory(await this.store.write((tx) => moveTrajectory(tx, id, target, now)));
  }

  recordCallFailure(failure: CallFailure, now: number): Promise<void> {
    return this.store.write((tx) => recordCallFailure(tx, failure, now));
  }

  recordRefusal(refusal: Refusal, now: number): Promise<void> {
    return this.store.write((tx) => recordRefusal(tx, refusal, now));
  }

  setPolicyVersion(version: number, now: number): Promise<void> {
    return this.store.write((tx) => setPolicyVersion(tx, version, now));
  }

  async setChannelConfig(channel: string, raw: ChannelConfigPatch, now: number): Promise<ChannelConfig> {
    const patch = parseOrThrow(ChannelConfigPatch, raw);
    return this.store.write((tx) => configureChannel(tx, channel, patch, now));
  }

  async completeTrajectory(id: string, input: CompleteInput, now: number): Promise<Trajectory> {
    return toTrajectory(await this.store.write((tx) => completeTrajectory(tx, id, input, now)));
  }

  async holdGroupForGuidance(channel: string, id: string, now: number): Promise<Group> {
    return toGroup(await this.store.write((tx) => holdForGuidance(tx, channel, id, now)));
  }

  async releaseGuidanceHold(channel: string, id: string, why: GuidanceRelease, now: number): Promise<Group> {
    return toGroup(await this.store.write((tx) => releaseGuidance(tx, channel, id, why, now)));
  }

  addLabels(labels: LabelInput[], now: number): Promise<Label[]> {
    return this.store.write((tx) => addLabels(tx, labels, now));
  }

  addSignals(signals: SignalInput[], now: number): Promise<Signal[]> {
    return this.store.write((tx) => addSignals(tx, signals, now));
  }

  ackLease(leaseId: string, now: number): Promise<Lease> {
    return this.endLease(leaseId, 'acked', now);
  }

  nackLease(leaseId: string, now: number): Promise<Lease> {
    return this.endLease(leaseId, 'nacked', now);
  }

  private async endLease(leaseId: string, outcome: 'acked' | 'nacked', now: number): Promise<Lease> {
    const result = await this.store.write((tx) => endLease(tx, leaseId, outcome, now));
    if (result instanceof Error) throw result;
    return result;
  }

  sweep(now: number): Promise<GroupSweepResult> {
    return this.store.write((tx) => sweep(tx, now));
  }

  registerPrompts(
    channel: string,
    prompts: { taskId: string; taskSet: string }[],
    now: number,
  ): Promise<{ added: number; total: number }> {
    return this.store.write((tx) => registerPrompts(tx, channel, prompts, now));
  }

  nextPrompts(
    channel: string,
    count: number,
    now: number,
    taskSet: string | null = null,
  ): Promise<NextPrompt[]> {
    // A claim is soft state (lost, the prompt's timeout frees it): its commit waits for no flush.
    return this.store.write((tx) => nextPrompts(tx, channel, count, now, taskSet), { durable: false });
  }

  listPrompts(channel: string, now: number): Promise<PromptView[]> {
    return this.store.read((tx) => listPrompts(tx, channel, now));
  }

  missingEvidenceBlobs(sha256s: string[]): Promise<string[]> {
    return this.store.read((tx) => tx.evidence.missingBlobs(sha256s));
  }

  putEvidenceBlob(sha256: string, content: Uint8Array, now: number): Promise<boolean> {
    return this.store.write((tx) => tx.evidence.putBlob(sha256, content, now));
  }

  keepEvidence(trajectoryId: string, body: EvidenceBody, now: number): Promise<Evidence> {
    return this.store.write((tx) => keepEvidence(tx, trajectoryId, body, now));
  }

  getEvidence(trajectoryId: string): Promise<Evidence | null> {
    return this.store.read(function* (tx) {
      const row = yield* tx.evidence.evidence(trajectoryId);
      return row && toEvidence(row);
    });
  }

  evidenceBlobs(sha256s: string[]): Promise<Map<string, Uint8Array>> {
    return this.store.read((tx) => tx.evidence.blobs(sha256s));
  }

  listEvidence(channel: string | null, after: string | null, limit: number): Promise<EvidenceSummary[]> {
    return this.store.read(function* (tx) {
      return (yield* tx.evidence.evidencePage(channel, after, limit)).map(toSummary);
    });
  }

  recordMismatch(
    leaseId: string,
    reports: MismatchReport[],
    now: number,
  ): Promise<{ leaseId: string; steps: number }> {
    return this.store.write((tx) => recordMismatch(tx, leaseId, reports, now));
  }

  async leaseBatch(params: LeaseParams, now: number): Promise<LeasedBatch | null> {
    // A lease is soft state (lost, its groups are served again): its commit waits for no flush.
    const leased = await this.store.write((tx) => leaseGroups(tx, params, now), { durable: false });
    // The groups are ours now: their steps are read after the commit, holding no lock.
    return leased && this.store.read((tx) => serveLease(tx, leased));
  }

  previewBatch(params: LeaseParams): Promise<PreviewGroup[]> {
    return this.store.read((tx) => previewLease(tx, params));
  }

  // ---- not yet rules of their own: the store's ------------------------------------------------

  stats: ReadModels['stats'] = (...a) => this.store.views.stats(...a);

  // ---- reads ------------------------------------------------------------------------------------

  getTrajectory: Store['getTrajectory'] = (...a) => this.store.getTrajectory(...a);
  getTrajectorySteps: Store['getTrajectorySteps'] = (...a) => this.store.getTrajectorySteps(...a);
  async getTrajectoryStepsPacked(id: string): Promise<PackedStep[]> {
    const buffers: ArrayBuffer[] = [];
    return (await this.store.getTrajectorySteps(id)).map((step) => packStepIds(step, buffers));
  }
  getStep: Store['getStep'] = (...a) => this.store.getStep(...a);
  getGroup: Store['getGroup'] = (...a) => this.store.getGroup(...a);
  listGroups: Store['listGroups'] = (...a) => this.store.listGroups(...a);
  listSteps: Store['listSteps'] = (...a) => this.store.listSteps(...a);
  listTrajectories: Store['listTrajectories'] = (...a) => this.store.listTrajectories(...a);
  scanTrajectories: Store['scanTrajectories'] = (...a) => this.store.scanTrajectories(...a);
  getPolicyVersion: Store['getPolicyVersion'] = (...a) => this.store.getPolicyVersion(...a);
  getChannelConfig: Store['getChannelConfig'] = (...a) => this.store.getChannelConfig(...a);
  getLease: Store['getLease'] = (...a) => this.store.getLease(...a);
  getLabels: Store['getLabels'] = (...a) => this.store.getLabels(...a);
  getCurrentLabels: Store['getCurrentLabels'] = (...a) => this.store.getCurrentLabels(...a);
  getSignals: Store['getSignals'] = (...a) => this.store.getSignals(...a);
  dashboardSummary: ReadModels['dashboardSummary'] = (...a) => this.store.views.dashboardSummary(...a);
  gymRuns: ReadModels['gymRuns'] = (...a) => this.store.views.gymRuns(...a);
  listLeases: ReadModels['listLeases'] = (...a) => this.store.views.listLeases(...a);
  mismatch: ReadModels['mismatch'] = (...a) => this.store.views.mismatch(...a);
  readEvents: Store['readEvents'] = (...a) => this.store.readEvents(...a);
  lastEventSeq: Store['lastEventSeq'] = (...a) => this.store.lastEventSeq(...a);
  describe: Store['describe'] = (...a) => this.store.describe(...a);
  close: Store['close'] = () => this.store.close();

  subscribe(listener: Parameters<NonNullable<Store['subscribe']>>[0]): () => void {
    return this.store.subscribe?.(listener) ?? (() => {});
  }
}

import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import {
  type ChannelConfig,
  type ChannelConfigPatch,
  type Evidence,
  EvidenceBody,
  type EvidenceSummary,
  type Group,
  type Label,
  type LabelInput,
  type Lease,
  type LeaseRequest,
  MAX_EVIDENCE_BLOB_BYTES,
  type MismatchReport,
  type MismatchStats,
  type NewStep,
  type PoolEvent,
  parseOrThrow,
  Sha256Hex,
  type Signal,
  type SignalInput,
  type Step,
  StepwiseError,
  type Trajectory,
  ValidationError,
} from '../domain/index.js';
import type {
  CallFailure,
  CompleteInput,
  CreateTrajectoryInput,
  EventQuery,
  GroupQuery,
  Page,
  PoolStats,
  Refusal,
  SignalQuery,
  StepQuery,
  Store,
  SubmitOutcome,
  SubmitRequest,
  ToolResultAttachment,
  TrajectoryQuery,
  TrajectoryRead,
} from '../store/store.js';
import { type PackedStep, type PoolOps, poolOps } from './core.js';
import { type VersionReport, versionReport } from './report.js';
import type { GuidanceRelease, LeasedBatch, NextPrompt, PromptView } from './types.js';
import { WriteCoalescer } from './write-coalescer.js';

export interface DataPoolOptions {
  /** A store (the pool's rules then run in this process) or the pool's operations bound to one (WorkerPool). */
  store: Store | PoolOps;
  /** Where background failures (a sweep that could not run) are reported. */
  logger?: Pick<Logger, 'warn'>;
  clock?: () => number;
  /** How long a submission may wait for others to share its commit (0: only those already queued). */
  commitWindowMs?: number;
  /** Commit at once when this many steps are queued. */
  maxCommitSteps?: number;
  /** Batches handed to the store before the previous is answered (>1 only for a store on another thread). */
  commitsInFlight?: number;
  /** How often overdue leases and incomplete groups are swept. */
  sweepIntervalMs?: number;
  /** How often waiting consumers re-check the store for work written by other processes. */
  pollIntervalMs?: number;
  /**
   * How long a policy version read from the store is reused (default 50 ms). A version set through
   * this pool is seen at once; one set by another process sharing the store, within this long.
   */
  policyVersionTtlMs?: number;
}

export interface SubmitResult {
  inserted: number;
  duplicates: number;
  completed: string[];
}

/**
 * The DataPool's serving semantics over a Store: group commit of submissions, long-polling leases,
 * periodic sweeps and a live event feed. All state lives in the store; this object only waits.
 */
export class DataPool {
  readonly store: PoolOps;
  private readonly clock: () => number;
  private readonly logger?: Pick<Logger, 'warn'>;
  private readonly writer: WriteCoalescer<SubmitRequest, SubmitOutcome>;
  private readonly pollIntervalMs: number;
  private readonly sweepIntervalMs: number;
  private readonly policyVersionTtlMs: number;
  private version: { value: number; readAt: number } | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  /** Consumers waiting for a leasable group, and readers waiting for new events. */
  private waiters = { ready: new Set<() => void>(), events: new Set<() => void>() };
  private readonly unsubscribe: (() => void) | undefined;
  private closed = false;

  constructor(options: DataPoolOptions) {
    this.store = poolOps(options.store);
    this.clock = options.clock ?? Date.now;
    this.logger = options.logger;
    this.pollIntervalMs = options.pollIntervalMs ?? 200;
    this.sweepIntervalMs = options.sweepIntervalMs ?? 1_000;
    this.policyVersionTtlMs = options.policyVersionTtlMs ?? 50;
    this.writer = new WriteCoalescer((requests) => this.store.submitBatch(requests, this.clock()), {
      windowMs: options.commitWindowMs ?? 0,
      maxWeight: options.maxCommitSteps ?? 4_096,
      maxInFlight: options.commitsInFlight ?? 1,
    });
    // A store shared with other processes may announce their commits: wake at once instead of
    // at the next poll.
    this.unsubscribe = this.store.subscribe?.((change) => {
      if (change === 'policy') this.version = null;
      if (change === 'events') this.wake('events');
      else this.wake();
    });
  }

  /** Starts the background sweep (lease expiry, incomplete-group timeouts). */
  start(): this {
    if (this.sweepTimer || this.closed) return this;
    this.sweepTimer = setInterval(() => {
      void this.sweepNow().catch((err) => this.logger?.warn({ err }, 'pool sweep failed; will retry'));
    }, this.sweepIntervalMs);
    this.sweepTimer.unref();
    return this;
  }

  async sweepNow(): Promise<void> {
    const result = await this.store.sweep(this.clock());
    if (result.expiredLeases + result.servedPartial + result.idleAborted + result.guidanceReleased > 0)
      this.wake();
  }

  /** Wakes those waiting for new data (all, or only event readers); they re-check the store. */
  wake(topic?: 'events'): void {
    const topics = topic ? [topic] : (['ready', 'events'] as const);
    for (const t of topics) {
      const waiters = this.waiters[t];
      this.waiters[t] = new Set();
      for (const w of waiters) w();
    }
  }

  private waitForChange(topic: 'ready' | 'events', ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        this.waiters[topic].delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      signal?.addEventListener('abort', done, { once: true });
      this.waiters[topic].add(done);
    });
  }

  private assertOpen(): void {
    if (this.closed)
      throw new StepwiseError('the pool is shutting down', 503, 'unavailable', undefined, true);
  }

  // ---- producers ------------------------------------------------------------------------------

  /** Stores steps; settles once they are committed (with whatever else came meanwhile: group commit). */
  async submitSteps(
    steps: NewStep[],
    options: {
      channel?: string;
      nRollouts?: number | null;
      toolResults?: ToolResultAttachment[];
    } = {},
  ): Promise<SubmitResult> {
    this.assertOpen();
    const request: SubmitRequest = {
      channel: options.channel ?? 'train',
      nRollouts: options.nRollouts ?? null,
      steps,
    };
    if (options.toolResults && options.toolResults.length > 0) request.toolResults = options.toolResults;
    const outcome = await this.writer.submit(request, Math.max(1, steps.length));
    if (!outcome.ok) throw outcome.error;
    if (outcome.completed.length > 0) this.wake();
    return { inserted: outcome.inserted, duplicates: outcome.duplicates, completed: outcome.completed };
  }

  async createTrajectory(input: CreateTrajectoryInput): Promise<Trajectory> {
    this.assertOpen();
    return this.store.createTrajectory(input, this.clock());
  }

  async completeTrajectory(id: string, input: CompleteInput): Promise<Trajectory> {
    this.assertOpen();
    const trajectory = await this.store.completeTrajectory(id, input, this.clock());
    this.wake();
    return trajectory;
  }

  /** Moves a trajectory with no steps, alone in its group, to another group and/or channel (Store.moveTrajectory). */
  async moveTrajectory(id: string, target: { groupId: string; channel: string }): Promise<Trajectory> {
    this.assertOpen();
    return this.store.moveTrajectory(id, target, this.clock());
  }

  async mergeTrajectoryMetadata(id: string, metadata: Record<string, unknown>): Promise<Trajectory> {
    this.assertOpen();
    return this.store.mergeTrajectoryMetadata(id, metadata, this.clock());
  }

  // ---- guidance holds (ActGuide-RL, docs/datapool.md) ----------------------------------------

  async listGroups(query: GroupQuery): Promise<Page<Group>> {
    return this.store.listGroups(query);
  }

  /** Keeps a group from being leased until its guided replacement lands (or the hold ends). */
  async holdForGuidance(channel: string, groupId: string): Promise<Group> {
    this.assertOpen();
    return this.store.holdGroupForGuidance(channel, groupId, this.clock());
  }

  /** Ends a guidance hold: the group goes on to ready, as it would have, and leases may take it. */
  async releaseGuidance(channel: string, groupId: string, why: GuidanceRelease): Promise<Group> {
    this.assertOpen();
    const group = await this.store.releaseGuidanceHold(channel, groupId, why, this.clock());
    this.wake();
    return group;
  }

  async recordCallFailure(failure: CallFailure): Promise<void> {
    this.assertOpen();
    await this.store.recordCallFailure(failure, this.clock());
  }

  async recordRefusal(refusal: Refusal): Promise<void> {
    this.assertOpen();
    await this.store.recordRefusal(refusal, this.clock());
  }

  // ---- consumers ------------------------------------------------------------------------------

  /** Leases a batch, waiting up to wait_ms for enough ready groups; null when none came. */
  async lease(request: LeaseRequest, signal?: AbortSignal): Promise<LeasedBatch | null> {
    this.assertOpen();
    const askedAt = this.clock();
    const deadline = askedAt + request.wait_ms;
    for (;;) {
      const batch = await this.store.leaseBatch(
        {
          channel: request.channel,
          batchSize: request.batch_size,
          nRollouts: request.n_rollouts ?? null,
          maxStaleness: request.max_staleness ?? null,
          consumer: request.consumer,
          ttlMs: request.ttl_ms,
          // The last try does without stragglers: a lease never waits past its wait_ms.
          patient: deadline - this.clock() > this.pollIntervalMs,
          askedAt,
        },
        this.clock(),
      );
      if (batch) return batch;
      const left = deadline - this.clock();
      if (left <= 0 || this.closed || signal?.aborted) return null;
      await this.waitForChange('ready', Math.min(left, this.pollIntervalMs), signal);
      // Woken by shutdown or a gone client: answer "nothing" rather than touch a closing store.
      if (this.closed || signal?.aborted) return null;
    }
  }

  async ack(leaseId: string): Promise<Lease> {
    return this.store.ackLease(leaseId, this.clock());
  }

  async nack(leaseId: string): Promise<Lease> {
    const lease = await this.store.nackLease(leaseId, this.clock());
    this.wake();
    return lease;
  }

  async getLease(leaseId: string): Promise<Lease | null> {
    return this.store.getLease(leaseId);
  }

  async setPolicyVersion(version: number): Promise<void> {
    await this.store.setPolicyVersion(version, this.clock());
    this.version = { value: version, readAt: performance.now() };
  }

  /** The policy version in force (see `policyVersionTtlMs` for versions set by other processes). */
  async policyVersion(): Promise<number> {
    const cached = this.version;
    if (cached && performance.now() - cached.readAt < this.policyVersionTtlMs) return cached.value;
    const readAt = performance.now();
    const value = await this.store.getPolicyVersion();
    // A set that landed while this read was in flight wins.
    if (!this.version || this.version.readAt <= readAt) this.version = { value, readAt };
    return this.version.value;
  }

  async configureChannel(channel: string, patch: ChannelConfigPatch): Promise<ChannelConfig> {
    const config = await this.store.setChannelConfig(channel, patch, this.clock());
    this.wake();
    return config;
  }

  /** Registers a channel's prompts for the scheduler; known ones keep their place and history. */
  registerPrompts(
    channel: string,
    prompts: { taskId: string; taskSet: string }[],
  ): Promise<{ added: number; total: number }> {
    this.assertOpen();
    return this.store.registerPrompts(channel, prompts, this.clock());
  }

  /** What a producer rolls out next: up to `count` prompts, each with its number of rollouts. */
  nextPrompts(channel: string, count: number, taskSet: string | null = null): Promise<NextPrompt[]> {
    this.assertOpen();
    return this.store.nextPrompts(channel, count, this.clock(), taskSet);
  }

  listPrompts(channel: string): Promise<PromptView[]> {
    return this.store.listPrompts(channel, this.clock());
  }

  // ---- evidence: what verifiers read, for re-verification (docs/datapool.md#evidence) -------------

  /** Which of these blobs the store lacks (a runner uploads only those). */
  async missingEvidenceBlobs(sha256s: string[]): Promise<string[]> {
    for (const [i, sha] of sha256s.entries()) parseOrThrow(Sha256Hex, sha, `sha256.${i}`);
    return this.store.missingEvidenceBlobs(sha256s);
  }

  /** Stores a blob under its sha256, which must be the hash of its bytes; true when it was new. */
  async putEvidenceBlob(sha256: string, content: Uint8Array): Promise<boolean> {
    this.assertOpen();
    parseOrThrow(Sha256Hex, sha256, 'sha256');
    if (content.byteLength > MAX_EVIDENCE_BLOB_BYTES)
      throw new ValidationError(`body: a blob holds at most ${MAX_EVIDENCE_BLOB_BYTES} bytes`, 'body');
    const actual = createHash('sha256').update(content).digest('hex');
    if (actual !== sha256)
      throw new ValidationError(`sha256: the body hashes to ${actual}, not ${sha256}`, 'sha256');
    return this.store.putEvidenceBlob(sha256, content, this.clock());
  }

  /** Keeps what a trajectory's verifier read (its blobs stored first), once. */
  async keepEvidence(trajectoryId: string, body: unknown): Promise<Evidence> {
    this.assertOpen();
    return this.store.keepEvidence(trajectoryId, parseOrThrow(EvidenceBody, body), this.clock());
  }

  getEvidence(trajectoryId: string): Promise<Evidence | null> {
    return this.store.getEvidence(trajectoryId);
  }

  evidenceBlobs(sha256s: string[]): Promise<Map<string, Uint8Array>> {
    return this.store.evidenceBlobs(sha256s);
  }

  /** Trajectories with evidence, in id order after `after`, of one channel or all. */
  listEvidence(query: { channel?: string | null; after?: string | null; limit?: number } = {}) {
    const limit = Math.min(Math.max(query.limit ?? 500, 1), 10_000);
    return this.store.listEvidence(query.channel ?? null, query.after ?? null, limit) as Promise<
      EvidenceSummary[]
    >;
  }

  async channelConfig(channel: string): Promise<ChannelConfig> {
    return this.store.getChannelConfig(channel);
  }

  // ---- curation and queries -------------------------------------------------------------------

  async addLabels(labels: LabelInput[]): Promise<Label[]> {
    const added = await this.store.addLabels(labels, this.clock());
    this.wake();
    return added;
  }

  async labels(trajectoryId: string): Promise<Label[]> {
    return this.store.getLabels(trajectoryId);
  }

  /** Appends reward and quality signals, all or none; they are served with the next leases. */
  async addSignals(signals: SignalInput[]): Promise<Signal[]> {
    this.assertOpen();
    return this.store.addSignals(signals, this.clock());
  }

  getSignals(trajectoryId: string, options: SignalQuery = {}): Promise<Signal[]> {
    return this.store.getSignals(trajectoryId, options);
  }

  stats(channel: string | null = null): Promise<PoolStats> {
    return this.store.stats(channel);
  }

  /** Stores a trainer's mismatch report for steps of a lease (docs/trainers.md#mismatch-telemetry). */
  reportMismatch(leaseId: string, reports: MismatchReport[]): Promise<{ leaseId: string; steps: number }> {
    this.assertOpen();
    return this.store.recordMismatch(leaseId, reports, this.clock());
  }

  /** Reported mismatch per engine (its `recent` latest leases) and per policy version. */
  mismatch(channel: string | null = null, recent?: number): Promise<MismatchStats> {
    return this.store.mismatch(channel, recent);
  }

  /** What happened in a channel under each policy version (pool/report.ts). */
  versionReport(channel: string): Promise<VersionReport[]> {
    return versionReport((query) => this.store.readEvents(query), channel);
  }

  events(query: EventQuery): Promise<PoolEvent[]> {
    return this.store.readEvents(query);
  }

  /** Follows the event log from a cursor until the signal aborts or the pool closes. */
  async *watchEvents(query: Omit<EventQuery, 'limit'>, signal?: AbortSignal): AsyncGenerator<PoolEvent> {
    let after = query.after;
    while (!this.closed && !signal?.aborted) {
      const events = await this.store.readEvents({ ...query, after, limit: 500 });
      for (const event of events) {
        after = event.seq;
        yield event;
      }
      if (events.length < 500) await this.waitForChange('events', this.pollIntervalMs, signal);
    }
  }

  listSteps(query: StepQuery): Promise<Page<Step>> {
    return this.store.listSteps(query);
  }

  listTrajectories(query: TrajectoryQuery): Promise<Page<Trajectory>> {
    return this.store.listTrajectories(query);
  }

  getTrajectory(id: string, read?: TrajectoryRead): Promise<Trajectory | null> {
    return this.store.getTrajectory(id, read);
  }

  getStep(trajectoryId: string, index: number): Promise<Step | null> {
    return this.store.getStep(trajectoryId, index);
  }

  getTrajectorySteps(id: string): Promise<Step[]> {
    return this.store.getTrajectorySteps(id);
  }

  /** getTrajectorySteps with the ids as Uint32Arrays, for a caller that only serialises them. */
  getTrajectoryStepsPacked(id: string): Promise<PackedStep[]> {
    return this.store.getTrajectoryStepsPacked(id);
  }

  /** Commits what is queued, releases waiters, stops the sweep and closes the store. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.sweepTimer = null;
    await this.writer.close();
    this.wake();
    await this.store.close();
  }
}

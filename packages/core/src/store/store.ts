import type {
  ChannelConfig,
  Group,
  Label,
  Lease,
  PoolEvent,
  Signal,
  Step,
  Trajectory,
} from '../domain/index.js';
import type { ReadModels } from './read-models.js';
import type { PoolTx, Rule } from './tx.js';
import type {
  CurrentLabel,
  EventQuery,
  GroupQuery,
  Page,
  ScanPage,
  SignalQuery,
  StepQuery,
  StoreChange,
  StoreInfo,
  TrajectoryQuery,
  TrajectoryRead,
  TrajectoryScan,
} from './types.js';

export type * from './types.js';

export interface WriteOptions {
  /** Wait until the commit would survive power loss (default). A lease needs no flush: it is soft state. */
  durable?: boolean;
}

/**
 * Everything the DataPool persists, behind one database-agnostic interface. Every method is atomic
 * and safe to call from many processes sharing one database; nothing here relies on process memory
 * for correctness (implementations may cache, but only what the database can rebuild).
 */
export interface Store {
  readonly kind: 'sqlite' | 'postgres';

  /** Runs a pool rule (pool/) in one write transaction of its own, retried where the backend may. */
  write<T>(rule: (tx: PoolTx) => Rule<T>, options?: WriteOptions): Promise<T>;
  /** Runs a pool rule that only reads, on one consistent snapshot; it may not write or emit. */
  read<T>(rule: (tx: PoolTx) => Rule<T>): Promise<T>;

  getTrajectory(id: string, read?: TrajectoryRead): Promise<Trajectory | null>;
  getTrajectorySteps(id: string): Promise<Step[]>;
  getStep(trajectoryId: string, index: number): Promise<Step | null>;
  getGroup(channel: string, id: string): Promise<Group | null>;
  /** Groups by creation, newest first. */
  listGroups(query: GroupQuery): Promise<Page<Group>>;
  listSteps(query: StepQuery): Promise<Page<Step>>;
  listTrajectories(query: TrajectoryQuery): Promise<Page<Trajectory>>;
  /** Pages through every trajectory matching the filters without offsets (exports read it all). */
  scanTrajectories(query: TrajectoryScan): Promise<ScanPage<Trajectory>>;

  getPolicyVersion(): Promise<number>;
  getChannelConfig(channel: string): Promise<ChannelConfig>;

  getLease(leaseId: string): Promise<Lease | null>;

  getLabels(trajectoryId: string): Promise<Label[]>;
  /** The curation state in force for a trajectory and its steps (labels folded). */
  getCurrentLabels(trajectoryId: string): Promise<CurrentLabel[]>;

  /** A trajectory's signals by createdAt, then insertion; `current`: only the latest per key. */
  getSignals(trajectoryId: string, options?: SignalQuery): Promise<Signal[]>;

  readEvents(query: EventQuery): Promise<PoolEvent[]>;
  lastEventSeq(): Promise<number>;
  /** The dashboard's and the gym's views. */
  readonly views: ReadModels;
  describe(): Promise<StoreInfo>;
  /**
   * Calls back when a process sharing the database commits a change (the store's own included);
   * returns the unsubscribe. Stores without notifications omit it: their users poll.
   */
  subscribe?(listener: (change: StoreChange) => void): () => void;

  close(): Promise<void>;
}

import type { Lease, MismatchStats } from '../domain/index.js';
import type { DashboardSummary, GymRunSummary, LeaseQuery, Page, PoolStats } from './types.js';

/** The aggregate views the dashboard, the gym and `stats` read: no pool rule needs them. */
export interface ReadModels {
  /** Reward histogram and group outcome mix (dashboard). */
  dashboardSummary(channel: string | null, bins?: number): Promise<DashboardSummary>;
  /** Gym runs found in the trajectories' metadata, newest first. */
  gymRuns(limit?: number): Promise<GymRunSummary[]>;
  /** Leases, newest first. */
  listLeases(query: LeaseQuery): Promise<Page<Lease>>;
  stats(channel: string | null): Promise<PoolStats>;
  /**
   * Reported rollout-vs-trainer mismatch per engine (with its `recent` latest leases, oldest first,
   * and whether the latest jumped) and per policy version.
   */
  mismatch(channel: string | null, recent?: number): Promise<MismatchStats>;
}

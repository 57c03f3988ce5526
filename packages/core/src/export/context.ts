import { trainingSteps } from '../curation/cleaner/graft.js';
import { isStepTrainable, type Step, type Trajectory } from '../domain/index.js';
import type { PoolOps } from '../pool/core.js';
import type { CurrentLabel, TrajectoryScan } from '../store/store.js';

/** What one export run reads from and tallies; each kind's writer gets it. */
export class ExportContext {
  steps = 0;
  /** Matching data left out, by reason. */
  readonly skipped: Record<string, number> = {};
  /** Kind-specific tallies (pairs, groups, tool results placed...). */
  readonly details: Record<string, number> = {};

  constructor(
    readonly store: PoolOps,
    readonly query: Omit<TrajectoryScan, 'after' | 'limit'>,
    readonly pageSize: number,
    /** Called after each trajectory the export has dealt with. */
    readonly onTrajectory: () => void,
  ) {}

  skip(reason: string, n = 1): void {
    if (n > 0) this.skipped[reason] = (this.skipped[reason] ?? 0) + n;
  }

  note(name: string, n = 1): void {
    if (n > 0) this.details[name] = (this.details[name] ?? 0) + n;
  }

  /** Every trajectory matching the export's filters, oldest first, one page in memory at a time. */
  trajectories(extra: Partial<TrajectoryScan> = {}): AsyncGenerator<Trajectory> {
    return scanAll(this.store, { ...this.query, ...extra }, this.pageSize);
  }

  /**
   * A trajectory's steps as a trainer receives them (an online CLEANER run's purified view: no failed
   * attempt, grafts without log-probs): what every training export writes.
   */
  async trainingStepsOf(trajectory: Trajectory): Promise<Step[]> {
    const steps = trainingSteps(trajectory, await this.store.getTrajectorySteps(trajectory.id));
    this.steps += steps.length;
    return steps;
  }

  /** A trajectory's steps as captured: the audit record (`trajectories`), failed attempts included. */
  async capturedStepsOf(trajectoryId: string): Promise<Step[]> {
    const steps = await this.store.getTrajectorySteps(trajectoryId);
    this.steps += steps.length;
    return steps;
  }
}

export async function* scanAll(
  store: PoolOps,
  query: Omit<TrajectoryScan, 'after' | 'limit'>,
  pageSize: number,
): AsyncGenerator<Trajectory> {
  let after: string | null = null;
  do {
    const page: Awaited<ReturnType<PoolOps['scanTrajectories']>> = await store.scanTrajectories({
      ...query,
      after,
      limit: pageSize,
    });
    yield* page.items;
    after = page.cursor;
  } while (after !== null);
}

/** Whether curation keeps a step in training data (its own label, else its trajectory's). */
export function trainable(labels: readonly CurrentLabel[], stepIndex: number): boolean {
  return labels.length === 0 || isStepTrainable(labels, stepIndex);
}

import type { PoolEvent, Trajectory } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import { type RewardFunction, type RewardsConfig, type Scoring, scoringFor } from './config.js';
import type { JobRequest } from './job-queue.js';

// Which reward jobs a completed trajectory, a ready group or a pool event calls for: shared by the
// scheduler, the job runner (follow-up combinations) and the service's entry points.

export class RewardJobPlanner {
  private readonly config: RewardsConfig;
  private readonly pool: DataPool;
  /** Signal names some combination reads that are not its own scoring's functions (human, env, ...). */
  private readonly externalInputs: Set<string>;
  private readonly hasGroupFunctions: boolean;

  constructor(pool: DataPool, config: RewardsConfig) {
    this.pool = pool;
    this.config = config;
    this.hasGroupFunctions = [...this.config.functions.values()].some((f) => f.plugin.target === 'group');
    this.externalInputs = new Set(
      [...this.config.channels.values(), ...this.config.tasks.values(), this.config.default].flatMap((s) =>
        s?.combination
          ? s.combination.combination.names.filter((n) => !s.functions.some((f) => f.name === n))
          : [],
      ),
    );
  }

  functionJob(
    fn: RewardFunction,
    t: Pick<Trajectory, 'id' | 'groupId' | 'channel'>,
    reason: string,
    force = false,
  ): JobRequest {
    const group = fn.plugin.target === 'group';
    return {
      kind: 'function',
      channel: t.channel,
      trajectoryId: group ? null : t.id,
      groupId: group ? t.groupId : null,
      function: fn.name,
      version: fn.version,
      maxAttempts: fn.maxAttempts,
      reason,
      force,
    };
  }

  combineJob(scoring: Scoring, t: Pick<Trajectory, 'id' | 'channel'>, reason: string): JobRequest[] {
    const rule = scoring.combination;
    if (!rule) return [];
    return [
      {
        kind: 'combine',
        channel: t.channel,
        trajectoryId: t.id,
        groupId: null,
        function: rule.signal,
        version: rule.version,
        maxAttempts: this.config.workers.max_attempts,
        reason,
      },
    ];
  }

  /** Whether every expected rollout of the trajectory's group has finished (or the group moved on). */
  async groupFinished(t: Trajectory): Promise<boolean> {
    const group = await this.pool.store.getGroup(t.channel, t.groupId);
    if (!group) return false;
    if (group.state !== 'collecting') return true;
    return group.expected !== null && group.nFinished >= group.expected;
  }

  private async jobsForCompleted(t: Trajectory, reason: string): Promise<JobRequest[]> {
    const scoring = scoringFor(this.config, t);
    if (!scoring) return [];
    const requests: JobRequest[] = [];
    const computed = scoring.functions.filter((f) => f.handler !== null);
    for (const fn of computed)
      if (fn.plugin.target !== 'group') requests.push(this.functionJob(fn, t, reason));
    const groupFns = computed.filter((f) => f.plugin.target === 'group');
    if (groupFns.length > 0 && (await this.groupFinished(t))) {
      for (const fn of groupFns) requests.push(this.functionJob(fn, t, reason));
    }
    // Jobs of functions the combination reads queue it as they finish; queue it here only if none
    // was queued (its inputs come from elsewhere, or were computed already).
    const feeding = requests.flatMap((r, i) =>
      scoring.combination?.combination.names.includes(r.function) ? [i] : [],
    );
    for (const c of this.combineJob(scoring, t, reason)) requests.push({ ...c, unlessCreated: feeding });
    return requests;
  }

  /** A ready group's group-target jobs (its scoring is that of its members: they share a prompt). */
  private async groupJobs(channel: string, groupId: string, reason: string): Promise<JobRequest[]> {
    const members = await this.pool.listTrajectories({
      channel,
      groupId,
      status: 'complete',
      limit: 1,
      offset: 0,
    });
    const first = members.items[0];
    if (!first) return [];
    const scoring = scoringFor(this.config, first);
    if (!scoring) return [];
    return scoring.functions
      .filter((f) => f.handler !== null && f.plugin.target === 'group')
      .map((f) => this.functionJob(f, first, reason));
  }

  async jobsForEvent(event: PoolEvent): Promise<JobRequest[]> {
    const data = event.data as Record<string, unknown>;
    if (event.type === 'trajectory_completed') {
      if (data.update === true || data.status !== 'complete') return [];
      const t = await this.pool.getTrajectory(String(data.trajectory_uid));
      return t ? this.jobsForCompleted(t, 'completed') : [];
    }
    if (event.type === 'group_ready' && event.channel && this.hasGroupFunctions) {
      return this.groupJobs(event.channel, String(data.group_id), 'group_ready');
    }
    if (event.type === 'signal_added') {
      const name = String(data.name);
      const t = await this.signalTarget(event, name);
      if (!t) return [];
      const scoring = scoringFor(this.config, t);
      const rule = scoring?.combination;
      // A configured function's own signals are combined by its job as it finishes.
      if (!scoring || !rule?.combination.names.includes(name)) return [];
      if (scoring.functions.some((f) => f.name === name)) return [];
      return this.combineJob(scoring, t, 'signal');
    }
    return [];
  }

  /** The trajectory a signal event is about, when some combination reads that signal from outside. */
  private async signalTarget(event: PoolEvent, name: string): Promise<Trajectory | null> {
    if (!this.externalInputs.has(name)) return null;
    return this.pool.getTrajectory(String((event.data as Record<string, unknown>).trajectory_uid));
  }
}

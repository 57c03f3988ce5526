/*
 * The sim's side of a weight switch, with vLLM's semantics (its dev-mode RL routes: /pause with
 * mode abort|wait|keep, /resume, /abort_requests, and the start/update/finish weight update):
 * - abort: running generations end at once with the tokens ready so far (finish_reason "abort");
 * - keep: running generations freeze (their latency clock stops) and go on after /resume, the tokens
 *   after the switch under the new weights;
 * - wait: /pause returns once the running generations have ended.
 * In every mode new generations wait while paused; none is refused.
 *
 * The sim computes a whole completion at once and paces it with its latency model, so "a token is
 * ready" is "its time on the schedule has passed", counted on a clock that stops while paused.
 */

export type PauseMode = 'abort' | 'wait' | 'keep';
export const PAUSE_MODES: readonly PauseMode[] = ['abort', 'wait', 'keep'];

/** One span of a completion's tokens produced under one weights version (null: none set). */
export type VersionSpan = [version: number | string | null, count: number];

/** What the sim's weights are: the version a trainer last finished loading. */
export interface SimWeights {
  version: string | null;
  gen: number;
  label: string;
  updating: boolean;
}

/** One generation being paced out: its clock, its schedule and where each weights version began. */
export class SimRun {
  /** Paused time of the controller when this run started: later pauses stop its clock. */
  private readonly pausedBase: number;
  private abortedAt: number | null = null;
  /** Token index where each version began, oldest first. */
  private readonly boundaries: { from: number; version: string | null }[];
  private wake: (() => void) | null = null;

  constructor(
    private readonly control: SimPauseControl,
    readonly schedule: readonly number[],
    private readonly started: number,
  ) {
    this.pausedBase = control.pausedMs(started);
    this.boundaries = [{ from: 0, version: control.weights.version }];
  }

  /** Milliseconds of generation so far: wall time less the time the engine was paused. */
  elapsed(now = performance.now()): number {
    return now - this.started - (this.control.pausedMs(now) - this.pausedBase);
  }

  /** Tokens ready now (all of them once aborted: the abort fixed the count). */
  ready(now = performance.now()): number {
    if (this.abortedAt !== null) return this.abortedAt;
    const t = this.elapsed(now);
    let n = 0;
    while (n < this.schedule.length && this.schedule[n]! <= t) n++;
    return n;
  }

  get aborted(): boolean {
    return this.abortedAt !== null;
  }

  abort(): void {
    if (this.abortedAt !== null) return;
    this.abortedAt = this.ready();
    this.wake?.();
  }

  /** Called on resume: tokens from here on are the new weights'. */
  switched(version: string | null): void {
    const last = this.boundaries[this.boundaries.length - 1]!;
    if (last.version === version) return;
    const from = this.ready();
    if (from === last.from) last.version = version;
    else this.boundaries.push({ from, version });
    this.wake?.();
  }

  /** The weights version of each span of the first `count` tokens. */
  spans(from: number, to: number): VersionSpan[] {
    const out: VersionSpan[] = [];
    for (let b = 0; b < this.boundaries.length; b++) {
      const start = Math.max(this.boundaries[b]!.from, from);
      const end = Math.min(this.boundaries[b + 1]?.from ?? Number.POSITIVE_INFINITY, to);
      if (end > start) out.push([wireVersion(this.boundaries[b]!.version), end - start]);
    }
    return out;
  }

  /**
   * Waits until `dueMs` of generation time have passed (pauses stretch it), the run is aborted, or
   * the client left: true when due.
   */
  async until(dueMs: number, gone: { aborted: boolean; wake?: () => void }): Promise<boolean> {
    for (;;) {
      if (this.aborted || gone.aborted) return false;
      if (this.control.paused) await this.control.resumed();
      else {
        const left = dueMs - this.elapsed();
        if (left <= 0) return true;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, left);
          function done() {
            clearTimeout(timer);
            resolve();
          }
          this.wake = done;
          gone.wake = done;
        });
        this.wake = null;
      }
    }
  }

  /** Wakes the run's wait (the controller paused, resumed or aborted it). */
  poke(): void {
    this.wake?.();
  }

  end(): void {
    this.control.finished(this);
  }
}

/** A version as the wire gives it: a decimal string is the integer a trainer set. */
function wireVersion(version: string | null): number | string | null {
  return version !== null && /^\d{1,15}$/.test(version) ? Number(version) : version;
}

export class SimPauseControl {
  private pausedSince: number | null = null;
  private pausedTotal = 0;
  private readonly running = new Set<SimRun>();
  private resumeWaiters: (() => void)[] = [];
  private idleWaiters: (() => void)[] = [];
  readonly weights: SimWeights = { version: null, gen: 0, label: '', updating: false };

  get paused(): boolean {
    return this.pausedSince !== null;
  }

  get runningCount(): number {
    return this.running.size;
  }

  /** Total paused milliseconds up to `now`. */
  pausedMs(now: number): number {
    return this.pausedTotal + (this.pausedSince === null ? 0 : now - this.pausedSince);
  }

  /** Waits while paused (or while a wait-mode pause drains): new generations start only when it runs. */
  async admit(): Promise<void> {
    while (this.paused || this.holdNew) await this.resumed();
  }

  start(schedule: readonly number[], started: number): SimRun {
    const run = new SimRun(this, schedule, started);
    this.running.add(run);
    return run;
  }

  finished(run: SimRun): void {
    this.running.delete(run);
    if (this.running.size === 0) for (const idle of this.idleWaiters.splice(0)) idle();
  }

  /** Resolves at the next resume. */
  resumed(): Promise<void> {
    return new Promise<void>((resolve) => this.resumeWaiters.push(resolve));
  }

  async pause(mode: PauseMode): Promise<void> {
    if (!this.paused) this.pausedSince = performance.now();
    for (const run of this.running) {
      if (mode === 'abort') run.abort();
      else run.poke();
    }
    if (mode === 'wait' && this.running.size > 0) {
      // Running generations go on (their clock does not stop); only new ones wait.
      this.pausedTotal += performance.now() - this.pausedSince!;
      this.pausedSince = null;
      this.holdNew = true;
      for (const run of this.running) run.poke();
      await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      this.holdNew = false;
      if (!this.paused) this.pausedSince = performance.now();
    }
  }

  /** While a wait-mode pause drains, new generations wait but running ones go on. */
  private holdNew = false;

  resume(): void {
    if (this.pausedSince !== null) this.pausedTotal += performance.now() - this.pausedSince;
    this.pausedSince = null;
    for (const run of this.running) run.switched(this.weights.version);
    for (const go of this.resumeWaiters.splice(0)) go();
  }

  /** Ends every running generation with what it has (vLLM's /abort_requests without ids). */
  abortAll(): number {
    const n = this.running.size;
    for (const run of this.running) run.abort();
    return n;
  }
}

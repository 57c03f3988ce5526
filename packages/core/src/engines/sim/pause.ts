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
 * ready" is "its time on the schedule has passed", counted on the engine's generation clock: it
 * stops while paused, and with a token budget (a GPU's decode throughput shared by its running
 * sequences) it runs slower the more sequences share it.
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
  /** The engine's generation clock when this run started. */
  private readonly startedAt: number;
  private abortedAt: number | null = null;
  /** Token index where each version began, oldest first. */
  private readonly boundaries: { from: number; version: string | null }[];
  private wake: (() => void) | null = null;

  constructor(
    private readonly control: SimPauseControl,
    readonly schedule: readonly number[],
    started: number,
  ) {
    this.startedAt = control.clockMs(started);
    this.boundaries = [{ from: 0, version: control.weights.version }];
  }

  /** Milliseconds of generation so far, on the engine's clock (stopped while paused, slowed by sharing). */
  elapsed(now = performance.now()): number {
    return this.control.clockMs(now) - this.startedAt;
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
  }

  /** The weights version of each span of tokens [from, to). */
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
   * Waits until `dueMs` of generation time have passed (pauses and sharing stretch it), the run is
   * aborted, or the client left: true when due.
   */
  async until(dueMs: number, gone: { aborted: boolean; wake?: () => void }): Promise<boolean> {
    for (;;) {
      if (this.aborted || gone.aborted) return false;
      const left = dueMs - this.elapsed();
      if (left <= 0) return true;
      const speed = this.control.speed;
      await new Promise<void>((resolve) => {
        // Stopped (paused): only a poke (resume, abort) wakes it; else when due at today's speed.
        const timer = speed > 0 ? setTimeout(done, left / speed) : null;
        function done() {
          if (timer) clearTimeout(timer);
          resolve();
        }
        this.wake = done;
        gone.wake = done;
      });
      this.wake = null;
    }
  }

  /** Wakes the run's wait: the engine's speed changed (a pause, a resume, another sequence). */
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

/** A GPU's decode throughput: each sequence's nominal speed, and the total its running ones share. */
export interface SimCapacity {
  perSequence: number;
  budget: number;
}

export class SimPauseControl {
  private isPaused = false;
  /** While a wait-mode pause drains, new generations wait but running ones go on. */
  private holdNew = false;
  private readonly running = new Set<SimRun>();
  private resumeWaiters: (() => void)[] = [];
  private idleWaiters: (() => void)[] = [];
  readonly weights: SimWeights = { version: null, gen: 0, label: '', updating: false };
  // The generation clock: `clockAt` ms of it at real time `realAt`, running at `speed` since.
  private clockAt = 0;
  private realAt = performance.now();
  private currentSpeed = 1;
  private busy = { ms: 0, since: null as number | null };
  private readonly startedAt = performance.now();

  /** Without a capacity every sequence runs at its latency model's speed, however many run. */
  constructor(private readonly capacity: SimCapacity | null = null) {}

  get paused(): boolean {
    return this.isPaused;
  }

  get runningCount(): number {
    return this.running.size;
  }

  /** How fast generation time passes now: 0 while paused, below 1 when sequences share the budget. */
  get speed(): number {
    return this.currentSpeed;
  }

  /** The generation clock at real time `now`. */
  clockMs(now: number): number {
    return this.clockAt + (now - this.realAt) * this.currentSpeed;
  }

  /** Busy (some sequence generating, not paused) and total milliseconds since the sim started. */
  usage(now = performance.now()): { busyMs: number; totalMs: number } {
    const open = this.busy.since === null ? 0 : now - this.busy.since;
    return { busyMs: this.busy.ms + open, totalMs: now - this.startedAt };
  }

  /** The speed changed (pause, resume, a sequence came or went): the clock is rebased, runs re-time. */
  private retime(): void {
    const now = performance.now();
    this.clockAt = this.clockMs(now);
    this.realAt = now;
    const n = this.running.size;
    const share =
      this.capacity && n > 0 ? Math.min(1, this.capacity.budget / (n * this.capacity.perSequence)) : 1;
    this.currentSpeed = this.isPaused ? 0 : share;
    const busy = !this.isPaused && n > 0;
    if (busy && this.busy.since === null) this.busy.since = now;
    if (!busy && this.busy.since !== null) {
      this.busy.ms += now - this.busy.since;
      this.busy.since = null;
    }
    for (const run of this.running) run.poke();
  }

  /** Waits while paused (or while a wait-mode pause drains): new generations start only when it runs. */
  async admit(): Promise<void> {
    while (this.isPaused || this.holdNew) await this.resumed();
  }

  start(schedule: readonly number[], started: number): SimRun {
    const run = new SimRun(this, schedule, started);
    this.running.add(run);
    this.retime();
    return run;
  }

  finished(run: SimRun): void {
    if (!this.running.delete(run)) return;
    this.retime();
    if (this.running.size === 0) for (const idle of this.idleWaiters.splice(0)) idle();
  }

  /** Resolves at the next resume. */
  resumed(): Promise<void> {
    return new Promise<void>((resolve) => this.resumeWaiters.push(resolve));
  }

  async pause(mode: PauseMode): Promise<void> {
    if (mode === 'wait' && this.running.size > 0 && !this.isPaused) {
      // Running generations go on; only new ones wait until they have ended.
      this.holdNew = true;
      await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      this.holdNew = false;
    }
    this.isPaused = true;
    this.retime();
    if (mode === 'abort') for (const run of this.running) run.abort();
  }

  resume(): void {
    this.holdNew = false;
    if (this.isPaused) {
      this.isPaused = false;
      for (const run of this.running) run.switched(this.weights.version);
      this.retime();
    }
    for (const go of this.resumeWaiters.splice(0)) go();
  }

  /** Ends every running generation with what it has (vLLM's /abort_requests without ids). */
  abortAll(): number {
    const n = this.running.size;
    for (const run of this.running) run.abort();
    return n;
  }
}

/**
 * Group commit: submissions that arrive close together are written in one transaction, and each
 * caller's promise settles only after that transaction commits (acknowledged = durable).
 */
export class WriteCoalescer<Req, Res> {
  private queue: { request: Req; weight: number; resolve: (r: Res) => void; reject: (e: unknown) => void }[] =
    [];
  private queuedWeight = 0;
  private scheduled: NodeJS.Immediate | NodeJS.Timeout | null = null;
  private scheduledDue = 0;
  /** When the most impatient queued request wants its commit. */
  private queueDue = Number.POSITIVE_INFINITY;
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;

  constructor(
    private readonly commit: (requests: Req[]) => Promise<Res[]>,
    /**
     * maxInFlight > 1 hands the next batch over before the previous one is answered: worth it only
     * when commits run elsewhere (a worker thread) and are applied in order there.
     */
    private readonly options: { windowMs: number; maxWeight: number; maxInFlight?: number },
  ) {}

  /**
   * Queues a request for the next commit. `deferMs` lets it wait longer than the window (a write
   * nobody is waiting on, e.g. a step captured behind an answer already sent), until `flushSoon()`
   * or another submission brings the commit forward.
   */
  submit(request: Req, weight = 1, deferMs = 0): Promise<Res> {
    if (this.closed) return Promise.reject(new Error('the pool is shutting down'));
    return new Promise<Res>((resolve, reject) => {
      this.queue.push({ request, weight, resolve, reject });
      this.queuedWeight += weight;
      const full = this.queuedWeight >= this.options.maxWeight;
      const delayMs = full ? 0 : Math.max(this.options.windowMs, deferMs);
      this.queueDue = Math.min(this.queueDue, performance.now() + delayMs);
      this.schedule(delayMs);
    });
  }

  /**
   * Commits what is queued at the next turn of the event loop rather than when its wait ends; with
   * `withinMs`, only if that wait ends within withinMs anyway (else more writes may join the batch).
   */
  flushSoon(withinMs = Number.POSITIVE_INFINITY): void {
    if (this.queue.length > 0 && this.queueDue - performance.now() <= withinMs) {
      this.queueDue = performance.now();
      this.schedule(0);
    }
  }

  private get saturated(): boolean {
    return this.inFlight.size >= (this.options.maxInFlight ?? 1);
  }

  /** Arranges a flush in `delayMs` (0: the next turn of the event loop) unless one is due sooner. */
  private schedule(delayMs: number): void {
    if (this.saturated) return; // a finishing flush picks up the queue
    const due = performance.now() + delayMs;
    if (this.scheduled && this.scheduledDue <= due) return;
    this.clearScheduled();
    const run = () => {
      this.scheduled = null;
      this.flush();
    };
    this.scheduledDue = due;
    this.scheduled = delayMs <= 0 ? setImmediate(run) : setTimeout(run, delayMs);
  }

  private clearScheduled(): void {
    if (this.scheduled === null) return;
    clearTimeout(this.scheduled as NodeJS.Timeout);
    clearImmediate(this.scheduled as NodeJS.Immediate);
    this.scheduled = null;
  }

  private flush(): void {
    if (this.saturated || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.queuedWeight = 0;
    this.queueDue = Number.POSITIVE_INFINITY;
    const done = (async () => {
      try {
        const results = await this.commit(batch.map((b) => b.request));
        for (const [i, b] of batch.entries()) b.resolve(results[i]!);
      } catch (error) {
        for (const b of batch) b.reject(error);
      }
    })().finally(() => {
      this.inFlight.delete(done);
      if (this.queue.length > 0) this.schedule(Math.max(0, this.queueDue - performance.now()));
    });
    this.inFlight.add(done);
  }

  /** Commits whatever is queued and refuses new submissions. */
  async close(): Promise<void> {
    this.closed = true;
    this.clearScheduled();
    while (this.inFlight.size > 0 || this.queue.length > 0) {
      if (this.inFlight.size > 0) await Promise.race(this.inFlight);
      else this.flush();
    }
  }
}

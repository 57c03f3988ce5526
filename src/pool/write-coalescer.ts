/**
 * Group commit: submissions that arrive close together are written in one transaction, and each
 * caller's promise settles only after that transaction commits (acknowledged = durable).
 */
export class WriteCoalescer<Req, Res> {
  private queue: { request: Req; weight: number; resolve: (r: Res) => void; reject: (e: unknown) => void }[] =
    [];
  private queuedWeight = 0;
  private scheduled: NodeJS.Immediate | NodeJS.Timeout | null = null;
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

  submit(request: Req, weight = 1): Promise<Res> {
    if (this.closed) return Promise.reject(new Error('the pool is shutting down'));
    return new Promise<Res>((resolve, reject) => {
      this.queue.push({ request, weight, resolve, reject });
      this.queuedWeight += weight;
      this.schedule(this.queuedWeight >= this.options.maxWeight);
    });
  }

  private get saturated(): boolean {
    return this.inFlight.size >= (this.options.maxInFlight ?? 1);
  }

  private schedule(now: boolean): void {
    if (this.saturated) return; // a finishing flush picks up the queue
    if (this.scheduled && !now) return;
    this.clearScheduled();
    const run = () => {
      this.scheduled = null;
      this.flush();
    };
    this.scheduled =
      now || this.options.windowMs <= 0 ? setImmediate(run) : setTimeout(run, this.options.windowMs);
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
    const done = (async () => {
      try {
        const results = await this.commit(batch.map((b) => b.request));
        for (const [i, b] of batch.entries()) b.resolve(results[i]!);
      } catch (error) {
        for (const b of batch) b.reject(error);
      }
    })().finally(() => {
      this.inFlight.delete(done);
      if (this.queue.length > 0) this.schedule(true);
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

/**
 * Group commit: submissions that arrive close together are written in one transaction, and each
 * caller's promise settles only after that transaction commits (acknowledged = durable).
 */
export class WriteCoalescer<Req, Res> {
  private queue: { request: Req; weight: number; resolve: (r: Res) => void; reject: (e: unknown) => void }[] =
    [];
  private queuedWeight = 0;
  private scheduled: NodeJS.Immediate | NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private closed = false;

  constructor(
    private readonly commit: (requests: Req[]) => Promise<Res[]>,
    private readonly options: { windowMs: number; maxWeight: number },
  ) {}

  submit(request: Req, weight = 1): Promise<Res> {
    if (this.closed) return Promise.reject(new Error('the pool is shutting down'));
    return new Promise<Res>((resolve, reject) => {
      this.queue.push({ request, weight, resolve, reject });
      this.queuedWeight += weight;
      if (this.queuedWeight >= this.options.maxWeight) this.schedule(true);
      else this.schedule(false);
    });
  }

  private schedule(now: boolean): void {
    if (this.running) return; // the running flush picks up the queue when it ends
    if (this.scheduled && !now) return;
    this.clearScheduled();
    const run = () => {
      this.scheduled = null;
      void this.flush();
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

  private async flush(): Promise<void> {
    if (this.running || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.queuedWeight = 0;
    this.running = (async () => {
      try {
        const results = await this.commit(batch.map((b) => b.request));
        for (const [i, b] of batch.entries()) b.resolve(results[i]!);
      } catch (error) {
        for (const b of batch) b.reject(error);
      }
    })();
    await this.running;
    this.running = null;
    if (this.queue.length > 0) this.schedule(true);
  }

  /** Commits whatever is queued and refuses new submissions. */
  async close(): Promise<void> {
    this.closed = true;
    this.clearScheduled();
    while (this.running || this.queue.length > 0) {
      if (this.running) await this.running;
      else await this.flush();
    }
  }
}

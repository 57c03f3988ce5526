/*
 * Counts generations in flight so a policy-version switch can drain them: while a drain is on, new
 * generations wait; once the last running one ends (or the drain times out), the version changes
 * and the waiting ones start under it. Without a drain, a step is stamped with the version in force
 * when its generation started.
 */
export class PolicyGate {
  private inFlight = 0;
  private holding: Promise<void> | null = null;
  private onIdle: (() => void) | null = null;

  get running(): number {
    return this.inFlight;
  }

  get draining(): boolean {
    return this.holding !== null;
  }

  /** Resolves once no drain or hold is on (a call already counted waits here, uncounted as it is). */
  async settled(): Promise<void> {
    while (this.holding) await this.holding;
  }

  /** Waits while a drain is on, then counts one more generation. */
  async enter(): Promise<void> {
    while (this.holding) await this.holding;
    this.inFlight++;
  }

  exit(): void {
    this.inFlight--;
    if (this.inFlight === 0) this.onIdle?.();
  }

  /** Holds new generations while `change` runs, letting running ones go on (a weight switch). */
  async hold<T>(change: () => Promise<T>): Promise<T> {
    return (await this.drain(change, 0)).value;
  }

  /**
   * Holds new generations, waits up to timeoutMs for running ones (none with 0), runs `change`,
   * lets all go.
   */
  async drain<T>(
    change: () => Promise<T>,
    timeoutMs: number,
  ): Promise<{ value: T; waitedMs: number; timedOut: boolean }> {
    while (this.holding) await this.holding;
    let release!: () => void;
    this.holding = new Promise((resolve) => {
      release = resolve;
    });
    const started = performance.now();
    let timedOut = false;
    try {
      if (this.inFlight > 0 && timeoutMs > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            timedOut = true;
            resolve();
          }, timeoutMs);
          this.onIdle = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      const value = await change();
      return { value, waitedMs: performance.now() - started, timedOut };
    } finally {
      this.onIdle = null;
      this.holding = null;
      release();
    }
  }
}

import { closeSync, fdatasync, openSync } from 'node:fs';
import { StepwiseError } from '../../domain/errors.js';

/**
 * synchronous=FULL's guarantee without its stall: commit with NORMAL, acknowledge a write after an
 * fdatasync of the WAL (on libuv's pool) that began after its commit.
 * Why, and what else it covers: docs/datapool.md#group-commit-and-durability
 */
export class WalSync {
  private committed = 0;
  private synced = 0;
  private started = 0;
  private running: Promise<void> | null = null;
  private failure: StepwiseError | null = null;
  private fd: number | null;

  private constructor(
    fd: number,
    private readonly path: string,
  ) {
    this.fd = fd;
  }

  /** Opens the WAL of an open WAL-mode database; null when the file is not there to flush. */
  static open(walPath: string): WalSync | null {
    try {
      return new WalSync(openSync(walPath, 'r'), walPath);
    } catch {
      return null;
    }
  }

  /** Flushes started so far (one covers every commit counted before it began). */
  get flushes(): number {
    return this.started;
  }

  /** True once a flush failed: nothing written since can be acknowledged. */
  get failed(): boolean {
    return this.failure !== null;
  }

  /** Counts a transaction that just committed (call it before anything reports the commit). */
  commit(): void {
    this.committed++;
  }

  /** Resolves once every transaction counted so far is on disk. */
  async durable(): Promise<void> {
    const target = this.committed;
    while (this.synced < target) {
      if (this.failure) throw this.failure;
      if (this.fd === null) throw new StepwiseError('store is closed', 503, 'unavailable', undefined, true);
      this.running ??= this.flush(this.fd);
      await this.running;
    }
    if (this.failure) throw this.failure;
  }

  private flush(fd: number): Promise<void> {
    const upTo = this.committed;
    this.started++;
    return new Promise<void>((resolve) => {
      fdatasync(fd, (error) => {
        this.running = null;
        if (error) {
          // After a failed flush the kernel may have dropped the dirty pages: what was acknowledged
          // as written cannot be trusted to be on disk, so no later write is acknowledged either.
          this.failure ??= new StepwiseError(
            `flushing ${this.path} to disk failed (${error.code ?? error.message}); the store accepts no more writes, restart the server once the disk is healthy`,
            503,
            'unavailable',
          );
        } else {
          this.synced = Math.max(this.synced, upTo);
        }
        resolve();
      });
    });
  }

  /** Waits for a flush in progress, then releases the file. */
  async close(): Promise<void> {
    await this.running?.catch(() => {});
    if (this.fd === null) return;
    closeSync(this.fd);
    this.fd = null;
  }
}

import type { Readable } from 'node:stream';

/** Collects a stream up to `maxBytes` and keeps draining past it, so the writer never blocks. */
export class OutputBuffer {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;

  constructor(private readonly maxBytes: number) {}

  attach(stream: Readable | null): Promise<void> {
    if (!stream) return Promise.resolve();
    stream.on('data', (chunk: Buffer) => this.push(chunk));
    return new Promise((resolve) => {
      stream.once('close', resolve);
      stream.once('error', () => resolve());
    });
  }

  push(chunk: Buffer): void {
    const room = this.maxBytes - this.size;
    if (room <= 0) {
      if (chunk.length > 0) this.truncated = true;
      return;
    }
    if (chunk.length > room) {
      this.chunks.push(chunk.subarray(0, room));
      this.size += room;
      this.truncated = true;
    } else {
      this.chunks.push(chunk);
      this.size += chunk.length;
    }
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

/** Waits for `promise`, but no longer than `ms`; the timer is cleared either way. */
export async function settleWithin(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const expiry = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  try {
    await Promise.race([promise.then(() => undefined), expiry]);
  } finally {
    clearTimeout(timer);
  }
}

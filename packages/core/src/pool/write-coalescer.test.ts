import { describe, expect, it } from 'vitest';
import { WriteCoalescer } from './write-coalescer.js';

/** A commit function that records its batches and settles only when the test says so. */
function controlledCommit() {
  const batches: number[][] = [];
  const pending: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  const commit = (requests: number[]) =>
    new Promise<string[]>((resolve, reject) => {
      batches.push(requests);
      pending.push({ resolve: () => resolve(requests.map((r) => `ok:${r}`)), reject });
    });
  return { batches, pending, commit };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('WriteCoalescer (group commit)', () => {
  it('commits submissions of the same turn together and answers each only after the commit', async () => {
    const c = controlledCommit();
    const writer = new WriteCoalescer(c.commit, { windowMs: 0, maxWeight: 100 });
    const settled: string[] = [];
    const all = [1, 2, 3].map((n) => writer.submit(n).then((r) => settled.push(r)));
    await tick();
    expect(c.batches).toEqual([[1, 2, 3]]);
    expect(settled).toEqual([]);
    c.pending[0]!.resolve();
    await Promise.all(all);
    expect(settled).toEqual(['ok:1', 'ok:2', 'ok:3']);
  });

  it('queues what arrives during a commit into the next one', async () => {
    const c = controlledCommit();
    const writer = new WriteCoalescer(c.commit, { windowMs: 0, maxWeight: 100 });
    const first = writer.submit(1);
    await tick();
    const second = writer.submit(2);
    const third = writer.submit(3);
    await tick();
    expect(c.batches).toEqual([[1]]);
    c.pending[0]!.resolve();
    await first;
    await tick();
    await tick();
    expect(c.batches).toEqual([[1], [2, 3]]);
    c.pending[1]!.resolve();
    expect(await Promise.all([second, third])).toEqual(['ok:2', 'ok:3']);
  });

  it('waits up to the window for company, but commits at once past the weight limit', async () => {
    const c = controlledCommit();
    const writer = new WriteCoalescer(c.commit, { windowMs: 50, maxWeight: 10 });
    void writer.submit(1, 3);
    await tick();
    expect(c.batches).toEqual([]);
    void writer.submit(2, 8);
    await tick();
    expect(c.batches).toEqual([[1, 2]]);
    c.pending[0]!.resolve();
  });

  it('rejects every submission of a failed commit', async () => {
    const c = controlledCommit();
    const writer = new WriteCoalescer(c.commit, { windowMs: 0, maxWeight: 100 });
    const a = writer.submit(1);
    const b = writer.submit(2);
    await tick();
    c.pending[0]!.reject(new Error('disk full'));
    await expect(a).rejects.toThrow('disk full');
    await expect(b).rejects.toThrow('disk full');
  });

  it('commits what is queued on close and refuses new work afterwards', async () => {
    const c = controlledCommit();
    const writer = new WriteCoalescer(c.commit, { windowMs: 1_000, maxWeight: 100 });
    const queued = writer.submit(7);
    const closing = writer.close();
    await tick();
    expect(c.batches).toEqual([[7]]);
    c.pending[0]!.resolve();
    await closing;
    expect(await queued).toBe('ok:7');
    await expect(writer.submit(8)).rejects.toThrow(/shutting down/);
  });
  it('lets a deferred submission wait until flushSoon, and commits it with the next prompt one', async () => {
    const c = controlledCommit();
    const writer = new WriteCoalescer(c.commit, { windowMs: 0, maxWeight: 100 });
    void writer.submit(1, 1, 10_000);
    await tick();
    await tick();
    expect(c.batches).toEqual([]);
    writer.flushSoon();
    await tick();
    expect(c.batches).toEqual([[1]]);
    c.pending[0]!.resolve();
    await tick();
    // A submission nobody defers brings a deferred one forward into its commit.
    void writer.submit(2, 1, 10_000);
    await tick();
    void writer.submit(3);
    await tick();
    expect(c.batches).toEqual([[1], [2, 3]]);
    c.pending[1]!.resolve();
  });

  it('commits a deferred submission by itself once its wait is over', async () => {
    const c = controlledCommit();
    const writer = new WriteCoalescer(c.commit, { windowMs: 0, maxWeight: 100 });
    const started = performance.now();
    const done = writer.submit(1, 1, 30);
    await tick();
    expect(c.batches).toEqual([]);
    while (c.batches.length === 0) await new Promise((r) => setTimeout(r, 2));
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
    c.pending[0]!.resolve();
    expect(await done).toBe('ok:1');
  });

  it('keeps a deferred submission queued during a commit deferred, and a prompt one prompt', async () => {
    const c = controlledCommit();
    const writer = new WriteCoalescer(c.commit, { windowMs: 0, maxWeight: 100 });
    void writer.submit(1);
    await tick();
    expect(c.batches).toEqual([[1]]);
    void writer.submit(2, 1, 10_000); // arrives while [1] commits
    c.pending[0]!.resolve();
    await tick();
    await tick();
    expect(c.batches).toEqual([[1]]);
    void writer.submit(3);
    await tick();
    expect(c.batches).toEqual([[1], [2, 3]]);
    c.pending[1]!.resolve();
  });
});

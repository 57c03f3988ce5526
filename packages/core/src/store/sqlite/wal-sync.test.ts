import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { poolOps } from '../../pool/core.js';
import { openSqliteStore } from './sqlite-store.js';
import { WalSync } from './wal-sync.js';

const dirs: string[] = [];
function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'walsync-'));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function fileSync(): WalSync {
  const path = join(scratch(), 'db-wal');
  writeFileSync(path, 'frames');
  const sync = WalSync.open(path);
  if (!sync) throw new Error('could not open the file');
  return sync;
}

describe('WalSync', () => {
  it('flushes nothing until something committed', async () => {
    const sync = fileSync();
    await sync.durable();
    expect(sync.flushes).toBe(0);
    await sync.close();
  });

  it('covers every commit counted before a flush began with that one flush (group commit)', async () => {
    const sync = fileSync();
    sync.commit();
    sync.commit();
    sync.commit();
    await Promise.all([sync.durable(), sync.durable(), sync.durable()]);
    expect(sync.flushes).toBe(1);
    // Durable already: asking again flushes nothing.
    await sync.durable();
    expect(sync.flushes).toBe(1);
    await sync.close();
  });

  it('flushes again for a commit made while a flush ran', async () => {
    const sync = fileSync();
    sync.commit();
    const first = sync.durable();
    sync.commit(); // after the first flush started: that flush may not cover it
    await Promise.all([first, sync.durable()]);
    expect(sync.flushes).toBe(2);
    await sync.close();
  });

  it('refuses every later acknowledgement once a flush failed', async () => {
    // fdatasync on /dev/null fails (EINVAL), as it would on a failing disk.
    const sync = WalSync.open('/dev/null')!;
    sync.commit();
    await expect(sync.durable()).rejects.toMatchObject({ status: 503, code: 'unavailable' });
    await expect(sync.durable()).rejects.toThrow(/flushing \/dev\/null to disk failed \(EINVAL\)/);
    expect(sync.failed).toBe(true);
    await sync.close();
  });

  it('answers 503 for commits still unflushed after close', async () => {
    const sync = fileSync();
    await sync.close();
    sync.commit();
    await expect(sync.durable()).rejects.toMatchObject({ status: 503, message: 'store is closed' });
  });

  it('is null when there is no file to flush', () => {
    expect(WalSync.open(join(scratch(), 'missing-wal'))).toBeNull();
  });
});

describe('SqliteStore durability settings', () => {
  const pragma = (store: unknown) =>
    (store as { db: { pragma(q: string, o: object): unknown } }).db.pragma('synchronous', { simple: true });
  const walOf = (store: unknown) => (store as { wal: WalSync | null }).wal;

  it('FULL on a file: commits run with synchronous=NORMAL and each write waits for a WAL flush', async () => {
    const store = await openSqliteStore({ path: join(scratch(), 'pool.db') });
    expect(pragma(store)).toBe(1); // NORMAL
    const wal = walOf(store)!;
    expect(wal).not.toBeNull();
    const before = wal.flushes;
    await poolOps(store).setPolicyVersion(3, Date.now());
    expect(wal.flushes).toBe(before + 1);
    expect(await store.getPolicyVersion()).toBe(3);
    await store.close();
  });

  it('NORMAL asks for no flush; an in-memory database keeps SQLite FULL', async () => {
    const normal = await openSqliteStore({ path: join(scratch(), 'pool.db'), synchronous: 'NORMAL' });
    expect(walOf(normal)).toBeNull();
    expect(pragma(normal)).toBe(1);
    await normal.close();
    const memory = await openSqliteStore({ path: ':memory:' });
    expect(walOf(memory)).toBeNull();
    expect(pragma(memory)).toBe(2); // FULL
    await memory.close();
  });
});

import { randomBytes } from 'node:crypto';
import {
  mkdir,
  readdir,
  readFile,
  readlink,
  realpath,
  rename,
  rm,
  stat,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, dirname, join, sep } from 'node:path';
import { z } from 'zod';
import { ToolInstallError } from './errors.js';

// An install built once, atomically: a lock folder with a heartbeat, a staging folder renamed into place.

const STALE_LOCK_MS = 60_000;
/** Leftover staging folders of another host are removed only after this long. */
const FOREIGN_LEFTOVER_MS = 24 * 3600_000;

const Owner = z.object({ pid: z.number().int(), host: z.string(), token: z.string(), startedAt: z.string() });
type Owner = z.infer<typeof Owner>;

const OWNER_FILE = 'owner.json';

export interface InstallOnceOptions<T> {
  /** The folder the install lives in; created if missing. */
  parent: string;
  /** The install's folder name under parent. */
  name: string;
  /** The finished install if it is there and good (must ignore anything but `<parent>/<name>`). */
  find: () => T | null;
  /** Builds the install into `staging`; it is renamed to `<parent>/<name>` when this resolves. */
  build: (staging: string) => Promise<void>;
  force?: boolean;
  signal?: AbortSignal;
  onProgress?: (message: string) => void;
  /** A lock whose heartbeat is older than this is taken over (default 60 s). */
  staleLockMs?: number;
}

/**
 * Builds `<parent>/<name>` unless `find` accepts what is there. Concurrent callers (processes or
 * calls in one process) serialize on a lock folder with a heartbeat, so one builds and the others
 * reuse; the build happens in a staging folder that is renamed into place, and if two builds still
 * race (a lock taken over as stale), the loser of the rename adopts the winner's install.
 */
export async function installOnce<T>(
  options: InstallOnceOptions<T>,
): Promise<{ result: T; reused: boolean }> {
  const { parent, name, find, signal } = options;
  const progress = options.onProgress ?? (() => {});
  const staleMs = options.staleLockMs ?? STALE_LOCK_MS;
  if (!options.force) {
    const found = find();
    if (found) return { result: found, reused: true };
  }
  await mkdir(parent, { recursive: true });
  const lock = await acquireLock(join(parent, `.${name}.lock`), { staleMs, signal, progress });
  try {
    if (!options.force) {
      const found = find();
      if (found) return { result: found, reused: true };
    }
    await removeLeftovers(parent, name);
    const staging = join(parent, `.${name}.staging-${randomBytes(6).toString('hex')}`);
    await mkdir(staging);
    await writeFile(join(staging, OWNER_FILE), JSON.stringify(ownerRecord()));
    try {
      await options.build(staging);
      signal?.throwIfAborted();
      const adopted = await moveIntoPlace(staging, join(parent, name), options.force ? null : find);
      if (adopted) return { result: adopted, reused: false };
      await rm(join(parent, name, OWNER_FILE), { force: true });
    } catch (error) {
      await rm(staging, { recursive: true, force: true });
      throw error;
    }
    const result = find();
    if (!result)
      throw new ToolInstallError(`${join(parent, name)} was installed but does not pass its own check`);
    return { result, reused: false };
  } finally {
    await lock.release();
  }
}

/**
 * Renames staging to final. If final exists: a good one (per `find`, when given) is adopted and
 * staging removed; anything else is moved aside and replaced.
 */
async function moveIntoPlace<T>(
  staging: string,
  final: string,
  find: (() => T | null) | null,
): Promise<T | null> {
  for (let attempt = 0; ; attempt++) {
    try {
      await rename(staging, final);
      return null;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if ((code !== 'ENOTEMPTY' && code !== 'EEXIST') || attempt >= 5) throw error;
    }
    const existing = find?.();
    if (existing) {
      await rm(staging, { recursive: true, force: true });
      return existing;
    }
    const trash = join(dirname(final), `.${basename(final)}.trash-${randomBytes(6).toString('hex')}`);
    try {
      await rename(final, trash);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    await rm(trash, { recursive: true, force: true });
  }
}

function ownerRecord(token = randomBytes(8).toString('hex')): Owner {
  return { pid: process.pid, host: hostname(), token, startedAt: new Date().toISOString() };
}

function processIsGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

async function readOwner(folder: string): Promise<{ owner: Owner | null; touchedMs: number } | null> {
  const folderStat = await stat(folder).catch(() => null);
  if (!folderStat) return null;
  const file = join(folder, OWNER_FILE);
  const fileStat = await stat(file).catch(() => null);
  let owner: Owner | null = null;
  try {
    const parsed = fileStat ? Owner.safeParse(JSON.parse(await readFile(file, 'utf8'))) : null;
    owner = parsed?.success ? parsed.data : null;
  } catch {
    // gone, or half written: the heartbeat age decides
  }
  return { owner, touchedMs: Math.max(folderStat.mtimeMs, fileStat?.mtimeMs ?? 0) };
}

/** Removes staging and trash folders that no live installer owns. */
async function removeLeftovers(parent: string, name: string): Promise<void> {
  for (const entry of await readdir(parent)) {
    if (!entry.startsWith(`.${name}.staging-`) && !entry.startsWith(`.${name}.trash-`)) continue;
    const folder = join(parent, entry);
    const info = await readOwner(folder);
    if (!info) continue;
    const { owner } = info;
    const dead = owner
      ? owner.host === hostname()
        ? processIsGone(owner.pid)
        : Date.now() - info.touchedMs > FOREIGN_LEFTOVER_MS
      : entry.includes('.trash-') || Date.now() - info.touchedMs > FOREIGN_LEFTOVER_MS;
    if (!dead) continue;
    // A killed installer's npm may still be writing there (its children outlive it).
    await killProcessesWorkingIn(folder);
    await rm(folder, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 }).catch(() => {});
  }
}

/** SIGKILLs the processes whose working directory is inside `folder` (Linux /proc; else nothing). */
async function killProcessesWorkingIn(folder: string): Promise<void> {
  const real = await realpath(folder).catch(() => null);
  const pids = await readdir('/proc').catch(() => [] as string[]);
  if (!real) return;
  for (const pid of pids) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    const cwd = await readlink(`/proc/${pid}/cwd`).catch(() => null);
    if (cwd !== null && (cwd === real || cwd.startsWith(`${real}${sep}`))) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // gone already
      }
    }
  }
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolveSleep, reject) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolveSleep();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Takes the lock folder (mkdir is atomic). A held lock is waited for; it is taken over when its
 * owner is a dead process on this host or its heartbeat (owner.json's mtime) is older than staleMs.
 */
async function acquireLock(
  lockDir: string,
  options: { staleMs: number; signal?: AbortSignal; progress: (m: string) => void },
): Promise<{ release(): Promise<void> }> {
  const mine = ownerRecord();
  let announced = false;
  for (;;) {
    options.signal?.throwIfAborted();
    try {
      await mkdir(lockDir);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const info = await readOwner(lockDir);
    if (!info) continue;
    const { owner } = info;
    const stale =
      Date.now() - info.touchedMs > options.staleMs ||
      (owner !== null && owner.host === hostname() && processIsGone(owner.pid));
    if (stale) {
      options.progress(
        `taking over a stale install lock${owner ? ` of pid ${owner.pid} on ${owner.host}` : ''}`,
      );
      const aside = `${lockDir}.stale-${randomBytes(6).toString('hex')}`;
      try {
        await rename(lockDir, aside);
        await rm(aside, { recursive: true, force: true });
      } catch {
        // another waiter took it over first
      }
      continue;
    }
    if (!announced) {
      options.progress(
        `waiting for another install${owner ? ` (pid ${owner.pid} on ${owner.host})` : ''} to finish`,
      );
      announced = true;
    }
    await sleep(250, options.signal);
  }
  const ownerFile = join(lockDir, OWNER_FILE);
  await writeFile(ownerFile, JSON.stringify(mine));
  const heartbeat = setInterval(
    () => {
      const now = new Date();
      utimes(ownerFile, now, now).catch(() => {});
    },
    Math.max(10, Math.floor(options.staleMs / 6)),
  );
  heartbeat.unref();
  return {
    async release() {
      clearInterval(heartbeat);
      const info = await readOwner(lockDir);
      // Only our own lock: if it was taken over as stale, the folder now belongs to someone else.
      if (info?.owner?.token === mine.token) await rm(lockDir, { recursive: true, force: true });
    },
  };
}

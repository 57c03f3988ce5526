import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { BWRAP, namespaceArgs, PRLIMIT, PYTHON, systemArgs } from './bwrap-args.js';
import { SANDBOX_PATH } from './environment.js';

/** A uid for the check only: the one real runs drop to is derived from their workspace. */
const PROBE_UID = 999_999;

/** Whether bwrap is present and can create the sandbox's namespaces here (and, as root, drop to a uid). */
export function checkSandbox(): { ok: true } | { ok: false; reason: string } {
  for (const [path, what] of [
    [BWRAP, 'bubblewrap'],
    [PYTHON, 'python3'],
    [PRLIMIT, 'prlimit (util-linux)'],
  ] as const) {
    if (!existsSync(path)) return { ok: false, reason: `${what} not found at ${path}` };
  }
  const privileged = process.getuid?.() === 0;
  const probe = privileged
    ? `import os; os.setgroups([]); os.setresgid(${PROBE_UID}, ${PROBE_UID}, ${PROBE_UID}); os.setresuid(${PROBE_UID}, ${PROBE_UID}, ${PROBE_UID}); print('ok')`
    : "print('ok')";
  const args = [
    ...namespaceArgs(privileged),
    '--die-with-parent',
    ...systemArgs(),
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
  const result = spawnSync(BWRAP, args, { encoding: 'utf8', timeout: 15_000, env: { PATH: SANDBOX_PATH } });
  if (result.error) return { ok: false, reason: `bwrap could not run: ${result.error.message}` };
  if (result.status !== 0 || result.stdout.trim() !== 'ok') {
    const detail = result.stderr.trim() || `exit status ${result.status ?? result.signal}`;
    return { ok: false, reason: `bwrap cannot create a sandbox here: ${detail}` };
  }
  return { ok: true };
}

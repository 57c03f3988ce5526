import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import type { runInSandbox, SandboxOptions } from '../sandbox/index.js';
import { NODE_GUARD_CJS } from './node-guard.js';
import { PYTHON_SITECUSTOMIZE } from './python-path.js';

/** Sandbox settings a verifier is given: everything but the workspace and where it is mounted. */
export type SandboxSettings = Omit<SandboxOptions, 'workspace' | 'mountDir'>;

/** How verifiers run a command in the sandbox; `runInSandbox` in production, injectable for tests. */
export type SandboxRunner = typeof runInSandbox;

/** `runInSandbox`, loaded when first used (the verifiers' pure parts do not need the sandbox). */
export const defaultSandboxRunner: SandboxRunner = async (...args) => {
  const sandbox = await import('../sandbox/index.js');
  return sandbox.runInSandbox(...args);
};

/** Where the Node guard (node-guard.ts) is shown inside a verifier's sandbox. */
export const INSIDE_NODE_GUARD = '/opt/stepwise-verifier/node-guard.cjs';
/** The folder of our `sitecustomize.py` (python-path.ts) inside a verifier's sandbox. */
export const INSIDE_PYTHON_SITE = '/opt/stepwise-verifier/python';

/**
 * Variables a verifier never takes from its settings: what makes a shell, Python or Node read code
 * from elsewhere (BASH_ENV, ENV, PYTHONSTARTUP, NODE_OPTIONS...), or search other folders for it.
 */
const UNSAFE_ENV = new Set([
  'BASH_ENV',
  'ENV',
  'CDPATH',
  'GLOBIGNORE',
  'SHELLOPTS',
  'BASHOPTS',
  'PROMPT_COMMAND',
  'PYTHONPATH',
  'PYTHONHOME',
  'PYTHONSTARTUP',
  'PYTHONUSERBASE',
  'PYTHONINSPECT',
  'NODE_PATH',
  'NODE_OPTIONS',
  'LD_PRELOAD',
  'LD_LIBRARY_PATH',
  'PERL5LIB',
  'PERL5OPT',
  'RUBYOPT',
  'RUBYLIB',
]);

/** A PATH entry is kept when it is absolute and outside the workspace and /tmp (both writable). */
function safePath(path: string, mountDir: string): string {
  const under = (dir: string, p: string) => p === dir || p.startsWith(`${dir}/`);
  return path
    .split(':')
    .filter((p) => p.startsWith('/'))
    .map((p) => posix.normalize(p).replace(/(.)\/+$/, '$1'))
    .filter((p) => !under(mountDir, p) && !under('/tmp', p) && !under('/dev/shm', p))
    .join(':');
}

export interface VerifierSandbox {
  options: SandboxOptions;
  /** Removes the host files the sandbox was given; call when the verifier is done. */
  close(): Promise<void>;
}

/**
 * A verifier's sandbox (docs/security.md, "The verifier sandbox"): no network (the gateway bridge an
 * agent gets is dropped), the workspace as a private copy of its final state, and interpreters that do
 * not load code from it in place of their own: PYTHONSAFEPATH with the workspace folder put back
 * after the standard library (python-path.ts), no user site, Node's node_modules search kept out of
 * it, a PATH without it, no BASH_ENV/ENV.
 * `ownDirs` are the verifier's own folders in the workspace (its reward/): Python and Node may load
 * from those.
 */
export async function verifierSandbox(
  settings: SandboxSettings | undefined,
  workspace: string,
  mountDir: string,
  ownDirs: readonly string[] = [],
): Promise<VerifierSandbox> {
  const guardDir = await mkdtemp(join(tmpdir(), 'stepwise-verifier-'));
  const guard = join(guardDir, 'node-guard.cjs');
  await writeFile(guard, NODE_GUARD_CJS);
  const pythonSite = join(guardDir, 'python');
  await mkdir(pythonSite);
  await writeFile(join(pythonSite, 'sitecustomize.py'), PYTHON_SITECUSTOMIZE);
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(settings?.env ?? {}))
    if (!UNSAFE_ENV.has(key) && key !== 'PATH') env[key] = value;
  if (settings?.env?.PATH !== undefined) env.PATH = safePath(settings.env.PATH, mountDir);
  Object.assign(env, {
    PYTHONSAFEPATH: '1',
    PYTHONNOUSERSITE: '1',
    NODE_OPTIONS: `--require ${INSIDE_NODE_GUARD}`,
    STEPWISE_NODE_GUARD: JSON.stringify({ workspace: mountDir, allow: ownDirs }),
    STEPWISE_PYTHON_WORKSPACE: mountDir,
    // Ours first (its sitecustomize appends the workspace last), then the verifier's own folders.
    PYTHONPATH: [INSIDE_PYTHON_SITE, ...ownDirs].join(':'),
  });
  const options: SandboxOptions = {
    ...settings,
    workspace,
    mountDir,
    env,
    workspaceCopy: true,
    readOnlyBinds: [
      ...(settings?.readOnlyBinds ?? []),
      { source: guard, target: INSIDE_NODE_GUARD },
      { source: pythonSite, target: INSIDE_PYTHON_SITE },
    ],
  };
  delete options.gateway;
  return { options, close: () => rm(guardDir, { recursive: true, force: true }) };
}

/** Single-quotes a string for POSIX shells. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The last `max` characters of a process's output, for a failure reason. */
export function tail(text: string, max = 400): string {
  const t = text.trim();
  return t.length <= max ? t : `…${t.slice(-max)}`;
}

import { posix } from 'node:path';

/** ClawGym's PATH, then the sandbox's own shims (bwrap-args.ts): a system `python` still comes first. */
export const SANDBOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/stepwise/bin';

/**
 * HOME inside the sandbox: the home directory that holds mountDir (`/root` for ClawGym's
 * `/root/.openclaw/workspace`, so `~/.openclaw/workspace` in a prompt means the workspace), else
 * mountDir's parent, else /tmp. It is read-only: only the workspace and /tmp are writable.
 */
export function sandboxHome(mountDir: string): string {
  const home = /^(\/root|\/home\/[^/]+)(?:\/|$)/.exec(mountDir);
  if (home) return home[1]!;
  const parent = posix.dirname(mountDir);
  return parent === '/' ? '/tmp' : parent;
}

/** The command's whole environment: nothing of the host's leaks in; LC_ALL as ClawGym's reward run sets it. */
export function sandboxEnv(
  mountDir: string,
  extra: Record<string, string> | undefined,
): Record<string, string> {
  const env: Record<string, string> = { PATH: SANDBOX_PATH, HOME: sandboxHome(mountDir), LC_ALL: 'C.UTF-8' };
  for (const [key, value] of Object.entries(extra ?? {})) {
    if (key === '' || key.includes('=') || key.includes('\0') || value.includes('\0')) {
      throw new TypeError(`sandbox env: invalid variable ${JSON.stringify(key)}`);
    }
    env[key] = value;
  }
  return env;
}

/** Where the workspace may not be mounted: over the system directories the sandbox needs. */
const RESERVED = ['/usr', '/etc', '/proc', '/dev', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];

/** mountDir as a normalized absolute sandbox path; throws on `/`, relative paths and system directories. */
export function normalizeMountDir(mountDir: string): string {
  if (typeof mountDir !== 'string' || !mountDir.startsWith('/') || mountDir.includes('\0')) {
    throw new TypeError(`sandbox mountDir must be an absolute path, got ${JSON.stringify(mountDir)}`);
  }
  const normalized = posix.normalize(mountDir).replace(/\/+$/, '');
  if (normalized === '' || normalized === '/tmp') {
    throw new TypeError(`sandbox mountDir cannot be ${JSON.stringify(mountDir)}`);
  }
  if (RESERVED.some((dir) => normalized === dir || normalized.startsWith(`${dir}/`))) {
    throw new TypeError(`sandbox mountDir cannot be inside a system directory: ${mountDir}`);
  }
  return normalized;
}

/** A working directory inside the sandbox: absolute, or relative to mountDir. */
export function sandboxCwd(mountDir: string, cwd: string | undefined): string {
  if (cwd === undefined || cwd === '') return mountDir;
  if (cwd.includes('\0')) throw new TypeError('sandbox cwd contains a NUL byte');
  return posix.resolve(mountDir, cwd);
}

/** A read-only bind's target: absolute, normalized, and clear of the system, /tmp and the workspace. */
export function normalizeBindTarget(target: string, mountDir: string): string {
  if (typeof target !== 'string' || !target.startsWith('/') || target.includes('\0')) {
    throw new TypeError(
      `sandbox readOnlyBinds target must be an absolute path, got ${JSON.stringify(target)}`,
    );
  }
  const normalized = posix.normalize(target).replace(/\/+$/, '');
  const under = (dir: string, path: string) => path === dir || path.startsWith(`${dir}/`);
  const clash = [...RESERVED, '/tmp', '/run'].find((dir) => under(dir, normalized));
  if (normalized === '' || clash !== undefined) {
    throw new TypeError(`sandbox readOnlyBinds target ${target} is inside ${clash ?? '/'}`);
  }
  if (under(normalized, mountDir) || under(mountDir, normalized)) {
    throw new TypeError(`sandbox readOnlyBinds target ${target} overlaps the workspace ${mountDir}`);
  }
  return normalized;
}

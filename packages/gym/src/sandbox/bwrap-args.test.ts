import { describe, expect, it } from 'vitest';
import { bwrapArgs, groupFile, passwdFile } from './bwrap-args.js';

const plan = {
  workspace: '/tmp/run/ws',
  mountDir: '/root/.openclaw/workspace',
  etcFiles: { passwd: '/tmp/x/passwd', group: '/tmp/x/group', hosts: '/tmp/x/hosts' },
  tmpBytes: 1024,
  shmBytes: 512,
  statusFd: 3,
  seccompFd: 6,
};

/** The [source, destination] pairs of every bind of a kind. */
function binds(args: string[], kind: string): [string, string][] {
  const pairs: [string, string][] = [];
  args.forEach((arg, i) => {
    if (arg === kind) pairs.push([args[i + 1]!, args[i + 2]!]);
  });
  return pairs;
}

describe('bwrapArgs', () => {
  it('isolates every namespace and ties the sandbox to its parent', () => {
    const unprivileged = bwrapArgs({ ...plan, privileged: false });
    expect(unprivileged).toEqual(
      expect.arrayContaining(['--unshare-all', '--disable-userns', '--die-with-parent', '--new-session']),
    );
    const privileged = bwrapArgs({ ...plan, privileged: true });
    for (const flag of [
      '--unshare-ipc',
      '--unshare-pid',
      '--unshare-net',
      '--unshare-uts',
      '--die-with-parent',
    ]) {
      expect(privileged).toContain(flag);
    }
    expect(privileged.slice(privileged.indexOf('--cap-drop'), privileged.indexOf('--cap-drop') + 2)).toEqual([
      '--cap-drop',
      'ALL',
    ]);
  });

  it('loads the seccomp filter against user namespaces, which a privileged sandbox cannot do without', () => {
    for (const privileged of [true, false]) {
      const args = bwrapArgs({ ...plan, privileged });
      expect(args.slice(args.indexOf('--seccomp'), args.indexOf('--seccomp') + 2)).toEqual([
        '--seccomp',
        '6',
      ]);
    }
    const { seccompFd: _, ...noFilter } = plan;
    expect(bwrapArgs({ ...noFilter, privileged: false })).not.toContain('--seccomp');
    expect(() => bwrapArgs({ ...noFilter, privileged: true })).toThrow(/seccomp/);
  });

  it('binds writable only the workspace, and read-only only the system', () => {
    const args = bwrapArgs({ ...plan, privileged: true, gatewaySocket: '/tmp/x/gw.sock' });
    expect(binds(args, '--bind')).toEqual([['/tmp/run/ws', '/root/.openclaw/workspace']]);
    for (const [source, dest] of [...binds(args, '--ro-bind'), ...binds(args, '--ro-bind-try')]) {
      expect(source, source).toMatch(/^(\/usr|\/etc\/|\/tmp\/x\/|\/bin|\/sbin|\/lib)/);
      expect(dest).not.toMatch(/^\/(work|home|root|var|opt)/);
    }
    expect(args).not.toContain('--dev-bind');
    expect(args.slice(-6)).toEqual(['--remount-ro', '/', '--json-status-fd', '3', '--chdir', '/']);
  });

  it('writes passwd and group entries for the sandbox uid', () => {
    expect(passwdFile(1234, '/root')).toContain('agent:x:1234:1234:Stepwise sandbox:/root:/bin/bash');
    expect(groupFile(1234)).toContain('agent:x:1234:');
  });
  it('shows read-only binds read-only, under directories the sandbox uid can traverse, before the root goes read-only', () => {
    const args = bwrapArgs({
      ...plan,
      privileged: true,
      readOnlyBinds: [{ source: '/srv/tools/openclaw', target: '/opt/stepwise/openclaw' }],
    });
    expect(binds(args, '--ro-bind')).toContainEqual(['/srv/tools/openclaw', '/opt/stepwise/openclaw']);
    expect(binds(args, '--bind').map(([, to]) => to)).not.toContain('/opt/stepwise/openclaw');
    const at = args.indexOf('/srv/tools/openclaw');
    const dirAt = args.findIndex((a, k) => a === '--dir' && args[k + 1] === '/opt/stepwise');
    expect(args.slice(dirAt - 2, dirAt)).toEqual(['--perms', '0755']);
    expect(dirAt).toBeLessThan(at);
    expect(at).toBeLessThan(args.indexOf('--remount-ro'));
  });
});

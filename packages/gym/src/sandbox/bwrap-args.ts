import { existsSync, lstatSync, readlinkSync } from 'node:fs';

export const BWRAP = '/usr/bin/bwrap';
export const PYTHON = '/usr/bin/python3';
export const PRLIMIT = '/usr/bin/prlimit';
/** Where a copied workspace's original is bound read-only (SandboxOptions.workspaceCopy). */
export const INSIDE_WORKSPACE_ORIGINAL = '/run/stepwise/workspace';
/** Where the gateway bridge's unix socket appears inside the sandbox. */
export const INSIDE_GATEWAY_SOCKET = '/run/stepwise/gateway.sock';
/**
 * Commands the sandbox adds after the system's on PATH (environment.ts): `python` -> python3, which
 * ClawGym's image has (its checkers and prompts call bare `python`) and Debian's /usr may lack. They
 * live on the sandbox's own root tmpfs: nothing is written to the host's /usr.
 */
export const INSIDE_SHIM_DIR = '/run/stepwise/bin';
const SHIMS: readonly [name: string, target: string][] = [['python', '/usr/bin/python3']];

/** The parts of /etc that programs need; the rest of the host's configuration stays hidden. */
const ETC_ENTRIES = [
  'alternatives',
  'bash.bashrc',
  'ca-certificates',
  'ca-certificates.conf',
  'debian_version',
  'fonts',
  'gai.conf',
  'host.conf',
  'inputrc',
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'localtime',
  'magic',
  'magic.mime',
  'mime.types',
  'nsswitch.conf',
  'os-release',
  'perl',
  'profile',
  'protocols',
  'python3',
  'python3.11',
  'python3.12',
  'python3.13',
  'services',
  'ssl',
  'terminfo',
  'timezone',
];

/** Top-level system entries: mirrored as the same symlink (merged /usr) or bound read-only. */
const SYSTEM_LINKS = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];

export interface BwrapPlan {
  /** The host runs as root: bwrap is privileged, no user namespace, the supervisor drops to a uid. */
  privileged: boolean;
  workspace: string;
  mountDir: string;
  /** Host files for the sandbox's /etc/passwd, /etc/group and /etc/hosts. */
  etcFiles: { passwd: string; group: string; hosts: string };
  tmpBytes: number;
  shmBytes: number;
  /** The host path of the gateway bridge's unix socket. */
  gatewaySocket?: string;
  /** Host paths shown read-only inside (checked by the caller). */
  readOnlyBinds?: readonly { source: string; target: string }[];
  statusFd: number;
  /** The fd bwrap reads the seccomp filter from (seccomp.ts); needed when privileged. */
  seccompFd?: number;
  /** A hermetic root (rootfs.ts): its usr/ and etc/ stand in for the host's. */
  rootfs?: string;
  /**
   * The workspace as a private copy: a tmpfs of this many bytes at mountDir, the workspace read-only
   * at INSIDE_WORKSPACE_ORIGINAL for the command to copy from.
   */
  workspaceCopyBytes?: number;
}

/** Namespaces and capabilities: the isolation itself. */
export function namespaceArgs(privileged: boolean): string[] {
  if (!privileged) return ['--unshare-all', '--unshare-user', '--disable-userns'];
  // Not --unshare-all: as root it adds a user namespace that maps uid 0 only, and the command must
  // run as another uid. Capabilities: only what the supervisor needs to drop to that uid
  // (and to empty the bounding set first), to signal the command's processes, to bind the bridge,
  // and to enter the working directory before it drops (a 0700 workspace belongs to the command's
  // uid, not to root). The command keeps none of them: it runs as another uid with an empty
  // bounding set. Nor can it make a user namespace of its own (which would give it uid 0 and every
  // capability there): the seccomp filter of seccomp.ts refuses them (bwrapArgs' --seccomp).
  return [
    '--unshare-ipc',
    '--unshare-pid',
    '--unshare-net',
    '--unshare-uts',
    '--unshare-cgroup-try',
    '--cap-drop',
    'ALL',
    '--cap-add',
    'CAP_SETUID',
    '--cap-add',
    'CAP_SETGID',
    '--cap-add',
    'CAP_NET_BIND_SERVICE',
    '--cap-add',
    'CAP_SETPCAP',
    '--cap-add',
    'CAP_KILL',
    '--cap-add',
    'CAP_DAC_READ_SEARCH',
  ];
}

/**
 * /usr read-only, and /bin, /lib... as the host has them (symlinks into /usr, or read-only binds); with
 * a hermetic root, its usr/ and merged-/usr links to it.
 */
export function systemArgs(rootfs?: string): string[] {
  if (rootfs !== undefined) {
    const args = ['--ro-bind', `${rootfs}/usr`, '/usr'];
    for (const path of SYSTEM_LINKS) {
      if (existsSync(`${rootfs}/usr${path}`)) args.push('--symlink', `usr${path}`, path);
    }
    return args;
  }
  const args = ['--ro-bind', '/usr', '/usr'];
  for (const path of SYSTEM_LINKS) {
    let st: import('node:fs').Stats;
    try {
      st = lstatSync(path);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(path), path);
    else if (st.isDirectory()) args.push('--ro-bind', path, path);
  }
  return args;
}

export function bwrapArgs(plan: BwrapPlan): string[] {
  const args = namespaceArgs(plan.privileged);
  args.push('--die-with-parent', '--new-session', '--hostname', 'sandbox');
  if (plan.privileged && plan.seccompFd === undefined) {
    throw new Error('a privileged sandbox needs the seccomp filter that refuses user namespaces');
  }
  if (plan.seccompFd !== undefined) args.push('--seccomp', String(plan.seccompFd));
  args.push(...systemArgs(plan.rootfs));
  // bwrap makes missing parents 0700 when privileged; the sandbox uid must be able to traverse them.
  args.push('--perms', '0755', '--dir', '/etc');
  const etc = plan.rootfs === undefined ? '/etc' : `${plan.rootfs}/etc`;
  for (const entry of ETC_ENTRIES) args.push('--ro-bind-try', `${etc}/${entry}`, `/etc/${entry}`);
  args.push('--ro-bind', plan.etcFiles.passwd, '/etc/passwd');
  args.push('--ro-bind', plan.etcFiles.group, '/etc/group');
  args.push('--ro-bind', plan.etcFiles.hosts, '/etc/hosts');
  for (const dir of [...ancestors(INSIDE_SHIM_DIR), INSIDE_SHIM_DIR])
    args.push('--perms', '0755', '--dir', dir);
  for (const [name, target] of SHIMS) args.push('--symlink', target, `${INSIDE_SHIM_DIR}/${name}`);
  args.push('--proc', '/proc', '--dev', '/dev');
  args.push('--perms', '1777', '--size', String(plan.tmpBytes), '--tmpfs', '/tmp');
  args.push('--perms', '1777', '--size', String(plan.shmBytes), '--tmpfs', '/dev/shm');
  for (const dir of ancestors(plan.mountDir)) {
    if (dir !== '/tmp') args.push('--perms', '0755', '--dir', dir);
  }
  if (plan.workspaceCopyBytes === undefined) args.push('--bind', plan.workspace, plan.mountDir);
  else {
    // 0777: the command's uid fills it; nothing reaches the host workspace.
    args.push('--perms', '0777', '--size', String(plan.workspaceCopyBytes), '--tmpfs', plan.mountDir);
    for (const dir of ancestors(INSIDE_WORKSPACE_ORIGINAL)) args.push('--perms', '0755', '--dir', dir);
    args.push('--ro-bind', plan.workspace, INSIDE_WORKSPACE_ORIGINAL);
  }
  if (plan.gatewaySocket) {
    for (const dir of ancestors(INSIDE_GATEWAY_SOCKET)) args.push('--perms', '0755', '--dir', dir);
    args.push('--ro-bind', plan.gatewaySocket, INSIDE_GATEWAY_SOCKET);
  }
  for (const bind of plan.readOnlyBinds ?? []) {
    for (const dir of ancestors(bind.target)) args.push('--perms', '0755', '--dir', dir);
    args.push('--ro-bind', bind.source, bind.target);
  }
  // The root tmpfs (the parents of mountDir, /run) read-only: the workspace and /tmp stay writable.
  args.push('--remount-ro', '/');
  args.push('--json-status-fd', String(plan.statusFd), '--chdir', '/');
  return args;
}

/** /a/b/c -> ['/a', '/a/b']: the directories above a path, outermost first. */
function ancestors(path: string): string[] {
  const parts = path.split('/').filter((p) => p !== '');
  return parts.slice(0, -1).map((_, i) => `/${parts.slice(0, i + 1).join('/')}`);
}

export function passwdFile(uid: number, home: string): string {
  const lines = ['root:x:0:0:root:/root:/bin/bash'];
  if (uid !== 0) lines.push(`agent:x:${uid}:${uid}:Stepwise sandbox:${home}:/bin/bash`);
  lines.push('nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin', '');
  return lines.join('\n');
}

export function groupFile(gid: number): string {
  const lines = ['root:x:0:'];
  if (gid !== 0) lines.push(`agent:x:${gid}:`);
  lines.push('nogroup:x:65534:', '');
  return lines.join('\n');
}

export const HOSTS_FILE =
  '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n';

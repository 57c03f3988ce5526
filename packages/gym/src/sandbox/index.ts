import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  BWRAP,
  type BwrapPlan,
  bwrapArgs,
  groupFile,
  HOSTS_FILE,
  INSIDE_GATEWAY_SOCKET,
  INSIDE_WORKSPACE_ORIGINAL,
  PYTHON,
  passwdFile,
} from './bwrap-args.js';
import { createSandboxGroup, type GroupEvents } from './cgroup.js';
import { treeBytes, volumeBytes, volumeFull } from './disk-usage.js';
import {
  normalizeBindTarget,
  normalizeMountDir,
  sandboxCwd,
  sandboxEnv,
  sandboxHome,
} from './environment.js';
import { type Bridge, gatewayTarget, startBridge, withRefusals } from './gateway-bridge.js';
import { classifyLimitHit } from './limit-hit.js';
import { runUnsafe } from './run-unsafe.js';
import { noUserNamespaceFilter } from './seccomp.js';
import { shellWord } from './shell-word.js';
import { STATUS_FDS, type Supervised, supervise } from './supervise.js';
import { SUPERVISOR_PY, type SupervisorConfig } from './supervisor.js';
import {
  type BridgeScope,
  MIB,
  type RunResult,
  type RunSettings,
  resolveLimits,
  SandboxError,
  type SandboxLimits,
  type SandboxOptions,
} from './types.js';
import { chownTree, sandboxUidFor } from './workspace-owner.js';

/*
 * Runs untrusted commands (agents' tools, agents themselves, task verifiers) in a bubblewrap sandbox:
 * no network (one optional bridged gateway port), a read-only system, the workspace and a private /tmp
 * writable, rlimits, and a wall-clock timeout that ends every process of the sandbox. docs/gym-sandbox.md
 * says what is isolated and how.
 */

export { checkSandbox, requireSandbox } from './check.js';
export { DEFAULT_LIMITS, SandboxError } from './types.js';
export type { RunResult, SandboxLimits, SandboxOptions };

/** SIGTERM first; whatever still runs this much later gets SIGKILL. */
const KILL_GRACE_MS = 2_000;
/** One argv string cannot exceed the kernel's MAX_ARG_STRLEN (128 KiB). */
const MAX_COMMAND_BYTES = 128 * 1024 - 1;
/**
 * The sandbox's own tasks (bwrap, its init, the supervisor and its bridge threads): counted by
 * RLIMIT_NPROC without a user namespace of its own (non-root host), and by the control group always.
 */
const SUPERVISOR_TASKS = 32;

export async function runInSandbox(
  options: SandboxOptions,
  command: string /* run by bash -c */,
  run: RunSettings = {},
): Promise<RunResult> {
  const limits = resolveLimits(options.limits);
  const mountDir = normalizeMountDir(options.mountDir);
  const cwd = sandboxCwd(mountDir, run.cwd);
  const timeoutMs = run.timeoutMs ?? limits.wallMs;
  const maxOutputBytes = run.maxOutputBytes ?? MIB;
  checkRunSettings(command, timeoutMs, maxOutputBytes);
  const env = sandboxEnv(mountDir, options.env);
  const gateway = options.gateway ? resolveGateway(options.gateway) : undefined;
  const workspace = await realWorkspace(options.workspace);
  const readOnlyBinds = await realReadOnlyBinds(options.readOnlyBinds ?? [], mountDir);

  if (options.unsafeNoSandbox) {
    if (options.rootfs !== undefined)
      throw new SandboxError('a hermetic rootfs needs the sandbox: it cannot be used with unsafeNoSandbox');
    return runUnsafe({
      workspace,
      mountDir,
      cwd,
      env,
      limits,
      command,
      stdin: run.stdin,
      timeoutMs,
      graceMs: KILL_GRACE_MS,
      maxOutputBytes,
      gateway,
    });
  }
  return runInBwrap(options, run, {
    workspace,
    mountDir,
    cwd,
    env,
    limits,
    command,
    timeoutMs,
    maxOutputBytes,
    gateway,
    readOnlyBinds,
  });
}

/** A run's inputs, checked and resolved by runInSandbox. */
interface ResolvedRun {
  workspace: string;
  mountDir: string;
  cwd: string;
  env: Record<string, string>;
  limits: SandboxLimits;
  command: string;
  timeoutMs: number;
  maxOutputBytes: number;
  gateway: Gateway | undefined;
  readOnlyBinds: { source: string; target: string }[];
}

/** The sandbox proper: bwrap and the supervisor, in a run directory and control group of their own. */
async function runInBwrap(
  options: SandboxOptions,
  run: RunSettings,
  resolved: ResolvedRun,
): Promise<RunResult> {
  const {
    workspace,
    mountDir,
    cwd,
    env,
    limits,
    command,
    timeoutMs,
    maxOutputBytes,
    gateway,
    readOnlyBinds,
  } = resolved;
  if (!existsSync(BWRAP)) throw new SandboxError(`bubblewrap is not installed (${BWRAP} not found)`);
  const rootfs = options.rootfs === undefined ? undefined : await hermeticRoot(options.rootfs);

  const identity = await sandboxIdentity(workspace);
  const { privileged, seccomp } = identity;
  // A workspace that starts past the quota may keep what it has (and shrink), not grow.
  const diskQuotaBytes = Math.floor(limits.diskMb * MIB);
  const startBytes = (await volumeBytes(workspace)) ?? (await treeBytes(workspace).catch(() => 0));
  const runDir = await mkdtemp(join(tmpdir(), 'stepwise-sandbox-'));
  let bridge: Bridge | undefined;
  // Memory and tasks of the whole sandbox, held by the kernel where the host gives a control group.
  const group = await createSandboxGroup({
    memoryBytes: limits.memoryMb * MIB,
    tasks: limits.processes + SUPERVISOR_TASKS,
  });
  try {
    const copy = options.workspaceCopy === true;
    // A copy's writes land on its own capped tmpfs: the quota then counts /tmp and /dev/shm only.
    const measured = copy ? join(runDir, 'no-workspace') : workspace;
    if (copy) await mkdir(measured);
    const etcFiles = await writeEtcFiles(runDir, identity, mountDir);
    const gatewaySocket = gateway ? join(runDir, 'gateway.sock') : undefined;
    if (gateway && gatewaySocket) {
      bridge = await startBridge(gatewaySocket, gateway.target, gateway.scope).catch((error: Error) => {
        throw new SandboxError(`cannot start the gateway bridge: ${error.message}`);
      });
    }
    const config = supervisorConfig(identity, limits, copy ? mountDir : cwd, gateway);
    const tmpBytes = Math.floor(limits.memoryMb * MIB);
    const plan: BwrapPlan = {
      privileged,
      workspace,
      mountDir,
      etcFiles,
      tmpBytes,
      shmBytes: Math.min(tmpBytes, 64 * MIB),
      ...(gatewaySocket ? { gatewaySocket } : {}),
      readOnlyBinds,
      statusFd: STATUS_FDS.bwrap,
      ...(seccomp ? { seccompFd: STATUS_FDS.seccomp } : {}),
      ...(rootfs ? { rootfs } : {}),
      ...(copy ? { workspaceCopyBytes: startBytes + diskQuotaBytes } : {}),
    };
    const script = copy ? `${copyWorkspaceScript(mountDir, cwd)}\n${command}` : command;
    const args = sandboxArgs(plan, config, script);
    let supervised: Supervised;
    try {
      supervised = await supervise({
        executable: BWRAP,
        args,
        env,
        stdin: run.stdin,
        timeoutMs,
        graceMs: KILL_GRACE_MS,
        maxOutputBytes,
        ...(seccomp ? { seccomp } : {}),
        diskQuota: copy
          ? { workspace: measured, limitBytes: diskQuotaBytes }
          : await workspaceQuota(workspace, diskQuotaBytes, startBytes),
        ...(group ? { groupProcs: group.procs } : {}),
      });
    } catch (error) {
      throw new SandboxError(`bwrap could not be started: ${(error as Error).message}`);
    }
    const events = group ? await group.events() : undefined;
    return withRefusals(toResult(supervised, limits, events), bridge);
  } finally {
    await group?.remove();
    await bridge?.close();
    await rm(runDir, { recursive: true, force: true });
  }
}

/** Arguments checked before anything is set up. */
function checkRunSettings(command: string, timeoutMs: number, maxOutputBytes: number): void {
  if (!(timeoutMs > 0)) throw new TypeError(`sandbox timeoutMs must be positive, got ${timeoutMs}`);
  if (!(maxOutputBytes >= 0))
    throw new TypeError(`sandbox maxOutputBytes must be >= 0, got ${maxOutputBytes}`);
  if (typeof command !== 'string') throw new TypeError('sandbox command must be a string');
  if (command.includes('\0')) throw new TypeError('sandbox command contains a NUL byte');
  if (Buffer.byteLength(command) > MAX_COMMAND_BYTES) {
    throw new RangeError(
      `sandbox command is ${Buffer.byteLength(command)} bytes; the most is ${MAX_COMMAND_BYTES}`,
    );
  }
}

/** Read-only binds with real host sources and normalized targets inside. */
function realReadOnlyBinds(
  binds: readonly { source: string; target: string }[],
  mountDir: string,
): Promise<{ source: string; target: string }[]> {
  return Promise.all(
    binds.map(async ({ source, target }) => ({
      source: await realpath(source).catch(() => {
        throw new SandboxError(`the read-only bind source ${source} does not exist`);
      }),
      target: normalizeBindTarget(target, mountDir),
    })),
  );
}

/** Who the sandbox runs as, and the seccomp filter bwrap loads. */
interface SandboxIdentity {
  privileged: boolean;
  seccomp: Buffer | null;
  uid: number;
  gid: number;
}

/** As root, the sandbox gets a uid of its own, and the workspace is handed to it. */
async function sandboxIdentity(workspace: string): Promise<SandboxIdentity> {
  const privileged = process.getuid?.() === 0;
  // Unprivileged, bwrap's --disable-userns already holds; as root the filter is the only wall.
  const seccomp = noUserNamespaceFilter();
  if (privileged && !seccomp) {
    throw new SandboxError(
      `no seccomp filter against user namespaces for ${process.arch}: the sandbox cannot run as root here`,
    );
  }
  const uid = privileged ? sandboxUidFor(workspace) : (process.getuid?.() ?? 0);
  const gid = privileged ? uid : (process.getgid?.() ?? 0);
  if (privileged) {
    await chownTree(workspace, uid, gid).catch((error: Error) => {
      throw new SandboxError(`cannot hand the workspace to the sandbox uid: ${error.message}`);
    });
  }
  return { privileged, seccomp, uid, gid };
}

/** Writes the sandbox's /etc/passwd, /etc/group and /etc/hosts into runDir. */
async function writeEtcFiles(
  runDir: string,
  { uid, gid }: SandboxIdentity,
  mountDir: string,
): Promise<BwrapPlan['etcFiles']> {
  const etcFiles = {
    passwd: join(runDir, 'passwd'),
    group: join(runDir, 'group'),
    hosts: join(runDir, 'hosts'),
  };
  await writeFile(etcFiles.passwd, passwdFile(uid, sandboxHome(mountDir)));
  await writeFile(etcFiles.group, groupFile(gid));
  await writeFile(etcFiles.hosts, HOSTS_FILE);
  return etcFiles;
}

function supervisorConfig(
  { privileged, uid, gid }: SandboxIdentity,
  limits: SandboxLimits,
  cwd: string,
  gateway: Gateway | undefined,
): SupervisorConfig {
  return {
    statusFd: STATUS_FDS.supervisor,
    controlFd: STATUS_FDS.control,
    cwd,
    ...(privileged ? { uid, gid } : {}),
    limits: {
      cpu: Math.ceil(limits.cpuSeconds),
      as: Math.floor(limits.memoryMb * MIB),
      nproc: limits.processes + (privileged ? 0 : SUPERVISOR_TASKS),
      fsize: Math.floor(limits.fileSizeMb * MIB),
    },
    ...(gateway ? { gateway: { port: gateway.port, socket: INSIDE_GATEWAY_SOCKET } } : {}),
  };
}

/** bwrap's arguments, then the supervisor it runs: python with its config and the command. */
function sandboxArgs(plan: BwrapPlan, config: SupervisorConfig, command: string): string[] {
  return [...bwrapArgs(plan), '--', PYTHON, '-I', '-S', '-c', SUPERVISOR_PY, JSON.stringify(config), command];
}

/** The disk quota of a run in the workspace itself (not a copy). */
async function workspaceQuota(workspace: string, diskQuotaBytes: number, startBytes: number) {
  return {
    workspace,
    limitBytes: Math.max(diskQuotaBytes, startBytes),
    // A run that starts on a full workspace may still delete; one that fills it is stopped.
    stopWhenFull: !(await volumeFull(workspace)),
  };
}

/**
 * Fills a copied workspace before the command: symlinks, hard links and modes kept, FIFOs, sockets and
 * devices left out (a verifier must not block on a FIFO); what cannot be copied is left out quietly.
 */
function copyWorkspaceScript(mountDir: string, cwd: string): string {
  const to = shellWord(mountDir);
  return [
    `cp -a ${shellWord(`${INSIDE_WORKSPACE_ORIGINAL}/.`)} ${to}/ 2>/dev/null`,
    `find ${to} -xdev \\( -type p -o -type s -o -type b -o -type c \\) -delete 2>/dev/null`,
    `cd -- ${shellWord(cwd)} || exit 1`,
  ].join('; ');
}

type Gateway = ReturnType<typeof resolveGateway>;

function resolveGateway(gateway: { url: string; port?: number; scope?: BridgeScope }) {
  const target = gatewayTarget(gateway.url);
  const port = gateway.port ?? target.port;
  if (!Number.isInteger(port) || port < 1 || port > 65_535) {
    throw new TypeError(`sandbox gateway.port must be a TCP port, got ${gateway.port}`);
  }
  return { target, port, ...(gateway.scope ? { scope: gateway.scope } : {}) };
}

/** The real path of a hermetic root; it must hold the python3 the supervisor runs on. */
async function hermeticRoot(rootfs: string): Promise<string> {
  const real = await realpath(rootfs).catch(() => {
    throw new SandboxError(`the sandbox rootfs ${rootfs} does not exist`);
  });
  if (!existsSync(join(real, PYTHON)))
    throw new SandboxError(`the sandbox rootfs ${rootfs} has no ${PYTHON}: is it built?`);
  return real;
}

async function realWorkspace(workspace: string): Promise<string> {
  try {
    const real = await realpath(workspace);
    if ((await stat(real)).isDirectory()) return real;
  } catch {
    // Reported below.
  }
  throw new SandboxError(`the workspace ${workspace} is not a directory`);
}

function toResult(run: Supervised, limits: SandboxLimits, group?: GroupEvents): RunResult {
  let stderr = run.stderr.text();
  if (run.failedReason !== null)
    throw new SandboxError(`the sandbox could not be set up: ${run.failedReason}`);
  if (!run.started && !run.timedOut) {
    const why = stderr.trim() || `bwrap exited with ${run.bwrap.code ?? run.bwrap.signal}`;
    throw new SandboxError(`the sandbox failed to start: ${why}`);
  }
  let exitCode: number | null;
  let signal: string | null;
  if (run.exit) {
    ({ code: exitCode, signal } = run.exit);
  } else if (run.killed) {
    exitCode = null;
    signal = 'SIGKILL';
  } else {
    // The supervisor itself was killed (only the command could have): bwrap reports 128 + n.
    exitCode = run.bwrap.code;
    signal = run.bwrap.signal;
  }
  if (run.overDiskQuota !== null) {
    // Said where every caller looks (an agent's failure reason quotes the end of stderr).
    const held =
      run.overDiskQuota > Math.floor(limits.diskMb * MIB)
        ? `the workspace, /tmp and /dev/shm held ${mib(run.overDiskQuota)} MiB`
        : `the workspace is full (its bytes or its ${limits.inodes} files)`;
    stderr += `${stderr === '' || stderr.endsWith('\n') ? '' : '\n'}stepwise sandbox: disk quota exceeded: ${held}, over the ${limits.diskMb} MiB quota; every process was killed\n`;
  }
  return {
    exitCode,
    signal,
    stdout: run.stdout.text(),
    stderr,
    timedOut: run.timedOut,
    durationMs: run.durationMs,
    limitHit: classifyLimitHit(
      {
        exitCode,
        signal,
        stderr,
        cpuSeconds: run.exit?.cpu ?? null,
        peakTasks: run.exit?.peakTasks ?? null,
        overDiskQuota: run.overDiskQuota !== null,
        ...(group ? { group } : {}),
      },
      limits,
    ),
    stdoutTruncated: run.stdout.truncated,
    stderrTruncated: run.stderr.truncated,
  };
}

function mib(bytes: number): string {
  return (bytes / MIB).toFixed(1);
}

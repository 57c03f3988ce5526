import { type ChildProcess, spawn } from 'node:child_process';
import { readFile, readlink } from 'node:fs/promises';
import type { Readable, Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { type SandboxInit, sandboxBytes, volumeFull } from './disk-usage.js';
import { OutputBuffer, settleWithin } from './output-buffer.js';

/** A run of bwrap + the supervisor, as the host sees it. */
export interface SupervisedRun {
  executable: string;
  args: string[];
  env: Record<string, string>;
  stdin: string | undefined;
  timeoutMs: number;
  /** After SIGTERM, how long processes get before SIGKILL. */
  graceMs: number;
  maxOutputBytes: number;
  /** The seccomp filter bwrap loads from fd STATUS_FDS.seccomp (bwrap-args' seccompFd). */
  seccomp?: Buffer;
  /** Kill the sandbox when it holds more than limitBytes (disk-usage.ts measures). */
  diskQuota?: {
    workspace: string;
    limitBytes: number;
    /** A workspace volume that fills up (its bytes or its inodes) counts as over the quota. */
    stopWhenFull?: boolean;
  };
  /** cgroup.procs files (cgroup.ts) the sandbox joins before bwrap starts, so all it forks is in them. */
  groupProcs?: readonly string[];
}

/** Writes its own pid into each file named before `--`, then becomes the command after it. */
const JOIN_GROUPS =
  'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"';

export interface SupervisorExit {
  code: number | null;
  signal: string | null;
  cpu: number;
  peakTasks: number;
}

export interface Supervised {
  /** The supervisor got as far as starting the command. */
  started: boolean;
  /** Why the supervisor could not set the sandbox up (it said so). */
  failedReason: string | null;
  exit: SupervisorExit | null;
  /** bwrap's own ending. */
  bwrap: { code: number | null; signal: string | null };
  timedOut: boolean;
  /** SIGKILL was needed: the command did not end on SIGTERM within the grace period. */
  killed: boolean;
  /** The bytes the sandbox held when it was killed over its disk quota; null when it was not. */
  overDiskQuota: number | null;
  stdout: OutputBuffer;
  stderr: OutputBuffer;
  durationMs: number;
}

// fds of the bwrap process: 3 = bwrap's JSON status, 4 = supervisor status, 5 = supervisor control,
// 6 = the seccomp filter.
export const STATUS_FDS = { bwrap: 3, supervisor: 4, control: 5, seccomp: 6 } as const;

/** The disk quota is checked every 100 ms; a big workspace waits 3x its measuring time between checks. */
const DISK_POLL_MS = 100;
const DISK_POLL_MAX_MS = 2_000;

export async function supervise(run: SupervisedRun): Promise<Supervised> {
  const begin = performance.now();
  const child = spawnSandbox(run);
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });

  const stdout = new OutputBuffer(run.maxOutputBytes);
  const stderr = new OutputBuffer(run.maxOutputBytes);
  const drained = Promise.all([stdout.attach(child.stdout), stderr.attach(child.stderr)]);
  const { bwrapStatus, supervisorStatus, control } = statusPipes(child, run.seccomp);
  const sandbox = readBwrapStatus(bwrapStatus);
  const progress = readSupervisorStatus(supervisorStatus);

  if (run.stdin !== undefined && child.stdin) {
    child.stdin.on('error', () => undefined);
    child.stdin.end(run.stdin);
  }

  const stopped: Stopped = { timedOut: false, killed: false, overDiskQuota: null };
  const hardKill = () => killSandbox(child, sandbox, stopped);
  const clearTimers = startWallClock(run, control, hardKill, stopped);

  // Over the disk quota: SIGKILL at once, as every further moment is more bytes written.
  const stopPolling = new AbortController();
  const quota = run.diskQuota;
  if (quota) pollDiskQuota(quota, sandbox, hardKill, stopped, stopPolling.signal);

  let bwrap: { code: number | null; signal: string | null };
  try {
    bwrap = await exited;
  } finally {
    clearTimers();
    stopPolling.abort();
  }
  // Output and status end when the last process holding them is gone; bound the wait all the same.
  await settleWithin(Promise.all([drained, ended(bwrapStatus), ended(supervisorStatus)]), 2_000);
  for (const stream of [bwrapStatus, supervisorStatus, control, child.stdout, child.stderr])
    stream?.destroy();

  const init = sandbox.init();
  if (init !== null) await waitForNamespaceEnd(init.pid, init.pidNamespace, 5_000);

  return {
    started: progress.started,
    failedReason: progress.failedReason,
    exit: progress.exit,
    bwrap,
    timedOut: stopped.timedOut,
    killed: stopped.killed,
    overDiskQuota: stopped.overDiskQuota,
    stdout,
    stderr,
    durationMs: Math.round(performance.now() - begin),
  };
}

/** Spawns bwrap, first joining the control groups when there are any. */
function spawnSandbox(run: SupervisedRun): ChildProcess {
  const [executable, args] = run.groupProcs?.length
    ? [
        '/bin/sh',
        ['-c', JOIN_GROUPS, 'stepwise-sandbox', ...run.groupProcs, '--', run.executable, ...run.args],
      ]
    : [run.executable, run.args];
  return spawn(executable, args, {
    stdio: [
      run.stdin === undefined ? 'ignore' : 'pipe',
      'pipe',
      'pipe',
      'pipe',
      'pipe',
      'pipe',
      run.seccomp ? 'pipe' : 'ignore',
    ],
    env: run.env,
    cwd: '/',
    // Its own process group, so the whole group can be killed; bwrap --die-with-parent ties it to us.
    detached: true,
  });
}

/** The status and control pipes of STATUS_FDS; the seccomp filter is written into its own at once. */
function statusPipes(child: ChildProcess, seccompFilter: Buffer | undefined) {
  // Node's typings stop at fd 4; the pipes past it exist all the same.
  const pipes = child.stdio as unknown as (Readable & Writable)[];
  const bwrapStatus = pipes[STATUS_FDS.bwrap]!;
  const supervisorStatus = pipes[STATUS_FDS.supervisor]!;
  const control = pipes[STATUS_FDS.control]!;
  control.on('error', () => undefined);
  if (seccompFilter) {
    const seccomp = pipes[STATUS_FDS.seccomp]!;
    seccomp.on('error', () => undefined);
    seccomp.end(seccompFilter);
  }
  return { bwrapStatus, supervisorStatus, control };
}

/** What bwrap's JSON status says of the sandbox: its pid 1 and its pid namespace, once known. */
interface BwrapStatus {
  initPid(): number | null;
  init(): SandboxInit | null;
}

function readBwrapStatus(stream: Readable): BwrapStatus {
  let bwrapText = '';
  stream.setEncoding('utf8');
  stream.on('data', (text: string) => {
    bwrapText += text;
  });
  stream.on('error', () => undefined);

  const initPid = () => {
    const match = /"child-pid"\s*:\s*(\d+)/.exec(bwrapText);
    return match ? Number(match[1]) : null;
  };
  const init = (): SandboxInit | null => {
    const pid = initPid();
    const ns = /"pid-namespace"\s*:\s*(\d+)/.exec(bwrapText);
    return pid !== null && ns ? { pid, pidNamespace: ns[1]! } : null;
  };
  return { initPid, init };
}

/** What the supervisor has said so far, one JSON event a line. */
interface SupervisorProgress {
  started: boolean;
  failedReason: string | null;
  exit: SupervisorExit | null;
}

function readSupervisorStatus(stream: Readable): SupervisorProgress {
  const progress: SupervisorProgress = { started: false, failedReason: null, exit: null };
  let pendingLine = '';
  stream.setEncoding('utf8');
  stream.on('data', (text: string) => {
    pendingLine += text;
    let newline = pendingLine.indexOf('\n');
    while (newline >= 0) {
      const event = parseEvent(pendingLine.slice(0, newline));
      pendingLine = pendingLine.slice(newline + 1);
      if (event?.event === 'started') progress.started = true;
      else if (event?.event === 'failed') progress.failedReason = String(event.reason ?? 'unknown reason');
      else if (event?.event === 'exit') progress.exit = toExit(event);
      newline = pendingLine.indexOf('\n');
    }
  });
  stream.on('error', () => undefined);
  return progress;
}

/** How the run was stopped, if it was; set as it happens. */
interface Stopped {
  timedOut: boolean;
  killed: boolean;
  overDiskQuota: number | null;
}

/** SIGKILL to bwrap's process group and to the sandbox's pid 1. */
function killSandbox(child: ChildProcess, sandbox: BwrapStatus, stopped: Stopped): void {
  stopped.killed = true;
  signalQuietly(-(child.pid ?? 0), 'SIGKILL');
  const pid = sandbox.initPid();
  if (pid !== null) signalQuietly(pid, 'SIGKILL');
}

/** At the timeout the supervisor is told to end the command; after the grace period, SIGKILL. */
function startWallClock(
  run: SupervisedRun,
  control: Writable,
  hardKill: () => void,
  stopped: Stopped,
): () => void {
  let grace: NodeJS.Timeout | undefined;
  const wall = setTimeout(() => {
    stopped.timedOut = true;
    control.write('T');
    grace = setTimeout(hardKill, run.graceMs);
  }, run.timeoutMs);
  return () => {
    clearTimeout(wall);
    clearTimeout(grace);
  };
}

/** Measures what the sandbox holds every DISK_POLL_MS or more; over the quota, it is killed. */
function pollDiskQuota(
  quota: NonNullable<SupervisedRun['diskQuota']>,
  sandbox: BwrapStatus,
  hardKill: () => void,
  stopped: Stopped,
  stopPolling: AbortSignal,
): void {
  // Not awaited at the end: a measurement under way when bwrap exits sees the abort and stops there.
  void (async () => {
    while (!stopPolling.aborted) {
      const begin = performance.now();
      const used = await sandboxBytes(quota.workspace, sandbox.init()).catch(() => 0);
      if (stopPolling.aborted) return;
      if (used > quota.limitBytes || (quota.stopWhenFull && (await volumeFull(quota.workspace)))) {
        stopped.overDiskQuota = used;
        hardKill();
        return;
      }
      const took = performance.now() - begin;
      const pause = Math.min(DISK_POLL_MAX_MS, Math.max(DISK_POLL_MS - took, 3 * took));
      await sleep(pause, undefined, { signal: stopPolling }).catch(() => undefined);
    }
  })();
}

function ended(stream: Readable): Promise<void> {
  if (stream.readableEnded || stream.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', () => resolve());
  });
}

function parseEvent(line: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(line);
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

function toExit(event: Record<string, unknown>): SupervisorExit {
  return {
    code: typeof event.code === 'number' ? event.code : null,
    signal: typeof event.signal === 'string' ? event.signal : null,
    cpu: typeof event.cpu === 'number' ? event.cpu : 0,
    peakTasks: typeof event.peakTasks === 'number' ? event.peakTasks : 0,
  };
}

function signalQuietly(pid: number, signal: NodeJS.Signals): void {
  if (pid === 0) return;
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

/**
 * Waits until the sandbox's pid 1 is gone or a zombie. The kernel kills and reaps every other process
 * of a pid namespace before its init becomes a zombie, so then nothing of the sandbox is left.
 */
async function waitForNamespaceEnd(pid: number, namespace: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if ((await readlink(`/proc/${pid}/ns/pid`)) !== `pid:[${namespace}]`) return;
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      if (state === 'Z' || state === 'X') return;
    } catch {
      return;
    }
    await sleep(10);
  }
}

import type { LimitHit, SandboxLimits } from './types.js';

/** What is known about how a run ended, for telling which limit (if any) stopped it. */
export interface Ending {
  exitCode: number | null;
  signal: string | null;
  stderr: string;
  /** CPU seconds of the command and the descendants it waited for (null: unknown). */
  cpuSeconds: number | null;
  /** The most processes + threads seen at once in the sandbox (null: unknown). */
  peakTasks: number | null;
  /** The host saw the sandbox hold more than its disk quota and killed it. */
  overDiskQuota?: boolean;
  /** What the sandbox's control group counted (cgroup.ts), where it had one. */
  group?: { oomKills: number; forksRefused: number };
}

// What programs print when a limit bites: bash reports children killed by SIGXCPU / SIGXFSZ, fork
// fails with EAGAIN under RLIMIT_NPROC, allocations fail with ENOMEM under RLIMIT_AS.
const CPU_TEXT = /CPU time limit exceeded/i;
const FILE_SIZE_SIGNAL_TEXT = /File size limit exceeded/i;
const FILE_SIZE_TEXT = /File too large|\[Errno 27\]|\bEFBIG\b/i;
const PROCESS_TEXT =
  /\bfork: (?:retry: )?(?:Resource temporarily unavailable|Cannot allocate memory)|\bcan(?:no|')t fork\b|\[Errno 11\] Resource temporarily unavailable|pthread_create failed|can't start new thread/i;
const MEMORY_TEXT =
  /\bMemoryError\b|Cannot allocate memory|\bout of memory\b|std::bad_alloc|\bENOMEM\b|memory allocation of \d+ bytes failed|Fatal process out of memory|JavaScript heap out of memory/i;

/** Shell-style exit statuses of a child killed by a signal (128 + n). */
const SIGXCPU_STATUS = 128 + 24;
const SIGKILL_STATUS = 128 + 9;

/**
 * Which limit stopped the command, as well as the evidence allows: the signal or shell status the
 * kernel's enforcement leaves, the CPU time used, the peak process count, and what the program or its
 * shell said (a shell reports a child killed by SIGXCPU or SIGXFSZ even when the run goes on; failed
 * allocations and writes count only when the run failed).
 */
export function classifyLimitHit(ending: Ending, limits: SandboxLimits): LimitHit | null {
  const { exitCode, signal, stderr, cpuSeconds, peakTasks } = ending;
  // The host's own measurement, and the reason it killed the sandbox: nothing else can have ended it.
  if (ending.overDiskQuota) return 'disk';
  // The kernel's own counts: an OOM kill in the group, a fork refused at its task limit.
  if (ending.group && ending.group.oomKills > 0) return 'memory';
  if (ending.group && ending.group.forksRefused > 0) return 'processes';
  const failed = exitCode !== 0 || signal !== null;
  const cpuSpent = cpuSeconds !== null && cpuSeconds >= limits.cpuSeconds * 0.95;
  if (signal === 'SIGXCPU') return 'cpu';
  if (cpuSpent && (signal === 'SIGKILL' || exitCode === SIGXCPU_STATUS || exitCode === SIGKILL_STATUS)) {
    return 'cpu';
  }
  if (CPU_TEXT.test(stderr)) return 'cpu';
  if (signal === 'SIGXFSZ' || FILE_SIZE_SIGNAL_TEXT.test(stderr) || (failed && FILE_SIZE_TEXT.test(stderr))) {
    return 'file_size';
  }
  if (peakTasks !== null && peakTasks >= limits.processes - 1) return 'processes';
  if (PROCESS_TEXT.test(stderr)) return 'processes';
  if (failed && MEMORY_TEXT.test(stderr)) return 'memory';
  return null;
}

import { StepwiseError } from '@stepwise/core';
import { z } from 'zod';

export interface SandboxLimits {
  /** CPU seconds per process (RLIMIT_CPU): SIGXCPU at the limit, SIGKILL one second later. */
  cpuSeconds: number;
  /**
   * Memory, MiB: of all the sandbox's processes together (pages they put in its /tmp and /dev/shm too),
   * held by a control group where the host gives one (cgroup.ts); and each process's address space
   * (RLIMIT_AS), the only limit where it gives none. Also the size cap of the private /tmp.
   */
  memoryMb: number;
  /**
   * Processes and threads the command may have at once: RLIMIT_NPROC (counted per sandbox uid when
   * the host runs as root), and the control group's pids.max (this plus the sandbox's own few).
   */
  processes: number;
  /** Largest file a process may write (RLIMIT_FSIZE), MiB. */
  fileSizeMb: number;
  /** Wall-clock limit of one run, ms; the whole sandbox is killed when it passes. */
  wallMs: number;
  /**
   * Disk quota, MiB: what the workspace (all of it, the task's own files too), /tmp and /dev/shm may
   * hold together. Measured from the host every ~100 ms; a run that takes them past it (or grows them
   * when it started past it) is killed.
   */
  diskMb: number;
  /**
   * Files, directories and links the workspace may hold: the `nr_inodes` of a sample's workspace tmpfs
   * (workspace-volume.ts), held by the kernel where the runner could mount one.
   */
  inodes: number;
}

export const DEFAULT_LIMITS: SandboxLimits = Object.freeze({
  cpuSeconds: 60,
  memoryMb: 1024,
  processes: 256,
  fileSizeMb: 64,
  wallMs: 120_000,
  diskMb: 256,
  inodes: 65_536,
});

/**
 * What the sandboxed agent may reach (docs/security.md): the LLM routes under one trajectory's
 * base path, nothing else of the API. The runner's credential, when it has one, is added by the
 * bridge; the agent never holds it.
 */
export interface BridgeScope {
  /** The trajectory's base path on the gateway, e.g. `/<trajectory>/<group>/v1`. */
  basePath: string;
  /** Sent as `Authorization: Bearer ...` on every forwarded request, replacing the agent's. */
  apiKey?: string;
}

export interface SandboxOptions {
  /** Host directory, mounted read-write at mountDir. */
  workspace: string;
  /** Where the workspace appears inside the sandbox, e.g. /root/.openclaw/workspace. */
  mountDir: string;
  limits?: Partial<SandboxLimits>;
  /** Added to a minimal environment (PATH, HOME, LC_ALL=C.UTF-8); may override those. */
  env?: Record<string, string>;
  /**
   * Expose ONE host HTTP endpoint: inside the sandbox http://127.0.0.1:<port> reaches gateway.url on
   * the host; nothing else on the network. With `scope`, only that trajectory's LLM routes, with the
   * scope's key added by the bridge (an agent; docs/security.md); without, the whole endpoint.
   */
  gateway?: { url: string; port?: number; scope?: BridgeScope };
  /**
   * Host directories or files made visible inside, read-only (an agent's own install, say). A target
   * must be absolute and outside the system directories, the workspace and /tmp.
   */
  readOnlyBinds?: readonly { source: string; target: string }[];
  /**
   * A hermetic root filesystem (rootfs.ts: `HermeticRootfs.root`, a folder with usr/ and etc/) shown
   * in place of the host's /usr and /etc, so commands see the same programs on every host.
   */
  rootfs?: string;
  /**
   * Show the workspace as a private copy (verifiers: docs/security.md): the folder is bound read-only
   * out of sight, copied onto a size-capped tmpfs at mountDir (special files left out) before the
   * command runs, and what the command writes there ends with the sandbox. Ignored by unsafeNoSandbox.
   */
  workspaceCopy?: boolean;
  /** Run on the host without isolation (explicit opt-in; log a loud warning once per process). */
  unsafeNoSandbox?: boolean;
}

export type LimitHit = 'cpu' | 'memory' | 'file_size' | 'processes' | 'disk';

export interface RunResult {
  /** The command's exit status; null when it was killed by a signal. */
  exitCode: number | null;
  /** The signal that killed the command (e.g. SIGXCPU, or SIGKILL after a timeout). */
  signal: string | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  durationMs: number;
  limitHit: LimitHit | null;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** Requests the scoped gateway bridge refused (`METHOD /path`), when there were any. */
  gatewayRefused?: string[];
}

export interface RunSettings {
  /** Working directory inside the sandbox (absolute, or relative to mountDir); default mountDir. */
  cwd?: string;
  stdin?: string;
  /** Default: limits.wallMs. */
  timeoutMs?: number;
  /** Per stream; default 1 MiB. */
  maxOutputBytes?: number;
}

/** The sandbox itself failed (bwrap missing, could not start, could not set up): not the command's fault. */
export class SandboxError extends StepwiseError {
  override readonly name = 'SandboxError';
  constructor(message: string) {
    super(message, 500, 'sandbox_failed', undefined, true);
  }
}

const positive = z.number().finite().positive();
const LimitsSchema = z.strictObject({
  cpuSeconds: positive.max(86_400),
  memoryMb: positive.max(1_048_576),
  processes: z.number().int().min(1).max(1_000_000),
  fileSizeMb: positive.max(1_048_576),
  wallMs: positive.max(86_400_000),
  diskMb: positive.max(1_048_576),
  inodes: z.number().int().min(16).max(100_000_000),
});

/** The limits of a run: the defaults, overridden by `partial`; a bad value names its field. */
export function resolveLimits(partial: Partial<SandboxLimits> | undefined): SandboxLimits {
  const defined = Object.fromEntries(Object.entries(partial ?? {}).filter(([, v]) => v !== undefined));
  const parsed = LimitsSchema.safeParse({ ...DEFAULT_LIMITS, ...defined });
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new TypeError(`sandbox limits.${issue.path.join('.')}: ${issue.message}`);
  }
  return parsed.data;
}

export const MIB = 1024 * 1024;

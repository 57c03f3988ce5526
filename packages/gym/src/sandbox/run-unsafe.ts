import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { posix } from 'node:path';
import { type Bridge, type BridgeTarget, startBridge, withRefusals } from './gateway-bridge.js';
import { classifyLimitHit } from './limit-hit.js';
import { OutputBuffer, settleWithin } from './output-buffer.js';
import { type BridgeScope, MIB, type RunResult, SandboxError, type SandboxLimits } from './types.js';

export interface UnsafeRun {
  workspace: string;
  mountDir: string;
  cwd: string;
  env: Record<string, string>;
  limits: SandboxLimits;
  command: string;
  stdin: string | undefined;
  timeoutMs: number;
  graceMs: number;
  maxOutputBytes: number;
  gateway: { target: BridgeTarget; port: number; scope?: BridgeScope } | undefined;
}

/** Process-wide by nature: the warning is about the process, and it is said once. */
let warned = false;

/**
 * `unsafeNoSandbox`: the command runs on the host, as this user, with the same rlimits (RLIMIT_NPROC
 * does nothing for root) and the same process-group kill at the timeout, but nothing hides the host's
 * files or network, and a process that leaves its group survives.
 */
export async function runUnsafe(run: UnsafeRun): Promise<RunResult> {
  if (!warned) {
    warned = true;
    process.emitWarning(
      'unsafeNoSandbox: commands run on this host WITHOUT isolation (no namespaces, full network and ' +
        'filesystem access). Use it only for trusted tasks.',
      { type: 'SecurityWarning', code: 'STEPWISE_UNSAFE_NO_SANDBOX' },
    );
  }
  const relative = posix.relative(run.mountDir, run.cwd);
  const cwd =
    relative === '' || (!relative.startsWith('..') && !posix.isAbsolute(relative))
      ? posix.join(run.workspace, relative)
      : run.cwd;
  let bridge: Bridge | undefined;
  if (run.gateway) {
    const { target, port } = run.gateway;
    const direct = (target.host === '127.0.0.1' || target.host === 'localhost') && target.port === port;
    if (!direct) {
      bridge = await startBridge(port, target, run.gateway.scope).catch((error: Error) => {
        throw new SandboxError(`cannot forward 127.0.0.1:${port} to the gateway: ${error.message}`);
      });
    }
  }
  try {
    return withRefusals(await spawnOnHost(run, cwd), bridge);
  } finally {
    await bridge?.close();
  }
}

async function spawnOnHost(run: UnsafeRun, cwd: string): Promise<RunResult> {
  const { limits } = run;
  const shell = ['/bin/bash', '-c', run.command];
  const argv = existsSync('/usr/bin/prlimit')
    ? [
        '/usr/bin/prlimit',
        `--cpu=${Math.ceil(limits.cpuSeconds)}:${Math.ceil(limits.cpuSeconds) + 1}`,
        `--as=${Math.floor(limits.memoryMb * MIB)}`,
        `--nproc=${limits.processes}`,
        `--fsize=${Math.floor(limits.fileSizeMb * MIB)}`,
        '--core=0',
        '--',
        ...shell,
      ]
    : shell;
  const begin = performance.now();
  if (!existsSync(cwd)) {
    return {
      exitCode: 1,
      signal: null,
      stdout: '',
      stderr: `bash: line 1: cd: ${run.cwd}: No such file or directory\n`,
      timedOut: false,
      durationMs: 0,
      limitHit: null,
      stdoutTruncated: false,
      stderrTruncated: false,
    };
  }
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd,
    env: run.env,
    detached: true,
    stdio: [run.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  const stdout = new OutputBuffer(run.maxOutputBytes);
  const stderr = new OutputBuffer(run.maxOutputBytes);
  const drained = Promise.all([stdout.attach(child.stdout), stderr.attach(child.stderr)]);
  if (run.stdin !== undefined && child.stdin) {
    child.stdin.on('error', () => undefined);
    child.stdin.end(run.stdin);
  }
  const group = (signal: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid ?? 0), signal);
    } catch {
      // The group is gone.
    }
  };
  let timedOut = false;
  let grace: NodeJS.Timeout | undefined;
  const wall = setTimeout(() => {
    timedOut = true;
    group('SIGTERM');
    grace = setTimeout(() => group('SIGKILL'), run.graceMs);
  }, run.timeoutMs);
  let ending: { code: number | null; signal: string | null };
  try {
    ending = await exited;
  } catch (error) {
    throw new SandboxError(`cannot start the command: ${(error as Error).message}`);
  } finally {
    clearTimeout(wall);
    clearTimeout(grace);
  }
  // What the command left running in its group goes with it.
  group('SIGKILL');
  await settleWithin(drained, 2_000);
  child.stdout?.destroy();
  child.stderr?.destroy();
  const stderrText = stderr.text();
  return {
    exitCode: ending.code,
    signal: ending.signal,
    stdout: stdout.text(),
    stderr: stderrText,
    timedOut,
    durationMs: Math.round(performance.now() - begin),
    limitHit: classifyLimitHit(
      { exitCode: ending.code, signal: ending.signal, stderr: stderrText, cpuSeconds: null, peakTasks: null },
      limits,
    ),
    stdoutTruncated: stdout.truncated,
    stderrTruncated: stderr.truncated,
  };
}

import { stat } from 'node:fs/promises';
import {
  DEFAULT_LIMITS,
  type RunResult,
  runInSandbox,
  SandboxError,
  type SandboxOptions,
} from '../sandbox/index.js';
import type { ToolArguments } from './arguments.js';
import { ToolFailure } from './failure.js';
import { clipMiddle, shareRoom } from './truncate.js';
import { resolveWorkspacePath } from './workspace-path.js';

export interface ExecToolContext {
  workspace: string;
  mountDir: string;
  sandbox: SandboxOptions;
  maxOutputChars: number;
}

export interface ExecOutcome {
  ok: boolean;
  content: string;
  errorType: 'exit_nonzero' | 'timeout' | 'limit_exceeded' | null;
  truncated: boolean;
}

const LIMIT_NAMES = {
  cpu: 'CPU time',
  memory: 'memory',
  file_size: 'file size',
  processes: 'process count',
  disk: 'disk quota',
} as const;

/** Runs the command in the sandbox, in the workspace (or `workdir` inside it). */
export async function execTool(args: ToolArguments['exec'], context: ExecToolContext): Promise<ExecOutcome> {
  const sandbox: SandboxOptions = {
    ...context.sandbox,
    workspace: context.workspace,
    mountDir: context.mountDir,
  };
  let cwd = context.mountDir;
  if (args.workdir !== undefined && args.workdir.trim() !== '') {
    const dir = await resolveWorkspacePath(args.workdir, context);
    const st = dir.exists ? await stat(dir.host).catch(() => null) : null;
    if (!st) throw new ToolFailure('not_found', `Error: workdir ${args.workdir}: No such file or directory`);
    if (!st.isDirectory())
      throw new ToolFailure('bad_arguments', `Error: workdir ${args.workdir} is not a directory`);
    cwd = dir.sandbox;
  }
  const wallMs = context.sandbox.limits?.wallMs ?? DEFAULT_LIMITS.wallMs;
  const asked = args.timeoutMs ?? (args.timeout === undefined ? undefined : args.timeout * 1000);
  const timeoutMs = Math.min(asked ?? wallMs, wallMs);
  let result: RunResult;
  try {
    result = await runInSandbox(sandbox, args.command, { cwd, timeoutMs });
  } catch (error) {
    if (error instanceof RangeError || error instanceof TypeError) {
      throw new ToolFailure('bad_arguments', `Error: invalid arguments for exec: ${error.message}`);
    }
    if (error instanceof SandboxError)
      throw new ToolFailure('sandbox_failed', `Error: sandbox failed: ${error.message}`);
    throw error;
  }
  return describeRun(result, timeoutMs, sandbox, context.maxOutputChars);
}

function describeRun(
  result: RunResult,
  timeoutMs: number,
  sandbox: SandboxOptions,
  max: number,
): ExecOutcome {
  const failed = result.exitCode !== 0 || result.signal !== null;
  let header: string;
  let errorType: ExecOutcome['errorType'] = null;
  if (result.timedOut) {
    errorType = 'timeout';
    header = `Error: command timed out after ${formatSeconds(timeoutMs)} and was killed`;
  } else if (result.limitHit && failed) {
    errorType = 'limit_exceeded';
    header = `Error: command exceeded the sandbox's ${LIMIT_NAMES[result.limitHit]} limit (${limitValue(result.limitHit, sandbox)}) and was stopped (${status(result)})`;
  } else if (failed) {
    errorType = 'exit_nonzero';
    header =
      result.signal !== null
        ? `Error: command was killed by ${result.signal}`
        : `Error: command exited with code ${result.exitCode}`;
  } else {
    header = 'Exit code: 0';
  }
  const notes: string[] = [];
  if (result.stdoutTruncated || result.stderrTruncated)
    notes.push('[output over the capture limit was discarded]');
  const fixed = header.length + 40 + notes.join('\n').length;
  const [outRoom, errRoom] = shareRoom(result.stdout.length, result.stderr.length, Math.max(0, max - fixed));
  const stdout = clipMiddle(result.stdout, outRoom);
  const stderr = clipMiddle(result.stderr, errRoom);
  const parts = [header];
  if (result.stdout !== '') parts.push(`Stdout:\n${stdout.text}`);
  if (result.stderr !== '') parts.push(`Stderr:\n${stderr.text}`);
  if (result.stdout === '' && result.stderr === '') parts.push('(no output)');
  parts.push(...notes);
  return {
    ok: errorType === null,
    content: parts.join('\n'),
    errorType,
    truncated: stdout.truncated || stderr.truncated || notes.length > 0,
  };
}

function status(result: RunResult): string {
  return result.signal !== null ? `killed by ${result.signal}` : `exit code ${result.exitCode}`;
}

function limitValue(limit: keyof typeof LIMIT_NAMES, sandbox: SandboxOptions): string {
  const limits = { ...DEFAULT_LIMITS, ...sandbox.limits };
  switch (limit) {
    case 'cpu':
      return `${limits.cpuSeconds} s`;
    case 'memory':
      return `${limits.memoryMb} MiB`;
    case 'file_size':
      return `${limits.fileSizeMb} MiB per file`;
    case 'processes':
      return `${limits.processes} processes`;
    case 'disk':
      return `${limits.diskMb} MiB in the workspace and /tmp together`;
  }
}

function formatSeconds(ms: number): string {
  const seconds = ms / 1000;
  return `${Number.isInteger(seconds) ? seconds : seconds.toFixed(1)} s`;
}

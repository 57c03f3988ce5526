/**
 * Helpers for tests that run the real `stepwise` CLI as a child process (`node --import tsx
 * src/cli/main.ts ...`). Every child is tracked so a test can kill all of them in afterAll, and a
 * process 'exit' hook kills whatever is left if the worker exits without running afterAll.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const CLI_ENTRY = 'src/cli/main.ts';
const START_TIMEOUT_MS = 20_000;

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  exited: Promise<void>;
  /** The last 4,000 characters of stdout and stderr together. */
  log: () => string;
}

const children = new Set<ChildProcess>();

function killAll(): void {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

// Last resort: never leave a child behind, even if the worker exits without running afterAll.
const onExit = () => killAll();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', onExit);
}

/** Spawns `node --import tsx src/cli/main.ts ...args` from the repository root and tracks it. */
export function spawnCli(args: readonly string[], env: Record<string, string> = {}): ChildProcess {
  installExitHook();
  const child = spawn(process.execPath, ['--import', 'tsx', CLI_ENTRY, ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, STEPWISE_LOG_LEVEL: 'info', STEPWISE_API_KEYS: '', ...env },
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** SIGKILLs every tracked child and waits for all of them to exit; removes the exit hook. */
export async function killAllServerProcesses(): Promise<void> {
  const exits = [...children].map((child) => new Promise((resolve) => child.once('exit', resolve)));
  killAll();
  await Promise.all(exits);
  if (exitHookInstalled) {
    process.off('exit', onExit);
    exitHookInstalled = false;
  }
}

/**
 * Starts `stepwise serve` (or `gateway`) `--db dbPath --port 0 ...extraArgs` and resolves once its
 * pino log line `stepwise serving` (on stderr) gives the URL. Logs at info level with no API keys unless env says
 * otherwise.
 */
export function startServerProcess(
  dbPath: string,
  extraArgs: string[] = [],
  env: Record<string, string> = {},
  command: 'serve' | 'gateway' = 'serve',
): Promise<ServerProcess> {
  const child = spawnCli([command, '--db', dbPath, '--port', '0', ...extraArgs], env);
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  let output = '';
  const log = () => output.slice(-4_000);
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  return new Promise<ServerProcess>((resolve, reject) => {
    let pending = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not start within ${START_TIMEOUT_MS} ms:\n${log()}`));
    }, START_TIMEOUT_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`server exited before serving (code ${code}, signal ${signal}):\n${log()}`));
    });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
      pending += chunk;
      let newline = pending.indexOf('\n');
      while (newline >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        newline = pending.indexOf('\n');
        let entry: { msg?: string; url?: string } | null = null;
        try {
          entry = JSON.parse(line);
        } catch {
          continue;
        }
        const serving = entry?.msg === 'stepwise serving' || entry?.msg === 'stepwise gateway serving';
        if (serving && typeof entry?.url === 'string') {
          clearTimeout(timer);
          resolve({ child, url: entry.url, exited, log });
        }
      }
    });
  });
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the CLI to completion and collects its output; SIGKILLs it and rejects if it has not exited
 * within timeoutMs.
 */
export function runCli(
  args: readonly string[],
  env: Record<string, string> = {},
  timeoutMs = 15_000,
): Promise<CliResult> {
  const child = spawnCli(args, env);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  return new Promise<CliResult>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new Error(`stepwise ${args.join(' ')} did not exit within ${timeoutMs} ms:\n${stdout}${stderr}`),
      );
    }, timeoutMs);
    // 'close' (not 'exit') so that all output has been read.
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/**
 * Waits for a child to exit; rejects (leaving the child to killAllServerProcesses) if it is still
 * running after timeoutMs.
 */
export function waitForExit(
  child: ChildProcess,
  timeoutMs: number,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null)
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.off('exit', exited);
      reject(new Error(`process ${child.pid} did not exit within ${timeoutMs} ms`));
    }, timeoutMs);
    const exited = (code: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(timer);
      resolve({ code, signal });
    };
    child.once('exit', exited);
  });
}

/**
 * Resolves with the first JSON log line (stderr) of `child` that `match` accepts; rejects, with the
 * last output, if the child exits first. Its stdout is drained meanwhile, so it never blocks on a
 * full pipe; the streams keep flowing after the match.
 */
export function logLine(
  child: ChildProcess,
  match: (entry: Record<string, unknown>) => boolean,
): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    let pending = '';
    let seen = '';
    const onData = (chunk: string) => {
      seen = (seen + chunk).slice(-4_000);
      pending += chunk;
      for (let newline = pending.indexOf('\n'); newline >= 0; newline = pending.indexOf('\n')) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        let entry: Record<string, unknown>;
        try {
          entry = JSON.parse(line) as Record<string, unknown>;
        } catch {
          continue; // not a log line
        }
        if (match(entry)) {
          child.stderr!.off('data', onData);
          child.off('exit', onExit);
          resolve(entry);
          return;
        }
      }
    };
    const onExit = (code: number | null, signal: string | null) =>
      reject(new Error(`process ${child.pid} exited (${code ?? signal}) first:\n${seen}`));
    child.stdout?.resume();
    child.stderr!.setEncoding('utf8').on('data', onData);
    child.once('exit', onExit);
  });
}

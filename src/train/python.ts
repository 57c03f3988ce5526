import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { StepwiseError } from '@stepwise/core/domain/errors.js';

/*
 * The Python side of training: the reference engine and trainer of `clients/python` (its `train`
 * extra: torch, transformers, safetensors, numpy). Node finds that interpreter and runs its
 * processes; nothing here imports torch.
 */

export const PYTHON_CLIENT_DIR = fileURLToPath(new URL('../../clients/python', import.meta.url));
const TRAIN_MODULES = 'import torch, transformers, safetensors, numpy';
/**
 * glibc maps each block over 32 MB fresh and unmaps it on free, so the kernel zeroes its pages on
 * every use: the trainer's logits (75–310 MB) cost as much CPU in the kernel as in torch. Keep them.
 */
const ALLOCATOR_ENV = { MALLOC_MMAP_THRESHOLD_: String(2 ** 30), MALLOC_TRIM_THRESHOLD_: String(2 ** 32) };

/** The interpreter or its packages are missing: says how to install them. */
export class TrainPythonMissingError extends StepwiseError {
  override readonly name = 'TrainPythonMissingError';
  constructor(detail: string) {
    super(
      `the training side needs Python with torch and transformers (${detail}); install it with ` +
        '`python3 -m venv .venv-train && .venv-train/bin/pip install -e "clients/python[train]"` ' +
        'and set STEPWISE_TRAIN_PYTHON=.venv-train/bin/python (see docs/trainers.md)',
      500,
      'train_python_missing',
    );
  }
}

/**
 * The Python that has the `train` extra: `$STEPWISE_TRAIN_PYTHON` (an error when it lacks the
 * packages), else `.venv-train/bin/python` in the checkout, else `python3`; null when none has them.
 */
export function findTrainPython(env: NodeJS.ProcessEnv = process.env): string | null {
  const has = (python: string) => spawnSync(python, ['-c', TRAIN_MODULES], { stdio: 'ignore' }).status === 0;
  const chosen = env.STEPWISE_TRAIN_PYTHON;
  if (chosen) {
    if (!has(chosen)) throw new TrainPythonMissingError(`STEPWISE_TRAIN_PYTHON=${chosen} cannot import them`);
    return chosen;
  }
  const local = fileURLToPath(new URL('../../.venv-train/bin/python', import.meta.url));
  for (const candidate of [local, 'python3']) if (has(candidate)) return candidate;
  return null;
}

export function requireTrainPython(env: NodeJS.ProcessEnv = process.env): string {
  const python = findTrainPython(env);
  if (!python)
    throw new TrainPythonMissingError('none of STEPWISE_TRAIN_PYTHON, .venv-train, python3 has them');
  return python;
}

export interface PythonProcess {
  child: ChildProcess;
  /** The last 8,000 characters of stdout and stderr together. */
  log(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
  stop(graceMs?: number): Promise<void>;
  exited: Promise<number | null>;
}

/** Runs `python -m module args` from clients/python (the package needs no install there). */
export function spawnPython(
  python: string,
  args: readonly string[],
  env: Record<string, string> = {},
): PythonProcess {
  const child = spawn(python, args, {
    cwd: PYTHON_CLIENT_DIR,
    stdio: ['ignore', 'pipe', 'pipe'],
    // STEPWISE_PARENT_PID: a long-running module exits once we are gone, even killed outright
    // (stepwise_client/lifeline.py), when process.once('exit') below never runs.
    env: {
      ...ALLOCATOR_ENV,
      ...process.env,
      PYTHONUNBUFFERED: '1',
      STEPWISE_PARENT_PID: String(process.pid),
      ...env,
    },
  });
  let tail = '';
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-8000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  // Never outlive the Node process that started it.
  const onExit = () => child.kill('SIGKILL');
  process.once('exit', onExit);
  void exited.then(() => process.off('exit', onExit));
  return {
    child,
    log: () => tail,
    exited,
    async stop(graceMs = 5000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

export interface ReferenceEngineOptions {
  python: string;
  /** A preset (`tiny`) or a model folder. */
  model: string;
  seed?: number;
  port?: number;
  threads?: number;
  maxModelLen?: number;
  startTimeoutMs?: number;
}

export interface ReferenceEngine extends PythonProcess {
  url: string;
}

/** Starts `python -m stepwise_client.engine` and waits for the line that says where it listens. */
export async function startReferenceEngine(options: ReferenceEngineOptions): Promise<ReferenceEngine> {
  const args = [
    '-m',
    'stepwise_client.engine',
    '--model',
    options.model,
    '--port',
    String(options.port ?? 0),
  ];
  if (options.seed !== undefined) args.push('--seed', String(options.seed));
  if (options.threads !== undefined) args.push('--threads', String(options.threads));
  if (options.maxModelLen !== undefined) args.push('--max-model-len', String(options.maxModelLen));
  const proc = spawnPython(options.python, args);
  const timeoutMs = options.startTimeoutMs ?? 120_000;
  const url = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: proc.child.stdout! });
    let settled = false;
    const settle = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      lines.close();
      outcome();
    };
    const fail = (why: string) =>
      settle(() => {
        void proc.stop(0);
        reject(
          new StepwiseError(`the reference engine did not start: ${why}\n${proc.log()}`, 500, 'engine_start'),
        );
      });
    const timer = setTimeout(() => fail(`no answer within ${timeoutMs} ms`), timeoutMs);
    lines.on('line', (line) => {
      try {
        const said = JSON.parse(line) as { listening?: string };
        if (typeof said.listening === 'string') settle(() => resolve(said.listening!));
      } catch {
        // other output (warnings) before the line
      }
    });
    void proc.exited.then((code) => fail(`it exited with code ${code}`));
  });
  return { ...proc, url };
}

/** Runs a Python script or module to its end; its stdout, or an error with the output's tail. */
export async function runPython(
  python: string,
  args: readonly string[],
  options: { timeoutMs?: number; env?: Record<string, string> } = {},
): Promise<string> {
  const proc = spawnPython(python, args, options.env);
  let out = '';
  proc.child.stdout?.on('data', (chunk: Buffer) => {
    out += chunk.toString('utf8');
  });
  const timeoutMs = options.timeoutMs ?? 600_000;
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    void proc.stop(1000);
  }, timeoutMs);
  const code = await proc.exited;
  clearTimeout(timer);
  if (code !== 0) {
    const why = timedOut ? `was stopped after ${timeoutMs} ms` : `exited with code ${code}`;
    throw new StepwiseError(`python ${args.join(' ')} ${why}\n${proc.log()}`, 500, 'python_failed');
  }
  return out;
}

/** Helpers shared by the benchmarks (bench/*.ts). */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The code measured: the commit and any uncommitted change under src/. */
export function codeVersion(): string {
  try {
    const git = (...args: string[]) =>
      execFileSync('git', args, { cwd: REPO_ROOT, encoding: 'utf8' }).trimEnd();
    const head = git('rev-parse', '--short', 'HEAD');
    const dirty = git('status', '--porcelain', '--', 'src')
      .split('\n')
      .filter(Boolean)
      .map((line) => line.slice(3));
    return dirty.length ? `${head} + uncommitted changes in ${dirty.join(', ')}` : `${head} (src/ clean)`;
  } catch {
    return 'unknown (no git)';
  }
}

/**
 * `--help` / `-h`: prints the benchmark's own opening comment (its usage lines) and exits. Call it
 * first, with the benchmark's `import.meta.url`, before reading any other argument.
 */
export function exitOnHelp(moduleUrl: string, args = process.argv.slice(2)): void {
  if (!(args.includes('--help') || args.includes('-h'))) return;
  const source = readFileSync(fileURLToPath(moduleUrl), 'utf8');
  const comment = /^\/\*\*([\s\S]*?)\*\//.exec(source)?.[1] ?? '';
  const text = comment
    .split('\n')
    .map((line) => line.replace(/^\s*\* ?/, ''))
    .join('\n')
    .trim();
  process.stdout.write(`${text}\n`);
  process.exit(0);
}

/** A forked child process of a benchmark ends when its parent does (killed, crashed or exited). */
export function exitWithParent(): void {
  process.on('disconnect', () => process.exit(0));
}

export const fix = (n: number, d = 2) => n.toFixed(d);

export const int = (n: number) => Math.round(n).toLocaleString('en-US');

export function log(line: string): void {
  process.stderr.write(`[bench] ${line}\n`);
}

export const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/** Nearest-rank percentile. */
export function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

export const verdict = (ok: boolean) => (ok ? 'meets' : '**misses**');

/** A figure rounded to `digits` decimals, for the results files. */
export const round = (n: number, digits = 2) => Number(n.toFixed(digits));

/**
 * Records a run under bench/results/: `figures` as one more line of `<bench>.jsonl` (the history;
 * BENCHMARKS.md shows only the latest) and, when given, `report` as `<bench>.md` (the latest full report).
 */
export function recordRun(bench: string, figures: Record<string, unknown>, report?: string): string[] {
  const dir = join(REPO_ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const history = join(dir, `${bench}.jsonl`);
  appendFileSync(history, `${JSON.stringify({ date: new Date().toISOString(), ...figures })}\n`);
  if (report === undefined) return [history];
  const latest = join(dir, `${bench}.md`);
  writeFileSync(latest, `${report.trimEnd()}\n`);
  return [history, latest];
}

/** The next IPC message of `type` from a child process; rejects if the child exits first. */
export function nextMessage<M extends { type: string }, T extends M['type']>(
  child: ChildProcess,
  type: T,
): Promise<Extract<M, { type: T }>> {
  return new Promise((resolveMessage, reject) => {
    const onMessage = (m: M) => {
      if (m.type !== type) return;
      cleanup();
      resolveMessage(m as Extract<M, { type: T }>);
    };
    const onExit = (code: number | null) => {
      cleanup();
      reject(new Error(`child exited with ${code} while waiting for '${type}'`));
    };
    const cleanup = () => {
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    child.on('message', onMessage);
    child.on('exit', onExit);
  });
}

/**
 * The machine lines every report starts with. `stack` names what the run exercised (e.g. the SQLite
 * version); `noise` says who shares the cores.
 */
export function machineInfo(
  command: string,
  loadAtStart: number[],
  codeAtStart: string,
  options: { stack: string; noise: string; extra?: string[] },
): string[] {
  const codeAtEnd = codeVersion();
  const cpus = os.cpus();
  const load = (l: number[]) => l.map((x) => x.toFixed(2)).join(' / ');
  return [
    `- Date: ${new Date().toISOString()}`,
    `- Command: \`${command}\``,
    `- Code: ${codeAtStart}${codeAtEnd === codeAtStart ? '' : ` at start; ${codeAtEnd} at end (src/ changed during the run)`}`,
    `- CPU: ${cpus[0]?.model ?? 'unknown'} (${cpus.length} logical cores)`,
    `- RAM: ${(os.totalmem() / 1024 ** 3).toFixed(1)} GiB`,
    `- Node: ${process.version}, ${options.stack}, ${os.platform()} ${os.release()}`,
    ...(options.extra ?? []),
    `- Load average (1 / 5 / 15 min) at start: ${load(loadAtStart)}, at end: ${load(os.loadavg())} — ${options.noise} share the ${cpus.length} cores with whatever else runs, so expect run-to-run noise`,
  ];
}

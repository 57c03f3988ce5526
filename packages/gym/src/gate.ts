import { lstat, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { hostPathOf } from './tasks/files.js';
import { workspaceFor } from './tasks/index.js';
import { DEFAULT_MOUNT_DIR, type GymTask } from './tasks/schema.js';
import { runTool, type ToolContext } from './tools/index.js';
import { type SandboxSettings, verify } from './verify/index.js';

/*
 * The validation gate of a task (ClawGym's, plus one): on the untouched workspace the task scores 0;
 * with an empty placeholder at every path its prompt names it still scores 0 (no reward for merely
 * creating files); and its reference actions, run with the real tools in a fresh workspace, score
 * exactly 1. Used for synthesized tasks and, with another scorer, by `stepwise gym validate`.
 */

/** What a scorer may report: a score, or a score with per-check subscores and details. */
export type ScoreReport =
  | number
  | { score: number; subscores?: Record<string, number>; details?: Record<string, string> };
export type TaskScorer = (task: GymTask, workspaceDir: string) => Promise<ScoreReport>;

export interface GateOptions {
  /** Scores a finished workspace; default: the task's own verifier (check DSL or script), code score. */
  score?: TaskScorer;
  /** Sandbox settings for `exec` and for the default scorer. */
  sandbox?: SandboxSettings;
  /** Parent of the temporary workspaces (default the OS temp dir). */
  workDir?: string;
  /** Keep the three workspaces (their paths are in the result). */
  keepWorkspaces?: boolean;
  /** A task without reference actions fails the gate (default true; ClawGym tasks have none). */
  requireReference?: boolean;
  /**
   * A scaffold score above 0 is a warning, not a problem (`gym validate` on published tasks: a
   * heuristic probe, not ClawGym's gate). Default false: synthesized tasks must pass it.
   */
  scaffoldAsWarning?: boolean;
}

export interface GateResult {
  ok: boolean;
  noopScore: number | null;
  scaffoldScore: number | null;
  /** Null when the task has no reference actions (or they could not be scored). */
  referenceScore: number | null;
  problems: string[];
  /** Findings that do not fail the gate (the scaffold probe's, with scaffoldAsWarning). */
  warnings: string[];
  /** The placeholders the scaffold step created. */
  scaffolded: string[];
  workspaces?: { noop: string; scaffold: string; reference: string };
}

/** The default scorer: the task's verifier without a judge (the code score). */
export const verifierScore: (sandbox?: SandboxSettings) => TaskScorer = (sandbox) => async (task, dir) => {
  const result = await verify(task, dir, { sandbox });
  return {
    score: result.code,
    subscores: result.subscores,
    details: { ...result.details, ...(result.reason ? { verifier: result.reason } : {}) },
  };
};

// A path-like token: letters, digits and ._-/ with a dot-extension at the end.
const PATH_TOKEN =
  /(?<![\w.\-/~])(?:\.\/)?([A-Za-z0-9_][\w.-]*(?:\/[\w.-]+)*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w\-/<{*])/g;
const ABSOLUTE_TOKEN = /(?<![\w.\-/~])(\/[\w.-]+(?:\/[\w.-]+)+\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w\-/<{*])/g;
const URL = /\b[a-z][a-z0-9+.-]*:\/\/\S+/gi;
const FILE_EXTENSIONS = new Set(
  'csv tsv json jsonl ndjson md markdown txt text py yaml yml toml ini cfg conf log html htm xml sh bash js mjs cjs ts tsx jsx sql ics pdf png jpg jpeg gif svg gz tgz zip tar rs go java c h cpp hpp rb php css scss lock env ipynb parquet xlsx docx'.split(
    ' ',
  ),
);

/**
 * The file paths a prompt names (relative to the workspace), in order of first mention: tokens with a
 * directory part or a known file extension. Templated paths (`<name>.md`, `{slug}.md`, `*.log`), URLs,
 * directories (`output/`) and domain-like words are left out; absolute paths under `mountDir` are
 * made relative, other absolute paths are left out.
 */
export function scaffoldPaths(prompt: string, mountDir: string = DEFAULT_MOUNT_DIR): string[] {
  const text = prompt.replace(URL, ' ');
  const found: string[] = [];
  const add = (path: string) => {
    const clean = path.replace(/^\.\//, '');
    const ext = clean.slice(clean.lastIndexOf('.') + 1).toLowerCase();
    if (!clean.includes('/') && !FILE_EXTENSIONS.has(ext)) return;
    if (clean.split('/').some((part) => part === '..' || part === '.' || part === '')) return;
    if (!found.includes(clean)) found.push(clean);
  };
  const base = `${mountDir.replace(/\/+$/, '')}/`;
  for (const m of text.matchAll(ABSOLUTE_TOKEN)) if (m[1]!.startsWith(base)) add(m[1]!.slice(base.length));
  for (const m of text.matchAll(PATH_TOKEN)) add(m[1]!);
  return found;
}

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** Creates an empty file at every named path that is not there yet; returns the ones created. */
export async function scaffoldWorkspace(dir: string, paths: readonly string[]): Promise<string[]> {
  const created: string[] = [];
  for (const path of paths) {
    const host = hostPathOf(dir, path);
    if (await exists(host)) continue;
    try {
      await mkdir(dirname(host), { recursive: true });
      await writeFile(host, '', { flag: 'wx' });
      created.push(path);
    } catch {
      // A parent is a file (the prompt named both "a" and "a/b.txt"): nothing to scaffold there.
    }
  }
  return created;
}

function asReport(report: ScoreReport) {
  return typeof report === 'number' ? { score: report } : report;
}

function describe(report: Exclude<ScoreReport, number>, want: 'zero' | 'one'): string {
  const subs = Object.entries(report.subscores ?? {}).filter(([, v]) => (want === 'zero' ? v > 0 : v < 1));
  return subs
    .map(([k, v]) => `${k}=${Number(v.toFixed(3))}${report.details?.[k] ? ` (${report.details[k]})` : ''}`)
    .join('; ');
}

/** Runs the gate on one task. Never throws for a task's fault; every failure is a problem line. */
export async function gateTask(task: GymTask, options: GateOptions = {}): Promise<GateResult> {
  const score = options.score ?? verifierScore(options.sandbox);
  const root = await mkdtemp(join(options.workDir ?? tmpdir(), `stepwise-gate-${task.id.slice(0, 40)}-`));
  const dirs = {
    noop: join(root, 'noop'),
    scaffold: join(root, 'scaffold'),
    reference: join(root, 'reference'),
  };
  const problems: string[] = [];
  const warnings: string[] = [];
  const scoreIn = async (
    phase: string,
    dir: string,
    want: 'zero' | 'one',
    findings: string[] = problems,
  ): Promise<number | null> => {
    try {
      const report = asReport(await score(task, dir));
      const ok = want === 'zero' ? report.score === 0 : report.score === 1;
      if (!ok) {
        const why = describe(report, want);
        findings.push(
          `${phase}: scored ${report.score}, expected ${want === 'zero' ? 0 : 1}${why ? ` — ${why}` : ''}`,
        );
      }
      return report.score;
    } catch (error) {
      problems.push(`${phase}: the scorer failed: ${(error as Error).message}`);
      return null;
    }
  };
  let scaffolded: string[] = [];
  let noopScore: number | null = null;
  let scaffoldScore: number | null = null;
  let referenceScore: number | null = null;
  try {
    await workspaceFor(task, dirs.noop);
    noopScore = await scoreIn('no-op', dirs.noop, 'zero');

    await workspaceFor(task, dirs.scaffold);
    scaffolded = await scaffoldWorkspace(dirs.scaffold, scaffoldPaths(task.prompt, task.mountDir));
    scaffoldScore = await scoreIn(
      `scaffold (${scaffolded.length} placeholders)`,
      dirs.scaffold,
      'zero',
      options.scaffoldAsWarning ? warnings : problems,
    );

    const actions = task.referenceActions ?? [];
    if (actions.length === 0) {
      if (options.requireReference ?? true) problems.push('reference: the task has no reference actions');
    } else {
      await workspaceFor(task, dirs.reference);
      const ctx: ToolContext = {
        workspace: dirs.reference,
        mountDir: task.mountDir,
        sandbox: { ...options.sandbox, workspace: dirs.reference, mountDir: task.mountDir },
      };
      for (const [i, action] of actions.entries()) {
        const outcome = await runTool(action.name, action.arguments, ctx);
        if (!outcome.ok) {
          problems.push(
            `reference: action ${i + 1} (${action.name}) failed: ${outcome.content.slice(0, 400)}`,
          );
          break;
        }
      }
      referenceScore = await scoreIn('reference', dirs.reference, 'one');
    }
  } catch (error) {
    problems.push(`gate: ${(error as Error).message}`);
  } finally {
    if (!options.keepWorkspaces) await rm(root, { recursive: true, force: true });
  }
  return {
    ok: problems.length === 0,
    noopScore,
    scaffoldScore,
    referenceScore,
    problems,
    warnings,
    scaffolded,
    ...(options.keepWorkspaces ? { workspaces: dirs } : {}),
  };
}

/** Gates many tasks, `concurrency` at a time; results in task order. */
export async function gateTasks(
  tasks: readonly GymTask[],
  options: GateOptions & {
    concurrency?: number;
    onResult?: (task: GymTask, result: GateResult, done: number) => void;
  } = {},
): Promise<GateResult[]> {
  const results: GateResult[] = new Array(tasks.length);
  let next = 0;
  let done = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await gateTask(tasks[i]!, options);
      options.onResult?.(tasks[i]!, results[i]!, ++done);
    }
  };
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(options.concurrency ?? 2, tasks.length)) }, worker),
  );
  return results;
}

import { cp, lstat, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, posix } from 'node:path';
import { writeTaskFiles } from '../tasks/files.js';
import type { GymTask, Verifier } from '../tasks/schema.js';
import {
  defaultSandboxRunner,
  type SandboxRunner,
  type SandboxSettings,
  shellQuote,
  tail,
  verifierSandbox,
} from './sandbox-runner.js';

/*
 * ClawGym's script verifier. After the episode the task's `reward/` files are copied into the
 * workspace (the agent never saw them), `bash <mountDir>/<entry>` runs in the sandbox without network,
 * and the last non-empty stdout line is the score. A verifier that fails (non-zero exit, timeout,
 * no number, NaN, Inf) scores 0 with `verifierFailed`: the task's fault, not the agent's. A
 * SandboxError (the infrastructure) is thrown on to the runner.
 */

export type ScriptVerifier = Extract<Verifier, { kind: 'script' }>;

export interface ScriptVerdict {
  /** The printed number, unclamped as in ClawGym (non-finite: 0); 0 when the verifier failed. */
  score: number;
  verifierFailed: boolean;
  reason: string | null;
  /** The verifier's own output, trimmed to its end, for inspection. */
  stdoutTail: string;
  stderrTail: string;
  durationMs: number;
}

/** ClawGym's reward payload: what a checker of a chat-style task grades besides the workspace. */
export interface RewardPayload {
  final_message: string;
  metadata: unknown;
  transcript: unknown[];
}

/** Where ClawGym's rollout writes the payload (in the workspace); `OPENCLAW_REWARD_PAYLOAD` names it. */
export const REWARD_PAYLOAD_FILE = '.openclaw_reward_payload.json';

export interface ScriptVerifierOptions {
  sandbox?: SandboxSettings;
  /** Written to REWARD_PAYLOAD_FILE for the checker, as ClawGym's rollout does after an episode. */
  payload?: RewardPayload;
  runInSandbox?: SandboxRunner;
  /** Output kept from the verifier (default 1 MiB); a verifier that prints more fails. */
  maxOutputBytes?: number;
}

const NUMBER = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

/** The score printed as the last non-empty stdout line, or why there is none. */
export function scoreFromStdout(stdout: string): { score: number } | { reason: string } {
  const last = stdout
    .split(/\r?\n|\r/)
    .map((l) => l.trim())
    .filter((l) => l !== '')
    .at(-1);
  if (last === undefined) return { reason: 'the verifier printed no score' };
  // Python's float() spellings of NaN and the infinities: ClawGym's set_reward makes them 0.
  if (/^[+-]?(nan|inf|infinity)$/i.test(last)) return { score: 0 };
  if (!NUMBER.test(last)) {
    const shown = last.length > 80 ? `${last.slice(0, 80)}…` : last;
    return { reason: `the verifier's last line is not a finite number: ${JSON.stringify(shown)}` };
  }
  // As ClawGym's reward: the number as printed (no clamp); a non-finite one (1e999) is 0.
  const value = Number(last);
  return { score: Number.isFinite(value) ? value : 0 };
}

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Moves whatever the agent left at the verifier's top-level paths (a `reward/` of its own, a symlink
 * named `reward`) out of the workspace, so the verifier sees only its own files and nothing is written
 * through an agent's symlink; `restore` puts it back for inspection.
 */
async function setAside(workspace: string, names: readonly string[]) {
  const present: string[] = [];
  for (const name of names) if (await exists(join(workspace, name))) present.push(name);
  if (present.length === 0) return { restore: async () => {} };
  let hold: string;
  let moved: (from: string, to: string) => Promise<void>;
  try {
    // A sibling of the workspace: same filesystem, so a rename.
    hold = await mkdtemp(join(dirname(workspace), `.${basename(workspace)}-held-`));
    moved = rename;
  } catch {
    hold = await mkdtemp(join(tmpdir(), 'stepwise-held-'));
    moved = async (from, to) => {
      await cp(from, to, { recursive: true, verbatimSymlinks: true });
      await rm(from, { recursive: true, force: true });
    };
  }
  for (const name of present) {
    try {
      await rename(join(workspace, name), join(hold, name));
    } catch {
      await moved(join(workspace, name), join(hold, name));
    }
  }
  return {
    restore: async () => {
      for (const name of present) {
        await rm(join(workspace, name), { recursive: true, force: true });
        try {
          await rename(join(hold, name), join(workspace, name));
        } catch {
          await cp(join(hold, name), join(workspace, name), { recursive: true, verbatimSymlinks: true });
        }
      }
      await rm(hold, { recursive: true, force: true });
    },
  };
}

/**
 * The folders of the verifier's own Python and shell files (its reward/, never the workspace root):
 * with the working directory and script folder off sys.path, check.py still imports its siblings.
 */
function ownDirs(task: GymTask, verifier: ScriptVerifier): string[] {
  const dirs = verifier.files
    .map((f) => posix.dirname(posix.normalize(f.path)))
    .filter((d) => d !== '.' && d !== '..' && !d.startsWith('../'));
  return [...new Set([posix.dirname(posix.normalize(verifier.entry)), ...dirs])]
    .filter((d) => d !== '.' && d !== '..' && !d.startsWith('../'))
    .map((d) => posix.join(task.mountDir, d));
}

export async function runScriptVerifier(
  task: GymTask,
  verifier: ScriptVerifier,
  workspace: string,
  options: ScriptVerifierOptions = {},
): Promise<ScriptVerdict> {
  const run = options.runInSandbox ?? defaultSandboxRunner;
  // Normalized first: `./reward/x` must never make `.` (the whole workspace) a name to remove.
  const topNames = [...new Set(verifier.files.map((f) => posix.normalize(f.path).split('/')[0]!))].filter(
    (name) => name !== '' && name !== '.' && name !== '..',
  );
  // A payload the agent left in the workspace is set aside like its reward/: the checker reads ours.
  if (options.payload && !topNames.includes(REWARD_PAYLOAD_FILE)) topNames.push(REWARD_PAYLOAD_FILE);
  const held = await setAside(workspace, topNames);
  try {
    await writeTaskFiles(workspace, verifier.files, { exclusive: true });
    const sandbox = await verifierSandbox(options.sandbox, workspace, task.mountDir, ownDirs(task, verifier));
    let result: Awaited<ReturnType<SandboxRunner>>;
    try {
      if (options.payload) {
        await writeFile(join(workspace, REWARD_PAYLOAD_FILE), JSON.stringify(options.payload), {
          flag: 'wx',
        });
        sandbox.options.env = {
          ...sandbox.options.env,
          OPENCLAW_REWARD_PAYLOAD: posix.join(task.mountDir, REWARD_PAYLOAD_FILE),
        };
      }
      const entry = posix.join(task.mountDir, verifier.entry);
      result = await run(sandbox.options, `bash ${shellQuote(entry)}`, {
        cwd: task.mountDir,
        timeoutMs: verifier.timeoutMs,
        maxOutputBytes: options.maxOutputBytes ?? 1 << 20,
      });
    } finally {
      await sandbox.close();
    }
    const base = {
      stdoutTail: tail(result.stdout, 2_000),
      stderrTail: tail(result.stderr, 2_000),
      durationMs: result.durationMs,
    };
    const failed = (reason: string): ScriptVerdict => ({ ...base, score: 0, verifierFailed: true, reason });
    if (result.timedOut) return failed(`the verifier timed out after ${verifier.timeoutMs} ms`);
    if (result.limitHit) return failed(`the verifier hit the sandbox's ${result.limitHit} limit`);
    if (result.signal) return failed(`the verifier was killed by ${result.signal}`);
    if (result.exitCode !== 0) {
      const stderr = tail(result.stderr);
      return failed(`the verifier exited with code ${result.exitCode}${stderr ? `: ${stderr}` : ''}`);
    }
    if (result.stdoutTruncated) return failed('the verifier printed more output than is kept');
    const parsed = scoreFromStdout(result.stdout);
    if ('reason' in parsed) return failed(parsed.reason);
    return { ...base, score: parsed.score, verifierFailed: false, reason: null };
  } finally {
    for (const name of topNames) await rm(join(workspace, name), { recursive: true, force: true });
    await held.restore();
  }
}

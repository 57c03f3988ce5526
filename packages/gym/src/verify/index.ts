import type { GymTask } from '../tasks/schema.js';
import { runChecks } from './checks.js';
import { type JudgeConfig, judgeRubric } from './judge.js';
import type { SandboxRunner, SandboxSettings } from './sandbox-runner.js';
import { type RewardPayload, runScriptVerifier } from './script.js';

export { type ChecksResult, runChecks } from './checks.js';
export { CsvError, parseCsvRecords, parseCsvTable } from './csv.js';
export { parsePointer, resolvePointer } from './json-pointer.js';
export {
  BANDS,
  buildJudgeMessages,
  type JudgeConfig,
  type JudgeVerdict,
  judgeRubric,
  listOutputFiles,
  parseJudgeReply,
  snapToBand,
} from './judge.js';
export type { SandboxRunner, SandboxSettings } from './sandbox-runner.js';
export {
  REWARD_PAYLOAD_FILE,
  type RewardPayload,
  runScriptVerifier,
  type ScriptVerdict,
  scoreFromStdout,
} from './script.js';

/**
 * ClawGym's payload for a finished episode: the final message and the task entry's metadata. The
 * transcript is OpenClaw's session log in ClawGym; the episode's conversation is in the store here.
 */
function rewardPayload(task: GymTask, finalMessage: string): RewardPayload {
  const clawgym = task.provenance.clawgym as { metadata?: unknown } | undefined;
  return { final_message: finalMessage, metadata: clawgym?.metadata ?? {}, transcript: [] };
}

/*
 * Verifying a finished episode: the code score (ClawGym's script, or the check DSL), then the rubric
 * when the task has rules and a judge is configured, combined with the task's weights.
 */

export interface VerifyOptions {
  sandbox?: SandboxSettings;
  judge?: JudgeConfig;
  /** The sandbox entry point (default `runInSandbox`); tests may pass another. */
  runInSandbox?: SandboxRunner;
  /**
   * The agent's final message after an episode: a script verifier then gets ClawGym's reward payload
   * (absent for the no-op gate, which scores the untouched workspace).
   */
  finalMessage?: string;
}

export interface VerifyResult {
  /** The reward: (wc·code + wr·rubric) / (wc + wr) with a rubric, else the code score alone. */
  score: number;
  code: number;
  /** Null when the task has no rubric, no judge is configured, or the judge failed. */
  rubric: number | null;
  /** The code verifier failed (its own fault, not the agent's): `code` is 0. */
  verifierFailed: boolean;
  /** The judge failed: `rubric` is null and `score` is the code score alone. */
  judgeFailed: boolean;
  /** Why a verifier or the judge failed (or what it noted); null when all went well. */
  reason: string | null;
  /** Per check (check DSL) and per rubric rule (`rubric:<name>`). */
  subscores: Record<string, number>;
  /** Per check: what was found. */
  details: Record<string, string>;
}

/**
 * Verifies the workspace of a finished episode. A SandboxError (infrastructure) propagates: the
 * runner marks the trajectory infra_failed.
 */
export async function verify(
  task: GymTask,
  workspace: string,
  options: VerifyOptions = {},
): Promise<VerifyResult> {
  const reasons: string[] = [];
  let code: number;
  let verifierFailed = false;
  const subscores: Record<string, number> = {};
  let details: Record<string, string> = {};
  if (task.verifier.kind === 'script') {
    const verdict = await runScriptVerifier(task, task.verifier, workspace, {
      sandbox: options.sandbox,
      runInSandbox: options.runInSandbox,
      ...(options.finalMessage === undefined ? {} : { payload: rewardPayload(task, options.finalMessage) }),
    });
    code = verdict.score;
    verifierFailed = verdict.verifierFailed;
    if (verdict.reason) reasons.push(verdict.reason);
  } else if (task.verifier.kind === 'none') {
    code = 0;
    if (!options.judge || task.rubric.length === 0)
      reasons.push('the task has no code verifier and no rubric was judged: scored 0');
  } else {
    const result = await runChecks(task.verifier.checks, workspace, {
      mountDir: task.mountDir,
      sandbox: options.sandbox,
      runInSandbox: options.runInSandbox,
    });
    code = result.score;
    Object.assign(subscores, result.subscores);
    details = result.details;
  }

  let rubric: number | null = null;
  let judgeFailed = false;
  if (task.rubric.length > 0 && options.judge) {
    const verdict = await judgeRubric(task, workspace, options.judge);
    rubric = verdict.rubric;
    judgeFailed = verdict.judgeFailed;
    if (verdict.reason) reasons.push(verdict.judgeFailed ? `judge: ${verdict.reason}` : verdict.reason);
    for (const [name, band] of Object.entries(verdict.rules)) subscores[`rubric:${name}`] = band;
  }

  const { code: wc, rubric: wr } = task.weights;
  const score = rubric === null || wc + wr === 0 ? code : (wc * code + wr * rubric) / (wc + wr);
  return {
    score,
    code,
    rubric,
    verifierFailed,
    judgeFailed,
    reason: reasons.length > 0 ? reasons.join('; ') : null,
    subscores,
    details,
  };
}

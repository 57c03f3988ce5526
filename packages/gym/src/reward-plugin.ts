import { realpath, stat } from 'node:fs/promises';
import { isAbsolute, resolve, sep } from 'node:path';
import {
  definePlugin,
  errorMessage,
  NotApplicableError,
  RewardError,
  type TrajectoryView,
} from '@stepwise/core';
import { z } from 'zod';
import { type GymTask, loadTasks, TASK_SET_HELP } from './tasks/index.js';
import { type JudgeConfig, verify } from './verify/index.js';

// The gym's verifier as a reward, over the workspace the agent left, which must lie inside `workspace_root`
// (agents write metadata). docs/rewards.md#verifier-trajectory-source-verifier

export const VerifierParams = z.strictObject({
  tasks: z.string().min(1).describe(TASK_SET_HELP),
  workspace_root: z.string().min(1).describe('directory that holds the kept workspaces'),
  workspace_key: z.string().min(1).max(128).default('workspace'),
  unsafe_no_sandbox: z
    .boolean()
    .default(false)
    .describe('run verifier commands on the host (only for trusted tasks on machines without bubblewrap)'),
  judge: z
    .strictObject({
      base_url: z.url(),
      model: z.string().min(1),
      api_key_env: z
        .string()
        .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name')
        .optional(),
      timeout_ms: z.number().int().min(1).max(3_600_000).optional(),
    })
    .optional()
    .describe('judge for task rubrics; without it only the code score counts'),
});
export type VerifierParams = z.infer<typeof VerifierParams>;

function taskIdOf(view: TrajectoryView): string | null {
  if (view.trajectory.taskId) return view.trajectory.taskId;
  const fromMetadata = view.trajectory.metadata.task_id;
  return typeof fromMetadata === 'string' && fromMetadata !== '' ? fromMetadata : null;
}

async function workspaceOf(view: TrajectoryView, params: VerifierParams): Promise<string> {
  const raw = view.trajectory.metadata[params.workspace_key];
  if (typeof raw !== 'string' || raw === '') {
    throw new NotApplicableError(
      `trajectory ${view.trajectory.id} records no workspace (metadata.${params.workspace_key}); keep workspaces and record their path to verify after the run`,
    );
  }
  let root: string;
  let dir: string;
  try {
    root = await realpath(params.workspace_root);
    dir = await realpath(isAbsolute(raw) ? raw : resolve(root, raw));
  } catch {
    throw new NotApplicableError(
      `the workspace of trajectory ${view.trajectory.id} (${raw}) no longer exists`,
    );
  }
  if (!dir.startsWith(root + sep)) {
    throw new NotApplicableError(
      `the workspace of trajectory ${view.trajectory.id} (${raw}) is outside workspace_root ${params.workspace_root}`,
    );
  }
  if (!(await stat(dir)).isDirectory()) {
    throw new NotApplicableError(
      `the workspace of trajectory ${view.trajectory.id} (${raw}) is not a directory`,
    );
  }
  return dir;
}

export const verifierPlugin = definePlugin(
  {
    name: 'verifier',
    version: '1',
    description:
      "Runs the gym task's verifier (checks or script, sandboxed) over the workspace the agent left; scores the verifier's combined score.",
    target: 'trajectory',
    source: 'verifier',
  },
  VerifierParams,
  (params) => {
    let taskSet: Promise<Map<string, GymTask>> | null = null;
    const tasks = () => {
      if (!taskSet) {
        taskSet = loadTasks(params.tasks).then((list) => new Map(list.map((t) => [t.id, t])));
        // A set that failed to load is read again next time (the file may be fixed meanwhile).
        taskSet.catch(() => {
          taskSet = null;
        });
      }
      return taskSet;
    };
    const judge: JudgeConfig | undefined = params.judge && {
      baseURL: params.judge.base_url,
      model: params.judge.model,
      apiKey: (params.judge.api_key_env && process.env[params.judge.api_key_env]) || 'none',
      timeoutMs: params.judge.timeout_ms,
      maxRetries: 0,
    };
    return async (views) => {
      const scores = [];
      for (const view of views) {
        const taskId = taskIdOf(view);
        if (taskId === null) {
          throw new NotApplicableError(`trajectory ${view.trajectory.id} carries no gym task (task_id)`);
        }
        let set: Map<string, GymTask>;
        try {
          set = await tasks();
        } catch (error) {
          throw new RewardError(
            `the task set ${params.tasks} could not be loaded: ${errorMessage(error)}`,
            true,
          );
        }
        const task = set.get(taskId);
        if (!task) throw new NotApplicableError(`task ${taskId} is not in the task set ${params.tasks}`);
        const workspace = await workspaceOf(view, params);
        const verdict = await verify(task, workspace, {
          sandbox: { unsafeNoSandbox: params.unsafe_no_sandbox },
          judge,
        });
        if (verdict.verifierFailed) {
          throw new RewardError(
            `the verifier of task ${taskId} failed: ${verdict.reason ?? 'no reason given'}`,
            true,
          );
        }
        if (verdict.judgeFailed) {
          throw new RewardError(
            `the rubric judge of task ${taskId} failed: ${verdict.reason ?? 'no reason given'}`,
            true,
          );
        }
        scores.push({
          trajectoryId: view.trajectory.id,
          stepIndex: null,
          value: verdict.score,
          details: {
            task_id: taskId,
            code: verdict.code,
            rubric: verdict.rubric,
            subscores: verdict.subscores,
            reason: verdict.reason,
          },
        });
      }
      return scores;
    };
  },
);

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  type GuideStrategy,
  type InjectionMode,
  jsonTextAt,
  type PlanAction,
  parseOrThrow,
  ValidationError,
} from '@stepwise/core';
import { z } from 'zod';
import { type GuideOptions, runGuided } from './guide.js';
import type { GymRunOptions, GymSummary, runGym, SampleResult } from './runner.js';

/* `stepwise gym run --guide ...`: the action logs a plan may come from, and the runner the guide options make. */

/**
 * Reads `--guide-actions FILE`: JSONL, one `{"task_id", "actions": [{"name", "arguments"}]}` a line;
 * an action may carry `args` instead of `arguments`, as the paper's action data does, and a line may
 * give the paper's `all_actions` (the JSON string its parquet rows hold) in place of `actions`.
 */
export function readActionLogs(path: string): Map<string, PlanAction[]> {
  if (!existsSync(path))
    throw new ValidationError(`--guide-actions: ${path} does not exist`, 'guide_actions');
  const logs = new Map<string, PlanAction[]>();
  readFileSync(path, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      if (line.trim() === '') return;
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch (error) {
        throw new ValidationError(
          `--guide-actions: line ${i + 1} is not JSON (${(error as Error).message})`,
          'guide_actions',
        );
      }
      // The paper's rows keep the plan as `extra_info.all_actions`, a JSON string: taken as it is.
      let text = line;
      let path: (string | number)[] = ['actions'];
      const row = value as Record<string, unknown> | null;
      if (
        row !== null &&
        typeof row === 'object' &&
        typeof row.all_actions === 'string' &&
        !('actions' in row)
      ) {
        text = row.all_actions;
        path = [];
        try {
          value = { task_id: row.task_id, actions: JSON.parse(text) };
        } catch (error) {
          throw new ValidationError(
            `--guide-actions line ${i + 1}: all_actions is not a JSON array (${(error as Error).message})`,
            'all_actions',
          );
        }
        if (Object.keys(row).some((k) => k !== 'task_id' && k !== 'all_actions'))
          throw new ValidationError(
            `--guide-actions line ${i + 1}: give "task_id" and "all_actions" (or "actions") only`,
            'all_actions',
          );
      }
      const entry = parseOrThrow(ActionLogLine, value, `--guide-actions line ${i + 1}`);
      // Each action keeps its arguments' source text: the hint renders key order and big integers
      // from it, as the paper's Python does from the same data.
      const logged = (value as { actions: Record<string, unknown>[] }).actions;
      const raw = entry.actions.map((a, j) => {
        const key = logged[j]!.arguments !== undefined ? 'arguments' : 'args';
        const at = jsonTextAt(text, [...path, j, key]);
        return at === undefined ? a : { ...a, argumentsJson: at };
      });
      logs.set(entry.task_id, raw);
    });
  return logs;
}

// An action as the paper's data writes it (`args`) or as OpenAI's calls do (`arguments`): one of them.
const LoggedAction = z
  .strictObject({
    name: z.string().min(1),
    arguments: z.record(z.string(), z.unknown()).optional(),
    args: z.record(z.string(), z.unknown()).optional(),
  })
  .superRefine((a, ctx) => {
    if ((a.arguments === undefined) === (a.args === undefined))
      ctx.addIssue({
        code: 'custom',
        path: ['arguments'],
        message:
          a.arguments === undefined
            ? 'is missing (or give "args", as the paper\'s data does)'
            : 'give "arguments" or "args", not both',
      });
  })
  .transform((a): PlanAction => ({ name: a.name, arguments: a.arguments ?? a.args }));

const ActionLogLine = z.strictObject({
  task_id: z.string().min(1),
  actions: z.array(LoggedAction).min(1, 'must hold at least one action'),
});

/** The `--guide*` options of `gym run` and `guide`, as parsed values. */
export interface GuideCommandOptions {
  guide?: GuideStrategy | true;
  guideActions?: string;
  guideK?: number;
  guideRatio?: number;
  probeRollouts?: number;
  maxProbeSteps?: number;
  guideApiKey?: string;
  guideMode?: InjectionMode;
}

/**
 * What `stepwise gym run` runs in place of `runGym` under `--guide` (undefined without it): the guided
 * run, with its summary printed and written to `<out>/guide-summary.json`.
 */
export function guidedRunner(
  opts: GuideCommandOptions & { out: string },
  print: (line: string) => void,
):
  | ((
      options: GymRunOptions,
      runSamples?: typeof runGym,
    ) => Promise<{ results: SampleResult[]; summary: GymSummary }>)
  | undefined {
  if (opts.guide === undefined) return undefined;
  const strategy: GuideStrategy = opts.guide === true ? 'adaptive' : opts.guide;
  if (strategy === 'fixed_k' && opts.guideK === undefined)
    throw new ValidationError('--guide fixed_k needs --guide-k N', 'guide-k');
  if (strategy === 'fixed_ratio' && opts.guideRatio === undefined)
    throw new ValidationError('--guide fixed_ratio needs --guide-ratio R', 'guide-ratio');
  const guide: GuideOptions = {
    strategy,
    ...(opts.guideK !== undefined ? { k: opts.guideK } : {}),
    ...(opts.guideRatio !== undefined ? { ratio: opts.guideRatio } : {}),
    ...(opts.probeRollouts !== undefined ? { probeRollouts: opts.probeRollouts } : {}),
    ...(opts.maxProbeSteps !== undefined ? { maxProbeSteps: opts.maxProbeSteps } : {}),
    ...(opts.guideApiKey !== undefined ? { adminApiKey: opts.guideApiKey } : {}),
    ...(opts.guideMode !== undefined ? { injectionMode: opts.guideMode } : {}),
    ...(opts.guideActions !== undefined ? { actionLogs: readActionLogs(opts.guideActions) } : {}),
    onDecision: (d) => {
      if (d.guidance)
        print(
          `guide: ${d.taskId} hard; k=${d.guidance.k}/${d.guidance.actions} after ${d.guidance.probes.length} probes, ${d.guidance.rescued ? 'rescued' : 'not rescued'}`,
        );
      else if (d.hard) print(`guide: ${d.taskId} hard; left as is (${d.reason})`);
    },
  };
  return async (options, runSamples) => {
    const run = await runGuided({ ...options, guide }, runSamples);
    const s = run.guidance.summary;
    print(
      `guide: ${s.hard} of ${s.groups} groups hard (${(100 * s.hardFraction).toFixed(1)}%), ${s.rescued} rescued (${(100 * s.rescuedFraction).toFixed(1)}%); ${s.probeRollouts} probe and ${s.guidedRollouts} guided rollouts`,
    );
    writeFileSync(
      join(opts.out, 'guide-summary.json'),
      `${JSON.stringify({ summary: s, decisions: run.guidance.decisions }, null, 2)}\n`,
    );
    return run;
  };
}

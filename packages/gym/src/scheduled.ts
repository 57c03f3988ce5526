import { appendFileSync, mkdirSync } from 'node:fs';
import { type ScheduledPrompt, ValidationError } from '@stepwise/core';
import {
  type GymRunOptions,
  type GymSummary,
  type SampleResult,
  sampleEnvOf,
  sampleJobOf,
  sampleSeed,
  summarize,
} from './runner.js';
import { runSample } from './sample.js';
import { serverClient } from './server-client.js';
import type { GymTask } from './tasks/schema.js';

/*
 * A gym run whose work comes from the pool's prompt scheduler (docs/gym.md#scheduled-runs): the run
 * registers its tasks as the channel's prompts, then each worker asks the pool what to roll out next
 * and runs that prompt's rollouts as one group, until `groups` groups have run. Which prompt goes
 * next is the channel's schedule policy (in order, uniform, by difficulty), decided in the pool from
 * every earlier group's rewards, whoever ran it.
 */

export interface ScheduleOptions {
  /** Groups to run in all. */
  groups: number;
  /** The task set the run's tasks are registered under (mixtures weigh sets). */
  taskSet?: string;
  /** Called with each prompt handed out (progress, tests). */
  onPrompt?: (prompt: ScheduledPrompt) => void;
  /** Called when the run stops early: the pool had no prompt for it and it had no group running. */
  onIdle?: (groups: number) => void;
}

const WAIT_MS = [250, 500, 1000, 2000];

/** A runner (run.ts GymRunner) that takes its prompts from the pool's scheduler. */
export function scheduledRunner(schedule: ScheduleOptions) {
  if (!Number.isInteger(schedule.groups) || schedule.groups < 1)
    throw new ValidationError('--groups: must be a positive integer', 'groups');
  return async (options: GymRunOptions): Promise<{ results: SampleResult[]; summary: GymSummary }> => {
    if (!options.channel)
      throw new ValidationError(
        '--schedule needs --channel: the channel whose prompts are scheduled',
        'channel',
      );
    const channel = options.channel;
    const server = serverClient(options.gatewayUrl, options.apiKey);
    const byId = new Map(options.tasks.map((t) => [t.id, t]));
    // The run asks for its own task set only: another producer's prompts in the channel are not claimed.
    const taskSet = schedule.taskSet ?? 'default';
    await server.registerPrompts(
      channel,
      options.tasks.map((t) => ({ taskId: t.id, taskSet })),
    );
    mkdirSync(options.workDir, { recursive: true });
    const results: SampleResult[] = [];
    // Groups asked for (a slot is taken before asking, so concurrent workers never run more than
    // `groups`), groups run (their round numbers), and groups running now.
    let reserved = 0;
    let rounds = 0;
    let running = 0;
    let idle = false;
    const worker = async () => {
      let waited = 0;
      while (reserved < schedule.groups && !idle && !options.signal?.aborted) {
        reserved++;
        const [prompt] = await server.nextPrompts(channel, 1, taskSet);
        if (!prompt) {
          reserved--;
          // Nothing free: wait for one of this run's groups to settle; with none running, every
          // prompt is retired (or another producer's), and nothing this run does will change that.
          if (running === 0 && waited > 0) idle = true;
          else await sleep(WAIT_MS[Math.min(waited++, WAIT_MS.length - 1)]!, options.signal);
          continue;
        }
        waited = 0;
        const task = byId.get(prompt.taskId);
        if (!task)
          throw new ValidationError(
            `--channel ${channel}: the pool handed out prompt ${prompt.taskId}, which is not one of this run's tasks; give a scheduled run a channel whose prompts are its tasks`,
            'channel',
          );
        const round = rounds++;
        running++;
        schedule.onPrompt?.(prompt);
        try {
          for (const sample of groupSamples(options, task, prompt, round)) {
            const result = await runSample(sample.job, sample.env);
            appendFileSync(options.stateFile, `${JSON.stringify(result)}\n`);
            results.push(result);
            options.onSample?.(result, results.length, schedule.groups * prompt.nRollouts);
          }
        } finally {
          running--;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, options.concurrency) }, worker));
    if (idle) schedule.onIdle?.(rounds);
    return { results, summary: summarize(results, 0) };
  };
}

/** The samples of one scheduled group: a group id and seeds of its own (the same prompt runs again later). */
function groupSamples(options: GymRunOptions, task: GymTask, prompt: ScheduledPrompt, round: number) {
  const groupId = `${options.runId}.${task.id}.${round}`;
  const env = sampleEnvOf(options);
  const group = { ...options, samples: prompt.nRollouts, groupOf: () => groupId };
  return Array.from({ length: prompt.nRollouts }, (_, sample) => {
    const job = sampleJobOf(group, task, sample);
    return {
      env,
      job: {
        ...job,
        seed: sampleSeed(options.runId, `${task.id}.${round}`, sample),
        metadata: { ...job.metadata, schedule_pool: prompt.pool },
      },
    };
  });
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

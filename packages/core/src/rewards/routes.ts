import type { Context, Hono } from 'hono';
import { z } from 'zod';
import {
  ChannelName,
  ClientId,
  JsonObject,
  MAX_PROMPT_TOKENS,
  MultiModalData,
  NotFoundError,
  parseOrThrow,
  TokenIds,
} from '../domain/index.js';
import { type AuthVariables, requireScope } from '../http/auth.js';
import { readJsonBody } from '../http/json-body.js';
import { JOB_STATES, type RewardJob } from './job-queue.js';
import type { RewardService } from './service.js';

// HTTP routes of the rewards module (thin: parse, call the service, shape the answer).
// Routes and scopes: docs/rewards.md#http-api

type Env = { Variables: AuthVariables };

const FunctionName = z.string().min(1).max(128);

export const ComputeRewardBody = z.strictObject({
  trajectory_uid: ClientId,
  functions: z.array(FunctionName).min(1, 'must name at least one function').max(64).optional(),
  recompute: z.boolean().default(false),
  /** How long to wait for the result; past it the answer is 202 with the job ids. */
  wait_ms: z.number().int().min(0, 'must be >= 0').max(600_000, 'must be <= 600000').default(30_000),
});

const SampleIds = TokenIds.refine((ids) => ids.length <= MAX_PROMPT_TOKENS, {
  message: `at most ${MAX_PROMPT_TOKENS} token ids (MAX_PROMPT_TOKENS)`,
});

/** Claw-R1's `POST /compute_reward`: one sample by its ids and its dataset's fields, not stored. */
export const SampleRewardBody = z.strictObject({
  prompt_ids: SampleIds,
  response_ids: SampleIds,
  multi_modal_data: MultiModalData.nullable().optional(),
  num_turns: z.number().int().min(0).max(1_000_000).default(2),
  extra_fields: JsonObject.default({}),
  dataset_fields: JsonObject.default({}),
});
export type SampleRewardBody = z.output<typeof SampleRewardBody>;

/** Whether a `/compute_reward` body is Claw-R1's sample form (ids) rather than ours (a trajectory). */
export function isSampleRewardBody(body: unknown): boolean {
  return typeof body === 'object' && body !== null && !Array.isArray(body) && 'prompt_ids' in body;
}

const RecomputeBody = z.strictObject({
  channel: ChannelName.optional(),
  trajectory_uid: ClientId.optional(),
  function: FunctionName.optional(),
});

const JobListQuery = z.strictObject({
  state: z.enum(JOB_STATES as [string, ...string[]]).optional(),
  kind: z.enum(['function', 'combine']).optional(),
  channel: ChannelName.optional(),
  trajectory_uid: ClientId.optional(),
  prompt_uid: ClientId.optional(),
  function: FunctionName.optional(),
  before: z.coerce.number().int().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
});

const JobId = z.coerce.number().int('must be a job id').min(1, 'must be a job id');

export function jobToWire(job: RewardJob) {
  return {
    id: job.id,
    kind: job.kind,
    channel: job.channel,
    trajectory_uid: job.trajectoryId,
    prompt_uid: job.groupId,
    function: job.function,
    version: job.version,
    state: job.state,
    attempts: job.attempts,
    max_attempts: job.maxAttempts,
    run_at: job.runAt,
    error: job.error,
    errors: job.errors,
    result: job.result,
    reason: job.reason,
    created_at: job.createdAt,
    updated_at: job.updatedAt,
    finished_at: job.finishedAt,
  };
}

/** The compute_reward answer: 200 when every job finished (status done or failed), 202 while pending. */
export async function computeRewardResponse(
  c: Context,
  rewards: RewardService,
  body: unknown,
): Promise<Response> {
  const request = parseOrThrow(ComputeRewardBody, body);
  const answer = await rewards.computeReward(request.trajectory_uid, {
    functions: request.functions,
    recompute: request.recompute,
    waitMs: request.wait_ms,
  });
  return c.json(answer, answer.status === 'pending' ? 202 : 200);
}

export function mountRewardRoutes(app: Hono<Env>, rewards: RewardService): void {
  const trainer = requireScope('trainer');

  app.get('/v1/rewards', trainer, async (c) =>
    c.json({ plugins: rewards.manifests(), ...(await rewards.describe()) }),
  );

  app.post('/v1/rewards/compute', trainer, async (c) =>
    computeRewardResponse(c, rewards, await readJsonBody(c)),
  );

  app.post('/v1/rewards/recompute', requireScope('admin'), async (c) => {
    const body = parseOrThrow(RecomputeBody, await readJsonBody(c));
    const out = await rewards.recompute({
      channel: body.channel,
      trajectoryId: body.trajectory_uid,
      function: body.function,
    });
    return c.json(out, 202);
  });

  app.get('/v1/rewards/jobs', trainer, async (c) => {
    const q = parseOrThrow(JobListQuery, c.req.query());
    const jobs = await rewards.jobs({
      state: q.state as RewardJob['state'] | undefined,
      kind: q.kind,
      channel: q.channel,
      trajectoryId: q.trajectory_uid,
      groupId: q.prompt_uid,
      function: q.function,
      beforeId: q.before,
      limit: q.limit,
    });
    return c.json({
      jobs: jobs.map(jobToWire),
      next_before: jobs.length === q.limit ? jobs.at(-1)!.id : null,
    });
  });

  app.get('/v1/rewards/jobs/:id', trainer, async (c) => {
    const id = parseOrThrow(JobId, c.req.param('id'), 'id');
    const job = await rewards.job(id);
    if (!job) throw new NotFoundError(`reward job ${id} does not exist`);
    return c.json(jobToWire(job));
  });

  app.get('/v1/rewards/status/:id', trainer, async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    return c.json({ trajectory_uid: id, ...(await rewards.requiredSignals(id)) });
  });
}

import type { Context } from 'hono';
import { z } from 'zod';
import {
  ChannelName,
  ClientId,
  CompleteTrajectoryBody,
  checkCompletionChannel,
  LIST_METADATA_BYTES,
  MAX_METADATA_BYTES,
  MAX_POLICY_VERSION,
  NotFoundError,
  parseOrThrow,
  type Step,
  StepwiseError,
  StoredJsonObject,
  stepToWire,
  TrajectoryStatus,
  trajectoryToWire,
} from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp, ApiEnv } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';
import type { LiveGateway } from './live-gateway.js';
import { jsonOf } from './offload-json.js';
import { LabelQuery, optionalNumber, Pagination, queryBoolean } from './queries.js';

const MetadataBody = z.strictObject({ metadata: StoredJsonObject });
const MAX_LISTED_REFUSALS = 100;
const RefusalsBody = z.strictObject({
  attempts: z.array(z.string().min(1).max(2_048)).min(1).max(10_000),
  /** How many were refused in all, when more than `attempts` lists. */
  count: z
    .number()
    .int()
    .min(1)
    .max(2 ** 31 - 1)
    .optional(),
  reason: z.string().min(1).max(2_048),
});
const TrajectoryListQuery = z.strictObject({
  channel: ChannelName.optional(),
  prompt_uid: ClientId.optional(),
  task_id: z.string().min(1).max(256).optional(),
  reward_min: optionalNumber,
  reward_max: optionalNumber,
  status: TrajectoryStatus.optional(),
  guided: queryBoolean,
  probe: queryBoolean,
  derived: queryBoolean,
  // Compared with an integer column: a larger filter is a 400 here, not PostgreSQL's out-of-range 500.
  policy_version: z.coerce
    .number()
    .int()
    .min(0)
    .max(MAX_POLICY_VERSION, `must be <= ${MAX_POLICY_VERSION}`)
    .optional(),
  ...LabelQuery,
  ...Pagination,
});

/** What an episode's owner (runner or trainer) does to a trajectory by id: complete, metadata, refusals. */
export function mountTrajectoryOwnerRoutes(app: ApiApp, pool: DataPool, gateway?: LiveGateway): void {
  const owner = requireScope('runner', 'trainer');
  const complete = async (c: Context<ApiEnv>, id: string) => {
    parseOrThrow(ClientId, id, 'trajectory_uid');
    const body = parseOrThrow(CompleteTrajectoryBody, await readJsonBody(c));
    if (body.channel !== undefined) {
      const stored = await pool.getTrajectory(id);
      if (!stored) throw new NotFoundError(`trajectory ${id} does not exist`);
      checkCompletionChannel(body.channel, stored);
    }
    const input = { reward: body.reward ?? null, status: body.status };
    // Through the gateway when there is one: it first waits for the trajectory's captured steps.
    const trajectory = gateway
      ? await gateway.completeTrajectory(id, input)
      : await pool.completeTrajectory(id, input);
    return c.json(trajectoryToWire(trajectory));
  };
  app.post('/v1/trajectories/:id/complete', owner, (c) => complete(c, c.req.param('id')));
  app.post('/complete_trajectory/:id', owner, (c) => complete(c, c.req.param('id')));
  app.post('/v1/trajectories/:id/metadata', owner, async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    const { metadata } = parseOrThrow(MetadataBody, await readJsonBody(c));
    return c.json(trajectoryToWire(await pool.mergeTrajectoryMetadata(id, metadata)));
  });
  // What a trust boundary outside this server refused (the gym's sandbox bridge), as events.
  app.post('/v1/trajectories/:id/refusals', owner, async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    const body = parseOrThrow(RefusalsBody, await readJsonBody(c));
    const trajectory = await pool.getTrajectory(id);
    if (!trajectory) throw new NotFoundError(`trajectory ${id} does not exist`);
    await pool.recordRefusal({
      channel: trajectory.channel,
      trajectoryId: id,
      by: 'bridge',
      attempts: body.attempts.slice(0, MAX_LISTED_REFUSALS),
      count: body.count ?? body.attempts.length,
      reason: body.reason,
    });
    return c.json({ trajectory_uid: id, recorded: Math.min(body.attempts.length, MAX_LISTED_REFUSALS) });
  });
}

/** `GET /v1/trajectories` (a filtered page) and `/v1/trajectories/:id` (with steps and labels). */
export function mountTrajectoryReads(app: ApiApp, pool: DataPool): void {
  app.get('/v1/trajectories', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(TrajectoryListQuery, c.req.query());
    const page = await pool.listTrajectories({
      channel: q.channel,
      groupId: q.prompt_uid,
      taskId: q.task_id,
      rewardMin: q.reward_min,
      rewardMax: q.reward_max,
      status: q.status,
      guided: q.guided,
      probe: q.probe,
      derived: q.derived,
      policyVersion: q.policy_version,
      trainable: q.trainable,
      quality: q.quality,
      tag: q.label,
      limit: q.limit,
      offset: q.offset,
      // Compact rows: big metadata only in the detail view (docs/security.md).
      inlineMetadataBytes: LIST_METADATA_BYTES,
    });
    return c.json({ total: page.total, items: page.items.map(trajectoryToWire) });
  });
  app.get('/v1/trajectories/:id', requireScope('trainer'), async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    // Metadata stored before the cap may be bigger than it: then a marker, never megabytes parsed here.
    const trajectory = await pool.getTrajectory(id, { inlineMetadataBytes: MAX_METADATA_BYTES });
    if (!trajectory) throw new StepwiseError(`trajectory ${id} does not exist`, 404, 'not_found');
    // Its steps' ids (262,144 in the biggest step) come as Uint32Arrays and are written as JSON on
    // the offload thread: neither cloned number by number nor serialised on the event loop.
    const [steps, labels] = await Promise.all([pool.getTrajectoryStepsPacked(id), pool.labels(id)]);
    const body = {
      ...trajectoryToWire(trajectory),
      steps: steps.map((step) => stepToWire(step as unknown as Step)),
      labels,
    };
    return c.body(await jsonOf(body, true), 200, { 'content-type': 'application/json' });
  });
}

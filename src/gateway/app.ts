import { type Context, Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { streamSSE } from 'hono/streaming';
import type { Logger } from 'pino';
import { z } from 'zod';
import { mountDashboard } from '../dashboard/index.js';
import {
  ChannelConfigPatch,
  ChannelName,
  ClientId,
  CompleteTrajectoryBody,
  checkCompletionChannel,
  clientIdParam,
  EventType,
  GroupState,
  JsonObject,
  LabelsBody,
  MAX_POLICY_VERSION,
  NotFoundError,
  parseOrThrow,
  Quality,
  SignalsBody,
  StepwiseError,
  signalFromWire,
  signalToWire,
  stepToWire,
  TrajectoryStatus,
  trajectoryToWire,
  ValidationError,
} from '../domain/index.js';
import { mountExportRoutes } from '../export/routes.js';
import type { DataPool } from '../pool/data-pool.js';
import { mountRewardRoutes } from '../rewards/routes.js';
import type { RewardService } from '../rewards/service.js';
import { BatchRequest, checkBatchRequest, type RenderedBatch, renderBatch } from '../serving/batch.js';
import { type ApiKey, type AuthVariables, authenticate, requireScope } from './auth.js';
import type { Gateway } from './gateway.js';
import { readJsonBody, refuseNulQuery } from './json-body.js';
import { mountGatewayRoutes } from './routes.js';
import { readStepsBody } from './steps-body.js';

export interface AppOptions {
  pool: DataPool;
  apiKeys?: readonly ApiKey[];
  logger?: Logger;
  /** The LLM gateway; its routes share this app (and port) when given. */
  gateway?: Gateway;
  /** Origin written into base_urls (default: the origin each request came to). */
  publicUrl?: string;
  /** `gateway`: agent routes only (trajectories, steps, LLM calls); trainer and admin routes stay off. */
  role?: 'all' | 'gateway';
  /** Reward functions and jobs: `/compute_reward` and `/v1/rewards/*` answer when given. */
  rewards?: RewardService;
}

type Env = { Variables: AuthVariables };

const MetadataBody = z.strictObject({ metadata: JsonObject });
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

const optionalNumber = z.coerce.number().finite().optional();
const Pagination = {
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce
    .number()
    .int()
    .min(0)
    .max(1_000_000, 'must be <= 1000000 (narrow the filters instead)')
    .default(0),
};
const LabelQuery = {
  trainable: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
  quality: Quality.optional(),
  label: z.string().min(1).max(64).optional(),
};
const queryBoolean = z
  .enum(['true', 'false'])
  .transform((v) => v === 'true')
  .optional();
const StepListQuery = z.strictObject({
  channel: ChannelName.optional(),
  trajectory_uid: ClientId.optional(),
  prompt_uid: ClientId.optional(),
  reward_min: optionalNumber,
  reward_max: optionalNumber,
  status: TrajectoryStatus.optional(),
  ...LabelQuery,
  ...Pagination,
});
const GroupListQuery = z.strictObject({
  channel: ChannelName.optional(),
  state: GroupState.optional(),
  ...Pagination,
});
const GuidanceHoldBody = z
  .strictObject({
    channel: ChannelName.default('train'),
    group_id: ClientId,
    action: z.enum(['hold', 'release']),
    reason: z.enum(['replaced', 'abandoned', 'operator']).optional(),
  })
  .refine((b) => b.action === 'release' || b.reason === undefined, {
    path: ['reason'],
    message: 'only a release has a reason',
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
const EventListQuery = z.strictObject({
  cursor: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  channel: ChannelName.optional(),
  type: z
    .string()
    .transform((v) => v.split(','))
    .pipe(z.array(EventType))
    .optional(),
});
const PolicyVersionBody = z.strictObject({
  version: z
    .number()
    .int()
    .min(0, 'must be >= 0')
    .max(MAX_POLICY_VERSION, `must be <= ${MAX_POLICY_VERSION} (stored as a 32-bit integer)`),
  /** Hold new generations until running ones finish, then switch (needs the gateway). */
  drain: z.boolean().default(false),
});
const StatsQuery = z.strictObject({ channel: ChannelName.optional() });
const SignalListQuery = z.strictObject({
  current: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
});

/**
 * The HTTP face of the pool: thin handlers that parse, call the pool and shape the answer.
 * Gateway routes for black-box agents mount on the same app in the gateway issue.
 */
export function createApp(options: AppOptions): Hono<Env> {
  const { pool } = options;
  const app = new Hono<Env>();

  app.onError((error, c) => {
    if (error instanceof StepwiseError) return c.json(error.toJSON(), error.status as 400);
    if (error instanceof HTTPException) {
      return c.json(
        { error: { code: 'http_error', message: error.message || 'request failed' } },
        error.status,
      );
    }
    options.logger?.error({ err: error, path: c.req.path }, 'request failed');
    return c.json({ error: { code: 'internal', message: 'internal error' } }, 500);
  });
  app.notFound((c) =>
    c.json({ error: { code: 'not_found', message: `no route for ${c.req.method} ${c.req.path}` } }, 404),
  );

  app.get('/ready', async (c) => c.json({ ok: true, store: pool.store.kind }));

  app.use('*', authenticate(options.apiKeys ?? []));
  app.use('*', async (c, next) => {
    refuseNulQuery(c.req.url, () => c.req.queries());
    return next();
  });
  // Body sizes are limited where requests are read (util/http-server.ts), before any route runs.

  // ---- producers (agent scope) ----------------------------------------------------------------

  const submit = async (c: Context<Env>, channelParam?: string) => {
    const batch = await readStepsBody(c);
    const channel =
      batch.channel ?? (channelParam ? parseOrThrow(ChannelName, channelParam, 'channel') : 'train');
    const result = await pool.submitSteps(batch.steps, { channel, nRollouts: batch.nRollouts });
    // `accepted`: what Claw-R1's client reads (every step is in: new, or an identical resubmission).
    return c.json({ ...result, accepted: result.inserted + result.duplicates, channel });
  };
  // Steps, completions and signals by trajectory id are the episode owner's (docs/security.md).
  const owner = requireScope('runner', 'trainer');
  app.post('/v1/steps', owner, (c) => submit(c));
  app.post('/submit_steps', owner, (c) => submit(c, c.req.query('channel')));

  const complete = async (c: Context<Env>, id: string) => {
    parseOrThrow(ClientId, id, 'trajectory_uid');
    const body = parseOrThrow(CompleteTrajectoryBody, await readJsonBody(c));
    if (body.channel !== undefined) {
      const stored = await pool.getTrajectory(id);
      if (!stored) throw new NotFoundError(`trajectory ${id} does not exist`);
      checkCompletionChannel(body.channel, stored);
    }
    const input = { reward: body.reward ?? null, status: body.status };
    // Through the gateway when there is one: it first waits for the trajectory's captured steps.
    const trajectory = options.gateway
      ? await options.gateway.completeTrajectory(id, input)
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

  const gatewayRoutes = { publicUrl: options.publicUrl, rewards: options.rewards };
  if (options.role === 'gateway') {
    if (options.gateway) mountGatewayRoutes(app, options.gateway, gatewayRoutes);
    return app;
  }

  // ---- trainers -------------------------------------------------------------------------------

  app.post('/v1/batches/lease', requireScope('trainer'), async (c) => {
    const raw = await readJsonBody(c);
    const request = parseOrThrow(BatchRequest, raw);
    checkBatchRequest(request, raw as Record<string, unknown>);
    const batch = await pool.lease(request, c.req.raw.signal);
    if (!batch) return c.body(null, 204);
    let rendered: RenderedBatch;
    try {
      rendered = await renderBatch(batch, request);
    } catch (error) {
      // Nothing was served: the groups go back to the queue at once rather than at lease expiry.
      await pool.nack(batch.lease.id);
      throw error;
    }
    const headers = { 'content-type': rendered.contentType, ...rendered.headers };
    if (typeof rendered.body === 'string') return new Response(rendered.body, { headers });
    const parts = rendered.body;
    let next = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (next < parts.length) controller.enqueue(parts[next++]!);
        else controller.close();
      },
    });
    const length = parts.reduce((n, p) => n + p.byteLength, 0);
    return new Response(stream, { headers: { ...headers, 'content-length': String(length) } });
  });
  // A lease id is checked like any id in a path: NUL or a 10 kB string never reaches the store.
  app.post('/v1/batches/:id/ack', requireScope('trainer'), async (c) => {
    const lease = await pool.ack(clientIdParam(c.req.param('id'), 'lease_id'));
    return c.json({ lease_id: lease.id, state: lease.state, groups: lease.groupIds.length });
  });
  app.post('/v1/batches/:id/nack', requireScope('trainer'), async (c) => {
    const lease = await pool.nack(clientIdParam(c.req.param('id'), 'lease_id'));
    return c.json({ lease_id: lease.id, state: lease.state, groups: lease.groupIds.length });
  });
  app.put('/v1/policy-version', requireScope('trainer'), async (c) => {
    const { version, drain } = parseOrThrow(PolicyVersionBody, await readJsonBody(c));
    if (!options.gateway) {
      if (drain) throw new ValidationError('drain: there is no gateway in this process to drain', 'drain');
      await pool.setPolicyVersion(version);
      return c.json({ version });
    }
    const { waitedMs, timedOut } = await options.gateway.setPolicyVersion(version, drain);
    return c.json({
      version,
      ...(drain ? { drained_ms: Math.round(waitedMs), drain_timed_out: timedOut } : {}),
    });
  });
  app.get('/v1/policy-version', requireScope('trainer', 'agent'), async (c) =>
    c.json({ version: await pool.policyVersion() }),
  );

  mountExportRoutes(app, pool);

  // ---- observation (trainer or admin) ---------------------------------------------------------

  app.get('/v1/stats', requireScope('trainer'), async (c) => {
    const { channel } = parseOrThrow(StatsQuery, c.req.query());
    const stats = await pool.stats(channel ?? null);
    // The gateway's counters are this process's, whatever the channel filter.
    return c.json(options.gateway ? { ...stats, gateway: options.gateway.stats() } : stats);
  });

  app.get('/v1/events', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(EventListQuery, c.req.query());
    const filter = { channel: q.channel, types: q.type };
    if (c.req.header('accept')?.includes('text/event-stream')) return streamEvents(c, q.cursor, filter);
    const events = await pool.events({ after: q.cursor, limit: q.limit, ...filter });
    return c.json({ events, cursor: events.at(-1)?.seq ?? q.cursor });
  });
  app.get('/v1/events/stream', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(EventListQuery, c.req.query());
    const lastId = Number(c.req.header('last-event-id'));
    return streamEvents(c, Number.isFinite(lastId) && lastId > 0 ? lastId : q.cursor, {
      channel: q.channel,
      types: q.type,
    });
  });
  const streamEvents = (c: Context<Env>, cursor: number, filter: { channel?: string; types?: EventType[] }) =>
    streamSSE(c, async (stream) => {
      const aborter = new AbortController();
      stream.onAbort(() => aborter.abort());
      for await (const event of pool.watchEvents({ after: cursor, ...filter }, aborter.signal)) {
        await stream.writeSSE({ id: String(event.seq), event: event.type, data: JSON.stringify(event) });
      }
    });

  app.get('/v1/steps', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(StepListQuery, c.req.query());
    const page = await pool.listSteps({
      channel: q.channel,
      trajectoryId: q.trajectory_uid,
      groupId: q.prompt_uid,
      rewardMin: q.reward_min,
      rewardMax: q.reward_max,
      status: q.status,
      trainable: q.trainable,
      quality: q.quality,
      tag: q.label,
      limit: q.limit,
      offset: q.offset,
    });
    return c.json({ total: page.total, items: page.items.map(stepToWire) });
  });

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
    });
    return c.json({ total: page.total, items: page.items.map(trajectoryToWire) });
  });
  app.get('/v1/trajectories/:id', requireScope('trainer'), async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    const trajectory = await pool.getTrajectory(id);
    if (!trajectory) throw new StepwiseError(`trajectory ${id} does not exist`, 404, 'not_found');
    const [steps, labels] = await Promise.all([pool.getTrajectorySteps(id), pool.labels(id)]);
    return c.json({ ...trajectoryToWire(trajectory), steps: steps.map(stepToWire), labels });
  });

  // ---- signals (trainer or admin: reward workers, judges, verifiers) ---------------------------

  app.post('/v1/signals', requireScope('runner', 'trainer'), async (c) => {
    const { signals } = parseOrThrow(SignalsBody, await readJsonBody(c));
    const added = await pool.addSignals(signals.map((s) => signalFromWire(s, s.trajectory_uid)));
    return c.json({ signals: added.map(signalToWire) });
  });

  app.get('/v1/trajectories/:id/signals', requireScope('trainer'), async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    const { current } = parseOrThrow(SignalListQuery, c.req.query());
    if (!(await pool.getTrajectory(id))) throw new NotFoundError(`trajectory ${id} does not exist`);
    const signals = await pool.getSignals(id, { current: current ?? false });
    return c.json({ trajectory_uid: id, signals: signals.map(signalToWire) });
  });

  if (options.rewards) mountRewardRoutes(app, options.rewards);

  // ---- curation and configuration (admin) -----------------------------------------------------

  // ActGuide-RL's guidance hold (docs/datapool.md): held groups are listed like any, and only an
  // admin holds or releases one (the guide does, with its admin key; an operator frees a stuck one).
  app.get('/v1/groups', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(GroupListQuery, c.req.query());
    return c.json(await pool.listGroups(q));
  });
  app.post('/v1/groups/guidance', requireScope('admin'), async (c) => {
    const body = parseOrThrow(GuidanceHoldBody, await readJsonBody(c));
    const group =
      body.action === 'hold'
        ? await pool.holdForGuidance(body.channel, body.group_id)
        : await pool.releaseGuidance(body.channel, body.group_id, body.reason ?? 'operator');
    return c.json({ group });
  });

  app.post('/v1/labels', requireScope('admin'), async (c) => {
    const { labels } = parseOrThrow(LabelsBody, await readJsonBody(c));
    return c.json({ labels: await pool.addLabels(labels) });
  });
  app.get('/v1/channels/:name', requireScope('trainer'), async (c) => {
    const name = parseOrThrow(ChannelName, c.req.param('name'), 'channel');
    return c.json({ channel: name, config: await pool.channelConfig(name) });
  });
  app.put('/v1/channels/:name', requireScope('admin'), async (c) => {
    const name = parseOrThrow(ChannelName, c.req.param('name'), 'channel');
    const patch = parseOrThrow(ChannelConfigPatch, await readJsonBody(c));
    return c.json({ channel: name, config: await pool.configureChannel(name, patch) });
  });

  mountDashboard(app, { pool, gateway: options.gateway, apiKeys: options.apiKeys ?? [] });
  if (options.gateway) mountGatewayRoutes(app, options.gateway, gatewayRoutes);

  return app;
}

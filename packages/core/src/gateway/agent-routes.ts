import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { INJECTION_MODES } from '../curation/actguide/hint.js';
import {
  AuthError,
  ChannelName,
  ClientId,
  CompleteTrajectoryBody,
  ConflictError,
  checkCompletionChannel,
  clientIdParam,
  EpisodeLimits,
  NotFoundError,
  parseOrThrow,
  StepwiseError,
  StoredJsonObject,
  signalFromWire,
  signalToWire,
  TrajectorySignalsBody,
  trajectoryToWire,
} from '../domain/index.js';
import { type AuthVariables, agentOnly, requireScope } from '../http/auth.js';
import { readJsonBody } from '../http/json-body.js';
import {
  ComputeRewardBody,
  computeRewardResponse,
  isSampleRewardBody,
  SampleRewardBody,
} from '../rewards/routes.js';
import { scoreSample } from '../rewards/sample.js';
import type { RewardService } from '../rewards/service.js';
import type { Gateway } from './gateway.js';
import { mountLlmRoutes } from './llm-routes.js';
import { openaiErrorResponse, toOpenAIError } from './openai-errors.js';

// The gateway's routes, the LLM calls' from their table (llm-routes.ts, served first by direct.ts); errors on the agent's routes have OpenAI's
// shape, so every OpenAI SDK reports them. docs/gateway.md#protocol

type Env = { Variables: AuthVariables };

const InitTrajectoryBody = z
  .strictObject({
    group_id: ClientId.optional(),
    channel: ChannelName.optional(),
    metadata: StoredJsonObject.optional(),
    n_rollouts: z.number().int().min(1).max(4096).optional(),
    // ActGuide-RL (docs/actguide.md): a guided rollout is trained off-policy, a probe never is.
    guided: z.boolean().optional(),
    probe: z.boolean().optional(),
    guidance_k: z.number().int().min(0).max(1_000_000).optional(),
    guidance_hint: z.string().max(262_144).optional(),
    // Claw-R1's agents read tool calls from the raw `<tool_call>` text in content (docs/gateway.md).
    raw_tool_calls: z.boolean().optional(),
    guidance_mode: z.enum(INJECTION_MODES).optional(),
    // ActGuide-RL: the group waits in pending_guidance if none of its rollouts scores above this.
    hold_for_guidance: z.number().finite().optional(),
    // This episode's limits; each only tightens its channel's (docs/datapool.md#episode-policy).
    episode: EpisodeLimits.partial()
      .transform((limits) => Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== null)))
      .optional(),
  })
  .superRefine((body, ctx) => {
    if (body.guided && body.probe)
      ctx.addIssue({
        code: 'custom',
        path: ['probe'],
        message: 'a trajectory is guided (trained off-policy) or a probe (never trained), not both',
      });
    for (const field of ['guidance_k', 'guidance_hint'] as const)
      if (body[field] !== undefined && !body.guided && !body.probe)
        ctx.addIssue({
          code: 'custom',
          path: [field],
          message: 'applies to guided or probe trajectories only (set guided or probe)',
        });
    if (body.guidance_mode !== undefined && body.guidance_hint === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['guidance_mode'],
        message: 'says where guidance_hint goes: send guidance_hint with it',
      });
  });

const RegisterTrajectoryBody = z.strictObject({
  channel: ChannelName.optional(),
  metadata: StoredJsonObject.optional(),
});

/** Runs a handler and answers any error in OpenAI's shape. */
const openai =
  (handler: (c: Context<Env>) => Promise<Response>) =>
  async (c: Context<Env>): Promise<Response> => {
    try {
      return await handler(c);
    } catch (error) {
      if (c.req.raw.signal.aborted) return new Response(null, { status: 499 });
      return toOpenAIError(error);
    }
  };

/**
 * Refuses, and records as an `access_refused` event, what only an episode's owner may do, unless the
 * trajectory's channel lets agents own their episodes (`trust_agent_reward`, docs/security.md).
 */
async function requireAgentTrust(
  gateway: Gateway,
  c: Context<Env>,
  where: { channel: string; trajectoryId: string | null },
  what: string,
): Promise<void> {
  if ((await gateway.pool.channelConfig(where.channel)).trust_agent_reward) return;
  return refuseAgent(gateway, c, where, what);
}

/** Records the refusal of `what` to an agent (an `access_refused` event) and throws its 403. */
async function refuseAgent(
  gateway: Gateway,
  c: Context<Env>,
  where: { channel: string; trajectoryId: string | null },
  what: string,
): Promise<never> {
  const reason =
    `${what} is for the episode's owner (its runner, a trainer or a reward worker), not an agent; ` +
    `the operator lets agents do it with trust_agent_reward: true on channel '${where.channel}' ` +
    `(PUT /v1/channels/${where.channel})`;
  await gateway.pool.recordRefusal({
    channel: where.channel,
    trajectoryId: where.trajectoryId,
    by: 'gateway',
    attempts: [`${c.req.method} ${c.req.path}`],
    count: 1,
    reason,
  });
  throw new StepwiseError(reason, 403, 'forbidden', 'trust_agent_reward');
}

/**
 * Refuses a `metadata.source` other than `agent` from an agent, trusted channel or not: the source
 * says who wrote a trajectory (the gateway's online sessions, a dataset), and the session read-back
 * adopts `source: session` (docs/security.md).
 */
async function refuseForeignSource(
  gateway: Gateway,
  c: Context<Env>,
  where: () => Promise<{ channel: string; trajectoryId: string | null }>,
  metadata: Record<string, unknown> | undefined,
): Promise<void> {
  const source = metadata?.source;
  if (source === undefined || source === 'agent') return;
  const reason = `metadata.source: an agent's metadata may name only its own source ('agent'), not ${JSON.stringify(source)}`;
  await gateway.pool.recordRefusal({
    ...(await where()),
    by: 'gateway',
    attempts: [`${c.req.method} ${c.req.path}`],
    count: 1,
    reason,
  });
  throw new StepwiseError(reason, 403, 'forbidden', 'metadata.source');
}

/**
 * `/compute_reward` in either form: ours (a stored trajectory's reward, computed by its functions and
 * stored as their signals) or Claw-R1's (a sample's ids and dataset fields; scored, never stored).
 * Either is refused to an agent's key unless the channel trusts agents: the reward functions would be
 * an oracle the policy could probe.
 */
async function rewardResponse(
  c: Context<Env>,
  gateway: Gateway,
  rewards: RewardService,
  body: unknown,
): Promise<Response> {
  if (!isSampleRewardBody(body)) {
    if (agentOnly(c.get('apiKey'))) {
      const { trajectory_uid: id } = parseOrThrow(ComputeRewardBody, body);
      const t = await gateway.pool.getTrajectory(id);
      if (!t) throw new NotFoundError(`trajectory ${id} does not exist`);
      await requireAgentTrust(
        gateway,
        c,
        { channel: t.channel, trajectoryId: id },
        "computing a trajectory's reward",
      );
    }
    return computeRewardResponse(c, rewards, body);
  }
  const sample = parseOrThrow(SampleRewardBody, body);
  const channel = parseOrThrow(ChannelName, c.req.query('channel') ?? 'train', 'channel');
  if (agentOnly(c.get('apiKey')))
    await requireAgentTrust(
      gateway,
      c,
      { channel, trajectoryId: null },
      'scoring a sample with the reward functions',
    );
  const [promptText, responseText] = await Promise.all([
    gateway.tokenizing.decode(sample.prompt_ids, gateway.sampleModel()),
    gateway.tokenizing.decode(sample.response_ids, gateway.sampleModel()),
  ]);
  const score = await scoreSample(
    rewards.config,
    {
      channel,
      promptIds: sample.prompt_ids,
      responseIds: sample.response_ids,
      promptText,
      responseText,
      metadata: sample.dataset_fields,
    },
    c.req.raw.signal,
  );
  return c.json(score);
}

export interface GatewayRouteOptions {
  /** Origin written into base_urls (default: the origin the request came to). */
  publicUrl?: string;
  /** Reward functions for `/compute_reward`; without them it answers 501. */
  rewards?: RewardService;
}

export function mountGatewayRoutes(
  app: Hono<Env>,
  gateway: Gateway,
  options: GatewayRouteOptions = {},
): void {
  const agent = requireScope('agent');
  const origin = (c: Context) => options.publicUrl?.replace(/\/+$/, '') ?? new URL(c.req.url).origin;
  app.post(
    '/init_trajectory',
    requireScope('agent', 'runner'),
    openai((c) => initTrajectory(c, gateway, origin(c))),
  );
  // ---- under a trajectory's base_url ----------------------------------------------------------
  app.post(
    '/:traj/:group/v1/register_trajectory',
    agent,
    openai((c) => registerTrajectory(c, gateway)),
  );
  app.post(
    '/:traj/:group/v1/complete_trajectory',
    agent,
    openai((c) => completeTrajectory(c, gateway)),
  );
  app.post(
    '/:traj/:group/v1/signals',
    agent,
    openai((c) => trajectorySignals(c, gateway)),
  );
  // This process's counters (a `stepwise gateway` has no /v1/stats).
  app.get('/v1/gateway/stats', requireScope('trainer'), async (c) => c.json(gateway.stats()));
  app.post(
    '/compute_reward',
    agent,
    openai(async (c) =>
      options.rewards
        ? rewardResponse(c, gateway, options.rewards, await readJsonBody(c))
        : openaiErrorResponse(
            501,
            'no reward function is configured on this server: submit rewards with the steps or with complete_trajectory, or start the server with --rewards FILE (docs/rewards.md)',
            null,
            'not_implemented',
          ),
    ),
  );

  // The LLM calls, from the one route table the fast listener matches (llm-routes.ts).
  mountLlmRoutes(app, gateway);
}

/** The trajectory and group a base_url names. */
const ids = (c: Context) => ({
  trajectory: clientIdParam(c.req.param('traj'), 'trajectory_uid'),
  group: clientIdParam(c.req.param('group'), 'group_id'),
});

/** `POST /init_trajectory`: a new trajectory and its base_url. */
async function initTrajectory(c: Context<Env>, gateway: Gateway, origin: string): Promise<Response> {
  const body = parseOrThrow(InitTrajectoryBody, await readJsonBody(c));
  const channel = body.channel ?? 'train';
  // Holding a group keeps it from trainers: the runner's call, never an agent's (docs/security.md).
  if (body.hold_for_guidance !== undefined && agentOnly(c.get('apiKey')))
    throw new AuthError("hold_for_guidance: an agent's key cannot hold a group back from training", 403);
  if (agentOnly(c.get('apiKey'))) {
    await refuseForeignSource(gateway, c, async () => ({ channel, trajectoryId: null }), body.metadata);
    // A task's groups feed the prompt scheduler (their settling frees a prompt and writes its history).
    if (body.metadata?.task_id !== undefined)
      await requireAgentTrust(
        gateway,
        c,
        { channel, trajectoryId: null },
        'opening a rollout of a task (metadata.task_id)',
      );
  }
  // An agent's key opens its own groups; adding rollouts to an existing one is its owner's.
  const newGroup =
    agentOnly(c.get('apiKey')) &&
    body.group_id !== undefined &&
    !(await gateway.pool.channelConfig(channel)).trust_agent_reward;
  // The store refuses the join inside its transaction; the refusal is then recorded as such.
  const t = await gateway
    .initTrajectory({
      groupId: body.group_id,
      channel,
      metadata: body.metadata,
      nRollouts: body.n_rollouts ?? null,
      guided: body.guided,
      probe: body.probe,
      guidanceK: body.guidance_k ?? null,
      guidanceHint: body.guidance_hint ?? null,
      ...(body.guidance_mode ? { guidanceMode: body.guidance_mode } : {}),
      ...(body.hold_for_guidance !== undefined ? { holdForGuidance: body.hold_for_guidance } : {}),
      newGroup,
      rawToolCalls: body.raw_tool_calls,
      ...(body.episode ? { episodeLimits: body.episode } : {}),
    })
    .catch(async (error: unknown) => {
      if (!(newGroup && error instanceof ConflictError && error.field === 'group_id')) throw error;
      return refuseAgent(gateway, c, { channel, trajectoryId: null }, `joining group ${body.group_id}`);
    });
  return c.json({
    trajectory_uid: t.id,
    group_id: t.groupId,
    channel: t.channel,
    base_url: `${origin}/${t.id}/${t.groupId}/v1`,
  });
}

/** `POST <base_url>/register_trajectory`: Claw-R1's registration (it may move the trajectory, see registerAt). */
async function registerTrajectory(c: Context<Env>, gateway: Gateway): Promise<Response> {
  const { trajectory, group } = ids(c);
  const body = parseOrThrow(RegisterTrajectoryBody, await readJsonBody(c));
  // Claw-R1 registers first, under its prompt_uid base_url and with the channel its dataset
  // names: the only call that moves a trajectory (before its first step, where channels trust agents).
  // Before anything moves: the refusal changes nothing.
  await refuseForeignSource(
    gateway,
    c,
    async () => {
      const stored = await gateway.pool.getTrajectory(trajectory);
      if (!stored) throw new NotFoundError(`trajectory ${trajectory} does not exist`);
      return { channel: stored.channel, trajectoryId: trajectory };
    },
    body.metadata,
  );
  const session = await gateway.registerAt(trajectory, group, body.channel);
  // Metadata reaches the trainer and reward functions read it: it is the owner's to set.
  await requireAgentTrust(
    gateway,
    c,
    { channel: session.channel, trajectoryId: trajectory },
    "merging a trajectory's metadata",
  );
  return c.json(trajectoryToWire(await gateway.registerTrajectory(session, body.metadata ?? {})));
}

/** `POST <base_url>/complete_trajectory`. */
async function completeTrajectory(c: Context<Env>, gateway: Gateway): Promise<Response> {
  const { trajectory, group } = ids(c);
  const session = await gateway.sessionAt(trajectory, group);
  const body = parseOrThrow(CompleteTrajectoryBody, await readJsonBody(c));
  checkCompletionChannel(body.channel, session);
  await requireAgentTrust(
    gateway,
    c,
    { channel: session.channel, trajectoryId: trajectory },
    body.reward == null ? 'completing a trajectory' : 'completing a trajectory with a reward',
  );
  const t = await gateway.completeTrajectory(trajectory, {
    reward: body.reward ?? null,
    status: body.status,
  });
  return c.json(trajectoryToWire(t));
}

/** `POST <base_url>/signals`: signals of this trajectory only, the agent's own unless its channel trusts it. */
async function trajectorySignals(c: Context<Env>, gateway: Gateway): Promise<Response> {
  const { trajectory, group } = ids(c);
  const { signals } = parseOrThrow(TrajectorySignalsBody, await readJsonBody(c));
  // The base_url is the capability: it writes signals for its own trajectory and no other.
  signals.forEach((s, i) => {
    if (s.trajectory_uid !== undefined && s.trajectory_uid !== trajectory) {
      throw new StepwiseError(
        `signals.${i}.trajectory_uid: this base_url writes signals only for trajectory ${trajectory}`,
        403,
        'forbidden',
        `signals.${i}.trajectory_uid`,
      );
    }
  });
  const stored = await gateway.pool.getTrajectory(trajectory);
  if (!stored || stored.groupId !== group) {
    throw new NotFoundError(`trajectory ${trajectory} has no group ${group} (check the base_url)`);
  }
  // What the agent declares is recorded as its own (`agent`), never as a verifier's or a judge's.
  const claimed = signals.find((s) => s.source !== undefined && s.source !== 'agent');
  if (claimed)
    await requireAgentTrust(
      gateway,
      c,
      { channel: stored.channel, trajectoryId: trajectory },
      `posting a signal with source '${claimed.source}'`,
    );
  const added = await gateway.pool.addSignals(
    signals.map((s) => signalFromWire({ ...s, source: s.source ?? 'agent' }, trajectory)),
  );
  return c.json({ signals: added.map(signalToWire) });
}

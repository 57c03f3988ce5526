import type { Logger } from 'pino';
import { newTrajectoryId } from '../domain/ids.js';
import {
  ConflictError,
  NotFoundError,
  StepwiseError,
  type Trajectory,
  ValidationError,
} from '../domain/index.js';
import type { EngineRouter, EngineStatus } from '../engines/router.js';
import type { DataPool } from '../pool/data-pool.js';
import { type CaptureTokenizer, inThreadTokenizer } from '../services/capture-tokenizer.js';
import { offThreadTokenizer } from '../services/offload.js';
import type { ChatTokenizer } from '../text/index.js';
import type { ModelRef } from '../text/model-ref.js';
import type { ServedModel } from '../text/step-model.js';
import { type Answer, JSON_HEADERS } from './answer.js';
import {
  CallContext,
  type CallMiddleware,
  type CallServices,
  composeCall,
  type ForwardAnswer,
} from './call-context.js';
import { callCore, forwardAnswer } from './call-core.js';
import type { CallKind, CallRequest } from './call-request.js';
import type { CallOrigin, CallTracer } from './call-trace.js';
import { StepRecorder } from './capture.js';
import { baseOfStep, ContinuityCounters } from './continuity.js';
import {
  admitCall,
  countsTokens,
  EPISODE_LIMIT_KEY,
  EPISODE_LIMITS_KEY,
  type EpisodeLimitError,
  type EpisodePolicy,
  type EpisodeUsage,
  episodePolicy,
  NO_USAGE,
} from './episode.js';
import type { Forwarding } from './forward.js';
import { type GenerateInput, type GenerateOutput, generate } from './generate.js';
import { OnlineSessions, type SessionStats } from './online-sessions.js';
import { PolicyGate } from './policy-gate.js';
import { ResponseStore } from './response-store.js';
import {
  callsOf,
  type InitTrajectoryInput,
  type LastStep,
  newSession,
  RAW_TOOL_CALLS,
  type Session,
  settle,
} from './session.js';
import { type SwitchReport, type SwitchRequest, switchWeights } from './weight-switch.js';

// The gateway's core, independent of HTTP. An answer ends only once its step is committed, and sessions
// are a cache of the store, so another process continues a trajectory. docs/gateway.md#capture

export interface GatewayOptions {
  pool: DataPool;
  /** Null: no engine configured; LLM routes answer 503 and say how to configure one. */
  router: EngineRouter | null;
  /**
   * For engines that return no ids, and ActGuide training prompts: Qwen3's by default, on a worker
   * thread (services/offload.ts); one given here runs on the event loop.
   */
  tokenizer?: () => ChatTokenizer;
  logger?: Pick<Logger, 'warn' | 'info' | 'error'> & Partial<Pick<Logger, 'debug'>>;
  /** Longest a drain waits for running generations before switching anyway (default 60 s). */
  drainTimeoutMs?: number;
  /** Longest one engine may take for one phase of a weight switch (default 10 min: a big load). */
  switchTimeoutMs?: number;
  /** Trajectory sessions unused this long are dropped from memory (they reload from the store; default 10 min). */
  sessionCacheMs?: number;
  /**
   * Online sessions (`X-Stepwise-Session`) with no call for this long are completed, and their next
   * call opens a new trajectory (default 30 min).
   */
  sessionIdleMs?: number;
  /** Online sessions kept open at once; past it a key's least recently used idle one is completed (default 10000). */
  maxSessions?: number;
  /** Online sessions one API key may hold open (default 1000; at most maxSessions). */
  maxSessionsPerKey?: number;
  /** The channel of online sessions' trajectories (default `online`); agents may not choose another. */
  sessionChannel?: string;
  /**
   * A session unused this long is checked against the store before its next call (default 30 s), so
   * a trajectory closed elsewhere (idle timeout, another process) is refused, not written to.
   */
  sessionRecheckMs?: number;
  /**
   * `max_tokens` of a `/generate` that sets none (Claw-R1's `response_length`), capped by the rest of
   * the engine's context. Unset: the rest of the context (vLLM's own default would be 16 tokens).
   */
  generateMaxTokens?: number;
  /** Told of each stored step with its call's origin (OpenTelemetry export, server/otel.ts). */
  tracer?: CallTracer;
  /**
   * Token continuity: a chat call that continues what the gateway sent and got before goes to a
   * vLLM (or sim) engine as the previous ids + the new turns' ids (continuity.ts; default off). Its
   * middleware is registered by server/; here it keeps each session's base across reloads.
   */
  tokenContinuity?: boolean;
  /**
   * The call middleware, outermost first, around the core (route, forward, capture, commit); server/
   * assembles them (server/call-middleware.ts). None: calls are forwarded and captured as they come.
   */
  middleware?: (services: CallServices) => CallMiddleware[];
}

export class Gateway {
  readonly pool: DataPool;
  readonly gate = new PolicyGate();
  private readonly router: EngineRouter | null;
  readonly tokenizing: CaptureTokenizer;
  private readonly logger?: GatewayOptions['logger'];
  private readonly sessions = new Map<string, Session>();
  private readonly loading = new Map<string, Promise<Session>>();
  private readonly drainTimeoutMs: number;
  private readonly switchTimeoutMs: number;
  private readonly sessionCacheMs: number;
  private readonly sessionRecheckMs: number;
  private readonly generateMaxTokens: number | null;
  private readonly timer: NodeJS.Timeout;
  /** Engine bodies still being read after their [DONE] (each entry stops reading one). */
  private readonly draining = new Set<() => void>();
  private readonly recorder: StepRecorder;
  private readonly forwardAnswer: ForwardAnswer;
  /** The middleware around the core, as one function. */
  private readonly pipeline: (ctx: CallContext) => Promise<Answer>;
  /** Online sessions on the fixed base_url (`X-Stepwise-Session`). */
  readonly online: OnlineSessions;
  /** Stored Responses API conversations, for `previous_response_id` (responses.ts). */
  readonly responseStore = new ResponseStore();
  private readonly tokenContinuity: boolean;
  /** Token continuity: calls continued and fallbacks by reason (this process's). */
  readonly continuity = new ContinuityCounters();

  constructor(options: GatewayOptions) {
    this.pool = options.pool;
    this.router = options.router;
    this.tokenizing = options.tokenizer ? inThreadTokenizer(options.tokenizer) : offThreadTokenizer;
    this.logger = options.logger;
    this.drainTimeoutMs = options.drainTimeoutMs ?? 60_000;
    this.switchTimeoutMs = options.switchTimeoutMs ?? 600_000;
    this.sessionCacheMs = options.sessionCacheMs ?? 600_000;
    this.sessionRecheckMs = options.sessionRecheckMs ?? 30_000;
    this.generateMaxTokens = options.generateMaxTokens ?? null;
    this.tokenContinuity = options.tokenContinuity ?? false;
    this.timer = setInterval(() => this.evictIdle(), Math.min(60_000, this.sessionCacheMs));
    this.timer.unref();
    this.recorder = new StepRecorder({
      pool: this.pool,
      tokenizing: this.tokenizing,
      logger: options.logger,
      tracer: options.tracer,
      forget: (session) => {
        if (this.sessions.get(session.id) === session) this.sessions.delete(session.id);
      },
    });
    const forwarding: Forwarding = {
      recorder: this.recorder,
      tokenizing: this.tokenizing,
      draining: this.draining,
    };
    this.forwardAnswer = forwardAnswer(forwarding);
    const services: CallServices = {
      gate: this.gate,
      recorder: this.recorder,
      tokenizing: this.tokenizing,
      forwarding,
      continuity: this.continuity,
      episodes: {
        usage: (id) => this.episodeUsage(id),
        ended: (id, error) => this.recordEpisodeEnd(id, error),
      },
    };
    this.pipeline = composeCall(
      options.middleware?.(services) ?? [],
      callCore({
        pool: this.pool,
        recorder: this.recorder,
        splice: {
          settled: () => this.gate.settled(),
          version: () => this.pool.policyVersion(),
          decode: (ids, engine) => this.tokenizing.decode(ids, engine.model),
        },
      }),
    );
    this.online = new OnlineSessions(this, {
      idleMs: options.sessionIdleMs,
      channel: options.sessionChannel,
      maxSessions: options.maxSessions,
      maxSessionsPerKey: options.maxSessionsPerKey,
      logger: options.logger,
    });
  }

  get openSessions(): number {
    return this.sessions.size;
  }

  /** Steps whose write failed (logged; the agent got an error instead of the answer). */
  get lostSteps(): number {
    return this.recorder.lostSteps;
  }

  /** This process's counters: online sessions, implicit feedback, trajectories cached, lost steps. */
  stats(): {
    sessions: SessionStats;
    cached_trajectories: number;
    lost_steps: number;
    token_continuity?: ReturnType<ContinuityCounters['toJSON']>;
    engines: EngineStatus[];
  } {
    return {
      engines: this.router?.status() ?? [],
      sessions: this.online.stats(),
      cached_trajectories: this.sessions.size,
      lost_steps: this.lostSteps,
      ...(this.tokenContinuity ? { token_continuity: this.continuity.toJSON() } : {}),
    };
  }

  // ---- trajectory lifecycle -------------------------------------------------------------------

  async initTrajectory(input: InitTrajectoryInput): Promise<Trajectory> {
    let metadata = input.metadata ?? {};
    // The gateway writes why an episode ended; nobody may claim it beforehand.
    if (metadata[EPISODE_LIMIT_KEY] !== undefined)
      throw new ValidationError(
        `metadata.${EPISODE_LIMIT_KEY}: set by the gateway when an episode passes a limit`,
        `metadata.${EPISODE_LIMIT_KEY}`,
      );
    if (input.episodeLimits && Object.keys(input.episodeLimits).length > 0)
      metadata = { ...metadata, [EPISODE_LIMITS_KEY]: input.episodeLimits };
    if (input.rawToolCalls) metadata = { ...metadata, [RAW_TOOL_CALLS]: true };
    if (input.guidanceHint != null) {
      const given = metadata.guidance;
      const guidance = typeof given === 'object' && given !== null && !Array.isArray(given) ? given : {};
      metadata = {
        ...metadata,
        guidance: { ...guidance, hint: input.guidanceHint, mode: input.guidanceMode ?? 'user_prompt' },
      };
    }
    const trajectory = await this.pool.createTrajectory({
      id: newTrajectoryId(),
      groupId: input.groupId ?? newTrajectoryId(),
      channel: input.channel ?? 'train',
      nRollouts: input.nRollouts ?? null,
      metadata,
      guided: input.guided ?? false,
      probe: input.probe ?? false,
      guidanceK: input.guidanceK ?? null,
      holdForGuidance: input.holdForGuidance ?? null,
      newGroup: input.newGroup ?? false,
    });
    const { rawToolCalls, episode } = await this.sessionSettings(trajectory);
    const session = newSession(trajectory, 0, null, rawToolCalls, episode);
    if (episode) session.usage = { ...NO_USAGE };
    this.sessions.set(trajectory.id, session);
    return trajectory;
  }

  /**
   * What a session keeps of its trajectory's and channel's settings: raw tool-call text (the
   * trajectory's metadata, set at init, or the channel's) and the episode policy (episode.ts).
   */
  private async sessionSettings(
    t: Pick<Trajectory, 'channel' | 'metadata'>,
  ): Promise<{ rawToolCalls: boolean; episode: EpisodePolicy | null }> {
    const config = await this.pool.channelConfig(t.channel);
    return {
      rawToolCalls: t.metadata[RAW_TOOL_CALLS] === true || config.raw_tool_calls,
      episode: episodePolicy(config, t.metadata),
    };
  }

  /** Records the limit that ended an episode in its trajectory's metadata (once), for a reward to read. */
  private async recordEpisodeEnd(id: string, error: EpisodeLimitError): Promise<void> {
    const trajectory = await this.pool.getTrajectory(id);
    if (trajectory?.status !== 'open' || trajectory.metadata[EPISODE_LIMIT_KEY] !== undefined) return;
    await this.pool.mergeTrajectoryMetadata(id, {
      [EPISODE_LIMIT_KEY]: { limit: error.limit, value: error.value, used: error.used },
    });
  }

  /** What an episode has used, read from its stored steps (a session rebuilt from the store). */
  async episodeUsage(trajectoryId: string): Promise<EpisodeUsage> {
    const usage = { ...NO_USAGE };
    for (let offset = 0; ; offset += 500) {
      const page = await this.pool.listSteps({ trajectoryId, limit: 500, offset });
      for (const step of page.items) {
        usage.turns += 1;
        usage.responseTokens += step.responseIds.length;
        usage.context = step.promptIds.length + step.responseIds.length;
      }
      if (page.items.length < 500) return usage;
    }
  }

  /** The open session of a trajectory; `groupId` (from a base_url) must be the trajectory's. */
  async session(id: string, groupId: string | null = null): Promise<Session> {
    let session = this.sessions.get(id);
    if (session && session.inFlight === 0 && Date.now() - session.usedAt >= this.sessionRecheckMs) {
      const stored = await this.pool.getTrajectory(id);
      if (stored?.status !== 'open') session.closed ??= stored?.status ?? 'gone';
      // Another gateway sharing the store took calls of this trajectory meanwhile: continue from
      // what it stored.
      else if (stored.nSteps > session.nextIndex) {
        this.sessions.delete(id);
        session = undefined;
      }
    }
    if (!session) {
      let pending = this.loading.get(id);
      if (!pending) {
        pending = this.load(id).finally(() => this.loading.delete(id));
        this.loading.set(id, pending);
      }
      session = await pending;
    }
    if (groupId !== null && groupId !== session.groupId) {
      throw new NotFoundError(`trajectory ${id} has no group ${groupId} (check the base_url)`);
    }
    if (session.closed)
      throw new ConflictError(`trajectory ${id} is already ${session.closed}`, 'trajectory_uid');
    session.usedAt = Date.now();
    return session;
  }

  /**
   * The session a base_url names, `/<trajectory>/<group>/v1`, for an LLM call, `models` or
   * `complete_trajectory`: a group that is not the trajectory's is a 404. Only `register_trajectory`
   * moves a trajectory (registerAt), so a call after a refused registration moves nothing.
   */
  async sessionAt(id: string, groupId: string): Promise<Session> {
    const session = await this.session(id);
    if (groupId !== session.groupId)
      throw new NotFoundError(
        `trajectory ${id} has no group ${groupId} (check the base_url; a trajectory joins the group its base_url names, as Claw-R1's prompt_uid, at register_trajectory, where its channel sets trust_agent_reward)`,
      );
    return session;
  }

  /**
   * The session `register_trajectory` names. Claw-R1's black-box flow swaps the group segment for its
   * GRPO group (the dataset's `prompt_uid`) right after init and registers there, naming a channel
   * for validation: where the channel lets agents own their episodes (`trust_agent_reward`, on the
   * target channel too), a trajectory with no step yet, alone in its group, moves there. Otherwise a
   * group that is not the trajectory's is a 404, another channel a 400, and nothing moves.
   */
  async registerAt(id: string, groupId: string, channel?: string): Promise<Session> {
    const session = await this.session(id);
    const target = { groupId, channel: channel ?? session.channel };
    if (target.groupId === session.groupId && target.channel === session.channel) return session;
    const trusted = async (name: string) => (await this.pool.channelConfig(name)).trust_agent_reward;
    const movable = session.nextIndex === 0 && session.inFlight === 0 && (await trusted(session.channel));
    if (target.groupId !== session.groupId && !movable) {
      throw new NotFoundError(
        `trajectory ${id} has no group ${groupId} (check the base_url; naming a new group there, as Claw-R1's prompt_uid, needs trust_agent_reward on channel '${session.channel}' and a trajectory with no step yet)`,
      );
    }
    if (target.channel !== session.channel && !(movable && (await trusted(target.channel)))) {
      throw new ValidationError(
        `channel: trajectory ${id} is in channel '${session.channel}'; a channel is chosen at POST /init_trajectory (or here, before the first step, where both channels set trust_agent_reward)`,
        'channel',
      );
    }
    const moved = await this.pool.moveTrajectory(id, target);
    session.groupId = moved.groupId;
    session.channel = moved.channel;
    // A trajectory moved before its first step takes its new channel's settings.
    const settings = await this.sessionSettings(moved);
    session.rawToolCalls = settings.rawToolCalls;
    session.episode = settings.episode;
    if (settings.episode) session.usage ??= { ...NO_USAGE };
    return session;
  }

  private async load(id: string): Promise<Session> {
    const trajectory = await this.pool.getTrajectory(id);
    if (!trajectory)
      throw new NotFoundError(`trajectory ${id} does not exist (create one with POST /init_trajectory)`);
    if (trajectory.status !== 'open') {
      throw new ConflictError(`trajectory ${id} is already ${trajectory.status}`, 'trajectory_uid');
    }
    let last: LastStep | null = null;
    let base: Session['continuity'] = null;
    if (trajectory.nSteps > 0) {
      const step = await this.pool.getStep(id, trajectory.nSteps - 1);
      if (step)
        last = { index: step.index, calls: callsOf(step.toolCalls), answered: step.toolResults !== null };
      if (step && this.tokenContinuity) base = baseOfStep(step, this.modelOfEngine(step.engineId));
    }
    const { rawToolCalls, episode } = await this.sessionSettings(trajectory);
    const session = newSession(trajectory, trajectory.nSteps, last, rawToolCalls, episode);
    session.continuity = base;
    this.sessions.set(id, session);
    return session;
  }

  /**
   * The model a bare sample of ids (`/compute_reward`) belongs to: the engines' one model folder
   * (null: none configured, the built-in Qwen3). Engines of different models leave it unknown.
   */
  sampleModel(): ModelRef | null {
    const models = (this.router?.engineList() ?? []).map((e) => e.model ?? null);
    const first = models[0] ?? null;
    if (models.some((m) => m?.dir !== first?.dir || m?.family !== first?.family))
      throw new ValidationError(
        'prompt_ids: the engines serve models of different tokenizers, so ids alone do not say which to decode them with; score the trajectory instead',
        'prompt_ids',
      );
    return first;
  }

  /** The models the engines serve by folder, as steps record them (text/step-model.ts). */
  servedModels(): ServedModel[] {
    const out: ServedModel[] = [];
    for (const e of this.router?.engineList() ?? [])
      if (e.model && e.adapter) out.push({ ref: e.model, family: e.adapter.family, name: e.adapter.model });
    return out;
  }

  /** The model folder of a configured engine (null: none, or an engine this process does not know). */
  private modelOfEngine(engineId: string | null): ModelRef | null {
    return (engineId !== null && this.router?.engine(engineId)?.model) || null;
  }

  private evictIdle(): void {
    const cutoff = Date.now() - this.sessionCacheMs;
    for (const [id, s] of this.sessions) {
      if (s.usedAt < cutoff && s.inFlight === 0 && s.writes.size === 0) this.sessions.delete(id);
    }
  }

  async registerTrajectory(session: Session, metadata: Record<string, unknown>): Promise<Trajectory> {
    return this.pool.mergeTrajectoryMetadata(session.id, metadata);
  }

  /** Waits for the trajectory's step writes, then completes it. */
  async completeTrajectory(
    id: string,
    input: { reward: number | null; status?: 'complete' | 'aborted' | 'infra_failed' },
  ): Promise<Trajectory> {
    const session = this.sessions.get(id);
    if (session) await settle(session);
    const trajectory = await this.pool.completeTrajectory(id, {
      reward: input.reward,
      status: input.status ?? 'complete',
    });
    if (session) session.closed = trajectory.status;
    this.sessions.delete(id);
    this.responseStore.drop(id);
    this.router?.release(id);
    return trajectory;
  }

  // ---- policy version -------------------------------------------------------------------------

  async setPolicyVersion(version: number, drain: boolean): Promise<{ waitedMs: number; timedOut: boolean }> {
    if (!drain) {
      await this.pool.setPolicyVersion(version);
      return { waitedMs: 0, timedOut: false };
    }
    const { waitedMs, timedOut } = await this.gate.drain(
      () => this.pool.setPolicyVersion(version),
      this.drainTimeoutMs,
    );
    if (timedOut)
      this.logger?.warn({ version, waitedMs }, 'drain timed out; switched with generations running');
    return { waitedMs, timedOut };
  }

  /** Switches the fleet's weights and the version together (weight-switch.ts). */
  async switchWeights(request: SwitchRequest): Promise<SwitchReport> {
    return switchWeights(
      {
        router: this.requireRouter(),
        gate: this.gate,
        setVersion: (version) => this.pool.setPolicyVersion(version),
        logger: this.logger,
        phaseTimeoutMs: this.switchTimeoutMs,
        drainTimeoutMs: this.drainTimeoutMs,
      },
      request,
    );
  }

  // ---- LLM calls ------------------------------------------------------------------------------

  private requireRouter(): EngineRouter {
    if (!this.router) {
      throw new StepwiseError(
        'no inference engine is configured: start the server with --engine sim or --engine vllm=http://host:port',
        503,
        'no_engine',
      );
    }
    return this.router;
  }

  /** The models agents may name: the engines' served models (the sim's, or vLLM's). */
  async models(): Promise<Answer> {
    const router = this.requireRouter();
    const reply = await router.send(null, 'GET', '/v1/models', null, AbortSignal.timeout(10_000));
    try {
      const text = await reply.reply.text();
      return { status: reply.reply.status, headers: JSON_HEADERS, body: text };
    } finally {
      reply.done();
    }
  }

  /**
   * Forwards one chat (`kind: 'chat'`) or text (`'text'`) completion for a session and captures it,
   * through the call middleware server/ registered (call-context.ts). `request` is the agent's,
   * checked once (checkCallRequest) by whoever received it, and `raw` its text when at hand; `signal`
   * aborts when the agent goes away before its answer ended, and is the engine request's own signal.
   */
  async call<K extends CallKind>(
    session: Session,
    kind: K,
    request: CallRequest<K>,
    signal: AbortSignal,
    raw: string | null = null,
    origin: CallOrigin | null = null,
  ): Promise<Answer> {
    const router = this.requireRouter();
    return this.pipeline(
      new CallContext({ session, kind, request, raw, signal, origin }, router, this.forwardAnswer),
    );
  }

  /**
   * A `/generate` of an episode under its policy: its steps are the agent's to submit, so its usage is
   * what it submitted, and the prompt's exact length is its context. Forced sampling replaces the
   * agent's and max_tokens is clamped, as on the other routes.
   */
  private async generateUnderPolicy(id: string, input: GenerateInput): Promise<GenerateInput> {
    const trajectory = await this.pool.getTrajectory(id);
    if (!trajectory) return input;
    const policy = episodePolicy(await this.pool.channelConfig(trajectory.channel), trajectory.metadata);
    if (!policy) return input;
    const usage = countsTokens(policy.limits) ? await this.episodeUsage(id) : { ...NO_USAGE };
    usage.turns = trajectory.nSteps;
    usage.context = Math.max(usage.context, input.promptIds.length);
    const { sampling } = input;
    const rewrite = await admitCall(policy, usage, sampling, (error) => this.recordEpisodeEnd(id, error));
    const forced: GenerateInput['sampling'] = { ...sampling, ...rewrite.set };
    if ('max_tokens' in rewrite.set) delete forced.max_new_tokens;
    return { ...input, sampling: forced };
  }

  /** White-box generation (`/generate`): see generate.ts. */
  async generate(input: GenerateInput, signal: AbortSignal): Promise<GenerateOutput> {
    if (input.trajectoryId !== null) input = await this.generateUnderPolicy(input.trajectoryId, input);
    return generate(
      { router: this.requireRouter(), pool: this.pool, generateMaxTokens: this.generateMaxTokens },
      input,
      signal,
    );
  }

  /** Waits up to graceMs for running generations to finish, then for every captured step's write. */
  async close(graceMs = 10_000): Promise<void> {
    clearInterval(this.timer);
    await this.online.close();
    const deadline = Date.now() + graceMs;
    while (this.gate.running > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await Promise.all([...this.sessions.values()].map(settle));
    // Answers ended at [DONE] need nothing more from their engine: stop waiting for its body's end.
    for (const discard of this.draining) discard();
    await this.router?.close();
  }
}

import type { Logger } from 'pino';
import { withAssistantPrefix } from '../curation/actguide/hint.js';
import { newTrajectoryId } from '../domain/ids.js';
import {
  ConflictError,
  NotFoundError,
  StepwiseError,
  type Trajectory,
  ValidationError,
} from '../domain/index.js';
import type { EngineRouter, RoutedReply } from '../engines/router.js';
import type { DataPool } from '../pool/data-pool.js';
import { type CaptureTokenizer, inThreadTokenizer } from '../services/capture-tokenizer.js';
import { offThreadTokenizer } from '../services/offload.js';
import type { ChatTokenizer } from '../text/index.js';
import type { ModelRef } from '../text/model-ref.js';
import type { ServedModel } from '../text/step-model.js';
import { type Answer, JSON_HEADERS } from './answer.js';
import { type CallKind, checkCallRequest, upstreamText } from './call-request.js';
import type { CallOrigin, CallTracer } from './call-trace.js';
import { type CallContext, StepRecorder } from './capture.js';
import {
  baseOfStep,
  type ContinuityBase,
  ContinuityCounters,
  completionsBody,
  continuesOn,
  type FallbackReason,
  forwardContinued,
  planContinuation,
  sameModel,
} from './continuity.js';
import { restoreEchoedCalls } from './echoed-calls.js';
import { type Forwarding, forwardError, forwardWhole } from './forward.js';
import { forwardStream } from './forward-stream.js';
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
import { type ChatCompletionRequest, templateMessages } from './wire/openai-chat.js';

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
   * vLLM (or sim) engine as the previous ids + the new turns' ids (continuity.ts; default off).
   */
  tokenContinuity?: boolean;
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
  private readonly sessionCacheMs: number;
  private readonly sessionRecheckMs: number;
  private readonly generateMaxTokens: number | null;
  private readonly timer: NodeJS.Timeout;
  /** Engine bodies still being read after their [DONE] (each entry stops reading one). */
  private readonly draining = new Set<() => void>();
  private readonly recorder: StepRecorder;
  private readonly forwarding: Forwarding;
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
    this.forwarding = { recorder: this.recorder, tokenizing: this.tokenizing, draining: this.draining };
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
  } {
    return {
      sessions: this.online.stats(),
      cached_trajectories: this.sessions.size,
      lost_steps: this.lostSteps,
      ...(this.tokenContinuity ? { token_continuity: this.continuity.toJSON() } : {}),
    };
  }

  // ---- trajectory lifecycle -------------------------------------------------------------------

  async initTrajectory(input: InitTrajectoryInput): Promise<Trajectory> {
    let metadata = input.metadata ?? {};
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
    this.sessions.set(trajectory.id, newSession(trajectory, 0, null, await this.rawToolCalls(trajectory)));
    return trajectory;
  }

  /** Whether the trajectory (metadata, set at init) or its channel (the operator) asks for raw tool-call text. */
  private async rawToolCalls(t: Pick<Trajectory, 'channel' | 'metadata'>): Promise<boolean> {
    if (t.metadata[RAW_TOOL_CALLS] === true) return true;
    return (await this.pool.channelConfig(t.channel)).raw_tool_calls;
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
    session.rawToolCalls = await this.rawToolCalls(moved);
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
    const session = newSession(trajectory, trajectory.nSteps, last, await this.rawToolCalls(trajectory));
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
   * Forwards one chat (`kind: 'chat'`) or text (`'text'`) completion for a session and captures it.
   * `body` is the agent's parsed request and `raw` its text when at hand; `signal` aborts when the
   * agent goes away before its answer ended, and is the engine request's own signal (it stops the
   * generation).
   */
  async call(
    session: Session,
    kind: CallKind,
    body: unknown,
    signal: AbortSignal,
    raw: string | null = null,
    origin: CallOrigin | null = null,
  ): Promise<Answer> {
    const router = this.requireRouter();
    const chat = kind === 'chat' ? checkCallRequest('chat', body) : null;
    const request = chat ?? checkCallRequest('text', body);
    // Roles and legacy fields no chat template reads are rewritten into ones it does (and stored so).
    const rendered = chat && templateMessages(chat.messages);
    if (chat && rendered?.rewritten) {
      chat.messages = [...rendered.messages];
      raw = null;
    }
    if (chat && session.prefixHint !== null) {
      // The engine sees the hint as the assistant's opening (stored so: the behaviour prompt); the
      // training prompt is rebuilt without it at capture.
      const prefixed = withAssistantPrefix(chat.messages, session.prefixHint);
      chat.messages = prefixed.messages;
      // The engine continues the prefix in the same turn (the paper's `continue_final_message`); later
      // calls carry it at the head of the first reply, a closed turn like any other.
      if (prefixed.continueFinal) {
        chat.continue_final_message = true;
        chat.add_generation_prompt = false;
      }
      raw = null;
    }
    // A call of ours echoed with its tool's defaults filled in goes back as generated (same tokens).
    if (chat && restoreEchoedCalls(chat, session.generatedCalls)) raw = null;
    const stream = request.stream === true;
    if (stream && kind === 'chat' && session.rawToolCalls)
      throw new ValidationError(
        `stream: trajectory ${session.id} asks for raw tool-call text in content (raw_tool_calls), which is offered for whole answers only (stream: false, as Claw-R1's gateway answers)`,
        'stream',
      );
    // Token continuity: the prompt as the previous ids + the new turns', when this call continues them.
    const { ids: continuation, outcome: planned, base } = await this.continuationOf(session, chat);
    let outcome = planned;
    const { take: attachments, drop: dropResults } = this.recorder.toolResultsOf(session, kind, request);
    await this.gate.enter();
    session.inFlight++;
    // Completing the trajectory waits for its calls in flight: each ends having queued its step or
    // recorded its failure (an agent may act on a stream's finish_reason before the engine's [DONE]).
    let ended: () => void = () => {};
    const inFlight: Promise<void> = new Promise<void>((resolve) => {
      ended = resolve;
    }).finally(() => session.writes.delete(inFlight));
    session.writes.add(inFlight);
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      session.inFlight--;
      // Idle time counts from the end of the last call (online sessions close on it).
      session.usedAt = Date.now();
      this.gate.exit();
      ended();
    };
    try {
      const version = await this.pool.policyVersion();
      const started = performance.now();
      const path = kind === 'chat' ? '/v1/chat/completions' : '/v1/completions';
      let routed: RoutedReply;
      let continued = false;
      try {
        routed = await router.send(
          session.id,
          'POST',
          (engine) => {
            // The ids are the base's model's: only an engine serving that model can continue them.
            continued =
              continuation !== null && continuesOn(engine) && base !== null && sameModel(engine, base);
            return continued ? '/v1/completions' : path;
          },
          null,
          signal,
          (engine) => {
            const served = router.models(engine.id);
            if (!continued || continuation === null) return upstreamText(kind, request, raw, engine, served);
            const model =
              typeof request.model === 'string' && served.includes(request.model)
                ? request.model
                : (served[0] ?? null);
            return completionsBody(request, continuation, model, router.maxModelLen(engine.id));
          },
        );
      } catch (error) {
        this.recorder.fail(session, attachments, error, null, signal.aborted);
        throw error;
      }
      if (continuation !== null) outcome = continued ? 'continued' : 'engine';
      if (outcome !== null) this.continuity.count(outcome);
      const context: CallContext = {
        session,
        kind,
        request,
        attachments,
        version,
        started,
        origin,
        routed,
        clientGone: () => signal.aborted,
        finish,
        ...(outcome !== null ? { metadata: { token_continuity: outcome } } : {}),
        ...(this.tokenContinuity
          ? {
              onStored: (step) => {
                session.continuity = baseOfStep(step, routed.engine.model ?? null);
              },
            }
          : {}),
      };
      if (routed.reply.status !== 200) return await forwardError(context, this.forwarding);
      if (continued) return await forwardContinued(context, this.forwarding);
      if (stream) return forwardStream(context, this.forwarding);
      return await forwardWhole(context, this.forwarding);
    } catch (error) {
      finish();
      dropResults();
      throw error;
    }
  }

  /**
   * Token continuity: the prompt as the previous ids + the new turns' (rendered by the base's model's
   * adapter), when this call continues them; else why not.
   */
  private async continuationOf(
    session: Session,
    chat: ChatCompletionRequest | null,
  ): Promise<{
    ids: number[] | null;
    outcome: 'continued' | FallbackReason | null;
    base: ContinuityBase | null;
  }> {
    if (!this.tokenContinuity || chat === null) return { ids: null, outcome: null, base: null };
    const plan = planContinuation(session, session.continuity, chat);
    if (typeof plan === 'string') return { ids: null, outcome: plan, base: null };
    try {
      const ids = await this.tokenizing.continuationIds(
        {
          messages: templateMessages(chat.messages).messages,
          tools: chat.tools ?? null,
          ...(plan.enableThinking !== undefined ? { enableThinking: plan.enableThinking } : {}),
          promptIds: plan.base.promptIds,
          responseIds: plan.base.responseIds,
        },
        plan.base.model,
      );
      return { ids, outcome: null, base: plan.base };
    } catch {
      // The model's template has no such shape (its adapter refused it, naming the model).
      return { ids: null, outcome: 'template_unknown', base: null };
    }
  }

  /** White-box generation (`/generate`): see generate.ts. */
  async generate(input: GenerateInput, signal: AbortSignal): Promise<GenerateOutput> {
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

import type { Logger } from 'pino';
import { type InjectionMode, withAssistantPrefix } from '../curation/actguide/hint.js';
import { newTrajectoryId } from '../domain/ids.js';
import {
  ConflictError,
  type JsonObject,
  MAX_PROMPT_TOKENS,
  type NewStep,
  NotFoundError,
  StepwiseError,
  type Trajectory,
  ValidationError,
} from '../domain/index.js';
import { type Captured, CompletionCapture } from '../engines/capture.js';
import type { Engine, EngineRouter, RoutedReply } from '../engines/router.js';
import { UpstreamError } from '../engines/upstream.js';
import { type CaptureTokenizer, inThreadTokenizer } from '../http/capture-tokenizer.js';
import { offThreadTokenizer } from '../http/offload.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ToolResultAttachment } from '../store/store.js';
import { type ChatTokenizer, SseDecoder } from '../text/index.js';
import { renderCompletion, type ToolCall } from '../text/tool-calls.js';
import { type Answer, JSON_HEADERS, type StreamSink, type StreamSource } from './answer.js';
import { OnlineSessions, type SessionStats } from './online-sessions.js';
import { normalizeUpstreamError, openaiError, openaiErrorBody } from './openai-errors.js';
import { PolicyGate } from './policy-gate.js';
import { checkSamplingOptions } from './sampling.js';
import { type AnsweredCall, toolResultsFor } from './tool-results.js';

/*
 * The gateway's core, independent of HTTP routing: trajectory sessions, forwarding a call to an
 * engine, capturing what the engine produced as a step, attaching tool results, and the policy
 * version gate. The agent gets the engine's bytes as they arrive, but the end of its answer only once
 * the step is committed (through the pool's group commit): an answered call always has its step. Sessions are a cache: everything they hold can be rebuilt from
 * the store, so another gateway process (or this one after a restart) continues a trajectory.
 */

export interface GatewayOptions {
  pool: DataPool;
  /** Null: no engine configured; LLM routes answer 503 and say how to configure one. */
  router: EngineRouter | null;
  /**
   * For engines that return no ids, and ActGuide training prompts: Qwen3's by default, on a worker
   * thread (http/offload.ts); one given here runs on the event loop.
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
  /** Online sessions kept open at once; past it the least recently used is completed (default 10000). */
  maxSessions?: number;
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
}

export interface InitTrajectoryInput {
  groupId?: string;
  channel?: string;
  metadata?: Record<string, unknown>;
  nRollouts?: number | null;
  /** ActGuide-RL: a guided rollout (trained off-policy) or a probe (never trained). */
  guided?: boolean;
  probe?: boolean;
  guidanceK?: number | null;
  /** The hint in its prompt; each guided step then also stores the prompt without it. */
  guidanceHint?: string | null;
  /**
   * Where the hint is: in the task's user message (`user_prompt`, the agent was given it), or an
   * assistant message the gateway inserts after the first user message of every call
   * (`assistant_prefix`, the paper's second mode; the agent never sees it).
   */
  guidanceMode?: InjectionMode;
  /** ActGuide-RL: hold the group back from leases if none of its rollouts scores above this. */
  holdForGuidance?: number;
  /** Refuse to join an existing group (an agent's own key, docs/security.md). */
  newGroup?: boolean;
  /** Chat answers keep the raw `<tool_call>` text in `content` (Claw-R1's agents parse it there). */
  rawToolCalls?: boolean;
}

/** Where a trajectory asks for raw tool-call text (metadata `raw_tool_calls`, set at init). */
const RAW_TOOL_CALLS = 'raw_tool_calls';

interface LastStep {
  index: number;
  calls: AnsweredCall[];
  answered: boolean;
}

/** What the gateway remembers about an open trajectory between calls. */
export interface Session {
  id: string;
  groupId: string;
  channel: string;
  nextIndex: number;
  last: LastStep | null;
  /** Calls in flight and step writes not yet committed: completing the trajectory waits for them. */
  writes: Set<Promise<void>>;
  inFlight: number;
  usedAt: number;
  closed: string | null;
  /** A guided trajectory's hint: its steps get a training prompt without it. */
  hint: string | null;
  /** Chat answers carry the model's raw `<tool_call>` text in `content` (Claw-R1's form). */
  rawToolCalls: boolean;
  /** Where the hint is (metadata `guidance.mode`; absent: the user message). */
  hintMode: InjectionMode;
  /** The hint every chat call of a guided or probe trajectory opens with in `assistant_prefix` mode. */
  prefixHint: string | null;
}

/** The hint a guided trajectory's steps are stored without (metadata `guidance.hint`). */
function hintOf(t: Pick<Trajectory, 'guided' | 'metadata'>): string | null {
  if (!t.guided) return null;
  const guidance = t.metadata.guidance;
  if (typeof guidance !== 'object' || guidance === null || Array.isArray(guidance)) return null;
  const hint = (guidance as Record<string, unknown>).hint;
  return typeof hint === 'string' ? hint : null;
}

/** Where a guided trajectory's hint is (metadata `guidance.mode`), `user_prompt` unless it says so. */
function hintModeOf(t: Pick<Trajectory, 'metadata'>): InjectionMode {
  const guidance = t.metadata.guidance;
  if (typeof guidance !== 'object' || guidance === null || Array.isArray(guidance)) return 'user_prompt';
  return (guidance as Record<string, unknown>).mode === 'assistant_prefix'
    ? 'assistant_prefix'
    : 'user_prompt';
}

/** The hint the gateway inserts as the assistant's opening: guided and probe trajectories alike. */
function prefixHintOf(t: Pick<Trajectory, 'guided' | 'probe' | 'metadata'>): string | null {
  if (!(t.guided || t.probe) || hintModeOf(t) !== 'assistant_prefix') return null;
  const hint = (t.metadata.guidance as Record<string, unknown>).hint;
  return typeof hint === 'string' ? hint : null;
}

export type CallKind = 'chat' | 'text';

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
};
/** An event that finishes its choice: it and what follows wait for the step's commit. */
const FINISHED = /"finish_reason":\s*"/;
/** Streamed events held for the capture at most, before they are read (see forwardStream). */
const UNREAD_EVENTS = 256;

/** Tool results of a request for the step they answer. */
type Attachments = () => ToolResultAttachment[];

/** A call's tool results: `take` them for the step they answer, or `drop` them unused. */
interface PendingResults {
  take: Attachments;
  /** The call ended before it could use them: a retry of the same messages brings them again. */
  drop(): void;
}

/** A finished generation that could not become a stored step: the agent gets an error, not the answer. */
class CaptureFailed extends StepwiseError {
  constructor(message: string, status = 500) {
    super(message, status, 'capture_failed', undefined, true);
  }
}

/** Request fields kept with each step (what shaped the sampling), beside messages and tools. */
const SAMPLING_FIELDS = [
  'model',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'max_tokens',
  'max_completion_tokens',
  'seed',
  'stop',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'tool_choice',
  'parallel_tool_calls',
  'response_format',
  'chat_template_kwargs',
  // How the engine closed the prompt: a new assistant turn (the default) or the last message continued.
  'add_generation_prompt',
  'continue_final_message',
] as const;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

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
  /** Steps whose write failed (logged; the agent got an error instead of the answer). */
  lostSteps = 0;
  /** Online sessions on the fixed base_url (`X-Stepwise-Session`). */
  readonly online: OnlineSessions;

  constructor(options: GatewayOptions) {
    this.pool = options.pool;
    this.router = options.router;
    this.tokenizing = options.tokenizer ? inThreadTokenizer(options.tokenizer) : offThreadTokenizer;
    this.logger = options.logger;
    this.drainTimeoutMs = options.drainTimeoutMs ?? 60_000;
    this.sessionCacheMs = options.sessionCacheMs ?? 600_000;
    this.sessionRecheckMs = options.sessionRecheckMs ?? 30_000;
    this.generateMaxTokens = options.generateMaxTokens ?? null;
    this.timer = setInterval(() => this.evictIdle(), Math.min(60_000, this.sessionCacheMs));
    this.timer.unref();
    this.online = new OnlineSessions(this, {
      idleMs: options.sessionIdleMs,
      maxSessions: options.maxSessions,
      logger: options.logger,
    });
  }

  get openSessions(): number {
    return this.sessions.size;
  }

  /** This process's counters: online sessions, implicit feedback, trajectories cached, lost steps. */
  stats(): { sessions: SessionStats; cached_trajectories: number; lost_steps: number } {
    return {
      sessions: this.online.stats(),
      cached_trajectories: this.sessions.size,
      lost_steps: this.lostSteps,
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
    this.sessions.set(
      trajectory.id,
      this.newSession(trajectory, 0, null, await this.rawToolCalls(trajectory)),
    );
    return trajectory;
  }

  /** Whether the trajectory (metadata, set at init) or its channel (the operator) asks for raw tool-call text. */
  private async rawToolCalls(t: Pick<Trajectory, 'channel' | 'metadata'>): Promise<boolean> {
    if (t.metadata[RAW_TOOL_CALLS] === true) return true;
    return (await this.pool.channelConfig(t.channel)).raw_tool_calls;
  }

  private newSession(
    t: Pick<Trajectory, 'id' | 'groupId' | 'channel' | 'guided' | 'probe' | 'metadata'>,
    next: number,
    last: LastStep | null,
    rawToolCalls: boolean,
  ): Session {
    return {
      id: t.id,
      groupId: t.groupId,
      channel: t.channel,
      nextIndex: next,
      last,
      writes: new Set(),
      inFlight: 0,
      usedAt: Date.now(),
      closed: null,
      hint: hintOf(t),
      rawToolCalls,
      hintMode: hintModeOf(t),
      prefixHint: prefixHintOf(t),
    };
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
    if (trajectory.nSteps > 0) {
      const step = await this.pool.getStep(id, trajectory.nSteps - 1);
      if (step)
        last = { index: step.index, calls: callsOf(step.toolCalls), answered: step.toolResults !== null };
    }
    const session = this.newSession(trajectory, trajectory.nSteps, last, await this.rawToolCalls(trajectory));
    this.sessions.set(id, session);
    return session;
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
  ): Promise<Answer> {
    const router = this.requireRouter();
    const request = checkCallRequest(kind, body);
    if (kind === 'chat' && session.prefixHint !== null) {
      // The engine sees the hint as the assistant's opening (stored so: the behaviour prompt); the
      // training prompt is rebuilt without it at capture.
      const prefixed = withAssistantPrefix(request.messages as { role: string }[], session.prefixHint);
      request.messages = prefixed.messages;
      // The engine continues the prefix in the same turn (the paper's `continue_final_message`); later
      // calls carry it at the head of the first reply, a closed turn like any other.
      if (prefixed.continueFinal) {
        request.continue_final_message = true;
        request.add_generation_prompt = false;
      }
      raw = null;
    }
    const stream = request.stream === true;
    if (stream && kind === 'chat' && session.rawToolCalls)
      throw new ValidationError(
        `stream: trajectory ${session.id} asks for raw tool-call text in content (raw_tool_calls), which is offered for whole answers only (stream: false, as Claw-R1's gateway answers)`,
        'stream',
      );
    const { take: attachments, drop: dropResults } = this.toolResultsOf(session, kind, request);
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
      try {
        routed = await router.send(session.id, 'POST', path, null, signal, (engine) =>
          upstreamText(kind, request, raw, engine, router.models(engine.id)),
        );
      } catch (error) {
        this.fail(session, attachments, error, null, signal.aborted);
        throw error;
      }
      const context: CallContext = {
        session,
        kind,
        request,
        attachments,
        version,
        started,
        routed,
        clientGone: () => signal.aborted,
        finish,
      };
      if (routed.reply.status !== 200) return await this.forwardError(context);
      if (stream) return this.forwardStream(context);
      return await this.forwardWhole(context);
    } catch (error) {
      finish();
      dropResults();
      throw error;
    }
  }

  /**
   * White-box token-in/token-out generation (Claw-R1's `/generate`): prompt ids to the engine's
   * completions API, exact ids and logprobs back. Records nothing; the agent submits its steps.
   */
  /**
   * The length of a `/generate` that names none: `generateMaxTokens`, never past the rest of the
   * engine's context; without it that rest. Null (the engine's own choice; vLLM's is the rest of the
   * context) where the engine reports no context length or the prompt fills it (the engine refuses).
   */
  private defaultMaxTokens(engine: Engine, promptLength: number): number | null {
    const contextLength = this.requireRouter().maxModelLen(engine.id);
    const room = contextLength === null ? null : contextLength - promptLength;
    if (room !== null && room <= 0) return null;
    if (this.generateMaxTokens === null) return room;
    return room === null ? this.generateMaxTokens : Math.min(this.generateMaxTokens, room);
  }

  async generate(input: GenerateInput, signal: AbortSignal): Promise<GenerateOutput> {
    const router = this.requireRouter();
    checkSamplingOptions(input.sampling, 'sampling_params.');
    // The id picks the engine a trajectory sticks to: one nobody opened is a mistake, not a new key.
    if (input.trajectoryId !== null && !(await this.pool.getTrajectory(input.trajectoryId)))
      throw new NotFoundError(`trajectory_uid: no trajectory ${input.trajectoryId}`);
    const version = await this.pool.policyVersion();
    const routed = await router.send(
      input.trajectoryId,
      'POST',
      '/v1/completions',
      null,
      signal,
      (engine) => {
        if (engine.kind === 'openai') {
          throw new StepwiseError(
            `engine ${engine.id} is an OpenAI-compatible API without token-id prompts: /generate needs vllm or sim`,
            501,
            'not_supported',
          );
        }
        const maxTokens = input.sampling.max_tokens ?? this.defaultMaxTokens(engine, input.promptIds.length);
        return JSON.stringify({
          ...input.sampling,
          max_tokens: maxTokens,
          model: router.models(engine.id)[0] ?? input.model ?? 'default',
          prompt: input.promptIds,
          return_token_ids: true,
          logprobs: 0,
          stream: false,
        });
      },
    );
    try {
      const text = await routed.reply.text();
      if (routed.reply.status !== 200) {
        const { message } = normalizeUpstreamError(routed.reply.status, text, routed.engine.id);
        throw new StepwiseError(message, routed.reply.status, 'upstream_error');
      }
      const capture = new CompletionCapture();
      try {
        capture.addCompletion(JSON.parse(text));
      } catch {
        throw new UpstreamError(
          `engine ${routed.engine.id} returned something that is not a completion`,
          502,
          true,
        );
      }
      const r = capture.result();
      if (!r.responseIds) {
        throw new UpstreamError(`engine ${routed.engine.id} returned no token ids`, 502, true);
      }
      return {
        prompt_ids: r.promptIds ?? input.promptIds,
        response_ids: r.responseIds,
        text: r.content,
        logprobs: r.logprobs,
        finish_reason: r.finishReason,
        // Claw-R1's GenerateResponse names: the same ids and logprobs (none where its flow asked for
        // none, `logprobs: false`, as its gateway answers), and the finish_reason as its stop_reason.
        token_ids: r.responseIds,
        log_probs: input.sampling.logprobs === false ? null : r.logprobs,
        stop_reason: r.finishReason,
        engine_id: routed.engine.id,
        policy_version: version,
      };
    } finally {
      routed.done();
    }
  }

  /**
   * The tool results this request carries for the step they answer: the session's last step. Every
   * step is stored, and becomes the last, before its answer goes out, so a request that answers it
   * always finds it here.
   */
  private toolResultsOf(session: Session, kind: CallKind, request: Record<string, unknown>): PendingResults {
    let results: ToolResultAttachment[];
    try {
      results = this.pendingToolResults(session, kind, request);
    } catch (error) {
      // Never fatal to the call: its step is kept without them.
      results = [];
      this.logger?.error({ err: error, trajectory: session.id }, 'tool results could not be matched');
    }
    let taken = false;
    return {
      take: () => {
        taken = true;
        return results;
      },
      drop: () => {
        // Matched but never written: the step they answer takes them from the retry.
        const last = session.last;
        if (!taken && last !== null && results.some((r) => r.index === last.index)) last.answered = false;
      },
    };
  }

  private pendingToolResults(
    session: Session,
    kind: CallKind,
    request: Record<string, unknown>,
  ): ToolResultAttachment[] {
    const last = session.last;
    if (kind !== 'chat' || !last || last.answered || last.calls.length === 0) return [];
    const results = toolResultsFor(request.messages as Record<string, unknown>[], last.calls);
    if (results.length === 0) return [];
    last.answered = true;
    return [{ trajectoryId: session.id, index: last.index, results }];
  }

  /** The engine's answer broke off while it was read whole: recorded, and raised for the agent. */
  private brokenAnswer(ctx: CallContext, error: unknown): never {
    const { engine } = ctx.routed;
    const aborted = ctx.clientGone();
    this.fail(ctx.session, ctx.attachments, error, engine, aborted);
    if (aborted) throw error;
    throw new UpstreamError(
      `engine ${engine.id} broke off its answer (${(error as Error).message})`,
      error instanceof UpstreamError && error.status === 504 ? 504 : 502, // 504: its body timeout cut it
      true,
    );
  }

  private async forwardError(ctx: CallContext): Promise<Answer> {
    const { routed } = ctx;
    try {
      let text: string;
      try {
        text = await routed.reply.text();
      } catch (error) {
        return this.brokenAnswer(ctx, error);
      }
      const { body, message } = normalizeUpstreamError(routed.reply.status, text, routed.engine.id);
      // Recorded before the agent sees the error: whoever reads the events after it finds the call.
      await this.record(ctx.session, ctx.attachments, {
        kind: 'upstream_error',
        engineId: routed.engine.id,
        status: routed.reply.status,
        message,
        partial: null,
      });
      return { status: routed.reply.status, headers: JSON_HEADERS, body };
    } finally {
      routed.done();
      ctx.finish();
    }
  }

  private async forwardWhole(ctx: CallContext): Promise<Answer> {
    const { routed } = ctx;
    let bytes: Buffer;
    try {
      bytes = await routed.reply.bytes();
    } catch (error) {
      routed.done();
      ctx.finish();
      return this.brokenAnswer(ctx, error);
    }
    routed.done();
    try {
      const answer = completionOf(bytes);
      if (answer === null) {
        const message = `engine ${routed.engine.id} returned something that is not a completion`;
        this.record(ctx.session, ctx.attachments, {
          kind: 'upstream_error',
          engineId: routed.engine.id,
          status: 502,
          message,
          partial: null,
        });
        return openaiError(502, message, null, 'bad_upstream_answer');
      }
      if (ctx.clientGone()) {
        this.record(ctx.session, ctx.attachments, {
          kind: 'aborted',
          engineId: routed.engine.id,
          status: null,
          message: 'the agent went away before the answer was sent',
          partial: null,
        });
        return { status: 499, headers: {}, body: null };
      }
      const capture = new CompletionCapture();
      capture.addCompletion(answer);
      // Committed before the agent sees a byte of it: no answered call is ever without its step.
      const step = await this.capture(ctx, capture.result(), null);
      let raw: string | null = null;
      if (ctx.session.rawToolCalls && ctx.kind === 'chat') {
        // The text of the ids the step holds, as generated; rebuilt ids are no record of spacing.
        const generated =
          step.tokenSource === 'engine' ? await this.tokenizing.decodeGenerated(step.responseIds) : null;
        raw = rawToolCallAnswer(answer, generated);
      }
      return { status: 200, headers: JSON_HEADERS, body: raw ?? bytes };
    } finally {
      ctx.finish();
    }
  }

  private forwardStream(ctx: CallContext): Answer {
    const { routed } = ctx;
    const iterator = routed.reply.body[Symbol.asyncIterator]();
    const decoder = new SseDecoder();
    const capture = new CompletionCapture();
    let done = false;
    let sawDone = false;
    let garbage: string | null = null;
    /** From the chunk that ends the choice (its finish_reason) on: sent once the step is committed. */
    let held = '';
    /** Ends the answer (once). */
    const stop = () => {
      if (done) return false;
      done = true;
      return true;
    };
    const options = ctx.request.stream_options;
    const agentWantsUsage = isObject(options) && options.include_usage === true;
    const failed = () => {
      const message = garbage ?? `engine ${routed.engine.id} ended the stream without [DONE]`;
      this.record(ctx.session, ctx.attachments, {
        kind: 'upstream_error',
        engineId: routed.engine.id,
        status: 502,
        message,
        partial: partialOf(capture),
      });
      return message;
    };
    /** Reads one event into the capture; null when it is not JSON. */
    const read = (data: string, at: number): unknown => {
      let chunk: unknown;
      try {
        chunk = JSON.parse(data);
      } catch {
        garbage ??= `engine ${routed.engine.id} streamed an event that is not JSON`;
        return null;
      }
      if (isObject(chunk) && isObject(chunk.error)) {
        garbage ??= `engine ${routed.engine.id} failed mid-stream: ${String((chunk.error as { message?: unknown }).message)}`;
      }
      capture.addChunk(chunk, at);
      return chunk;
    };
    // Events are forwarded as they come and read into the capture later (at [DONE], or every
    // UNREAD_EVENTS events), so parsing them never holds up the bytes the agent waits for.
    let unread: string[] = [];
    let unreadAt: number[] = [];
    const catchUp = () => {
      for (let i = 0; i < unread.length; i++) read(unread[i]!, unreadAt[i]!);
      unread = [];
      unreadAt = [];
    };
    /**
     * Returns the bytes to forward now: the engine's events in its framing, up to the one that
     * finishes the choice. That one and the rest up to [DONE] are held until the step is committed.
     */
    const take = (events: { data: string }[], at: number): string => {
      let out = '';
      for (const event of events) {
        if (event.data === '[DONE]') {
          sawDone = true;
          break; // nothing follows [DONE] in the protocol
        }
        if (!agentWantsUsage && event.data.includes('"usage"')) {
          // The gateway asked for the usage chunk; an agent that did not gets none.
          catchUp();
          const chunk = read(event.data, at);
          const usageOnly =
            isObject(chunk) &&
            isObject(chunk.usage) &&
            Array.isArray(chunk.choices) &&
            chunk.choices.length === 0;
          if (usageOnly) continue;
        } else {
          unread.push(event.data);
          unreadAt.push(at);
          if (unread.length >= UNREAD_EVENTS) catchUp();
        }
        if (held === '' && !FINISHED.test(event.data)) out += `data: ${event.data}\n\n`;
        else held += `data: ${event.data}\n\n`;
      }
      return out;
    };
    const forward = (controller: StreamSink, text: string) => {
      if (text !== '') controller.enqueue(text);
    };
    /**
     * The engine sent [DONE]: the agent's answer ends here, without waiting for the engine's body to
     * end (the step is captured at once; the rest of that body is read in the background, so its
     * connection can serve the next call).
     */
    const answer = async (controller: StreamSink, text: string) => {
      forward(controller, text);
      if (!stop()) return;
      void drainRest();
      try {
        catchUp();
        if (garbage !== null) {
          forward(controller, held);
          controller.enqueue(sseError(502, failed()));
          return;
        }
        try {
          await this.capture(ctx, capture.result(), capture.firstTokenAt);
        } catch (error) {
          const known = error instanceof StepwiseError;
          controller.enqueue(
            sseError(known ? error.status : 500, known ? error.message : 'internal error', 'capture_failed'),
          );
          return;
        }
        controller.enqueue(`${held}data: [DONE]\n\n`);
      } finally {
        ctx.finish();
        controller.close();
      }
    };
    const drainRest = async () => {
      const discard = () => routed.reply.discard();
      this.draining.add(discard);
      try {
        for (;;) if ((await iterator.next()).done) break;
      } catch {
        // the answer is whole already; a body that breaks off after [DONE] changes nothing
      } finally {
        this.draining.delete(discard);
        routed.done();
      }
    };
    const body: StreamSource = {
      pull: async (controller) => {
        try {
          for (;;) {
            const next = await iterator.next();
            if (next.done) break;
            const text = take(decoder.push(next.value), performance.now());
            if (sawDone) return await answer(controller, text);
            // A chunk that completed no event yields nothing yet: read on rather than stall the pull.
            if (text !== '') return forward(controller, text);
          }
          const text = take(decoder.end(), performance.now());
          if (sawDone) return await answer(controller, text);
          forward(controller, text + held);
          if (!stop()) return;
          routed.done();
          catchUp();
          controller.enqueue(sseError(502, failed()));
          ctx.finish();
          controller.close();
        } catch (error) {
          if (!stop()) return;
          routed.done();
          const aborted = ctx.clientGone();
          // An engine gone silent (the body timeout) is named as such, to the agent too: a 504.
          const silent = error instanceof UpstreamError && error.status === 504;
          catchUp();
          this.record(ctx.session, ctx.attachments, {
            kind: aborted ? 'aborted' : 'upstream_error',
            engineId: routed.engine.id,
            status: aborted ? null : silent ? 504 : 502,
            message: aborted
              ? 'the agent went away mid-stream'
              : `the engine's stream broke off (${(error as Error).message})`,
            partial: partialOf(capture),
          });
          ctx.finish();
          if (aborted) controller.error(error);
          else {
            controller.enqueue(
              silent
                ? sseError(504, (error as Error).message, 'upstream_timeout')
                : sseError(502, `engine ${routed.engine.id} broke off the stream`),
            );
            controller.close();
          }
        }
      },
      cancel: async () => {
        // The agent went away before [DONE]: stop the generation (dropping the engine's body ends
        // its request) and keep what was made as an aborted call.
        if (!stop()) return;
        routed.done();
        routed.reply.discard();
        catchUp();
        this.record(ctx.session, ctx.attachments, {
          kind: 'aborted',
          engineId: routed.engine.id,
          status: null,
          message: 'the agent went away mid-stream',
          partial: partialOf(capture),
        });
        ctx.finish();
      },
    };
    return { status: 200, headers: SSE_HEADERS, body };
  }

  /**
   * Turns a finished generation into the session's next step and commits it; the agent's answer
   * waits for this. A step that cannot be stored is a CaptureFailed (or the ConflictError of a
   * trajectory closed meanwhile), never a silent loss.
   */
  private async capture(
    ctx: CallContext,
    captured: Captured,
    firstTokenAt: number | null,
  ): Promise<Pick<NewStep, 'responseIds' | 'tokenSource'>> {
    const endedAt = performance.now();
    const { session, request, routed } = ctx;
    // Before this step becomes the session's last: the results answer the step before it.
    const toolResults = ctx.attachments();
    let promptIds = captured.promptIds;
    let responseIds = captured.responseIds;
    let logprobs = captured.logprobs;
    let source: NewStep['tokenSource'] = 'engine';
    if (!promptIds || !responseIds) {
      try {
        const rebuilt =
          ctx.kind === 'chat'
            ? await this.tokenizing.retokenizeChat(
                {
                  messages: request.messages as never,
                  tools: (request.tools as never) ?? null,
                  enableThinking: (request.chat_template_kwargs as { enable_thinking?: boolean } | undefined)
                    ?.enable_thinking,
                  continueFinalMessage: request.continue_final_message === true,
                },
                captured,
              )
            : await this.tokenizing.retokenizeText(promptText(request.prompt), captured);
        promptIds = rebuilt.promptIds;
        responseIds = rebuilt.responseIds;
        logprobs = null;
        source = 'retokenized';
      } catch (error) {
        const message = `engine ${routed.engine.id} answered without token ids, and they could not be rebuilt (${(error as Error).message})`;
        this.record(session, () => toolResults, {
          kind: 'upstream_error',
          engineId: routed.engine.id,
          status: 502,
          message,
          partial: null,
        });
        throw new CaptureFailed(message, 502);
      }
    }
    const metadata: JsonObject = {};
    for (const field of SAMPLING_FIELDS)
      if (request[field] !== undefined) metadata[field] = request[field] as never;
    if (captured.model) metadata.served_model = captured.model;
    if (captured.reasoning !== null) metadata.reasoning = captured.reasoning;
    if (captured.idsIncomplete) metadata.ids_incomplete = true;
    if (source === 'retokenized') {
      // How far the rebuilt ids are from what the engine counted: the drift of retokenizing.
      const drift = retokenizeDrift(promptIds, responseIds, captured.usage);
      if (drift) metadata.retokenize_drift = drift;
    }
    let trainingPromptIds: number[] | null = null;
    if (session.hint !== null && ctx.kind === 'chat') {
      const view = await this.tokenizing.trainingPromptOf(
        {
          trajectoryId: session.id,
          index: session.nextIndex,
          promptIds,
          responseIds,
          messages: request.messages as JsonObject[],
          tools: Array.isArray(request.tools) ? (request.tools as JsonObject[]) : null,
          metadata,
        },
        session.hint,
        session.hintMode,
      );
      trainingPromptIds = view.ids;
      if (view.problem !== null) metadata.training_prompt_unavailable = view.problem;
    }
    const index = session.nextIndex++;
    const step: NewStep = {
      trajectoryId: session.id,
      groupId: session.groupId,
      index,
      promptIds,
      responseIds,
      responseLogprobs: logprobs,
      reward: null,
      policyVersion: ctx.version,
      isLast: false,
      metadata,
      tokenSource: source,
      finishReason: captured.finishReason,
      messages: ctx.kind === 'chat' ? (request.messages as JsonObject[]) : null,
      tools: ctx.kind === 'chat' && Array.isArray(request.tools) ? (request.tools as JsonObject[]) : null,
      responseText: captured.content,
      toolCalls: captured.toolCalls.length > 0 ? (captured.toolCalls as unknown as JsonObject[]) : null,
      toolResults: null,
      latencyMs: endedAt - ctx.started,
      ttftMs: firstTokenAt !== null ? firstTokenAt - ctx.started : null,
      engineId: routed.engine.id,
      trainingPromptIds,
      routedExperts: null,
      multiModalData: null,
    };
    session.last = {
      index,
      calls: captured.toolCalls.map((c) => ({ id: c.id, name: c.function.name })),
      answered: false,
    };
    try {
      await this.write(session, [step], toolResults);
    } catch (error) {
      if (error instanceof ConflictError) throw error;
      const message = `the step of this call could not be stored (${(error as Error).message}); its answer is withheld so that no answered call goes unrecorded: send the call again`;
      void this.pool
        .recordCallFailure({
          channel: session.channel,
          trajectoryId: session.id,
          groupId: session.groupId,
          kind: 'capture_failed',
          engineId: routed.engine.id,
          status: 503,
          message,
          partial: null,
        })
        .catch((err: unknown) => this.logger?.warn({ err }, 'a failed capture could not be recorded'));
      throw new CaptureFailed(message, 503);
    }
    return step;
  }

  /** Commits steps and tool results through the pool's group commit; rejects when they are not stored. */
  private async write(
    session: Session,
    steps: NewStep[],
    toolResults: ToolResultAttachment[],
  ): Promise<void> {
    if (steps.length === 0 && toolResults.length === 0) return;
    const write = this.pool.submitSteps(steps, { channel: session.channel, toolResults });
    // Completing the trajectory waits for it, whatever its outcome.
    const tracked: Promise<void> = write
      .then(
        () => {},
        () => {},
      )
      .finally(() => session.writes.delete(tracked));
    session.writes.add(tracked);
    try {
      await write;
    } catch (error) {
      this.lostSteps += steps.length;
      if (error instanceof ConflictError) session.closed ??= 'closed';
      // The cache ran ahead of the store: the next call starts again from what is stored.
      else if (this.sessions.get(session.id) === session) this.sessions.delete(session.id);
      this.logger?.error(
        { err: error, trajectory: session.id, steps: steps.map((s) => s.index) },
        'a captured step could not be stored',
      );
      throw error;
    }
  }

  private record(
    session: Session,
    attachments: Attachments,
    failure: {
      kind: 'aborted' | 'upstream_error';
      engineId: string | null;
      status: number | null;
      message: string;
      partial: { promptTokens: number; responseIds: number[]; responseText: string } | null;
    },
  ): Promise<void> {
    // Best effort: the call failed already, its tool results go with the next call when these do not.
    const results = this.write(session, [], attachments()).catch(() => {});
    const recorded = this.pool
      .recordCallFailure({
        channel: session.channel,
        trajectoryId: session.id,
        groupId: session.groupId,
        ...failure,
      })
      .catch((err: unknown) => this.logger?.warn({ err }, 'a failed call could not be recorded'));
    return Promise.all([results, recorded]).then(() => {});
  }

  private fail(
    session: Session,
    attachments: Attachments,
    error: unknown,
    engine: Engine | null,
    aborted: boolean,
  ): void {
    this.record(session, attachments, {
      kind: aborted ? 'aborted' : 'upstream_error',
      engineId: engine?.id ?? null,
      status: aborted ? null : error instanceof StepwiseError ? error.status : 502,
      message: aborted ? 'the agent went away before the engine answered' : (error as Error).message,
      partial: null,
    });
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

export interface GenerateInput {
  promptIds: number[];
  /** Sampling parameters passed to the engine (max_tokens, temperature, top_p, stop, seed, ...). */
  sampling: Record<string, unknown>;
  trajectoryId: string | null;
  model?: string;
}

export interface GenerateOutput {
  prompt_ids: number[];
  response_ids: number[];
  text: string;
  logprobs: number[] | null;
  finish_reason: string | null;
  /** Claw-R1's names for response_ids, logprobs and finish_reason. */
  token_ids: number[];
  log_probs: number[] | null;
  stop_reason: string | null;
  engine_id: string;
  policy_version: number;
}

interface CallContext {
  session: Session;
  kind: CallKind;
  request: Record<string, unknown>;
  attachments: Attachments;
  version: number;
  started: number;
  routed: RoutedReply;
  clientGone(): boolean;
  finish(): void;
}

async function settle(session: Session): Promise<void> {
  while (session.writes.size > 0) await Promise.all(session.writes);
}

function callsOf(toolCalls: readonly Record<string, unknown>[] | null): AnsweredCall[] {
  return (toolCalls ?? []).map((c) => ({
    id: typeof c.id === 'string' ? c.id : '',
    name: isObject(c.function) && typeof c.function.name === 'string' ? c.function.name : '',
  }));
}

/**
 * Claw-R1's form of a chat answer: the completion's text as the model wrote it in `content`, no
 * `tool_calls`, and `stop` where the engine said `tool_calls` (Claw-R1's gateway answers vLLM's
 * completion text). `generated` is that text (the response ids decoded); without it (an engine that
 * sent no ids) the text is rendered from the parsed parts: reasoning, content, then each call as
 * Qwen3's `<tool_call>` block. Null when the answer holds no tool call or reasoning to fold in, or
 * (without `generated`) a call the template cannot render.
 */
export function rawToolCallAnswer(answer: Record<string, unknown>, generated: string | null): string | null {
  const choices = answer.choices as Record<string, unknown>[];
  let changed = false;
  const out = choices.map((choice) => {
    const message = isObject(choice.message) ? choice.message : null;
    if (!message) return choice;
    const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as ToolCall[]) : [];
    const reasoning = message.reasoning_content ?? message.reasoning;
    if (calls.length === 0 && typeof reasoning !== 'string') return choice;
    let text: string;
    try {
      text =
        generated ??
        renderCompletion({
          content: typeof message.content === 'string' ? message.content : null,
          ...(typeof reasoning === 'string' ? { reasoning } : {}),
          toolCalls: calls,
        });
    } catch {
      return choice;
    }
    changed = true;
    const { tool_calls: _calls, reasoning_content: _rc, reasoning: _r, ...rest } = message;
    return {
      ...choice,
      message: { ...rest, content: text },
      finish_reason: choice.finish_reason === 'tool_calls' ? 'stop' : choice.finish_reason,
    };
  });
  return changed ? JSON.stringify({ ...answer, choices: out }) : null;
}

/** The engine's answer parsed, when it is a completion (an object with choices); else null. */
function completionOf(bytes: Buffer): Record<string, unknown> | null {
  let answer: unknown;
  try {
    answer = JSON.parse(bytes.toString('utf8'));
  } catch {
    return null;
  }
  return isObject(answer) && Array.isArray(answer.choices) && answer.choices.length > 0 ? answer : null;
}

function partialOf(
  capture: CompletionCapture,
): { promptTokens: number; responseIds: number[]; responseText: string } | null {
  if (!capture.generated) return null;
  const r = capture.result();
  return {
    promptTokens: r.promptIds?.length ?? 0,
    responseIds: r.responseIds ?? [],
    responseText: r.content,
  };
}

function sseError(status: number, message: string, code = 'upstream_error'): string {
  return `data: ${JSON.stringify(openaiErrorBody(status, message, null, code))}\n\n`;
}

function promptText(prompt: unknown): string {
  if (typeof prompt === 'string') return prompt;
  if (Array.isArray(prompt) && typeof prompt[0] === 'string') return prompt[0];
  throw new ValidationError('prompt: a text prompt is needed to rebuild ids', 'prompt');
}

/** The agent's request, checked just enough to forward and capture it; the engine checks the rest. */
export function checkCallRequest(kind: CallKind, body: unknown): Record<string, unknown> {
  if (!isObject(body)) throw new ValidationError('body: must be a JSON object', 'body');
  if (kind === 'chat') {
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      throw new ValidationError('messages: must be a non-empty array of messages', 'messages');
    }
    body.messages.forEach((m, i) => {
      if (!isObject(m) || typeof m.role !== 'string') {
        throw new ValidationError(`messages.${i}: must be an object with a role`, `messages.${i}`);
      }
    });
    if (body.tools !== undefined && body.tools !== null && !Array.isArray(body.tools)) {
      throw new ValidationError('tools: must be an array', 'tools');
    }
  } else if (typeof body.prompt !== 'string' && !Array.isArray(body.prompt)) {
    throw new ValidationError('prompt: must be a string or an array of token ids', 'prompt');
  } else if (Array.isArray(body.prompt)) {
    checkPromptLength(body.prompt.length, 'prompt');
  }
  if (body.n !== undefined && body.n !== null && body.n !== 1) {
    throw new ValidationError(
      'n: only n=1 is supported (each choice would be its own step; send n separate requests, one trajectory each)',
      'n',
    );
  }
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') {
    throw new ValidationError('stream: must be a boolean', 'stream');
  }
  checkSamplingOptions(body);
  return body;
}

/** A prompt of ids longer than MAX_PROMPT_TOKENS is a 400 naming `field`. */
export function checkPromptLength(length: number, field: string): void {
  if (length > MAX_PROMPT_TOKENS)
    throw new ValidationError(
      `${field}: ${length} token ids; a call may send at most ${MAX_PROMPT_TOKENS} (MAX_PROMPT_TOKENS)`,
      field,
    );
}

/** What the gateway needs set in the engine's request: the served model, ids, logprobs, usage. */
function upstreamFields(
  kind: CallKind,
  request: Record<string, unknown>,
  engine: Engine,
  served: string[],
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (served.length > 0 && (typeof request.model !== 'string' || !served.includes(request.model)))
    out.model = served[0];
  if (engine.kind !== 'openai') {
    out.return_token_ids = true;
    if (kind === 'chat') out.logprobs = true;
    else if (typeof request.logprobs !== 'number') out.logprobs = 0;
  }
  // The usage chunk tells whether every generated id reached us (see Captured.idsIncomplete) and,
  // from a text-only engine, how far retokenizing drifts from its count. OpenAI's API has it too;
  // an agent that did not ask gets none.
  if (request.stream === true)
    out.stream_options = {
      ...(isObject(request.stream_options) ? request.stream_options : {}),
      include_usage: true,
    };
  return out;
}

/**
 * The engine's request body. When every field the gateway sets is absent from the agent's request
 * (or already has that value), it is the agent's own text with those fields appended before the
 * closing brace: a long conversation is forwarded without being printed again, byte for byte as
 * the agent sent it. A field the agent set differently means re-serializing (no duplicate keys).
 */
export function upstreamText(
  kind: CallKind,
  request: Record<string, unknown>,
  raw: string | null,
  engine: Engine,
  served: string[],
): string {
  const fields = upstreamFields(kind, request, engine, served);
  if (raw !== null) {
    let extra = '';
    let spliceable = true;
    for (const [key, value] of Object.entries(fields)) {
      if (!(key in request)) extra += `,${JSON.stringify(key)}:${JSON.stringify(value)}`;
      else if (JSON.stringify(request[key]) !== JSON.stringify(value)) {
        spliceable = false;
        break;
      }
    }
    const end = raw.lastIndexOf('}');
    if (spliceable && end > 0) return extra === '' ? raw : raw.slice(0, end) + extra + raw.slice(end);
  }
  return JSON.stringify({ ...request, ...fields });
}

/**
 * Rebuilt ids minus the engine's own counts (`usage`), for the prompt and the completion; null when
 * the engine sent no usage. Non-zero: the template or tokenizer here is not what the engine used.
 */
export function retokenizeDrift(
  promptIds: readonly number[],
  responseIds: readonly number[],
  usage: Captured['usage'],
): { prompt_tokens: number; completion_tokens: number } | null {
  if (typeof usage?.prompt_tokens !== 'number' || typeof usage.completion_tokens !== 'number') return null;
  return {
    prompt_tokens: promptIds.length - usage.prompt_tokens,
    completion_tokens: responseIds.length - usage.completion_tokens,
  };
}

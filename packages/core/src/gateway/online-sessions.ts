import type { Logger } from 'pino';
import {
  ChannelName,
  ConflictError,
  NotFoundError,
  parseOrThrow,
  StepwiseError,
  type Trajectory,
} from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import { classifyFeedback, excerpt, type FeedbackKind, latestUserTurn } from './feedback.js';
import type { InitTrajectoryInput, Session } from './session.js';
import { sessionOfStored } from './session-keys.js';

// Online sessions ("deployment = training"): each conversation of an assistant on a fixed base_url becomes
// one trajectory; the key map is a bounded cache of the store. docs/gateway.md#sessions-online-mode

export const DEFAULT_SESSION_CHANNEL = 'online';
export const FEEDBACK_SIGNAL = 'user_feedback';

/** Who calls: sessions are bound to the caller's key (null fingerprint: keys are off, the operator). */
export interface SessionOwner {
  fingerprint: string | null;
  /** The key holds only the `agent` scope: it may not choose its sessions' channel. */
  agentOnly: boolean;
}

/** What the sessions need from the gateway (the Gateway itself; a fake in unit tests). */
export interface SessionHost {
  readonly pool: DataPool;
  initTrajectory(input: InitTrajectoryInput): Promise<Trajectory>;
  session(id: string): Promise<Session>;
  completeTrajectory(
    id: string,
    input: { reward: number | null; status?: 'complete' | 'aborted' | 'infra_failed' },
  ): Promise<Trajectory>;
}

export interface OnlineSessionOptions {
  /** A session with no call for this long is completed (default 30 min). */
  idleMs?: number;
  /** The channel of session trajectories, the operator's choice (default `online`). */
  channel?: string;
  /** Open sessions kept in all; past it a key's least recently used idle one is completed early (default 10000). */
  maxSessions?: number;
  /** Open sessions one API key may hold; past it its own least recently used idle one is completed (default 1000). */
  maxSessionsPerKey?: number;
  logger?: Pick<Logger, 'warn' | 'info'> & Partial<Pick<Logger, 'debug'>>;
}

/** Counters of this process since it started (wire names). */
export interface SessionStats {
  open: number;
  max: number;
  max_per_key: number;
  channel: string;
  idle_ms: number;
  opened: number;
  restored: number;
  closed_idle: number;
  closed_evicted: number;
  closed_elsewhere: number;
  feedback: { thanks: number; correction: number; lost: number };
}

interface Entry {
  mapKey: string;
  /** The fingerprint of the key that opened it ('' with keys off). */
  owner: string;
  key: string;
  channel: string;
  trajectoryId: string;
  /** The gateway session of the trajectory, as of the last call (null until one is made). */
  session: Session | null;
  /** Calls between acquire and release. */
  pending: number;
  lastActive: number;
  /** The trajectory before this one, for feedback given in the first call after an idle close. */
  previous: { trajectoryId: string; lastStep: number | null } | null;
  /** The step whose implicit feedback was looked at last (one verdict per step). */
  feedbackMark: string | null;
}

interface Closed {
  trajectoryId: string;
  lastStep: number | null;
}

/** A user turn classified before its call was forwarded; recorded once the call is accepted. */
export interface PendingFeedback {
  trajectoryId: string;
  stepIndex: number;
  kind: FeedbackKind | null;
  text: string;
  mark: string;
  /** Step writes that must be committed before the signal can name the step. */
  prior: Promise<void>[];
}

/** One call of a session: the trajectory's gateway session, and what to do around the call. */
export interface SessionCall {
  session: Session;
  trajectoryId: string;
  /** Classifies the request's new user turn against the step it reacts to (null: nothing to record). */
  feedbackFor(body: Record<string, unknown>): PendingFeedback | null;
  /** Records the feedback as a `user_feedback` signal behind the answer. */
  recordFeedback(feedback: PendingFeedback): void;
  release(): void;
}

const noop = () => {};

export class OnlineSessions {
  readonly idleMs: number;
  readonly channel: string;
  readonly maxSessions: number;
  readonly maxSessionsPerKey: number;
  private readonly host: SessionHost;
  private readonly logger?: OnlineSessionOptions['logger'];
  /** Open sessions, least recently used first. */
  private readonly entries = new Map<string, Entry>();
  /** Open sessions by owner, and opens under way (counted against the caps before they finish). */
  private readonly owned = new Map<string, number>();
  private readonly opening = new Map<string, number>();
  /** Recently closed sessions (same bound), to link the next trajectory of the key. */
  private readonly closed = new Map<string, Closed>();
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly restored = new Map<string, Promise<void>>();
  private readonly background = new Set<Promise<void>>();
  private readonly timer: NodeJS.Timeout;
  private sweeping = false;
  private readonly counts = {
    opened: 0,
    restored: 0,
    closedIdle: 0,
    closedEvicted: 0,
    closedElsewhere: 0,
    thanks: 0,
    correction: 0,
    lost: 0,
  };

  constructor(host: SessionHost, options: OnlineSessionOptions = {}) {
    this.host = host;
    this.idleMs = options.idleMs ?? 30 * 60_000;
    this.channel = parseOrThrow(ChannelName, options.channel ?? DEFAULT_SESSION_CHANNEL, 'session_channel');
    this.maxSessions = options.maxSessions ?? 10_000;
    this.maxSessionsPerKey = Math.min(options.maxSessionsPerKey ?? 1_000, this.maxSessions);
    this.logger = options.logger;
    const every = Math.max(20, Math.min(15_000, Math.floor(this.idleMs / 4)));
    this.timer = setInterval(() => this.track(this.closeIdle()), every);
    this.timer.unref();
  }

  stats(): SessionStats {
    const c = this.counts;
    return {
      open: this.entries.size,
      max: this.maxSessions,
      max_per_key: this.maxSessionsPerKey,
      channel: this.channel,
      idle_ms: this.idleMs,
      opened: c.opened,
      restored: c.restored,
      closed_idle: c.closedIdle,
      closed_evicted: c.closedEvicted,
      closed_elsewhere: c.closedElsewhere,
      feedback: { thanks: c.thanks, correction: c.correction, lost: c.lost },
    };
  }

  /**
   * The channel of a caller's sessions: the operator's (`channel`); one named in X-Stepwise-Channel
   * only by the operator's own keys, or where that channel trusts agents (docs/security.md).
   */
  async channelFor(owner: SessionOwner, header: string | undefined): Promise<string> {
    if (header === undefined) return this.channel;
    const channel = parseOrThrow(ChannelName, header.trim(), 'X-Stepwise-Channel');
    if (channel === this.channel || !owner.agentOnly) return channel;
    const { pool } = this.host;
    if ((await pool.channelConfig(channel)).trust_agent_reward) return channel;
    const reason =
      `X-Stepwise-Channel: an agent's key cannot choose where its sessions go (channel '${this.channel}', ` +
      `--session-channel); the operator lets agents choose channel '${channel}' with trust_agent_reward: true ` +
      `on it (PUT /v1/channels/${channel})`;
    await pool.recordRefusal({
      channel,
      trajectoryId: null,
      by: 'gateway',
      attempts: [`X-Stepwise-Channel: ${channel}`],
      count: 1,
      reason,
    });
    throw new StepwiseError(reason, 403, 'forbidden', 'X-Stepwise-Channel');
  }

  /** The open trajectory of a session, opened (or read back from the store) on first use. */
  async acquire(
    owner: SessionOwner,
    key: string,
    channel: string,
    userAgent: string | null,
  ): Promise<SessionCall> {
    const ownerId = owner.fingerprint ?? '';
    const mapKey = `${ownerId}\u0000${channel}\u0000${key}`;
    for (let opens = 0; ; ) {
      const busy = this.locks.get(mapKey);
      if (busy) {
        await busy.then(noop, noop);
        continue;
      }
      const entry = this.entries.get(mapKey);
      if (entry) {
        entry.pending++;
        entry.lastActive = Date.now();
        this.entries.delete(mapKey);
        this.entries.set(mapKey, entry);
        try {
          const session = await this.host.session(entry.trajectoryId);
          entry.session = session;
          return this.callOf(entry, session);
        } catch (error) {
          entry.pending--;
          const closedElsewhere = error instanceof ConflictError || error instanceof NotFoundError;
          if (!closedElsewhere || opens >= 3) throw error;
          // Completed by someone else (an admin, the pool's idle sweep, a failed write): go on in a
          // new trajectory linked to it.
          if (this.entries.get(mapKey) === entry) {
            this.remove(entry);
            this.remember(mapKey, { trajectoryId: entry.trajectoryId, lastStep: lastStepOf(entry) });
            this.counts.closedElsewhere++;
          }
        }
      }
      if (opens++ >= 3) throw new ConflictError(`session ${key}: could not open a trajectory`);
      await this.locked(mapKey, () => this.open(mapKey, owner, key, channel, userAgent));
    }
  }

  private async open(
    mapKey: string,
    owner: SessionOwner,
    key: string,
    channel: string,
    userAgent: string | null,
  ): Promise<void> {
    await this.restore(channel);
    if (this.entries.has(mapKey)) return;
    const ownerId = owner.fingerprint ?? '';
    this.makeRoom(ownerId, owner.fingerprint !== null);
    const previous = this.closed.get(mapKey) ?? null;
    // Counted against the caps while the trajectory is opened: concurrent opens cannot pass them.
    bump(this.opening, ownerId, 1);
    let trajectory: Trajectory;
    try {
      trajectory = await this.host.initTrajectory({
        channel,
        // `source: session` with `session_owner` is what the read-back adopts: an agent's key can
        // write neither (init_trajectory refuses a metadata.source other than `agent`).
        metadata: {
          session_key: key,
          source: 'session',
          session_owner: owner.fingerprint,
          user_agent: userAgent,
          ...(previous ? { previous_trajectory: previous.trajectoryId } : {}),
        },
      });
    } finally {
      bump(this.opening, ownerId, -1);
    }
    this.closed.delete(mapKey);
    this.insert({
      mapKey,
      owner: ownerId,
      key,
      channel,
      trajectoryId: trajectory.id,
      session: null,
      pending: 0,
      lastActive: Date.now(),
      previous,
      feedbackMark: null,
    });
    this.counts.opened++;
    this.logger?.debug?.({ session_key: key, channel, trajectory: trajectory.id }, 'session opened');
  }

  /**
   * Reads back a channel's open session trajectories once per process (an indexed scan of the
   * channel's open trajectories), so a restarted gateway continues them. Also keeps the pool's idle
   * sweep, which aborts, from closing sessions before this class completes them.
   */
  private restore(channel: string): Promise<void> {
    let done = this.restored.get(channel);
    if (!done) {
      done = this.readBack(channel);
      this.restored.set(channel, done);
      done.catch(() => this.restored.delete(channel));
    }
    return done;
  }

  private async readBack(channel: string): Promise<void> {
    const { pool } = this.host;
    const config = await pool.channelConfig(channel);
    if (config.idle_timeout_ms !== null && config.idle_timeout_ms <= this.idleMs) {
      const raised = this.idleMs * 2;
      await pool.configureChannel(channel, { idle_timeout_ms: raised });
      this.logger?.info(
        { channel, idle_timeout_ms: raised, was: config.idle_timeout_ms, session_idle_ms: this.idleMs },
        "raised the session channel's idle_timeout_ms above --session-idle-ms: sessions end complete, not aborted by the idle sweep",
      );
    }
    let after: string | null = null;
    do {
      const page = await pool.store.scanTrajectories({ channel, status: 'open', after, limit: 500 });
      for (const t of page.items) {
        const found = sessionOfStored(t);
        if (found === null) continue;
        const { key, owner } = found;
        const mapKey = `${owner}\u0000${channel}\u0000${key}`;
        const older = this.entries.get(mapKey);
        // Two open trajectories for one key (two gateways split a session): keep the newer.
        if (older) this.closeLater(older, 'evicted');
        const previous = t.metadata.previous_trajectory;
        this.insert({
          mapKey,
          owner,
          key,
          channel,
          trajectoryId: t.id,
          session: null,
          pending: 0,
          // Refined from the last step's time before an idle close (see closeIfIdle).
          lastActive: t.createdAt,
          previous: typeof previous === 'string' ? { trajectoryId: previous, lastStep: null } : null,
          feedbackMark: null,
        });
        this.counts.restored++;
      }
      after = page.cursor;
    } while (after !== null);
  }

  private insert(entry: Entry): void {
    this.entries.set(entry.mapKey, entry);
    bump(this.owned, entry.owner, 1);
  }

  private remove(entry: Entry): void {
    if (this.entries.get(entry.mapKey) !== entry) return;
    this.entries.delete(entry.mapKey);
    bump(this.owned, entry.owner, -1);
  }

  /**
   * Room for one more session of `owner` under both caps: its own least recently used idle session
   * is completed early, never another key's; a 429 when it has none to give up.
   */
  private makeRoom(owner: string, keyed: boolean): void {
    const own = (this.owned.get(owner) ?? 0) + (this.opening.get(owner) ?? 0);
    let opening = 0;
    for (const n of this.opening.values()) opening += n;
    const ownFull = keyed && own >= this.maxSessionsPerKey;
    if (!ownFull && this.entries.size + opening < this.maxSessions) return;
    for (const candidate of this.entries.values()) {
      if (candidate.owner !== owner || this.busy(candidate) || this.locks.has(candidate.mapKey)) continue;
      this.closeLater(candidate, 'evicted');
      return;
    }
    throw new StepwiseError(
      ownFull
        ? `X-Stepwise-Session: this key has ${own} sessions open (--max-sessions-per-key ${this.maxSessionsPerKey}), each with a call in flight: try again once one ends`
        : `X-Stepwise-Session: the gateway holds its most open sessions (--max-sessions ${this.maxSessions}), none of them this key's to close: try again once sessions end (idle after --session-idle-ms ${this.idleMs})`,
      429,
      'too_many_sessions',
      'X-Stepwise-Session',
    );
  }

  private busy(entry: Entry): boolean {
    return entry.pending > 0 || (entry.session?.inFlight ?? 0) > 0;
  }

  private lastActivity(entry: Entry): number {
    return Math.max(entry.lastActive, entry.session?.usedAt ?? 0);
  }

  /** Leaves the map at once and completes in the background, under the key's lock. */
  private closeLater(entry: Entry, reason: 'evicted'): void {
    this.remove(entry);
    this.track(this.locked(entry.mapKey, () => this.complete(entry, reason)));
  }

  private async closeIdle(): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = true;
    try {
      const now = Date.now();
      for (const entry of [...this.entries.values()]) {
        if (this.busy(entry) || this.locks.has(entry.mapKey)) continue;
        if (now - this.lastActivity(entry) < this.idleMs) continue;
        await this.locked(entry.mapKey, () => this.closeIfIdle(entry)).catch((err: unknown) =>
          this.logger?.warn({ err, trajectory: entry.trajectoryId }, 'an idle session could not be closed'),
        );
      }
    } finally {
      this.sweeping = false;
    }
  }

  private async closeIfIdle(entry: Entry): Promise<void> {
    if (this.entries.get(entry.mapKey) !== entry) return;
    const { pool } = this.host;
    const stored = await pool.getTrajectory(entry.trajectoryId);
    if (stored?.status !== 'open') {
      this.remove(entry);
      this.remember(entry.mapKey, { trajectoryId: entry.trajectoryId, lastStep: lastStored(stored) });
      this.counts.closedElsewhere++;
      return;
    }
    // Another process may have written to it (a restored session, a shared store): its last step's
    // time is the activity that counts.
    const last = lastStored(stored);
    if (last !== null) {
      const step = await pool.getStep(stored.id, last);
      if (step) entry.lastActive = Math.max(entry.lastActive, step.createdAt);
    }
    if (this.busy(entry) || Date.now() - this.lastActivity(entry) < this.idleMs) return;
    this.remove(entry);
    await this.complete(entry, 'idle');
  }

  /** Completes a session's trajectory (it has left the map already). */
  private async complete(entry: Entry, reason: 'idle' | 'evicted'): Promise<void> {
    let lastStep = lastStepOf(entry);
    try {
      await this.host.pool.mergeTrajectoryMetadata(entry.trajectoryId, { session_closed: reason });
      const t = await this.host.completeTrajectory(entry.trajectoryId, { reward: null, status: 'complete' });
      lastStep = lastStored(t);
      if (reason === 'idle') this.counts.closedIdle++;
      else this.counts.closedEvicted++;
      this.logger?.debug?.(
        { session_key: entry.key, trajectory: entry.trajectoryId, reason },
        'session closed',
      );
    } catch (error) {
      if (error instanceof ConflictError || error instanceof NotFoundError) this.counts.closedElsewhere++;
      else {
        // The pool's idle sweep remains the backstop for a trajectory left open here.
        this.logger?.warn({ err: error, trajectory: entry.trajectoryId }, 'a session could not be completed');
      }
    }
    this.remember(entry.mapKey, { trajectoryId: entry.trajectoryId, lastStep });
  }

  private remember(mapKey: string, closed: Closed): void {
    this.closed.delete(mapKey);
    this.closed.set(mapKey, closed);
    if (this.closed.size > this.maxSessions) {
      const oldest = this.closed.keys().next().value;
      if (oldest !== undefined) this.closed.delete(oldest);
    }
  }

  private async locked<T>(mapKey: string, work: () => Promise<T>): Promise<T> {
    while (this.locks.has(mapKey)) await this.locks.get(mapKey)!.then(noop, noop);
    const running = work();
    this.locks.set(mapKey, running);
    try {
      return await running;
    } finally {
      if (this.locks.get(mapKey) === running) this.locks.delete(mapKey);
    }
  }

  private track(work: Promise<void>): void {
    const tracked = work
      .catch((err: unknown) => this.logger?.warn({ err }, 'session housekeeping failed'))
      .finally(() => this.background.delete(tracked));
    this.background.add(tracked);
  }

  private callOf(entry: Entry, session: Session): SessionCall {
    let released = false;
    return {
      session,
      trajectoryId: entry.trajectoryId,
      feedbackFor: (body) => this.feedbackFor(entry, session, body),
      recordFeedback: (feedback) => this.recordFeedback(entry, session, feedback),
      release: () => {
        if (released) return;
        released = true;
        entry.pending--;
        entry.lastActive = Date.now();
      },
    };
  }

  private feedbackFor(entry: Entry, session: Session, body: Record<string, unknown>): PendingFeedback | null {
    if (!Array.isArray(body.messages)) return null;
    // The step the user reacts to: this trajectory's last answer or, on the first call after an
    // idle close, the previous trajectory's.
    let target: { trajectoryId: string; stepIndex: number } | null = null;
    if (session.last) target = { trajectoryId: session.id, stepIndex: session.last.index };
    else if (session.nextIndex === 0 && entry.previous?.lastStep != null) {
      target = { trajectoryId: entry.previous.trajectoryId, stepIndex: entry.previous.lastStep };
    }
    if (!target) return null;
    const mark = `${target.trajectoryId}:${target.stepIndex}`;
    if (entry.feedbackMark === mark) return null;
    const text = latestUserTurn(body.messages);
    if (text === null) return null;
    return {
      ...target,
      kind: classifyFeedback(text),
      text,
      mark,
      prior: target.trajectoryId === session.id ? [...session.writes] : [],
    };
  }

  private recordFeedback(entry: Entry, session: Session, feedback: PendingFeedback): void {
    entry.feedbackMark = feedback.mark;
    const { kind } = feedback;
    if (kind === null) return;
    const write: Promise<void> = Promise.all(feedback.prior)
      .then(() =>
        this.host.pool.addSignals([
          {
            trajectoryId: feedback.trajectoryId,
            stepIndex: feedback.stepIndex,
            name: FEEDBACK_SIGNAL,
            value: kind === 'thanks' ? 1 : -1,
            // The user's turn reaches us through the agent's harness: its word, counted only where
            // a channel's combination names `user:` (docs/rewards.md).
            source: 'user',
            details: { implicit: true, kind, text_excerpt: excerpt(feedback.text) },
          },
        ]),
      )
      .then(
        () => {
          this.counts[kind]++;
        },
        (err: unknown) => {
          this.counts.lost++;
          this.logger?.warn(
            { err, trajectory: feedback.trajectoryId, step: feedback.stepIndex },
            'implicit feedback could not be recorded',
          );
        },
      )
      .finally(() => session.writes.delete(write));
    // Completing the trajectory (and shutdown) waits for it like for a step write.
    session.writes.add(write);
  }

  /** Stops the idle timer and waits for closes in progress; open sessions stay open (a restart continues them). */
  async close(): Promise<void> {
    clearInterval(this.timer);
    while (this.background.size > 0) await Promise.all(this.background);
  }
}

function bump(counts: Map<string, number>, owner: string, by: number): void {
  const n = (counts.get(owner) ?? 0) + by;
  if (n > 0) counts.set(owner, n);
  else counts.delete(owner);
}

/** The gateway numbers a trajectory's steps 0, 1, 2, ...: the last one is nSteps − 1. */
function lastStored(t: Trajectory | null): number | null {
  return t && t.nSteps > 0 ? t.nSteps - 1 : null;
}

function lastStepOf(entry: Entry): number | null {
  if (!entry.session) return null;
  return entry.session.nextIndex > 0 ? entry.session.nextIndex - 1 : null;
}

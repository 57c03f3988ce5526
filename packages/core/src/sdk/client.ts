import { Agent, type Dispatcher, request } from 'undici';
import { StepwiseError } from '../domain/errors.js';
import type {
  ChannelConfig,
  ChannelConfigPatch,
  EvidenceEntry,
  Group,
  Label,
  LabelInput,
  PoolEvent,
  SignalOut,
  SignalWire,
  StepOut,
  StepWireInput,
  TrajectoryOut,
} from '../domain/index.js';
import { LEASE_HEADERS } from '../domain/wire-headers.js';
import type { BatchJson, TrajectoryRowsBatchJson } from '../serving/json-batch.js';
import type { PoolStats } from '../store/store.js';

export interface StepwiseClientOptions {
  baseUrl: string;
  apiKey?: string;
  /** Per-request timeout for calls that do not long-poll. */
  timeoutMs?: number;
  /** Connection pool to use; by default each client keeps its own keep-alive pool. */
  dispatcher?: Dispatcher;
}

/** A server's error answer, with its status, code and field; 5xx and 429 are worth a retry. */
export class StepwiseHttpError extends StepwiseError {
  override readonly name = 'StepwiseHttpError';
  constructor(
    status: number,
    code: string,
    message: string,
    field?: string,
    /** The request's URL and the response body as sent, for messages and debugging. */
    readonly url?: string,
    readonly responseBody?: string,
  ) {
    super(message, status, code, field, status >= 500 || status === 429);
  }
}

type ErrorBody = { error?: { code?: string; message?: string; field?: string } };

/** The error a non-2xx answer becomes: the server's code, message and field when it sent them. */
function httpError(status: number, data: ErrorBody | null, text: string, url: string): StepwiseHttpError {
  const err = data?.error ?? {};
  return new StepwiseHttpError(status, err.code ?? 'http_error', err.message ?? text, err.field, url, text);
}

export interface LeaseOptions {
  batchSize: number;
  nRollouts?: number;
  channel?: string;
  maxStaleness?: number;
  waitMs?: number;
  consumer?: string;
  ttlMs?: number;
  /** Adds each trajectory's (and step's) group-relative advantage. */
  advantage?: 'grpo' | 'drgrpo' | 'rloo';
  /** `json` only: a prefix-tree packing of each group's steps. */
  pack?: 'prefix_tree';
  /** With `pack`: merge identical response prefixes across rollouts (a token may belong to several steps). */
  shareResponses?: boolean;
}

/** The wire fields every lease request shares. */
function leaseFields(options: Omit<LeaseOptions, 'pack' | 'shareResponses'>): Record<string, unknown> {
  return {
    channel: options.channel,
    batch_size: options.batchSize,
    n_rollouts: options.nRollouts,
    max_staleness: options.maxStaleness,
    wait_ms: options.waitMs ?? 0,
    consumer: options.consumer,
    ttl_ms: options.ttlMs,
    advantage: options.advantage,
  };
}

export interface BinaryLeaseOptions extends Omit<LeaseOptions, 'pack' | 'shareResponses'> {
  format: 'arrow' | 'padded';
  /** `trajectory`: each trajectory stitched into one sequence with a loss mask (docs/serving.md#trajectory-rows). */
  rows?: 'step' | 'trajectory';
  /** `padded`: widths (default: the longest in the batch), what to do with longer steps, pad id. */
  promptLength?: number;
  responseLength?: number;
  overlong?: 'reject' | 'truncate' | 'drop';
  padTokenId?: number;
}

/** A batch in a binary format: the bytes as served, the lease from the headers. */
export interface BinaryBatch {
  leaseId: string;
  expiresAt: number;
  format: 'arrow' | 'padded';
  rows: number;
  truncatedSteps: number;
  droppedSteps: number;
  /** Arrow IPC stream (read with apache-arrow's `tableFromIPC`) or an `.npz` (docs/serving.md). */
  body: Uint8Array;
}

export interface ListOptions {
  channel?: string;
  trajectoryUid?: string;
  promptUid?: string;
  taskId?: string;
  rewardMin?: number;
  rewardMax?: number;
  status?: string;
  trainable?: boolean;
  quality?: string;
  label?: string;
  limit?: number;
  offset?: number;
}

/** A prompt the scheduler handed out: roll it out `nRollouts` times, as one group. */
export interface ScheduledPrompt {
  taskId: string;
  taskSet: string;
  nRollouts: number;
  /** Its difficulty pool when handed out (`unseen`, `learnable`, `retest`, `easy`, `hard`). */
  pool: string;
}

interface ScheduledPromptWire {
  task_id: string;
  task_set: string;
  n_rollouts: number;
  pool: string;
}

export interface InitTrajectoryOptions {
  /** Joins (or opens) this prompt group; the server names a new one when omitted. */
  groupId?: string;
  channel?: string;
  nRollouts?: number;
  metadata?: Record<string, unknown>;
  /** ActGuide-RL: a guided rollout (trained off-policy) or a probe (never trained), not both. */
  guided?: boolean;
  probe?: boolean;
  guidanceK?: number;
  guidanceHint?: string;
  guidanceMode?: 'user_prompt' | 'assistant_prefix';
  /** The group waits in pending_guidance when none of its rollouts scores above this (runner scope). */
  holdForGuidance?: number;
  /** The agent reads tool calls from the raw `<tool_call>` text in content. */
  rawToolCalls?: boolean;
  /** This episode's limits, each only tighter than its channel's (docs/datapool.md#episode-policy). */
  episode?: {
    max_turns?: number;
    max_prompt_tokens?: number;
    max_response_tokens?: number;
    max_total_tokens?: number;
  };
  /**
   * While the channel's staleness budget is spent (a 429 `staleness_budget`: admission control),
   * wait and ask again (default), or throw at once (`false`).
   */
  waitForBudget?: boolean;
  /** Stops the wait for budget. */
  signal?: AbortSignal;
}

/** An opened trajectory: the agent's LLM calls go to `base_url`. */
export interface InitTrajectoryResult {
  trajectory_uid: string;
  group_id: string;
  channel: string;
  base_url: string;
}

/** A typed client for producers (agents) and consumers (trainers) of the Stepwise HTTP API. */
export class StepwiseClient {
  private readonly baseUrl: string;
  private readonly dispatcher: Dispatcher;
  private readonly ownsDispatcher: boolean;

  constructor(private readonly options: StepwiseClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    // undici's request() costs a fraction of fetch()'s CPU per call, which matters to producers.
    this.dispatcher = options.dispatcher ?? new Agent({ keepAliveTimeout: 10_000, connections: 256 });
    this.ownsDispatcher = !options.dispatcher;
  }

  /** Closes the client's own connections (a no-op for a shared dispatcher). */
  async close(): Promise<void> {
    if (this.ownsDispatcher) await this.dispatcher.close();
  }

  private async request<T>(
    method: string,
    path: string,
    body?: unknown,
    timeoutMs = this.options.timeoutMs ?? 30_000,
  ): Promise<{ status: number; data: T | null }> {
    const headers: Record<string, string> = {};
    // Bytes go as they are (evidence blobs); anything else as JSON.
    const raw = body instanceof Uint8Array;
    if (body !== undefined) headers['content-type'] = raw ? 'application/octet-stream' : 'application/json';
    if (this.options.apiKey) headers.authorization = `Bearer ${this.options.apiKey}`;
    const url = `${this.baseUrl}${path}`;
    const response = await request(url, {
      method: method as Dispatcher.HttpMethod,
      headers,
      body: body === undefined ? undefined : raw ? body : JSON.stringify(body),
      dispatcher: this.dispatcher,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    if (response.statusCode === 204) {
      await response.body.dump();
      return { status: 204, data: null };
    }
    const text = await response.body.text();
    let data: ErrorBody | null = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      throw new StepwiseHttpError(
        response.statusCode,
        'bad_response',
        `unparseable response: ${text.slice(0, 200)}`,
        undefined,
        url,
        text,
      );
    }
    if (response.statusCode >= 400) throw httpError(response.statusCode, data, text, url);
    return { status: response.statusCode, data: data as T };
  }

  async submitSteps(
    steps: StepWireInput[],
    options: { channel?: string; nRollouts?: number } = {},
  ): Promise<{ inserted: number; duplicates: number; completed: string[]; channel: string }> {
    const { data } = await this.request<{
      inserted: number;
      duplicates: number;
      completed: string[];
      channel: string;
    }>('POST', '/v1/steps', { steps, channel: options.channel, n_rollouts: options.nRollouts });
    return data!;
  }

  async completeTrajectory(
    trajectoryUid: string,
    options: { reward?: number | null; status?: 'complete' | 'aborted' | 'infra_failed' } = {},
  ): Promise<TrajectoryOut> {
    const { data } = await this.request<TrajectoryOut>(
      'POST',
      `/v1/trajectories/${encodeURIComponent(trajectoryUid)}/complete`,
      options,
    );
    return data!;
  }

  /** Opens a trajectory (POST /init_trajectory) for an agent to run under its base_url. */
  async initTrajectory(options: InitTrajectoryOptions = {}): Promise<InitTrajectoryResult> {
    // Admission control: the first rollout of a new group waits until the trainer frees budget.
    for (let delay = 250; ; delay = Math.min(delay * 1.5, 2_000)) {
      try {
        return await this.initOnce(options);
      } catch (error) {
        const busy = error instanceof StepwiseHttpError && error.code === 'staleness_budget';
        if (!busy || options.waitForBudget === false) throw error;
        await sleep(delay, options.signal);
      }
    }
  }

  private async initOnce(options: InitTrajectoryOptions): Promise<InitTrajectoryResult> {
    const { data } = await this.request<InitTrajectoryResult>('POST', '/init_trajectory', {
      group_id: options.groupId,
      channel: options.channel,
      n_rollouts: options.nRollouts,
      metadata: options.metadata,
      guided: options.guided,
      probe: options.probe,
      guidance_k: options.guidanceK,
      guidance_hint: options.guidanceHint,
      guidance_mode: options.guidanceMode,
      hold_for_guidance: options.holdForGuidance,
      raw_tool_calls: options.rawToolCalls,
      episode: options.episode,
    });
    return data!;
  }

  /** Merges keys into a trajectory's metadata (the owner's route: runner scope). */
  async mergeTrajectoryMetadata(
    trajectoryUid: string,
    metadata: Record<string, unknown>,
  ): Promise<TrajectoryOut> {
    const { data } = await this.request<TrajectoryOut>(
      'POST',
      `/v1/trajectories/${encodeURIComponent(trajectoryUid)}/metadata`,
      { metadata },
    );
    return data!;
  }

  /** Records what a trust boundary outside the server (the gym's sandbox bridge) refused, as events. */
  async reportRefusals(
    trajectoryUid: string,
    refusals: { attempts: string[]; count?: number; reason: string },
  ): Promise<{ trajectory_uid: string; recorded: number }> {
    const { data } = await this.request<{ trajectory_uid: string; recorded: number }>(
      'POST',
      `/v1/trajectories/${encodeURIComponent(trajectoryUid)}/refusals`,
      refusals,
    );
    return data!;
  }

  /** Which of these evidence blobs the server lacks (docs/datapool.md#evidence; runner scope). */
  async missingEvidenceBlobs(sha256s: string[]): Promise<string[]> {
    const missing: string[] = [];
    for (let i = 0; i < sha256s.length; i += 100_000) {
      const chunk = sha256s.slice(i, i + 100_000);
      const { data } = await this.request<{ missing: string[] }>('POST', '/v1/evidence/missing', {
        sha256: chunk,
      });
      missing.push(...data!.missing);
    }
    return missing;
  }

  /** Uploads one evidence blob under its sha256; true when the server did not have it. */
  async putEvidenceBlob(sha256: string, content: Uint8Array): Promise<boolean> {
    const { data } = await this.request<{ stored: boolean }>(
      'PUT',
      `/v1/evidence/blobs/${encodeURIComponent(sha256)}`,
      content,
    );
    return data!.stored;
  }

  /** Keeps what a trajectory's verifier read, once (its blobs uploaded first). */
  async keepEvidence(
    trajectoryUid: string,
    evidence: { entries: EvidenceEntry[]; final_message: string | null },
  ): Promise<{ trajectory_uid: string; files: number; bytes: number; created_at: number }> {
    const { data } = await this.request<{
      trajectory_uid: string;
      files: number;
      bytes: number;
      created_at: number;
    }>('PUT', `/v1/trajectories/${encodeURIComponent(trajectoryUid)}/evidence`, evidence);
    return data!;
  }

  /** Adds reward or quality signals to trajectories or their steps (runner or trainer scope). */
  async addSignals(signals: SignalWire[]): Promise<SignalOut[]> {
    return (await this.request<{ signals: SignalOut[] }>('POST', '/v1/signals', { signals })).data!.signals;
  }

  /** Leases a batch of ready groups; null when none became ready within waitMs. */
  async lease(options: LeaseOptions): Promise<BatchJson | null> {
    const waitMs = options.waitMs ?? 0;
    const { data } = await this.request<BatchJson>(
      'POST',
      '/v1/batches/lease',
      { ...leaseFields(options), pack: options.pack, share_responses: options.shareResponses },
      waitMs + (this.options.timeoutMs ?? 30_000),
    );
    return data;
  }

  /**
   * Leases a batch with each trajectory stitched into rows (one token sequence with a loss mask,
   * split at prefix breaks); null when none became ready within waitMs.
   */
  async leaseTrajectoryRows(
    options: Omit<LeaseOptions, 'pack' | 'shareResponses'>,
  ): Promise<TrajectoryRowsBatchJson | null> {
    const waitMs = options.waitMs ?? 0;
    const { data } = await this.request<TrajectoryRowsBatchJson>(
      'POST',
      '/v1/batches/lease',
      { ...leaseFields(options), rows: 'trajectory' },
      waitMs + (this.options.timeoutMs ?? 30_000),
    );
    return data;
  }

  /** Leases a batch as Arrow or verl's padded layout; null when none became ready within waitMs. */
  async leaseBinary(options: BinaryLeaseOptions): Promise<BinaryBatch | null> {
    const waitMs = options.waitMs ?? 0;
    const timeoutMs = waitMs + (this.options.timeoutMs ?? 30_000);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.options.apiKey) headers.authorization = `Bearer ${this.options.apiKey}`;
    const url = `${this.baseUrl}/v1/batches/lease`;
    const response = await request(url, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        ...leaseFields(options),
        format: options.format,
        rows: options.rows,
        prompt_length: options.promptLength,
        response_length: options.responseLength,
        overlong: options.overlong,
        pad_token_id: options.padTokenId,
      }),
      dispatcher: this.dispatcher,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    if (response.statusCode === 204) {
      await response.body.dump();
      return null;
    }
    if (response.statusCode >= 400) {
      const text = await response.body.text();
      let data: ErrorBody | null = null;
      try {
        data = JSON.parse(text) as ErrorBody;
      } catch {}
      throw httpError(response.statusCode, data, text, url);
    }
    const header = (name: string) => String(response.headers[name] ?? '');
    return {
      leaseId: header(LEASE_HEADERS.leaseId),
      expiresAt: Number(header(LEASE_HEADERS.leaseExpiresAt)),
      format: options.format,
      rows: Number(header(LEASE_HEADERS.rows)),
      truncatedSteps: Number(header(LEASE_HEADERS.truncatedSteps)),
      droppedSteps: Number(header(LEASE_HEADERS.droppedSteps)),
      body: new Uint8Array(await response.body.arrayBuffer()),
    };
  }

  async ack(leaseId: string): Promise<{ lease_id: string; state: string; groups: number }> {
    return (
      await this.request<{ lease_id: string; state: string; groups: number }>(
        'POST',
        `/v1/batches/${leaseId}/ack`,
      )
    ).data!;
  }

  async nack(leaseId: string): Promise<{ lease_id: string; state: string; groups: number }> {
    return (
      await this.request<{ lease_id: string; state: string; groups: number }>(
        'POST',
        `/v1/batches/${leaseId}/nack`,
      )
    ).data!;
  }

  async setPolicyVersion(version: number): Promise<void> {
    await this.request('PUT', '/v1/policy-version', { version });
  }

  async stats(channel?: string): Promise<PoolStats> {
    const q = channel ? `?channel=${encodeURIComponent(channel)}` : '';
    return (await this.request<PoolStats>('GET', `/v1/stats${q}`)).data!;
  }

  async events(cursor = 0, options: { limit?: number; channel?: string; types?: string[] } = {}) {
    const params = new URLSearchParams({ cursor: String(cursor) });
    if (options.limit) params.set('limit', String(options.limit));
    if (options.channel) params.set('channel', options.channel);
    if (options.types?.length) params.set('type', options.types.join(','));
    return (await this.request<{ events: PoolEvent[]; cursor: number }>('GET', `/v1/events?${params}`)).data!;
  }

  async listSteps(options: ListOptions = {}): Promise<{ total: number; items: StepOut[] }> {
    return (
      await this.request<{ total: number; items: StepOut[] }>('GET', `/v1/steps?${listParams(options)}`)
    ).data!;
  }

  async listTrajectories(options: ListOptions = {}): Promise<{ total: number; items: TrajectoryOut[] }> {
    return (
      await this.request<{ total: number; items: TrajectoryOut[] }>(
        'GET',
        `/v1/trajectories?${listParams(options)}`,
      )
    ).data!;
  }

  async getTrajectory(trajectoryUid: string): Promise<TrajectoryOut & { steps: StepOut[]; labels: Label[] }> {
    return (
      await this.request<TrajectoryOut & { steps: StepOut[]; labels: Label[] }>(
        'GET',
        `/v1/trajectories/${encodeURIComponent(trajectoryUid)}`,
      )
    ).data!;
  }

  async addLabels(labels: LabelInput[]): Promise<Label[]> {
    return (await this.request<{ labels: Label[] }>('POST', '/v1/labels', { labels })).data!.labels;
  }

  /**
   * Holds a group back from trainers for ActGuide guidance (admin scope). A group already leased is
   * refused with a 409 StepwiseHttpError.
   */
  async holdForGuidance(channel: string, groupId: string): Promise<Group> {
    return (
      await this.request<{ group: Group }>('POST', '/v1/groups/guidance', {
        channel,
        group_id: groupId,
        action: 'hold',
      })
    ).data!.group;
  }

  /** Releases a guidance hold (admin scope): `replaced` by a guided group, `abandoned`, or by an `operator`. */
  async releaseGuidance(
    channel: string,
    groupId: string,
    reason: 'replaced' | 'abandoned' | 'operator',
  ): Promise<Group> {
    return (
      await this.request<{ group: Group }>('POST', '/v1/groups/guidance', {
        channel,
        group_id: groupId,
        action: 'release',
        reason,
      })
    ).data!.group;
  }

  /**
   * Registers a channel's prompts for the scheduler (docs/datapool.md#prompt-scheduler), in order;
   * prompts already registered keep their place and history.
   */
  async registerPrompts(
    channel: string,
    prompts: { taskId: string; taskSet?: string }[],
  ): Promise<{ added: number; total: number }> {
    let added = 0;
    let total = 0;
    // The server takes 10,000 a request.
    for (let i = 0; i < prompts.length || i === 0; i += 10_000) {
      const chunk = prompts.slice(i, i + 10_000).map((p) => ({ task_id: p.taskId, task_set: p.taskSet }));
      const { data } = await this.request<{ added: number; total: number }>(
        'PUT',
        `/v1/channels/${encodeURIComponent(channel)}/prompts`,
        { prompts: chunk },
      );
      added += data!.added;
      total = data!.total;
    }
    return { added, total };
  }

  /** What to roll out next: up to `count` prompts not in flight, each with its number of rollouts. */
  async nextPrompts(channel: string, count = 1, taskSet?: string): Promise<ScheduledPrompt[]> {
    const { data } = await this.request<{ prompts: ScheduledPromptWire[] }>(
      'POST',
      `/v1/channels/${encodeURIComponent(channel)}/prompts/next`,
      { count, task_set: taskSet },
    );
    return data!.prompts.map((p) => ({
      taskId: p.task_id,
      taskSet: p.task_set,
      nRollouts: p.n_rollouts,
      pool: p.pool,
    }));
  }

  /**
   * What happened in a channel under each policy version: prompts handed out, groups ready and
   * dropped by reason, batches leased and their fill time (docs/datapool.md#the-report-per-version).
   */
  async versionReport(channel: string): Promise<Record<string, unknown>[]> {
    const { data } = await this.request<{ versions: Record<string, unknown>[] }>(
      'GET',
      `/v1/channels/${encodeURIComponent(channel)}/report`,
    );
    return data!.versions;
  }

  async configureChannel(channel: string, patch: ChannelConfigPatch): Promise<ChannelConfig> {
    return (
      await this.request<{ config: ChannelConfig }>(
        'PUT',
        `/v1/channels/${encodeURIComponent(channel)}`,
        patch,
      )
    ).data!.config;
  }

  async ready(): Promise<boolean> {
    try {
      await this.request('GET', '/ready', undefined, 2_000);
      return true;
    } catch {
      return false;
    }
  }
}

function listParams(o: ListOptions): URLSearchParams {
  const p = new URLSearchParams();
  const set = (key: string, value: unknown) => {
    if (value !== undefined && value !== null) p.set(key, String(value));
  };
  set('channel', o.channel);
  set('trajectory_uid', o.trajectoryUid);
  set('prompt_uid', o.promptUid);
  set('task_id', o.taskId);
  set('reward_min', o.rewardMin);
  set('reward_max', o.rewardMax);
  set('status', o.status);
  set('trainable', o.trainable);
  set('quality', o.quality);
  set('label', o.label);
  set('limit', o.limit);
  set('offset', o.offset);
  return p;
}

/** Waits `ms`, or rejects when `signal` aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

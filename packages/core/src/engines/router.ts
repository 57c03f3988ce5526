import type { Logger } from 'pino';
import { z } from 'zod';
import { fromZodError, StepwiseError } from '../domain/errors.js';
import type { ModelAdapter } from '../text/model-adapter.js';
import type { ModelRef } from '../text/model-ref.js';
import { type EngineKind, type Transport, UpstreamError, type UpstreamReply } from './upstream.js';

/*
 * Spreads calls over the configured engines: a trajectory stays on the engine that served it (its
 * prefix is in that engine's KV cache), new trajectories go to the healthy engine with the fewest
 * outstanding requests. A call is retried on another engine only when no byte of it reached the
 * first (connection refused, unresolvable host): a generation that started is never run twice.
 */

/**
 * `GET /v1/models` as OpenAI-compatible engines answer it. An entry that is no object or has no string
 * id is skipped, and a `max_model_len` (vLLM's) that is no positive integer is unknown.
 */
const ModelList = z.looseObject({
  data: z
    .array(
      z
        .looseObject({
          id: z.string().optional().catch(undefined),
          max_model_len: z.number().int().positive().optional().catch(undefined),
        })
        .nullable()
        .catch(null),
    )
    .nullish(),
});

export interface Engine {
  id: string;
  kind: EngineKind;
  transport: Transport;
  /** The model's adapter when the engine names a folder (`,model-dir=DIR`); Qwen3's built-in one otherwise. */
  adapter?: ModelAdapter;
  /** The folder `adapter` was read from, as a value other threads can load it by (text/model-ref.ts). */
  model?: ModelRef;
}

interface EngineState extends Engine {
  outstanding: number;
  healthy: boolean;
  /** Served model names from `GET /v1/models` (refreshed by health checks). */
  models: string[];
  /** The first served model's context length, where the engine reports it (vLLM's `max_model_len`). */
  maxModelLen: number | null;
  /** Why the engine is out of routing (a weight switch it failed), until a switch succeeds on it. */
  disabled: string | null;
}

/** An engine as `/v1/stats` reports it. */
export interface EngineStatus {
  id: string;
  kind: Engine['kind'];
  healthy: boolean;
  outstanding: number;
  /** Why it is out of routing, or null when it serves. */
  disabled: string | null;
}

/** A call in progress on one engine; `done()` once its body is consumed or abandoned. */
export interface RoutedReply {
  engine: Engine;
  reply: UpstreamReply;
  done(): void;
}

export interface RouterOptions {
  healthIntervalMs?: number;
  /** Most trajectories remembered for affinity (oldest forgotten first). */
  maxAffinity?: number;
  logger?: Pick<Logger, 'warn' | 'info'>;
}

export class EngineRouter {
  private readonly engines: EngineState[];
  private readonly affinity = new Map<string, EngineState>();
  private readonly maxAffinity: number;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    engines: Engine[],
    private readonly options: RouterOptions = {},
  ) {
    if (engines.length === 0) throw new StepwiseError('no engine configured', 500, 'no_engine');
    this.engines = engines.map((e) => ({
      ...e,
      outstanding: 0,
      healthy: true,
      models: [],
      maxModelLen: null,
      disabled: null,
    }));
    this.maxAffinity = options.maxAffinity ?? 100_000;
  }

  get size(): number {
    return this.engines.length;
  }

  /** Checks every engine now, then every healthIntervalMs (default 5 s). */
  async start(): Promise<this> {
    await this.checkHealth();
    const every = this.options.healthIntervalMs ?? 5_000;
    this.timer = setInterval(() => void this.checkHealth(), every);
    this.timer.unref();
    return this;
  }

  async checkHealth(): Promise<void> {
    await Promise.all(
      this.engines.map(async (engine) => {
        const signal = AbortSignal.timeout(5_000);
        try {
          const reply = await engine.transport.send('GET', '/v1/models', null, signal);
          const text = await reply.text();
          const ok = reply.status === 200;
          if (ok) {
            const list = ModelList.safeParse(JSON.parse(text));
            if (!list.success) {
              return this.mark(engine, false, `GET /v1/models: ${fromZodError(list.error).message}`);
            }
            const served = (list.data.data ?? []).flatMap((m) =>
              m?.id === undefined ? [] : [{ id: m.id, maxModelLen: m.max_model_len ?? null }],
            );
            engine.models = served.map((m) => m.id);
            engine.maxModelLen = served[0]?.maxModelLen ?? null;
          }
          this.mark(engine, ok, ok ? '' : `GET /v1/models answered ${reply.status}`);
        } catch (error) {
          this.mark(engine, false, (error as Error).message);
        }
      }),
    );
  }

  private mark(engine: EngineState, healthy: boolean, why: string): void {
    if (engine.healthy !== healthy) {
      if (healthy) this.options.logger?.info({ engine: engine.id }, 'engine is healthy again');
      else this.options.logger?.warn({ engine: engine.id, why }, 'engine is unhealthy');
    }
    engine.healthy = healthy;
  }

  /** The configured engines. */
  engineList(): readonly Engine[] {
    return this.engines;
  }

  /** A configured engine by id. */
  engine(engineId: string): Engine | undefined {
    return this.engines.find((e) => e.id === engineId);
  }

  /** The model names an engine serves (empty until its first health check). */
  models(engineId: string): string[] {
    return this.engines.find((e) => e.id === engineId)?.models ?? [];
  }

  /** The context length of the model an engine serves first; null until reported (or never reported). */
  maxModelLen(engineId: string): number | null {
    return this.engines.find((e) => e.id === engineId)?.maxModelLen ?? null;
  }

  /** Takes an engine out of routing (its calls go to the others) until `enable`. */
  disable(engineId: string, why: string): void {
    const engine = this.engines.find((e) => e.id === engineId);
    if (!engine) return;
    if (engine.disabled === null)
      this.options.logger?.warn({ engine: engineId, why }, 'engine taken out of routing');
    engine.disabled = why;
  }

  enable(engineId: string): void {
    const engine = this.engines.find((e) => e.id === engineId);
    if (engine?.disabled != null) this.options.logger?.info({ engine: engineId }, 'engine back in routing');
    if (engine) engine.disabled = null;
  }

  status(): EngineStatus[] {
    return this.engines.map((e) => ({
      id: e.id,
      kind: e.kind,
      healthy: e.healthy,
      outstanding: e.outstanding,
      disabled: e.disabled,
    }));
  }

  private pick(key: string | null, excluded: Set<EngineState>): EngineState | null {
    const pinned = key === null ? undefined : this.affinity.get(key);
    if (pinned?.healthy && pinned.disabled === null && !excluded.has(pinned)) return pinned;
    let best: EngineState | null = null;
    for (const healthy of [true, false]) {
      for (const e of this.engines) {
        if (excluded.has(e) || e.healthy !== healthy || e.disabled !== null) continue;
        if (!best || e.outstanding < best.outstanding) best = e;
      }
      if (best) break;
    }
    return best;
  }

  private pin(key: string, engine: EngineState): void {
    if (this.affinity.get(key) === engine) return;
    this.affinity.delete(key);
    this.affinity.set(key, engine);
    if (this.affinity.size > this.maxAffinity) {
      const oldest = this.affinity.keys().next().value;
      if (oldest !== undefined) this.affinity.delete(oldest);
    }
  }

  /** Forgets a finished trajectory's engine. */
  release(key: string): void {
    this.affinity.delete(key);
  }

  /**
   * Sends a call; `key` (a trajectory) keeps related calls on one engine. `prepare` builds the body
   * for the engine chosen (model names differ between engines) and overrides `body`; a `path`
   * function picks the route by engine (SGLang's native `/generate` beside vLLM's completions); a big
   * body may be built off the event loop (a promise) and sent as bytes.
   */
  async send(
    key: string | null,
    method: 'GET' | 'POST',
    path: string | ((engine: Engine) => string),
    body: string | null,
    signal: AbortSignal,
    prepare?: (engine: Engine) => string | Uint8Array | Promise<string | Uint8Array>,
  ): Promise<RoutedReply> {
    const tried = new Set<EngineState>();
    let last: unknown = null;
    for (;;) {
      const engine = this.pick(key, tried);
      if (!engine)
        throw (
          last ??
          new UpstreamError(
            this.engines.every((e) => e.disabled !== null)
              ? `no engine is available: every engine is out of routing (${this.engines[0]!.disabled})`
              : 'no engine is available',
            503,
            false,
          )
        );
      tried.add(engine);
      engine.outstanding++;
      let released = false;
      const done = () => {
        if (released) return;
        released = true;
        engine.outstanding--;
      };
      try {
        const route = typeof path === 'string' ? path : path(engine);
        const reply = await engine.transport.send(
          method,
          route,
          prepare ? await prepare(engine) : body,
          signal,
        );
        if (key !== null) this.pin(key, engine);
        if (!engine.healthy && reply.status < 500) this.mark(engine, true, '');
        return { engine, reply, done };
      } catch (error) {
        done();
        if (error instanceof UpstreamError) {
          this.mark(engine, false, error.message);
          if (!error.sent) {
            last = error;
            continue; // nothing reached this engine: another may serve the call
          }
        }
        throw error;
      }
    }
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await Promise.all(this.engines.map((e) => e.transport.close()));
  }
}

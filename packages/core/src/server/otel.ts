import { ExportResultCode } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace';
import type { Logger } from 'pino';
import type { PoolEvent } from '../domain/index.js';
import type { CallTracer, StoredCall } from '../gateway/call-trace.js';
import type { DataPool } from '../pool/data-pool.js';
import { type SpanSource, stepSpan, trajectorySpan } from './otel-spans.js';

/*
 * OpenTelemetry export of `stepwise serve`: each stored step and each finished trajectory becomes a
 * span (otel-spans.ts), sent in batches over OTLP/HTTP (protobuf) by the official exporter, which
 * retries 429/502/503/504 with backoff. The queue is bounded: when the receiver is down or slow,
 * spans are dropped and counted, and no LLM call waits for it. docs/telemetry.md
 */

export interface TelemetryOptions {
  /**
   * The collector's OTLP/HTTP endpoint (`http://host:4318`, or its full `/v1/traces` URL). Unset:
   * the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT.
   */
  endpoint?: string;
  /** Prompts and answers on the spans (gen_ai.input.messages / gen_ai.output.messages). */
  content?: boolean;
  /** Spans held for sending at most; past it new ones are dropped (default 2048). */
  maxQueueSize?: number;
  /** Spans per export request (default 512). */
  maxBatchSize?: number;
  /** Longest a span waits for a fuller batch (default 2 s). */
  scheduledDelayMs?: number;
  /** Longest one export takes, its retries included (default 10 s). */
  exportTimeoutMs?: number;
  logger?: Pick<Logger, 'warn' | 'info'>;
}

/** What the exporter did so far. */
export interface TelemetryStats {
  exported: number;
  /** Spans never sent: the queue was full, or their export failed after its retries. */
  dropped: number;
  queued: number;
}

/** The OTLP traces URL of an endpoint given as the collector's base URL or as the URL itself. */
export function tracesUrl(endpoint: string): string {
  const url = new URL(endpoint);
  if (!url.pathname.endsWith('/v1/traces')) url.pathname = `${url.pathname.replace(/\/$/, '')}/v1/traces`;
  return url.toString();
}

/** Whether the environment names a collector (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT). */
export function otlpEndpointFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT);
}

/** Batches spans to an exporter, one request at a time, from a bounded queue. */
class SpanBatcher {
  private queue: ReadableSpan[] = [];
  private sending: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  exported = 0;
  dropped = 0;
  private warnedAt = 0;

  constructor(
    private readonly exporter: SpanExporter,
    private readonly limits: { maxQueueSize: number; maxBatchSize: number; scheduledDelayMs: number },
    private readonly logger: TelemetryOptions['logger'],
  ) {}

  get queued(): number {
    return this.queue.length;
  }

  add(span: ReadableSpan): void {
    if (this.queue.length >= this.limits.maxQueueSize) {
      this.drop(1, 'the export queue is full');
      return;
    }
    this.queue.push(span);
    if (this.queue.length >= this.limits.maxBatchSize) this.send();
    else this.timer ??= setTimeout(() => this.send(), this.limits.scheduledDelayMs).unref();
  }

  /** Sends what is queued, batch after batch, unless a send is running (it goes on after). */
  private send(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.sending !== null || this.queue.length === 0) return;
    this.sending = this.sendAll().finally(() => {
      this.sending = null;
    });
  }

  private async sendAll(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.limits.maxBatchSize);
      const result = await new Promise<{ code: ExportResultCode; error?: Error }>((resolve) => {
        try {
          this.exporter.export(batch, resolve);
        } catch (error) {
          resolve({ code: ExportResultCode.FAILED, error: error as Error });
        }
      });
      if (result.code === ExportResultCode.SUCCESS) this.exported += batch.length;
      else this.drop(batch.length, result.error?.message ?? 'the export failed');
    }
  }

  private drop(n: number, why: string): void {
    this.dropped += n;
    // One warning a minute at most: a receiver that is down would otherwise flood the log.
    const now = Date.now();
    if (now - this.warnedAt < 60_000) return;
    this.warnedAt = now;
    this.logger?.warn({ dropped: this.dropped, why }, 'OpenTelemetry spans dropped');
  }

  /** Sends what is queued, waiting at most `timeoutMs`; what is left then is dropped. */
  async flush(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs).unref();
    });
    while ((this.queue.length > 0 || this.sending !== null) && Date.now() < deadline) {
      this.send();
      await Promise.race([this.sending, late]);
    }
    clearTimeout(timer);
  }

  async close(timeoutMs: number): Promise<void> {
    await this.flush(timeoutMs);
    if (this.queue.length > 0) this.drop(this.queue.splice(0).length, 'the server closed');
    await this.exporter.shutdown().catch(() => {});
  }
}

/**
 * The gateway's tracer: spans for stored steps as they come, and for finished trajectories as the
 * event log reports them (only those whose steps this process traced, so processes sharing a store
 * send each trajectory once where each serves its own).
 */
export class Telemetry implements CallTracer {
  private readonly source: SpanSource;
  private readonly batcher: SpanBatcher;
  /** Trajectories with a traced step, awaiting their end (oldest first; bounded). */
  private readonly open = new Map<string, true>();
  private readonly maxOpen = 100_000;
  private readonly stopWatching = new AbortController();
  private watching: Promise<void> | null = null;
  private pool: DataPool | null = null;
  /** The last event read. */
  private cursor = 0;

  constructor(private readonly options: TelemetryOptions = {}) {
    this.source = {
      resource: resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME || 'stepwise' }),
      scope: { name: 'stepwise' },
      content: options.content ?? false,
    };
    const exporter = new OTLPTraceExporter({
      // Unset: the exporter reads the OTEL_EXPORTER_OTLP_* variables (endpoint, headers, compression).
      ...(options.endpoint ? { url: tracesUrl(options.endpoint) } : {}),
      ...(options.exportTimeoutMs !== undefined ? { timeoutMillis: options.exportTimeoutMs } : {}),
    });
    this.batcher = new SpanBatcher(
      exporter,
      {
        maxQueueSize: options.maxQueueSize ?? 2048,
        maxBatchSize: options.maxBatchSize ?? 512,
        scheduledDelayMs: options.scheduledDelayMs ?? 2000,
      },
      options.logger,
    );
  }

  stats(): TelemetryStats {
    return { exported: this.batcher.exported, dropped: this.batcher.dropped, queued: this.batcher.queued };
  }

  stepStored(call: StoredCall): void {
    const id = call.step.trajectoryId;
    if (!this.open.has(id)) {
      if (this.open.size >= this.maxOpen) this.open.delete(this.open.keys().next().value!);
      this.open.set(id, true);
    }
    this.batcher.add(stepSpan(this.source, call));
  }

  /** Follows the pool's event log for finished trajectories, from its end now. */
  async start(pool: DataPool): Promise<this> {
    this.pool = pool;
    this.cursor = await logEnd(pool);
    const signal = this.stopWatching.signal;
    this.watching = (async () => {
      // Every type is read (and passed over here): a type filter would read the same events again
      // after each commit until the next completion moves the cursor.
      for await (const event of pool.watchEvents({ after: this.cursor }, signal)) await this.finished(event);
    })().catch((error: unknown) => {
      if (!signal.aborted) this.options.logger?.warn({ err: error }, 'trajectory spans stopped');
    });
    return this;
  }

  private async finished(event: PoolEvent): Promise<void> {
    this.cursor = event.seq;
    if (event.type !== 'trajectory_completed') return;
    const id = event.data.trajectory_uid;
    // A later reward for a finished trajectory (`update`) changes no span already sent.
    if (typeof id !== 'string' || event.data.update === true || !this.open.delete(id)) return;
    try {
      const trajectory = await this.pool!.getTrajectory(id);
      if (trajectory !== null) this.batcher.add(trajectorySpan(this.source, trajectory));
    } catch (error) {
      // One unreadable trajectory costs its span, not the watch.
      this.batcher.dropped++;
      this.options.logger?.warn({ err: error, trajectory: id }, 'a trajectory span could not be made');
    }
  }

  /** Sends what is queued (at most `timeoutMs`) and stops; the pool must still be open. */
  async close(timeoutMs = 5000): Promise<void> {
    this.stopWatching.abort();
    await this.watching;
    // Trajectories that finished while the server closed (the gateway completes its sessions).
    if (this.pool && this.open.size > 0) {
      for (;;) {
        const events = await this.pool.events({ after: this.cursor, limit: 500 });
        for (const event of events) await this.finished(event);
        if (events.length < 500) break;
      }
    }
    await this.batcher.close(timeoutMs);
  }
}

/** The log's last seq, probed with one-event reads (the store has no read of it). */
export async function logEnd(pool: Pick<DataPool, 'events'>): Promise<number> {
  const beyond = async (seq: number) => (await pool.events({ after: seq, limit: 1 })).length === 0;
  let low = 0;
  let high = 1024;
  while (!(await beyond(high))) {
    low = high;
    high *= 2;
  }
  // beyond(high) holds and beyond(low) may not: the smallest seq past which nothing is, in between.
  while (low < high) {
    const mid = Math.floor((low + high) / 2);
    if (await beyond(mid)) high = mid;
    else low = mid + 1;
  }
  return low;
}

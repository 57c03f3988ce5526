import type { Logger } from 'pino';
import { createModelAdapter } from '../text/model-adapter.js';
import { type Engine, EngineRouter } from './router.js';
import type { SimServerOptions } from './sim/serve.js';
import { simWorkerTransport } from './sim/worker-host.js';
import { type EngineSpec, httpTransport, parseEngineSpec } from './upstream.js';

export { type Captured, type CapturedToolCall, CompletionCapture } from './capture.js';
export { retokenizeChat, retokenizeText } from './retokenize.js';
export { type Engine, EngineRouter, type RoutedReply, type RouterOptions } from './router.js';
export {
  type EngineKind,
  type EngineSpec,
  fetchTransport,
  httpTransport,
  parseEngineSpec,
  readText,
  type Transport,
  UpstreamError,
  type UpstreamReply,
} from './upstream.js';

export interface EnginesOptions {
  /** `sim`, `vllm=URL`, `sglang=URL`, `openai=URL`, each with optional `,model-dir=DIR,family=NAME` (parseEngineSpec). */
  engines: readonly (string | EngineSpec)[];
  /** Settings of the built-in sim (policy, seed, latency). */
  sim?: SimServerOptions;
  /** Bearer key for `openai` engines. */
  apiKey?: string;
  /** Longest wait for an engine's response headers, and for each body chunk after. */
  upstreamTimeoutMs?: number;
  healthIntervalMs?: number;
  logger?: Pick<Logger, 'warn' | 'info'>;
}

/** Builds the engines from their specs and a router over them; null when none is configured. */
export function createEngineRouter(options: EnginesOptions): EngineRouter | null {
  if (options.engines.length === 0) return null;
  const seen = new Map<string, number>();
  const engines: Engine[] = options.engines.map((raw) => {
    const spec = typeof raw === 'string' ? parseEngineSpec(raw) : raw;
    // Two engines on one host keep distinct ids.
    const n = (seen.get(spec.id) ?? 0) + 1;
    seen.set(spec.id, n);
    const id = n === 1 ? spec.id : `${spec.id}#${n}`;
    const timeouts = {
      headersTimeoutMs: options.upstreamTimeoutMs,
      bodyTimeoutMs: options.upstreamTimeoutMs,
    };
    // A folder is read and its family checked now, so a bad one fails at startup, naming the model.
    const adapter = spec.modelDir
      ? createModelAdapter(spec.modelDir, spec.family === undefined ? {} : { family: spec.family })
      : undefined;
    const withAdapter = adapter
      ? {
          adapter,
          model: { dir: spec.modelDir!, ...(spec.family !== undefined ? { family: spec.family } : {}) },
        }
      : {};
    // The built-in sim runs on a worker thread, reached over loopback like any engine (worker-host.ts).
    if (spec.kind === 'sim') {
      const sim = {
        ...options.sim,
        ...(spec.modelDir ? { modelDir: spec.modelDir, family: spec.family } : {}),
      };
      return { id, kind: 'sim', transport: simWorkerTransport(sim, timeouts), ...withAdapter };
    }
    return {
      id,
      kind: spec.kind,
      ...withAdapter,
      transport: httpTransport(spec.url!, {
        apiKey: spec.kind === 'openai' ? options.apiKey : undefined,
        ...timeouts,
      }),
    };
  });
  return new EngineRouter(engines, { healthIntervalMs: options.healthIntervalMs, logger: options.logger });
}

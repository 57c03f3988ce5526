import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { ValidationError } from '../../domain/errors.js';
import { SimEngine } from './engine.js';
import { instantLatency, latencyModel } from './latency.js';
import { namedPolicies, type Policy, type ScriptStep, scriptedPolicy } from './policies.js';
import { createSimApp, DEFAULT_SIM_MODEL } from './server.js';

export interface SimServerOptions {
  host?: string;
  port?: number;
  policy?: 'echo' | 'random' | 'scripted';
  /** Steps for the `scripted` policy (e.g. parsed from `--script FILE`). */
  script?: unknown;
  seed?: number;
  ttftMs?: number;
  /** Decode speed; 0 or absent with no ttft means instant. */
  tokensPerSecond?: number;
  model?: string;
}

export interface RunningSimServer {
  url: string;
  port: number;
  model: string;
  close(): Promise<void>;
}

function choosePolicy(options: SimServerOptions): Policy {
  const name = options.policy ?? 'echo';
  if (name !== 'scripted') return namedPolicies[name]();
  if (!Array.isArray(options.script) || options.script.length === 0) {
    throw new ValidationError('the scripted policy needs a non-empty JSON array of steps', 'script');
  }
  for (const step of options.script as unknown[]) {
    const ok = typeof step === 'object' && step !== null && ('answer' in step || 'toolCall' in step);
    if (!ok) throw new ValidationError('each script step needs "answer" or "toolCall"', 'script');
  }
  return scriptedPolicy(options.script as ScriptStep[]);
}

/** Serves the sim engine on its own (`stepwise sim`). */
export async function startSimServer(options: SimServerOptions = {}): Promise<RunningSimServer> {
  const host = options.host ?? '127.0.0.1';
  const ttftMs = options.ttftMs ?? 0;
  const tps = options.tokensPerSecond ?? 0;
  const latency =
    tps > 0
      ? latencyModel({ ttftMs, tokensPerSecond: tps })
      : ttftMs > 0
        ? latencyModel({ ttftMs, tokensPerSecond: Number.POSITIVE_INFINITY })
        : instantLatency;
  const model = options.model ?? DEFAULT_SIM_MODEL;
  const engine = new SimEngine({ policy: choosePolicy(options), seed: options.seed ?? 0 });
  const app = createSimApp({ engine, latency, model });
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, hostname: host, port: options.port ?? 8200 }, () => resolve(s));
    s.once('error', reject);
  });
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | null = null;
  return {
    url: `http://${shownHost}:${port}`,
    port,
    model,
    close() {
      closing ??= new Promise<void>((resolve) => {
        const http = server as unknown as { closeIdleConnections(): void; closeAllConnections(): void };
        server.close(() => resolve());
        http.closeIdleConnections();
        // Streams in flight get a moment to finish, then are cut.
        setTimeout(() => http.closeAllConnections(), 1000).unref();
      });
      return closing;
    },
  };
}

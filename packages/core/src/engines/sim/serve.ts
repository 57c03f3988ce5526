import type { Hono } from 'hono';
import { parseOrThrow, ValidationError } from '../../domain/errors.js';
import { createModelAdapter, type ModelAdapter, ModelFeatureError } from '../../text/model-adapter.js';
import { listen } from '../../util/http-server.js';
import { SimEngine } from './engine.js';
import { instantLatency, latencyModel } from './latency.js';
import { SimPauseControl } from './pause.js';
import {
  type InjectedErrorKind,
  namedPolicies,
  type Policy,
  type ReferenceTask,
  referencePolicy,
  SimScript,
  scriptedPolicy,
} from './policies.js';
import { createSimApp, DEFAULT_SIM_MODEL } from './server.js';

export interface SimServerOptions {
  host?: string;
  port?: number;
  policy?: 'echo' | 'random' | 'scripted' | 'reference';
  /** Steps for the `scripted` policy (e.g. parsed from `--script FILE`). */
  script?: unknown;
  /** Tasks for the `reference` policy: each prompt with the tool calls that solve it. */
  tasks?: readonly ReferenceTask[];
  /** For `scripted` and `reference`: chance that a tool call is preceded by a wrong one, then corrected (default 0). */
  errorRate?: number;
  /** For `reference`: kinds of injected error (default both; one kind pins the plan whatever the seed). */
  errorKinds?: readonly InjectedErrorKind[];
  /** For `reference`: chance that an episode gives up part way (default 0). */
  giveUpRate?: number;
  /** For `reference`: share of a task's actions a plan in the prompt must show before it can finish (default 0). */
  needsPlan?: number;
  seed?: number;
  ttftMs?: number;
  /** Decode speed; 0 or absent with no ttft means instant. */
  tokensPerSecond?: number;
  /**
   * With `tokensPerSecond`: the tokens per second all running sequences share (a GPU's decode
   * throughput); beyond budget / tokensPerSecond sequences each runs slower. Absent: no limit.
   */
  tokenBudget?: number;
  model?: string;
  /** A model folder whose tokenizer the sim speaks with (Qwen3's built-in files when absent). */
  modelDir?: string;
  /** The folder's family by name; detected from the folder when absent. */
  family?: string;
}

export interface RunningSimServer {
  url: string;
  port: number;
  model: string;
  close(): Promise<void>;
}

function choosePolicy(options: SimServerOptions): Policy {
  const name = options.policy ?? 'echo';
  if (name === 'reference') {
    if (!options.tasks || options.tasks.length === 0)
      throw new ValidationError('the reference policy needs tasks with reference actions', 'tasks');
    return referencePolicy(options.tasks, {
      errorRate: options.errorRate,
      errorKinds: options.errorKinds,
      giveUpRate: options.giveUpRate,
      needsPlan: options.needsPlan,
    });
  }
  if (name !== 'scripted') return namedPolicies[name]();
  const script = parseOrThrow(SimScript, options.script, 'script');
  return scriptedPolicy(script, { errorRate: options.errorRate ?? 0 });
}

/**
 * The folder's adapter for the sim: it renders, writes and parses completions in the family's
 * format. A family with no parser is refused, naming the model, rather than spoken as Qwen3.
 */
function simAdapter(modelDir: string, family: string | undefined): ModelAdapter {
  const adapter = createModelAdapter(modelDir, family === undefined ? {} : { family });
  if (adapter.toolParser === null)
    throw new ModelFeatureError(
      adapter.model,
      adapter.family,
      'the built-in sim (no tool-call format for it)',
    );
  return adapter;
}

/** Throws the ValidationError these options would start with (a policy without its tasks or script). */
export function checkSimOptions(options: SimServerOptions = {}): void {
  choosePolicy(options);
  if (options.modelDir) simAdapter(options.modelDir, options.family);
}

/** The sim's HTTP app for these options: served standalone, or in process behind the gateway. */
export function buildSimApp(options: SimServerOptions = {}): { app: Hono; model: string } {
  const ttftMs = options.ttftMs ?? 0;
  const tps = options.tokensPerSecond ?? 0;
  const latency =
    tps > 0
      ? latencyModel({ ttftMs, tokensPerSecond: tps })
      : ttftMs > 0
        ? latencyModel({ ttftMs, tokensPerSecond: Number.POSITIVE_INFINITY })
        : instantLatency;
  const model = options.model ?? DEFAULT_SIM_MODEL;
  const engine = new SimEngine({
    policy: choosePolicy(options),
    seed: options.seed ?? 0,
    ...(options.modelDir ? { adapter: simAdapter(options.modelDir, options.family) } : {}),
  });
  const control = new SimPauseControl(
    options.tokenBudget && tps > 0 ? { perSequence: tps, budget: options.tokenBudget } : null,
  );
  return { app: createSimApp({ engine, latency, model, control }), model };
}

/** Serves the sim engine on its own (`stepwise sim`). */
export async function startSimServer(options: SimServerOptions = {}): Promise<RunningSimServer> {
  const host = options.host ?? '127.0.0.1';
  const { app, model } = buildSimApp(options);
  const listening = await listen(app.fetch, host, options.port ?? 8200);
  return {
    url: listening.url,
    port: listening.port,
    model,
    // Streams in flight get a moment to finish, then are cut.
    close: () => listening.close(undefined, 1_000),
  };
}

import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import {
  ChannelName,
  parseOrThrow,
  type SignalSource,
  type Trajectory,
  ValidationError,
} from '../domain/index.js';
import { type Combination, parseCombination } from './combination.js';
import { safeJsonParse } from './json-path.js';
import type { RewardHandler, RewardManifest, RewardPlugin } from './plugin.js';
import { builtinPlugins } from './plugins/index.js';

// The rewards configuration (`stepwise serve --rewards rewards.json`), its fields and signal versions:
// docs/rewards.md#configuration

/** Function names are signal names and must be usable in expressions. */
const FunctionName = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z_][A-Za-z0-9_.]*$/, 'must start with a letter or _ and hold only letters, digits, _ and .');

const FunctionSpec = z.strictObject({
  plugin: z.string().min(1).max(64),
  version: z.string().min(1).max(64).optional(),
  params: z.record(z.string(), z.unknown()).default({}),
  timeout_ms: z.number().int().min(1).max(3_600_000).optional(),
  max_attempts: z.number().int().min(1).max(100).optional(),
});

const CombinationSpec = z.union([
  z.string().min(1),
  z.strictObject({
    expression: z.string().min(1),
    signal: FunctionName.default('reward'),
    write_reward: z.boolean().default(true),
  }),
]);

const ScoringSpec = z.strictObject({
  functions: z.array(FunctionName).default([]),
  combination: CombinationSpec.optional(),
});

const WorkersSpec = z.strictObject({
  concurrency: z.number().int().min(0).max(1024).default(4),
  timeout_ms: z.number().int().min(1).max(3_600_000).default(60_000),
  max_attempts: z.number().int().min(1).max(100).default(3),
  backoff_ms: z.number().int().min(0).max(3_600_000).default(1_000),
  backoff_max_ms: z.number().int().min(0).max(86_400_000).default(60_000),
  poll_ms: z.number().int().min(10).max(60_000).default(250),
});

export const RewardsConfigFile = z.strictObject({
  functions: z.record(FunctionName, FunctionSpec),
  channels: z.record(ChannelName, ScoringSpec).default({}),
  tasks: z.record(z.string().min(1).max(256), ScoringSpec).default({}),
  default: ScoringSpec.optional(),
  workers: WorkersSpec.default(WorkersSpec.parse({})),
  backfill: z.boolean().default(true),
});
export type RewardsConfigFile = z.input<typeof RewardsConfigFile>;

export type WorkerSettings = z.infer<typeof WorkersSpec>;

/** A configured reward function, validated and ready to run. */
export interface RewardFunction {
  name: string;
  plugin: RewardManifest;
  /** The version its signals carry. */
  version: string;
  params: unknown;
  /** null: nothing to compute (human feedback). */
  handler: RewardHandler | null;
  timeoutMs: number;
  maxAttempts: number;
}

export interface CombinationRule {
  combination: Combination;
  /** Name of the signal the combined value is written as. */
  signal: string;
  source: SignalSource;
  /** `c-<hash of the expression>`. */
  version: string;
  writeReward: boolean;
}

/** What scores one channel or task. */
export interface Scoring {
  /** Where it was declared: `channels.train`, `tasks.t1`, `default`. */
  origin: string;
  functions: RewardFunction[];
  combination: CombinationRule | null;
}

export interface RewardsConfig {
  /** The plugins the configuration was resolved with (built-ins unless others were given). */
  plugins: RewardManifest[];
  functions: Map<string, RewardFunction>;
  channels: Map<string, Scoring>;
  tasks: Map<string, Scoring>;
  default: Scoring | null;
  workers: WorkerSettings;
  backfill: boolean;
}

function shortHash(value: unknown): string {
  return createHash('sha256').update(JSON.stringify(value)).digest('hex').slice(0, 10);
}

/** JSON with object keys sorted, so equal params hash alike whatever their order. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}

/**
 * Validates a configuration: plugins exist, params satisfy each plugin's schema, scorings name
 * configured functions, combinations parse and read no signal they write. Errors name the field.
 */
export function resolveRewardsConfig(
  raw: unknown,
  plugins: Map<string, RewardPlugin<unknown>> = builtinPlugins(),
): RewardsConfig {
  const file = parseOrThrow(RewardsConfigFile, raw);
  const functions = new Map<string, RewardFunction>();
  for (const [name, spec] of Object.entries(file.functions)) {
    const field = `functions.${name}`;
    const plugin = plugins.get(spec.plugin);
    if (!plugin) {
      throw new ValidationError(
        `${field}.plugin: unknown plugin ${JSON.stringify(spec.plugin)} (plugins: ${[...plugins.keys()].join(', ')})`,
        `${field}.plugin`,
      );
    }
    const params = parseOrThrow(plugin.params, spec.params, `${field}.params`);
    let handler: RewardHandler | null;
    try {
      handler = plugin.create(params);
    } catch (error) {
      if (error instanceof ValidationError) {
        throw new ValidationError(`${field}.${error.message}`, `${field}.${error.field ?? 'params'}`);
      }
      throw error;
    }
    functions.set(name, {
      name,
      plugin: plugin.manifest,
      version: spec.version ?? `${plugin.manifest.version}-${shortHash(canonical(params))}`,
      params,
      handler,
      timeoutMs: spec.timeout_ms ?? file.workers.timeout_ms,
      maxAttempts: spec.max_attempts ?? file.workers.max_attempts,
    });
  }

  const scoring = (origin: string, spec: z.infer<typeof ScoringSpec>): Scoring => {
    const used = spec.functions.map((name, i) => {
      const fn = functions.get(name);
      if (!fn) {
        throw new ValidationError(
          `${origin}.functions.${i}: no function ${JSON.stringify(name)} is configured`,
          `${origin}.functions.${i}`,
        );
      }
      return fn;
    });
    if (new Set(spec.functions).size !== spec.functions.length) {
      throw new ValidationError(`${origin}.functions: names a function twice`, `${origin}.functions`);
    }
    let combination: CombinationRule | null = null;
    if (spec.combination !== undefined) {
      const c =
        typeof spec.combination === 'string'
          ? { expression: spec.combination, signal: 'reward', write_reward: true }
          : spec.combination;
      const field = `${origin}.combination`;
      const parsed = parseCombination(c.expression, field);
      if (parsed.names.includes(c.signal)) {
        throw new ValidationError(
          `${field}: reads ${JSON.stringify(c.signal)}, the signal it writes (name the output with "signal")`,
          field,
        );
      }
      if (functions.has(c.signal)) {
        throw new ValidationError(
          `${field}.signal: ${JSON.stringify(c.signal)} is also a function's signal name`,
          `${field}.signal`,
        );
      }
      combination = {
        combination: parsed,
        signal: c.signal,
        source: 'rule',
        version: `c-${shortHash(c.expression.replace(/\s+/g, ''))}`,
        writeReward: c.write_reward,
      };
    }
    return { origin, functions: used, combination };
  };

  return {
    plugins: [...plugins.values()].map((p) => p.manifest),
    functions,
    channels: new Map(Object.entries(file.channels).map(([k, v]) => [k, scoring(`channels.${k}`, v)])),
    tasks: new Map(Object.entries(file.tasks).map(([k, v]) => [k, scoring(`tasks.${k}`, v)])),
    default: file.default ? scoring('default', file.default) : null,
    workers: file.workers,
    backfill: file.backfill,
  };
}

/** Reads and validates a rewards configuration file (JSON). */
export async function loadRewardsConfig(
  path: string,
  plugins?: Map<string, RewardPlugin<unknown>>,
): Promise<RewardsConfig> {
  const text = await readFile(path, 'utf8').catch((error: Error) => {
    throw new ValidationError(`${path}: ${error.message}`, 'rewards');
  });
  const parsed = safeJsonParse(text);
  if (!parsed.ok) throw new ValidationError(`${path}: not JSON (${parsed.error})`, 'rewards');
  try {
    return resolveRewardsConfig(parsed.value, plugins);
  } catch (error) {
    if (error instanceof ValidationError) throw new ValidationError(`${path}: ${error.message}`, error.field);
    throw error;
  }
}

/** The gym task a trajectory ran, if any. */
export function taskIdOf(trajectory: Pick<Trajectory, 'taskId' | 'metadata'>): string | null {
  if (trajectory.taskId) return trajectory.taskId;
  const id = trajectory.metadata.task_id;
  return typeof id === 'string' && id !== '' ? id : null;
}

/** What scores a trajectory: its task's entry, else its channel's, else the default; null: nothing. */
export function scoringFor(
  config: RewardsConfig,
  trajectory: Pick<Trajectory, 'channel' | 'taskId' | 'metadata'>,
): Scoring | null {
  const task = taskIdOf(trajectory);
  if (task !== null) {
    const byTask = config.tasks.get(task);
    if (byTask) return byTask;
  }
  return config.channels.get(trajectory.channel) ?? config.default;
}

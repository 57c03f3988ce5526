import { createHash } from 'node:crypto';
import { CleanerOptions, JsonObject } from '@stepwise/core';
import { z } from 'zod';
import type { AgentSpec } from '../runner.js';
import { SampleResultLine } from '../sample.js';
import { GymTask } from '../tasks/schema.js';

/*
 * What travels through the rollout queue. A job is one (task, sample) of a gym run: the sample as
 * the run decided it (group, seed, agent, model, timeout, gateway) and the task by the sha256 of its
 * definition, stored once per definition beside the queue (queue.ts). A job carries no secrets: API
 * keys are the worker's own. Its id is derived from (run, group, task, sample), so the same sample
 * can be enqueued any number of times and is one job.
 */

/** The agent as a job names it: OpenClaw, Codex and Claude Code by version, each worker runs its own install. */
export const AgentWire = z.discriminatedUnion('kind', [
  z.strictObject({
    kind: z.literal('builtin'),
    maxTurns: z.number().int().min(1).optional(),
    turnTimeoutMs: z.number().int().min(1).optional(),
    cleaner: CleanerOptions.optional(),
    /** The model folder: a path every worker must see (shared storage), as the coordinator's engines do. */
    model: z.strictObject({ dir: z.string().min(1), family: z.string().min(1).optional() }).optional(),
  }),
  z.strictObject({ kind: z.literal('command'), template: z.string().min(1) }),
  z.strictObject({
    kind: z.literal('openclaw'),
    version: z.string().min(1),
    allowTools: z.array(z.string()).optional(),
  }),
  z.strictObject({ kind: z.literal('codex'), version: z.string().min(1) }),
  z.strictObject({ kind: z.literal('claude-code'), version: z.string().min(1) }),
]);
export type AgentWire = z.infer<typeof AgentWire>;

export function agentWire(agent: AgentSpec): AgentWire {
  // An installed agent travels as its kind and version; a worker finds its own install of them.
  if (agent.kind === 'openclaw' && agent.allowTools)
    return { kind: agent.kind, version: agent.install.version, allowTools: [...agent.allowTools] };
  if ('install' in agent) return { kind: agent.kind, version: agent.install.version };
  if (agent.kind === 'command') return { kind: 'command', template: agent.template };
  return {
    kind: 'builtin',
    ...(agent.maxTurns !== undefined ? { maxTurns: agent.maxTurns } : {}),
    ...(agent.turnTimeoutMs !== undefined ? { turnTimeoutMs: agent.turnTimeoutMs } : {}),
    ...(agent.cleaner ? { cleaner: { ...agent.cleaner } } : {}),
    ...(agent.model ? { model: { ...agent.model } } : {}),
  };
}

export const RolloutJobData = z.strictObject({
  /** Layout of this object; a worker refuses a version it does not know. */
  v: z.literal(1),
  runId: z.string().min(1),
  taskId: z.string().min(1),
  /** sha256 of the task definition (`taskSha256`), stored in the queue's task table. */
  taskSha256: z.string().regex(/^[0-9a-f]{64}$/),
  sample: z.number().int().min(0),
  seed: z.number().int().min(0),
  groupId: z.string().min(1),
  nRollouts: z.number().int().min(1),
  channel: z.string().min(1).optional(),
  metadata: JsonObject.optional(),
  guidance: z
    .strictObject({ kind: z.enum(['guided', 'probe']), k: z.number().int().min(0), hint: z.string() })
    .optional(),
  /** The coordinator's gateway; a worker's own `--gateway` takes its place. */
  gatewayUrl: z.string().url(),
  model: z.string().min(1),
  agent: AgentWire,
  sampleTimeoutMs: z.number().int().min(1),
  /** An LLM judge for rubric tasks; the key is the worker's (`--judge-api-key`). */
  judge: z.strictObject({ baseURL: z.string().url(), model: z.string().min(1) }).optional(),
  /** The version the verifier's signals carry (the run's task set's). */
  verifierVersion: z.string().min(1).max(64).optional(),
  /** What the verifier read is kept up to this many bytes (evidence.ts); 0: not kept. */
  evidenceBytes: z.number().int().min(0).optional(),
});
export type RolloutJobData = z.infer<typeof RolloutJobData>;

/** A SampleResult as it comes back in a job's output or from the attempt table. */
export const SampleResultWire = SampleResultLine.loose();

/** sha256 of a task's canonical JSON: the task's address in the queue's task table. */
export function taskSha256(task: GymTask): string {
  return createHash('sha256')
    .update(JSON.stringify(GymTask.parse(task)))
    .digest('hex');
}

/**
 * The job id of a sample: a UUID (the key of the queue's job table) from sha256 of (run, group, task,
 * sample). Guided passes of a run reuse task ids in groups of their own, hence the group.
 */
export function rolloutJobId(runId: string, groupId: string, taskId: string, sample: number): string {
  const h = createHash('sha256')
    .update(`stepwise-rollout\0${runId}\0${groupId}\0${taskId}\0${sample}`)
    .digest();
  h[6] = (h[6]! & 0x0f) | 0x80; // version 8: a custom, name-derived UUID
  h[8] = (h[8]! & 0x3f) | 0x80; // RFC 4122 variant
  const hex = h.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The human-readable key of a sample's job, stored (and indexed) beside its id in the job table. */
export const rolloutJobKey = (groupId: string, sample: number) => `${groupId}#${sample}`;

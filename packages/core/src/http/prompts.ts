import { z } from 'zod';
import { ChannelName, ClientId, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import { MAX_PROMPTS_PER_CALL } from '../pool/schedule.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';

/** At most this many prompts registered per request (a big task set takes several). */
export const MAX_PROMPTS_PER_REGISTER = 10_000;

const RegisterBody = z.strictObject({
  prompts: z
    .array(z.strictObject({ task_id: ClientId, task_set: ClientId.optional() }))
    .min(1)
    .max(MAX_PROMPTS_PER_REGISTER),
});

const NextBody = z.strictObject({
  count: z.number().int().min(1).max(MAX_PROMPTS_PER_CALL).optional(),
  // A producer of one task set's tasks asks for that set's prompts only.
  task_set: ClientId.optional(),
});

/**
 * The prompt scheduler (docs/datapool.md#prompt-scheduler): an operator or a producer registers a
 * channel's prompts, producers ask what to roll out next, anyone with a trainer's key reads them.
 */
export function mountPromptRoutes(app: ApiApp, pool: DataPool): void {
  const channelOf = (name: string) => parseOrThrow(ChannelName, name, 'channel');
  app.put('/v1/channels/:name/prompts', requireScope('runner'), async (c) => {
    const channel = channelOf(c.req.param('name'));
    const body = parseOrThrow(RegisterBody, await readJsonBody(c));
    const prompts = body.prompts.map((p) => ({ taskId: p.task_id, taskSet: p.task_set ?? 'default' }));
    return c.json({ channel, ...(await pool.registerPrompts(channel, prompts)) });
  });
  app.post('/v1/channels/:name/prompts/next', requireScope('runner'), async (c) => {
    const channel = channelOf(c.req.param('name'));
    const body = parseOrThrow(NextBody, await readJsonBody(c));
    const prompts = await pool.nextPrompts(channel, body.count ?? 1, body.task_set ?? null);
    return c.json({
      channel,
      policy_version: await pool.policyVersion(),
      prompts: prompts.map((p) => ({
        task_id: p.taskId,
        task_set: p.taskSet,
        n_rollouts: p.nRollouts,
        pool: p.pool,
      })),
    });
  });
  app.get('/v1/channels/:name/report', requireScope('trainer'), async (c) => {
    const channel = channelOf(c.req.param('name'));
    return c.json({ channel, versions: await pool.versionReport(channel) });
  });
  app.get('/v1/channels/:name/prompts', requireScope('trainer'), async (c) => {
    const channel = channelOf(c.req.param('name'));
    const prompts = await pool.listPrompts(channel);
    const pools: Record<string, number> = {};
    for (const p of prompts) pools[p.pool] = (pools[p.pool] ?? 0) + 1;
    return c.json({
      channel,
      total: prompts.length,
      in_flight: prompts.filter((p) => p.inFlight).length,
      pools,
      prompts: prompts.map((p) => ({
        task_id: p.taskId,
        task_set: p.taskSet,
        position: p.position,
        pool: p.pool,
        in_flight: p.inFlight,
        handed: p.handed,
        groups: p.groups,
        attempts: p.attempts,
        passes: p.passes,
        last_pass_rate: p.lastPassRate,
        last_mean: p.lastMean,
        last_std: p.lastStd,
        last_version: p.lastVersion,
      })),
    });
  });
}

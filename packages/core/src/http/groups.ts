import { z } from 'zod';
import { ChannelName, ClientId, GroupState, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';
import { Pagination } from './queries.js';

const GroupListQuery = z.strictObject({
  channel: ChannelName.optional(),
  state: GroupState.optional(),
  ...Pagination,
});
const GuidanceHoldBody = z
  .strictObject({
    channel: ChannelName.default('train'),
    group_id: ClientId,
    action: z.enum(['hold', 'release']),
    reason: z.enum(['replaced', 'abandoned', 'operator']).optional(),
  })
  .refine((b) => b.action === 'release' || b.reason === undefined, {
    path: ['reason'],
    message: 'only a release has a reason',
  });

/**
 * Groups, and ActGuide-RL's guidance hold (docs/datapool.md): held groups are listed like any, and
 * only an admin holds or releases one (the guide does, with its admin key; an operator frees a stuck one).
 */
export function mountGroupRoutes(app: ApiApp, pool: DataPool): void {
  app.get('/v1/groups', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(GroupListQuery, c.req.query());
    return c.json(await pool.listGroups(q));
  });
  app.post('/v1/groups/guidance', requireScope('admin'), async (c) => {
    const body = parseOrThrow(GuidanceHoldBody, await readJsonBody(c));
    const group =
      body.action === 'hold'
        ? await pool.holdForGuidance(body.channel, body.group_id)
        : await pool.releaseGuidance(body.channel, body.group_id, body.reason ?? 'operator');
    return c.json({ group });
  });
}

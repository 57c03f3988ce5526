import { ChannelConfigPatch, ChannelName, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';

/** A channel's configuration: trainers read it, an admin changes it. */
export function mountChannelRoutes(app: ApiApp, pool: DataPool): void {
  app.get('/v1/channels/:name', requireScope('trainer'), async (c) => {
    const name = parseOrThrow(ChannelName, c.req.param('name'), 'channel');
    return c.json({ channel: name, config: await pool.channelConfig(name) });
  });
  app.put('/v1/channels/:name', requireScope('admin'), async (c) => {
    const name = parseOrThrow(ChannelName, c.req.param('name'), 'channel');
    const patch = parseOrThrow(ChannelConfigPatch, await readJsonBody(c));
    return c.json({ channel: name, config: await pool.configureChannel(name, patch) });
  });
}

import { z } from 'zod';
import {
  ClientId,
  NotFoundError,
  parseOrThrow,
  SignalsBody,
  signalFromWire,
  signalToWire,
} from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';

const SignalListQuery = z.strictObject({
  current: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
});

/** Signals (rewards, judgements, verdicts) written by owners, reward workers, judges and verifiers. */
export function mountSignalRoutes(app: ApiApp, pool: DataPool): void {
  app.post('/v1/signals', requireScope('runner', 'trainer'), async (c) => {
    const { signals } = parseOrThrow(SignalsBody, await readJsonBody(c));
    const added = await pool.addSignals(signals.map((s) => signalFromWire(s, s.trajectory_uid)));
    return c.json({ signals: added.map(signalToWire) });
  });
  app.get('/v1/trajectories/:id/signals', requireScope('trainer'), async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    const { current } = parseOrThrow(SignalListQuery, c.req.query());
    if (!(await pool.getTrajectory(id))) throw new NotFoundError(`trajectory ${id} does not exist`);
    const signals = await pool.getSignals(id, { current: current ?? false });
    return c.json({ trajectory_uid: id, signals: signals.map(signalToWire) });
  });
}

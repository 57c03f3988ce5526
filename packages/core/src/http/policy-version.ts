import { z } from 'zod';
import { MAX_POLICY_VERSION, parseOrThrow, ValidationError } from '../domain/index.js';
import { SwitchMode, WeightsSource } from '../domain/weight-switch.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';
import type { LiveGateway } from './live-gateway.js';

const PolicyVersionBody = z
  .strictObject({
    version: z
      .number()
      .int()
      .min(0, 'must be >= 0')
      .max(MAX_POLICY_VERSION, `must be <= ${MAX_POLICY_VERSION} (stored as a 32-bit integer)`),
    /** Hold new generations until running ones finish, then switch (needs the gateway). */
    drain: z.boolean().default(false),
    /**
     * Switch the engines' weights with the version: pause each engine (`abort`: running generations
     * end with what they have and go on under the new weights; `keep`: they freeze and go on; `wait`:
     * they finish first), load `weights`, resume (docs/gateway.md#weight-switch).
     */
    mode: SwitchMode.optional(),
    weights: WeightsSource.nullish(),
  })
  .superRefine((body, ctx) => {
    if (body.weights != null && body.mode === undefined)
      ctx.addIssue({ code: 'custom', path: ['mode'], message: 'weights need a mode (abort, keep or wait)' });
    if (body.mode !== undefined && body.drain)
      ctx.addIssue({
        code: 'custom',
        path: ['drain'],
        message: 'drain is the gateway-only switch; with a mode, use mode: "wait"',
      });
  });

/** The policy version new steps are stamped with: a trainer sets it, agents and trainers read it. */
export function mountPolicyVersionRoutes(app: ApiApp, pool: DataPool, gateway?: LiveGateway): void {
  app.put('/v1/policy-version', requireScope('trainer'), async (c) => {
    const { version, drain, mode, weights } = parseOrThrow(PolicyVersionBody, await readJsonBody(c));
    if (mode !== undefined) {
      if (!gateway)
        throw new ValidationError('mode: there is no gateway in this process to switch engines', 'mode');
      return c.json(await gateway.switchWeights({ version, mode, weights: weights ?? null }));
    }
    if (!gateway) {
      if (drain) throw new ValidationError('drain: there is no gateway in this process to drain', 'drain');
      await pool.setPolicyVersion(version);
      return c.json({ version });
    }
    const { waitedMs, timedOut } = await gateway.setPolicyVersion(version, drain);
    return c.json({
      version,
      ...(drain ? { drained_ms: Math.round(waitedMs), drain_timed_out: timedOut } : {}),
    });
  });
  app.get('/v1/policy-version', requireScope('trainer', 'agent'), async (c) =>
    c.json({ version: await pool.policyVersion() }),
  );
}

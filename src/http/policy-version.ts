import { z } from 'zod';
import { MAX_POLICY_VERSION, parseOrThrow, ValidationError } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';
import type { LiveGateway } from './live-gateway.js';

const PolicyVersionBody = z.strictObject({
  version: z
    .number()
    .int()
    .min(0, 'must be >= 0')
    .max(MAX_POLICY_VERSION, `must be <= ${MAX_POLICY_VERSION} (stored as a 32-bit integer)`),
  /** Hold new generations until running ones finish, then switch (needs the gateway). */
  drain: z.boolean().default(false),
});

/** The policy version new steps are stamped with: a trainer sets it, agents and trainers read it. */
export function mountPolicyVersionRoutes(app: ApiApp, pool: DataPool, gateway?: LiveGateway): void {
  app.put('/v1/policy-version', requireScope('trainer'), async (c) => {
    const { version, drain } = parseOrThrow(PolicyVersionBody, await readJsonBody(c));
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

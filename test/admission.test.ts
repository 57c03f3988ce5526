import { describe, expect, it } from 'vitest';
import { StepwiseClient } from '../packages/core/src/sdk/client.js';
import { callJson } from './support/http.js';
import { testServers } from './support/test-servers.js';

/*
 * Admission control over real HTTP: with `max_staleness` and `batch_groups` set, the first rollout
 * of a group beyond the staleness budget gets a retryable 429 (`Retry-After`) at /init_trajectory,
 * and the SDK's initTrajectory (the gym runner's and rollout workers' way in) waits and asks again
 * until the trainer's next version frees budget. The pool rules themselves are checked on both stores in
 * test/support/store-conformance.ts.
 */

const servers = testServers('admission');

describe('admission control at /init_trajectory', () => {
  it('answers 429 with Retry-After beyond the budget; the SDK waits until a batch is consumed', async () => {
    const server = await servers.serve();
    const put = await callJson('PUT', `${server.url}/v1/channels/train`, {
      max_staleness: 0,
      batch_groups: 1,
      n_rollouts: 1,
    });
    expect(put.status).toBe(200);
    const sdk = new StepwiseClient({ baseUrl: server.url });
    const first = await sdk.initTrajectory({ channel: 'train', nRollouts: 1 });

    const refused = await fetch(`${server.url}/init_trajectory`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ channel: 'train', n_rollouts: 1 }),
    });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('staleness_budget');
    await expect(sdk.initTrajectory({ channel: 'train', waitForBudget: false })).rejects.toMatchObject({
      status: 429,
    });

    let opened = false;
    const waiting = sdk.initTrajectory({ channel: 'train', nRollouts: 1 }).then((t) => {
      opened = true;
      return t;
    });
    await new Promise((r) => setTimeout(r, 600));
    expect(opened).toBe(false);
    // The trainer consumes the first group and publishes its update: budget for one more.
    await sdk.completeTrajectory(first.trajectory_uid, { reward: 1 });
    const batch = await sdk.lease({ batchSize: 1, channel: 'train', waitMs: 5_000 });
    expect(batch).not.toBeNull();
    await sdk.ack(batch!.lease_id);
    await new Promise((r) => setTimeout(r, 600));
    expect(opened).toBe(false);
    await sdk.setPolicyVersion(1);
    const second = await waiting;
    expect(second.trajectory_uid).not.toBe(first.trajectory_uid);
    const stats = await callJson('GET', `${server.url}/v1/stats?channel=train`);
    expect(stats.json.dropped?.stale ?? 0).toBe(0);
    await sdk.close();
  });
});

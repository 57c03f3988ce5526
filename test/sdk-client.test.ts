import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StepwiseClient, StepwiseHttpError } from '../packages/core/src/sdk/client.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';

/* The sdk's calls for episode owners (the gym's runner and guide) against a real server. */

describe('StepwiseClient: the owner of an episode', () => {
  let dir: string;
  let server: RunningServer;
  let client: StepwiseClient;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-sdk-'));
    server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
    client = new StepwiseClient({ baseUrl: server.url });
  });
  afterEach(async () => {
    await client.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('opens a trajectory, merges metadata, adds signals and refusals, completes it', async () => {
    const t = await client.initTrajectory({ groupId: 'g1', nRollouts: 2, metadata: { task_id: 'task-1' } });
    expect(t.group_id).toBe('g1');
    expect(t.channel).toBe('train');
    expect(t.base_url).toBe(`${server.url}/${t.trajectory_uid}/g1/v1`);

    const merged = await client.mergeTrajectoryMetadata(t.trajectory_uid, { cleaner: { rolled_back: 2 } });
    expect(merged.metadata).toMatchObject({ task_id: 'task-1', cleaner: { rolled_back: 2 } });

    const signals = await client.addSignals([
      { trajectory_uid: t.trajectory_uid, name: 'score', value: 0.75, source: 'verifier' },
    ]);
    expect(signals).toHaveLength(1);
    expect(signals[0]).toMatchObject({ trajectory_uid: t.trajectory_uid, name: 'score', value: 0.75 });

    const refusals = await client.reportRefusals(t.trajectory_uid, {
      attempts: ['GET http://example.com/'],
      count: 3,
      reason: 'outside the LLM routes',
    });
    expect(refusals).toEqual({ trajectory_uid: t.trajectory_uid, recorded: 1 });
    const events = await client.events(0, { types: ['access_refused'] });
    expect(events.events).toHaveLength(1);

    const done = await client.completeTrajectory(t.trajectory_uid, { reward: 0.75 });
    expect(done).toMatchObject({ trajectory_uid: t.trajectory_uid, status: 'complete', reward: 0.75 });
  });

  it('sends the guidance fields of a guided rollout', async () => {
    const t = await client.initTrajectory({
      groupId: 'g2',
      guided: true,
      guidanceK: 2,
      guidanceHint: 'first read the file',
      guidanceMode: 'assistant_prefix',
    });
    const stored = await client.getTrajectory(t.trajectory_uid);
    expect(stored.metadata).toMatchObject({
      guidance: { hint: 'first read the file', mode: 'assistant_prefix' },
    });
    expect(stored).toMatchObject({ guided: true, guidance_k: 2 });
  });

  it('holds a ready group for guidance and releases it; a leased group cannot be held (409)', async () => {
    await client.submitSteps(
      [
        {
          trajectory_uid: 't3',
          prompt_uid: 'g3',
          step_index: 0,
          prompt_ids: [1, 2],
          response_ids: [3],
          reward: 1,
          is_last: true,
        },
      ],
      { nRollouts: 1 },
    );
    expect((await client.holdForGuidance('train', 'g3')).state).toBe('pending_guidance');
    expect(await client.lease({ batchSize: 1 })).toBeNull();
    expect((await client.releaseGuidance('train', 'g3', 'abandoned')).state).toBe('ready');
    expect((await client.lease({ batchSize: 1 }))?.groups[0]?.group_id).toBe('g3');
    const refused = await client.holdForGuidance('train', 'g3').catch((e) => e);
    expect(refused).toBeInstanceOf(StepwiseHttpError);
    expect(refused).toMatchObject({ status: 409, url: `${server.url}/v1/groups/guidance` });
    expect(JSON.parse(refused.responseBody).error.message).toBe(refused.message);
  });

  it("a refusal carries the server's code, field, URL and body", async () => {
    const error = await client.initTrajectory({ groupId: 'g4', guidanceK: 1 }).catch((e) => e);
    expect(error).toBeInstanceOf(StepwiseHttpError);
    expect(error).toMatchObject({ status: 400, url: `${server.url}/init_trajectory` });
    expect(error.message).toMatch(/guidance_k/);
    expect(error.responseBody).toContain('guidance_k');
  });
});

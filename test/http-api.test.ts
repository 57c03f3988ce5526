import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StepwiseClient, StepwiseHttpError } from '../packages/core/src/sdk/client.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { wireEpisode } from './support/steps.js';

describe('HTTP API', () => {
  let dir: string;
  let server: RunningServer;
  let client: StepwiseClient;
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-http-'));
    server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, maxBodyBytes: 64 * 1024 });
    client = new StepwiseClient({ baseUrl: server.url });
  });
  afterEach(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers readiness', async () => {
    const res = await fetch(`${server.url}/ready`);
    expect(await res.json()).toEqual({ ok: true, store: 'sqlite' });
  });

  describe('bad input gets a 4xx naming the field, and stores nothing', () => {
    const cases: [string, string, unknown, number, string][] = [
      ['malformed JSON', '/v1/steps', '{"steps": [', 400, 'body'],
      [
        'a token that is not an integer',
        '/v1/steps',
        { steps: [{ ...wireEpisode('t', 'p', 1)[0], prompt_ids: [1, 2.5] }] },
        400,
        'steps.0.prompt_ids.1',
      ],
      [
        'a negative token',
        '/v1/steps',
        { steps: [{ ...wireEpisode('t', 'p', 1)[0], response_ids: [-1] }] },
        400,
        'steps.0.response_ids.0',
      ],
      [
        'logprobs whose length disagrees',
        '/v1/steps',
        { steps: [{ ...wireEpisode('t', 'p', 1)[0], rollout_log_probs: [-1] }] },
        400,
        'steps.0.rollout_log_probs',
      ],
      [
        'a channel name with illegal characters',
        '/v1/steps',
        { steps: wireEpisode('t', 'p', 1), channel: 'tr ain/..' },
        400,
        'channel',
      ],
      [
        'an unknown field',
        '/v1/steps',
        { steps: [{ ...wireEpisode('t', 'p', 1)[0], rewrd: 1 }] },
        400,
        'steps.0',
      ],
      [
        'a missing trajectory id',
        '/v1/steps',
        { steps: [{ ...wireEpisode('t', 'p', 1)[0], trajectory_uid: undefined }] },
        400,
        'steps.0.trajectory_uid',
      ],
      ['no steps', '/v1/steps', { steps: [] }, 400, 'steps'],
      [
        'a policy version beyond a 32-bit integer',
        '/v1/steps',
        { steps: [{ ...wireEpisode('t', 'p', 1)[0], policy_version: 2_147_483_648 }] },
        400,
        'steps.0.policy_version',
      ],
      ['a lease without batch_size', '/v1/batches/lease', { channel: 'train' }, 400, 'batch_size'],
      ['a lease with a wrong type', '/v1/batches/lease', { batch_size: 'two' }, 400, 'batch_size'],
    ];
    for (const [what, path, body, status, field] of cases) {
      it(what, async () => {
        const res = await post(path, body);
        expect(res.status).toBe(status);
        const json = (await res.json()) as { error: { field: string; message: string } };
        expect(json.error.field).toBe(field);
        expect(json.error.message).toContain(field === 'body' ? 'JSON' : field);
        expect((await client.stats()).produced.steps).toBe(0);
      });
    }

    it('a label that sets nothing (400), storing no label', async () => {
      await client.submitSteps(wireEpisode('t', 'p', 1));
      const res = await post('/v1/labels', { labels: [{ trajectory_uid: 't', author: 'me' }] });
      expect(res.status).toBe(400);
      const json = (await res.json()) as { error: { field: string; message: string } };
      expect(json.error.field).toBe('labels.0');
      expect(json.error.message).toMatch(/at least one of quality, trainable, tags or note/);
      expect(await server.pool.store.getCurrentLabels('t')).toEqual([]);
    });

    it('a policy version beyond a 32-bit integer (400), the version left as it was', async () => {
      const put = (version: number) =>
        fetch(`${server.url}/v1/policy-version`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ version }),
        });
      expect((await put(5)).status).toBe(200);
      const res = await put(2_147_483_648);
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { field: string } }).error.field).toBe('version');
      expect(await server.pool.policyVersion()).toBe(5);
      // The largest version that fits still works, and steps still go in under it.
      expect((await put(2_147_483_647)).status).toBe(200);
      await client.submitSteps(wireEpisode('t', 'p', 1));
      expect((await client.stats()).produced.steps).toBe(1);
    });

    it('JSON nested 5,000 levels deep (400 naming the field), the server still ready', async () => {
      // Built as text: the test's own JSON.stringify would overflow on such a value.
      const deep = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
      const step = JSON.stringify(wireEpisode('t', 'p', 1)[0]).slice(0, -1);
      const steps = await post('/v1/steps', `{"steps": [${step}, "metadata": ${deep(5000)}}]}`);
      expect(steps.status).toBe(400);
      const json = (await steps.json()) as { error: { field: string; message: string } };
      expect(json.error.field).toBe('steps.0.metadata.a');
      expect(json.error.message).toMatch(/JSON nested deeper than 128 levels/);
      const init = await post('/init_trajectory', `{"metadata": ${deep(5000)}}`);
      expect(init.status).toBe(400);
      // The agent-facing routes answer in OpenAI's error shape: the field is `param`.
      expect(((await init.json()) as { error: { param: string } }).error.param).toBe('metadata.a.a.a');
      const arrays = await post('/v1/signals', `{"signals": ${'['.repeat(5000)}${']'.repeat(5000)}}`);
      expect(arrays.status).toBe(400);
      expect((await fetch(`${server.url}/ready`)).status).toBe(200);
      expect((await client.stats()).produced.steps).toBe(0);
      // Nesting well inside the limit is still taken.
      const fine = await post('/v1/steps', `{"steps": [${step}, "metadata": ${deep(50)}}]}`);
      expect(fine.status).toBe(200);
    });

    it('an oversized body (413)', async () => {
      const big = wireEpisode('t', 'p', 1);
      big[0]!.prompt_ids = Array.from({ length: 20_000 }, (_, i) => i);
      const res = await post('/v1/steps', { steps: big });
      expect(res.status).toBe(413);
      expect((await client.stats()).produced.steps).toBe(0);
    });

    it('a retried step with different tokens (409), keeping the original', async () => {
      await client.submitSteps(wireEpisode('t', 'p', 1));
      const changed = wireEpisode('t', 'p', 1);
      changed[0]!.response_ids = [9, 9];
      const err = await client.submitSteps(changed).catch((e) => e);
      expect(err).toBeInstanceOf(StepwiseHttpError);
      expect(err).toMatchObject({ status: 409, field: 'steps.0' });
      expect((await client.getTrajectory('t')).steps[0]!.response_ids).toEqual([200, 300]);
    });
  });

  it('stores steps, completes trajectories and serves a leased batch in the wire format', async () => {
    for (let r = 0; r < 2; r++) await client.submitSteps(wireEpisode(`t${r}`, 'p1', 3, r), { nRollouts: 2 });
    const batch = await client.lease({ batchSize: 1, nRollouts: 2, consumer: 'trainer-a' });
    expect(batch).not.toBeNull();
    expect(batch!.consumer).toBe('trainer-a');
    const group = batch!.groups[0]!;
    expect(group.group_id).toBe('p1');
    const t1 = group.trajectories.find((t) => t.trajectory_uid === 't1')!;
    expect(t1.reward).toBe(1);
    expect(t1.steps.map((s) => s.step_index)).toEqual([0, 1, 2]);
    expect(t1.steps[2]).toMatchObject({
      prompt_ids: wireEpisode('t1', 'p1', 3)[2]!.prompt_ids,
      response_ids: [202, 302],
      rollout_log_probs: [-0.5, -0.25],
      is_last: true,
      prompt_uid: 'p1',
      trajectory_uid: 't1',
      policy_version: 0,
      token_source: 'submitted',
    });
    await client.ack(batch!.lease_id);
    const again = await post(`/v1/batches/${batch!.lease_id}/nack`, {});
    expect(again.status).toBe(409);
  });

  it('speaks the Claw-R1 aliases: bare step arrays, channel in the query, complete by path', async () => {
    const steps = wireEpisode('t1', 'p1', 2).map((s) => ({ ...s, is_last: false }));
    const res = await post('/submit_steps?channel=val', steps);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ inserted: 2, channel: 'val' });
    const done = await post('/complete_trajectory/t1', { reward: 0.5 });
    expect(await done.json()).toMatchObject({ status: 'complete', reward: 0.5, channel: 'val' });
    expect((await client.stats('val')).completed.trajectories).toBe(1);
  });

  it('answers 204 when nothing is ready in wait_ms, and wakes a waiting lease when a group completes', async () => {
    const empty = await post('/v1/batches/lease', { batch_size: 1, n_rollouts: 1, wait_ms: 50 });
    expect(empty.status).toBe(204);
    const waiting = client.lease({ batchSize: 1, nRollouts: 1, waitMs: 20_000 });
    await new Promise((r) => setTimeout(r, 100));
    await client.submitSteps(wireEpisode('late', 'pl', 2), { nRollouts: 1 });
    const batch = await waiting;
    expect(batch!.groups[0]!.group_id).toBe('pl');
  });

  it('serves a nacked batch again and sets the policy version', async () => {
    await client.submitSteps(wireEpisode('t', 'p', 1), { nRollouts: 1 });
    const first = await client.lease({ batchSize: 1 });
    await client.nack(first!.lease_id);
    await client.setPolicyVersion(4);
    const second = await client.lease({ batchSize: 1 });
    expect(second!.groups[0]!.group_id).toBe('p');
    expect(second!.policy_version).toBe(4);
    expect(second!.groups[0]!.staleness).toBe(4);
    const res = await fetch(`${server.url}/v1/policy-version`);
    expect(await res.json()).toEqual({ version: 4 });
  });

  it('applies labels to what the next batch contains', async () => {
    await client.submitSteps(wireEpisode('t', 'p', 3), { nRollouts: 1 });
    const labels = await client.addLabels([
      {
        trajectory_uid: 't',
        step_index: 1,
        trainable: false,
        quality: 'bad',
        tags: ['loop'],
        note: 'repeats',
      },
    ]);
    expect(labels[0]).toMatchObject({ trajectoryId: 't', stepIndex: 1, trainable: false });
    const batch = await client.lease({ batchSize: 1, nRollouts: 1 });
    expect(batch!.groups[0]!.trajectories[0]!.steps.map((s) => s.step_index)).toEqual([0, 2]);
    const bad = await post('/v1/labels', { labels: [{ trajectory_uid: 't', quality: 'great' }] });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { field: string } }).error.field).toBe('labels.0.quality');
  });

  it('lists steps and trajectories with filters, and shows one trajectory whole', async () => {
    for (let r = 0; r < 3; r++) await client.submitSteps(wireEpisode(`t${r}`, 'p', 2, r === 2 ? 1 : 0));
    const steps = await client.listSteps({ promptUid: 'p', limit: 4 });
    expect(steps.total).toBe(6);
    expect(steps.items).toHaveLength(4);
    const good = await client.listTrajectories({ rewardMin: 1 });
    expect(good.items.map((t) => t.trajectory_uid)).toEqual(['t2']);
    const detail = await client.getTrajectory('t2');
    expect(detail.steps.map((s) => s.step_index)).toEqual([0, 1]);
    const bad = await fetch(`${server.url}/v1/steps?limit=5000`);
    expect(bad.status).toBe(400);
    const missing = await fetch(`${server.url}/v1/trajectories/nope`);
    expect(missing.status).toBe(404);
  });

  it('pages events by cursor and streams them as server-sent events', async () => {
    await client.submitSteps(wireEpisode('t', 'p', 1), { nRollouts: 1 });
    const page = await client.events(0, { types: ['group_ready'] });
    expect(page.events.map((e) => e.type)).toEqual(['group_ready']);
    const controller = new AbortController();
    const res = await fetch(`${server.url}/v1/events/stream?cursor=${page.cursor}`, {
      signal: controller.signal,
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const reader = res.body!.getReader();
    await client.submitSteps(wireEpisode('u', 'q', 1), { nRollouts: 1 });
    let text = '';
    while (!text.includes('event: group_ready')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    controller.abort();
    expect(text).toContain('event: steps_submitted');
    expect(text).toMatch(/id: \d+/);
    expect(text).toContain('"group_id":"q"');
  });

  it('configures a channel and reports the config back', async () => {
    const config = await client.configureChannel('train', { max_staleness: 2, stale_policy: 'flag' });
    expect(config).toMatchObject({ max_staleness: 2, stale_policy: 'flag', n_rollouts: null });
    const res = await fetch(`${server.url}/v1/channels/train`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ max_staleness: -1 }),
    });
    expect(res.status).toBe(400);
    expect((await client.configureChannel('train', { n_rollouts: 3 })).max_staleness).toBe(2);
  });
});

describe('HTTP API with SQLite on a worker thread', () => {
  it('stores, leases and acks through the worker', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-http-worker-'));
    const server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, storeThread: 'worker' });
    const client = new StepwiseClient({ baseUrl: server.url });
    try {
      await client.submitSteps(wireEpisode('t', 'p', 2), { nRollouts: 1 });
      const conflict = wireEpisode('t', 'p', 2);
      conflict[0]!.response_ids = [1, 2];
      await expect(client.submitSteps(conflict)).rejects.toMatchObject({ status: 409, field: 'steps.0' });
      const batch = await client.lease({ batchSize: 1, nRollouts: 1 });
      expect(batch!.groups[0]!.trajectories[0]!.steps.map((s) => s.prompt_ids)).toEqual(
        wireEpisode('t', 'p', 2).map((s) => s.prompt_ids),
      );
      await client.ack(batch!.lease_id);
      expect((await client.stats()).consumed).toEqual({ groups: 1, steps: 2 });
    } finally {
      await client.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('security defaults', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-auth-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('refuses to listen beyond loopback without API keys', async () => {
    await expect(startServer({ dbPath: join(dir, 'a.db'), host: '0.0.0.0', port: 0 })).rejects.toThrow(
      /API keys/,
    );
  });

  it('requires a key with the right scope once keys are configured', async () => {
    const agentKey = 'agent-key-0123456789abcdef';
    const runnerKey = 'runner-key-0123456789abcdef';
    const trainerKey = 'trainer-key-0123456789abcdef';
    const server = await startServer({
      dbPath: join(dir, 'b.db'),
      host: '0.0.0.0',
      port: 0,
      apiKeys: [`${agentKey}:agent`, `${runnerKey}:runner`, `${trainerKey}:trainer`],
    });
    try {
      const base = `http://127.0.0.1:${server.port}`;
      expect((await fetch(`${base}/ready`)).status).toBe(200);
      expect((await fetch(`${base}/v1/stats`)).status).toBe(401);
      expect(
        (await fetch(`${base}/v1/stats`, { headers: { authorization: 'Bearer wrong-key-000000000' } }))
          .status,
      ).toBe(401);
      const agent = new StepwiseClient({ baseUrl: base, apiKey: agentKey });
      const runner = new StepwiseClient({ baseUrl: base, apiKey: runnerKey });
      const trainer = new StepwiseClient({ baseUrl: base, apiKey: trainerKey });
      // Steps are the episode owner's to write (a runner or a trainer), never the agent's.
      await expect(agent.submitSteps(wireEpisode('a', 'p', 1))).rejects.toMatchObject({ status: 403 });
      await expect(agent.completeTrajectory('a', { reward: 1 })).rejects.toMatchObject({ status: 403 });
      await runner.submitSteps(wireEpisode('t', 'p', 1), { nRollouts: 1 });
      await expect(runner.stats()).rejects.toMatchObject({ status: 403 });
      await expect(agent.stats()).rejects.toMatchObject({ status: 403 });
      await expect(trainer.addLabels([{ trajectory_uid: 't', trainable: false }])).rejects.toMatchObject({
        status: 403,
      });
      expect((await trainer.stats()).produced.steps).toBe(1);
      expect(await trainer.lease({ batchSize: 1 })).not.toBeNull();
    } finally {
      await server.close();
    }
  });

  it('rejects malformed key specs with a clear error', async () => {
    await expect(
      startServer({ dbPath: join(dir, 'c.db'), port: 0, apiKeys: ['short:agent'] }),
    ).rejects.toThrow(/at least 16/);
    await expect(
      startServer({ dbPath: join(dir, 'd.db'), port: 0, apiKeys: ['long-enough-key-123456:root'] }),
    ).rejects.toThrow(/unknown scope 'root'/);
    // A key never gets scopes (least of all admin) by leaving them out.
    await expect(
      startServer({ dbPath: join(dir, 'e.db'), port: 0, apiKeys: ['long-enough-key-123456'] }),
    ).rejects.toThrow(/name its scopes/);
  });
});

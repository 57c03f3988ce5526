import { describe, expect, it, vi } from 'vitest';
import { StepwiseError } from '../domain/errors.js';
import { type Engine, EngineRouter } from './router.js';
import { readText, type Transport, UpstreamError, type UpstreamReply } from './upstream.js';

const encoder = new TextEncoder();

function reply(status: number, text = '', contentType = 'application/json'): UpstreamReply {
  return {
    status,
    contentType,
    body: (async function* () {
      if (text !== '') yield encoder.encode(text);
    })(),
    text: async () => text,
    bytes: async () => Buffer.from(text),
    discard: () => {},
  };
}

interface Sent {
  method: 'GET' | 'POST';
  path: string;
  body: string | null;
}

/** A scriptable engine: `health` answers GET /v1/models, `answer` answers every other call. */
class FakeTransport implements Transport {
  readonly sent: Sent[] = [];
  closed = 0;
  health: () => Promise<UpstreamReply> = async () => reply(200, '{"data":[]}');
  answer: (call: Sent) => Promise<UpstreamReply> = async () => reply(200, `{"from":"${this.name}"}`);

  constructor(readonly name: string) {}

  send(method: 'GET' | 'POST', path: string, body: string | null): Promise<UpstreamReply> {
    const call = { method, path, body };
    if (method === 'GET' && path === '/v1/models') return this.health();
    this.sent.push(call);
    return this.answer(call);
  }

  async close(): Promise<void> {
    this.closed++;
  }

  /** Calls other than health checks. */
  get calls(): number {
    return this.sent.length;
  }
}

function setup(n: number, options: ConstructorParameters<typeof EngineRouter>[1] = {}) {
  const transports = Array.from({ length: n }, (_, i) => new FakeTransport(String.fromCharCode(65 + i)));
  const engines: Engine[] = transports.map((t) => ({ id: t.name, kind: 'vllm', transport: t }));
  const router = new EngineRouter(engines, options);
  const byName = Object.fromEntries(transports.map((t) => [t.name, t])) as Record<string, FakeTransport>;
  return { router, byName, transports };
}

const signal = () => AbortSignal.timeout(5_000);
const post = (router: EngineRouter, key: string | null = null) =>
  router.send(key, 'POST', '/v1/chat/completions', '{}', signal());

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('the promise resolved');
}

const unhealthy = (t: FakeTransport) => {
  t.health = async () => reply(503, 'loading');
};
const healthy = (t: FakeTransport, models: string[] = []) => {
  t.health = async () => reply(200, JSON.stringify({ object: 'list', data: models.map((id) => ({ id })) }));
};

describe('EngineRouter', () => {
  it('needs at least one engine', () => {
    expect(() => new EngineRouter([])).toThrow(StepwiseError);
    try {
      new EngineRouter([]);
    } catch (error) {
      expect((error as StepwiseError).code).toBe('no_engine');
    }
    expect(setup(3).router.size).toBe(3);
  });

  describe('least-outstanding choice', () => {
    it('sends each new call to the engine with the fewest calls in flight', async () => {
      const { router, byName } = setup(3);
      const a = await post(router);
      const b = await post(router);
      const c = await post(router);
      expect([a.engine.id, b.engine.id, c.engine.id]).toEqual(['A', 'B', 'C']);
      b.done();
      const d = await post(router);
      expect(d.engine.id).toBe('B');
      a.done();
      c.done();
      // A and C are idle, B has one: A (first in order) then C.
      expect((await post(router)).engine.id).toBe('A');
      expect((await post(router)).engine.id).toBe('C');
      expect(byName.B!.calls).toBe(2);
      expect(JSON.parse(await readText(d.reply.body))).toEqual({ from: 'B' });
    });

    it('decrements the count exactly once however often done() is called', async () => {
      const { router } = setup(2);
      const first = await post(router);
      expect(first.engine.id).toBe('A');
      first.done();
      first.done();
      first.done();
      // A: 0 (not -2), B: 0 -> A; then A: 1, B: 0 -> B.
      expect((await post(router)).engine.id).toBe('A');
      expect((await post(router)).engine.id).toBe('B');
    });

    it('counts a call until done(), not until the reply arrives', async () => {
      const { router } = setup(2);
      const held = await post(router); // reply received, body not consumed yet
      await readText(held.reply.body);
      expect((await post(router)).engine.id).toBe('B');
    });
  });

  describe('trajectory affinity', () => {
    it('keeps a key on its engine while healthy, even when that engine is busier', async () => {
      const { router } = setup(2);
      const first = await post(router, 'traj-1');
      expect(first.engine.id).toBe('A');
      // A now has one call in flight and B none, yet the trajectory stays on A.
      expect((await post(router, 'traj-1')).engine.id).toBe('A');
      expect((await post(router, 'traj-1')).engine.id).toBe('A');
      // An unkeyed call and a new trajectory go to the idle engine.
      expect((await post(router, 'traj-2')).engine.id).toBe('B');
      expect((await post(router, 'traj-2')).engine.id).toBe('B');
    });

    it('forgets a key on release()', async () => {
      const { router } = setup(2);
      await post(router, 'traj-1'); // A: 1
      await post(router, 'traj-1'); // A: 2
      await post(router); // B: 1
      router.release('traj-1');
      expect((await post(router, 'traj-1')).engine.id).toBe('B');
      // and is pinned to the new engine from then on
      expect((await post(router, 'traj-1')).engine.id).toBe('B');
      router.release('never-seen'); // no-op
    });

    it('moves a key off an engine that turned unhealthy, and keeps it on the new one', async () => {
      const { router, byName } = setup(2);
      const first = await post(router, 'traj-1');
      first.done();
      expect(first.engine.id).toBe('A');
      unhealthy(byName.A!);
      await router.checkHealth();
      const moved = await post(router, 'traj-1');
      expect(moved.engine.id).toBe('B');
      // A recovers and is idle while B is busy, but the trajectory now lives on B.
      healthy(byName.A!);
      await router.checkHealth();
      expect((await post(router, 'traj-1')).engine.id).toBe('B');
      expect((await post(router)).engine.id).toBe('A');
    });

    it('forgets the oldest keys beyond maxAffinity', async () => {
      const { router } = setup(2, { maxAffinity: 1 });
      const first = await post(router, 'old'); // A: 1
      const second = await post(router, 'new'); // B: 1, and 'old' is pushed out
      expect([first.engine.id, second.engine.id]).toEqual(['A', 'B']);
      second.done(); // A: 1, B: 0
      // Were 'old' still pinned it would go to A; forgotten, it follows the load.
      expect((await post(router, 'old')).engine.id).toBe('B');
    });

    it('remembers every key within maxAffinity', async () => {
      const { router } = setup(2, { maxAffinity: 2 });
      await post(router, 'old'); // A: 1
      (await post(router, 'new')).done(); // B: 0
      expect((await post(router, 'old')).engine.id).toBe('A');
    });
  });

  describe('retries', () => {
    it('retries on another engine when the request never left (sent: false)', async () => {
      const { router, byName } = setup(2);
      byName.A!.answer = async () => {
        throw new UpstreamError('the engine at A is unreachable (ECONNREFUSED)', 503, false);
      };
      const routed = await post(router, 'traj-1');
      expect(routed.engine.id).toBe('B');
      expect(byName.A!.calls).toBe(1);
      expect(byName.B!.calls).toBe(1);
      // The trajectory is pinned to the engine that served it.
      expect((await post(router, 'traj-1')).engine.id).toBe('B');
    });

    it('releases the failed attempt and marks its engine unhealthy', async () => {
      const { router, byName } = setup(2);
      let failures = 1;
      byName.A!.answer = async () => {
        if (failures-- > 0) throw new UpstreamError('refused', 503, false);
        return reply(200, '{}');
      };
      const routed = await post(router);
      expect(routed.engine.id).toBe('B');
      routed.done();
      // A is unhealthy: B (healthy) gets the next call even though both are idle.
      const next = await post(router);
      expect(next.engine.id).toBe('B');
      next.done();
      await router.checkHealth(); // A answers its health check again
      // Both idle again: the failed attempt on A was counted down, so A (first) is chosen.
      expect((await post(router)).engine.id).toBe('A');
    });

    it('never retries a call that reached the engine (sent: true)', async () => {
      const { router, byName } = setup(2);
      const failure = new UpstreamError('the request to the engine failed (UND_ERR_SOCKET)', 502, true);
      byName.A!.answer = async () => {
        throw failure;
      };
      expect(await rejection(post(router))).toBe(failure);
      expect(byName.B!.calls).toBe(0);
      // A was marked unhealthy and its attempt counted down.
      expect((await post(router)).engine.id).toBe('B');
    });

    it('never retries on an error that is not an UpstreamError', async () => {
      const { router, byName } = setup(2);
      const failure = new TypeError('bad body');
      let fail = true;
      byName.A!.answer = async () => {
        if (fail) throw failure;
        return reply(200, '{}');
      };
      expect(await rejection(post(router))).toBe(failure);
      expect(byName.B!.calls).toBe(0);
      fail = false;
      // A stays healthy and idle, so it is chosen again.
      expect((await post(router)).engine.id).toBe('A');
    });

    it('throws the last engine error when every engine refused', async () => {
      const { router, byName } = setup(2);
      const errors = ['A', 'B'].map((n) => new UpstreamError(`${n} refused`, 503, false));
      byName.A!.answer = async () => {
        throw errors[0];
      };
      byName.B!.answer = async () => {
        throw errors[1];
      };
      expect(await rejection(post(router))).toBe(errors[1]);
      expect(byName.A!.calls).toBe(1);
      expect(byName.B!.calls).toBe(1);
    });
  });

  describe('health checks', () => {
    it('reads the served models from GET /v1/models', async () => {
      const { router, byName } = setup(2);
      const seen: Sent[] = [];
      const a = byName.A!;
      a.health = async () => reply(200, '{"object":"list","data":[{"id":"Qwen/Qwen3-8B"},{"id":7},{}]}');
      const send = a.send.bind(a);
      a.send = (method, path, body) => {
        seen.push({ method, path, body });
        return send(method, path, body);
      };
      healthy(byName.B!, ['m1', 'm2']);
      expect(router.models('A')).toEqual([]);
      await router.checkHealth();
      expect(seen).toEqual([{ method: 'GET', path: '/v1/models', body: null }]);
      expect(router.models('A')).toEqual(['Qwen/Qwen3-8B']);
      expect(router.models('B')).toEqual(['m1', 'm2']);
      expect(router.models('nope')).toEqual([]);
    });

    it("reads the first model's max_model_len when it is a positive integer", async () => {
      const { router, byName } = setup(2);
      byName.A!.health = async () => reply(200, '{"data":[{"id":"m","max_model_len":32768},{"id":"n"}]}');
      byName.B!.health = async () => reply(200, '{"data":[{"id":"m","max_model_len":"32k"}]}');
      await router.checkHealth();
      expect([router.maxModelLen('A'), router.maxModelLen('B')]).toEqual([32768, null]);
      expect(router.models('B')).toEqual(['m']);
    });

    it('marks an engine whose model list is malformed unhealthy, naming the field', async () => {
      const warn = vi.fn();
      const { router, byName } = setup(3, { logger: { warn, info: vi.fn() } });
      byName.A!.health = async () => reply(200, '{"object":"list","data":{"id":"m"}}');
      byName.B!.health = async () => reply(200, 'null');
      byName.C!.health = async () => reply(200, '{"data":[{"id":"m"},"n",null]}');
      await router.checkHealth();
      const why = Object.fromEntries(warn.mock.calls.map(([o]) => [o.engine, o.why]));
      expect(why.A).toMatch(/^GET \/v1\/models: data: .*expected array/);
      expect(why.B).toMatch(/^GET \/v1\/models: body: .*expected object/);
      expect(router.models('A')).toEqual([]);
      // Entries that are no objects are skipped, as ones without an id are.
      expect(router.models('C')).toEqual(['m']);
      expect((await post(router)).engine.id).toBe('C');
    });

    it('marks an engine unhealthy on a non-200 answer or a failure, and healthy again on 200', async () => {
      const warn = vi.fn();
      const info = vi.fn();
      const { router, byName } = setup(3, { logger: { warn, info } });
      unhealthy(byName.A!);
      byName.B!.health = async () => {
        throw new Error('connect ECONNREFUSED');
      };
      await router.checkHealth();
      expect(warn).toHaveBeenCalledTimes(2);
      // Only C is healthy: it takes every call, however busy.
      expect((await post(router)).engine.id).toBe('C');
      expect((await post(router)).engine.id).toBe('C');
      await router.checkHealth(); // still down: no second warning
      expect(warn).toHaveBeenCalledTimes(2);
      healthy(byName.B!);
      await router.checkHealth();
      expect(info).toHaveBeenCalledTimes(1);
      expect(info.mock.calls[0]![0]).toEqual({ engine: 'B' });
      expect((await post(router)).engine.id).toBe('B');
    });

    it('counts any answer other than 200 as unhealthy, 4xx included', async () => {
      const { router, byName } = setup(2);
      byName.A!.health = async () => reply(404, '{"detail":"Not Found"}');
      await router.checkHealth();
      expect((await post(router)).engine.id).toBe('B');
      expect((await post(router)).engine.id).toBe('B');
    });

    it('keeps the models of an engine whose check failed', async () => {
      const { router, byName } = setup(1);
      healthy(byName.A!, ['m']);
      await router.checkHealth();
      unhealthy(byName.A!);
      await router.checkHealth();
      expect(router.models('A')).toEqual(['m']);
    });

    it('still uses an unhealthy engine (least outstanding) when none is healthy', async () => {
      const { router, byName } = setup(2);
      unhealthy(byName.A!);
      unhealthy(byName.B!);
      await router.checkHealth();
      byName.A!.answer = async () => reply(503, 'still loading');
      const first = await post(router);
      expect(first.engine.id).toBe('A');
      expect(first.reply.status).toBe(503);
      const second = await post(router);
      expect(second.engine.id).toBe('B'); // 200: B is marked healthy again
      second.done();
      first.done();
      // B answered below 500 and is healthy now; A (503) is not, so B wins though both are idle.
      expect((await post(router)).engine.id).toBe('B');
      expect((await post(router)).engine.id).toBe('B');
    });

    it('start() checks at once and then on every interval until close()', async () => {
      const { router, byName } = setup(1, { healthIntervalMs: 10 });
      let checks = 0;
      byName.A!.health = async () => {
        checks++;
        return reply(200, '{"data":[{"id":"m"}]}');
      };
      await expect(router.start()).resolves.toBe(router);
      expect(checks).toBe(1);
      expect(router.models('A')).toEqual(['m']);
      await vi.waitFor(() => expect(checks).toBeGreaterThanOrEqual(3), { timeout: 1_000, interval: 5 });
      await router.close();
      const after = checks;
      await new Promise((resolve) => setTimeout(resolve, 40));
      expect(checks).toBe(after);
    });
  });

  it('builds the body with prepare() for the engine chosen, on every attempt', async () => {
    const { router, byName } = setup(2);
    byName.A!.answer = async () => {
      throw new UpstreamError('refused', 503, false);
    };
    const prepared: string[] = [];
    const routed = await router.send(
      'traj',
      'POST',
      '/v1/chat/completions',
      '{"model":"ignored"}',
      signal(),
      (engine) => {
        prepared.push(engine.id);
        return JSON.stringify({ model: `model-on-${engine.id}` });
      },
    );
    expect(routed.engine.id).toBe('B');
    expect(prepared).toEqual(['A', 'B']);
    expect(byName.A!.sent[0]!.body).toBe('{"model":"model-on-A"}');
    expect(byName.B!.sent[0]!.body).toBe('{"model":"model-on-B"}');
    // Without prepare the body is sent as given.
    await router.send(null, 'POST', '/v1/completions', '{"raw":true}', signal());
    expect(byName.B!.sent[1]).toEqual({ method: 'POST', path: '/v1/completions', body: '{"raw":true}' });
  });

  it('close() closes every transport', async () => {
    const { router, transports } = setup(3);
    await router.close();
    expect(transports.map((t) => t.closed)).toEqual([1, 1, 1]);
  });
});

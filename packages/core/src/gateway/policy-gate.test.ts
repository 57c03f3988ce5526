import { describe, expect, it } from 'vitest';
import { PolicyGate } from './policy-gate.js';

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Lets every pending promise callback and timer of zero delay run. */
const settle = () => new Promise<void>((resolve) => setTimeout(resolve, 0));

/** Tracks whether a promise has settled yet. */
function watch<T>(promise: Promise<T>) {
  const state = { done: false, value: undefined as T | undefined };
  void promise.then((value) => {
    state.done = true;
    state.value = value;
  });
  return state;
}

describe('PolicyGate', () => {
  it('counts generations in and out', async () => {
    const gate = new PolicyGate();
    expect(gate.running).toBe(0);
    expect(gate.draining).toBe(false);
    await gate.enter();
    await gate.enter();
    expect(gate.running).toBe(2);
    gate.exit();
    expect(gate.running).toBe(1);
    gate.exit();
    expect(gate.running).toBe(0);
  });

  it('runs the change at once when nothing is running, draining meanwhile', async () => {
    const gate = new PolicyGate();
    let drainingDuringChange: boolean | null = null;
    const result = await gate.drain(async () => {
      drainingDuringChange = gate.draining;
      return 'v2';
    }, 1_000);
    expect(result.value).toBe('v2');
    expect(result.timedOut).toBe(false);
    expect(result.waitedMs).toBeGreaterThanOrEqual(0);
    expect(result.waitedMs).toBeLessThan(500);
    expect(drainingDuringChange).toBe(true);
    expect(gate.draining).toBe(false);
  });

  it('waits for the running generations to exit before running the change', async () => {
    const gate = new PolicyGate();
    await gate.enter();
    await gate.enter();
    const events: string[] = [];
    const drained = watch(
      gate.drain(async () => {
        events.push(`change with ${gate.running} running`);
        return 7;
      }, 5_000),
    );
    await settle();
    expect(gate.draining).toBe(true);
    expect(events).toEqual([]);
    gate.exit();
    await settle();
    expect(events).toEqual([]);
    expect(drained.done).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 20));
    gate.exit();
    await settle();
    expect(events).toEqual(['change with 0 running']);
    expect(drained.done).toBe(true);
    expect(drained.value).toMatchObject({ value: 7, timedOut: false });
    expect(drained.value!.waitedMs).toBeGreaterThanOrEqual(15);
    expect(gate.draining).toBe(false);
  });

  it('holds new generations until the change is done, then lets them in', async () => {
    const gate = new PolicyGate();
    await gate.enter();
    const events: string[] = [];
    const changeMayFinish = deferred();
    const drain = gate.drain(async () => {
      events.push('change started');
      await changeMayFinish.promise;
      events.push('change done');
    }, 5_000);
    await settle();
    const entered = watch(gate.enter().then(() => events.push('entered')));
    const enteredToo = watch(gate.enter().then(() => events.push('entered too')));
    await settle();
    expect(entered.done).toBe(false);
    expect(gate.running).toBe(1); // held callers are not counted yet
    gate.exit();
    await settle();
    expect(events).toEqual(['change started']);
    expect(entered.done).toBe(false); // still held while the change runs
    changeMayFinish.resolve();
    await drain;
    await settle();
    expect(events).toEqual(['change started', 'change done', 'entered', 'entered too']);
    expect(entered.done && enteredToo.done).toBe(true);
    expect(gate.running).toBe(2);
  });

  it('times out when a generation never exits, and still runs the change', async () => {
    const gate = new PolicyGate();
    await gate.enter();
    let changed = 0;
    const result = await gate.drain(async () => ++changed, 40);
    expect(result.timedOut).toBe(true);
    expect(result.value).toBe(1);
    expect(result.waitedMs).toBeGreaterThanOrEqual(35);
    expect(result.waitedMs).toBeLessThan(1_000);
    expect(gate.running).toBe(1);
    expect(gate.draining).toBe(false);
    // New generations are let in again, and the straggler can still leave.
    await gate.enter();
    expect(gate.running).toBe(2);
    gate.exit();
    gate.exit();
    expect(gate.running).toBe(0);
    expect(changed).toBe(1);
  });

  it('does not time out when the generations exit in time', async () => {
    const gate = new PolicyGate();
    await gate.enter();
    setTimeout(() => gate.exit(), 10);
    const started = performance.now();
    const result = await gate.drain(async () => 'ok', 2_000);
    expect(result.timedOut).toBe(false);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('runs concurrent drains one after the other, never overlapping', async () => {
    const gate = new PolicyGate();
    await gate.enter();
    const events: string[] = [];
    const firstMayFinish = deferred();
    const change = (name: string, wait?: Promise<void>) => async () => {
      events.push(`${name} start`);
      await wait;
      events.push(`${name} end`);
      return name;
    };
    const first = gate.drain(change('first', firstMayFinish.promise), 5_000);
    const second = gate.drain(change('second'), 5_000);
    await settle();
    expect(events).toEqual([]); // the first waits for the running generation
    gate.exit();
    await settle();
    expect(events).toEqual(['first start']); // the second waits for the first
    firstMayFinish.resolve();
    const results = await Promise.all([first, second]);
    expect(results.map((r) => r.value)).toEqual(['first', 'second']);
    expect(events).toEqual(['first start', 'first end', 'second start', 'second end']);
    expect(gate.draining).toBe(false);
  });

  it('drains again after an earlier drain', async () => {
    const gate = new PolicyGate();
    await gate.drain(async () => 1, 1_000);
    await gate.enter();
    const second = watch(gate.drain(async () => 2, 5_000));
    await settle();
    expect(second.done).toBe(false); // waits for the new generation, not fooled by the old drain
    gate.exit();
    await settle();
    expect(second.value).toMatchObject({ value: 2, timedOut: false });
  });

  it('lets generations in again when the change fails', async () => {
    const gate = new PolicyGate();
    await expect(
      gate.drain(async () => {
        throw new Error('checkpoint missing');
      }, 1_000),
    ).rejects.toThrow('checkpoint missing');
    expect(gate.draining).toBe(false);
    await gate.enter();
    expect(gate.running).toBe(1);
  });
});

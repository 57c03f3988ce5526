import { describe, expect, it } from 'vitest';
import { ResponseStore } from './response-store.js';

const turn = (text: string) => [{ role: 'user', content: text }];

describe('ResponseStore', () => {
  it('answers a response only to the trajectory that made it', () => {
    const store = new ResponseStore();
    store.put('a', 'resp_1', turn('one'), 10);
    expect(store.get('a', 'resp_1')).toEqual(turn('one'));
    expect(store.get('b', 'resp_1')).toBeNull();
    expect(store.get('a', 'resp_2')).toBeNull();
  });

  it('keeps a trajectory’s latest responses only', () => {
    const store = new ResponseStore({ perTrajectory: 2 });
    for (const id of ['r1', 'r2', 'r3']) store.put('a', id, turn(id), 10);
    expect(store.get('a', 'r1')).toBeNull();
    expect(store.get('a', 'r2')).toEqual(turn('r2'));
    expect(store.get('a', 'r3')).toEqual(turn('r3'));
    expect(store.stats()).toEqual({ responses: 2, bytes: 20 });
  });

  it('stays within its byte budget, dropping the least recently used trajectories first', () => {
    const store = new ResponseStore({ maxBytes: 100 });
    store.put('a', 'a1', turn('a1'), 40);
    store.put('b', 'b1', turn('b1'), 40);
    // Reading a makes b the least recently used.
    expect(store.get('a', 'a1')).not.toBeNull();
    store.put('c', 'c1', turn('c1'), 40);
    expect(store.get('b', 'b1')).toBeNull();
    expect(store.get('a', 'a1')).not.toBeNull();
    expect(store.get('c', 'c1')).not.toBeNull();
    expect(store.stats()).toEqual({ responses: 2, bytes: 80 });
    // A response bigger than the budget stays until the next one comes, its trajectory's latest.
    store.put('c', 'c2', turn('c2'), 500);
    expect(store.stats()).toEqual({ responses: 1, bytes: 500 });
    expect(store.get('c', 'c2')).not.toBeNull();
  });

  it('forgets a completed trajectory', () => {
    const store = new ResponseStore();
    store.put('a', 'a1', turn('a1'), 40);
    store.put('b', 'b1', turn('b1'), 40);
    store.drop('a');
    expect(store.get('a', 'a1')).toBeNull();
    expect(store.stats()).toEqual({ responses: 1, bytes: 40 });
  });
});

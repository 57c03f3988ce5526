import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openSqliteStore } from '../src/store/sqlite/sqlite-store.js';
import { runTrain } from '../src/train/loop.js';
import { findTrainPython } from '../src/train/python.js';

/*
 * `stepwise train --async abort` with the real pieces (the reference engine behind the gateway, the
 * Python trainer, the built-in agent in the sandbox): rounds run ahead under admission control,
 * every update is switched in through the gateway while rollouts run, and the trainer checks each
 * batch's behaviour log-probs against the checkpoint of the version that made each token. Short:
 * the rise of the reward in this mode is measured in docs/trainers.md (a full run takes minutes);
 * test/partial-rollouts-reference.test.ts cuts generations at a fixed point to prove the splice.
 */

const python = findTrainPython();
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!python)('stepwise train --async abort', () => {
  it('switches in flight: behaviour log-probs exact per version, rounds ahead, nothing dropped', async () => {
    const out = mkdtempSync(join(tmpdir(), 'stepwise-train-async-'));
    dirs.push(out);
    const result = await runTrain({
      out,
      seed: 3,
      versions: 4,
      groups: 2,
      rollouts: 4,
      warmupSteps: 30,
      warmupLr: 1e-2,
      lr: 2e-2,
      epochs: 1,
      maxStaleness: 1,
      concurrency: 2,
      update: true,
      async: 'abort',
      python: python!,
      print: () => {},
    });
    expect(result.updates.map((u) => u.version)).toEqual([1, 2, 3, 4]);
    const updates = result.updates as unknown as Record<string, number>[];
    // Every token's behaviour log-prob equals its own version's checkpoint's, whatever its age.
    for (const u of updates) expect(u.behaviour_exact_max).toBeLessThanOrEqual(1e-4);
    // Rounds ran ahead of the trainer: some batch held tokens of two versions.
    expect(Math.max(...updates.map((u) => u.versions_checked!))).toBeGreaterThanOrEqual(2);
    expect(Math.max(...updates.map((u) => u.staleness_max!))).toBeLessThanOrEqual(1);
    // Admission control kept every group within the staleness budget: none was dropped.
    expect(result.staleDropped).toBe(0);
    // Each version was switched in through the gateway; the trainer reported its mismatch.
    for (const u of updates) expect(u.mismatch_reported).toBe(1);
    const store = await openSqliteStore({ path: join(out, 'train.db') });
    try {
      expect(await store.getPolicyVersion()).toBe(4);
      const steps = (await store.listSteps({ limit: 100_000, offset: 0 })).items;
      expect(steps.every((s) => s.tokenSource === 'engine')).toBe(true);
      for (const s of steps.filter((x) => x.versionSpans))
        expect(s.versionSpans!.reduce((n, [, c]) => n + c, 0)).toBe(s.responseIds.length);
    } finally {
      await store.close();
    }
  }, 900_000);
});

/**
 * Crash test: a real `stepwise serve` process takes concurrent step submissions over HTTP, is killed
 * with SIGKILL mid-stream, and is restarted on the same SQLite file. Every step whose submit call was
 * answered (acknowledged) must be there, byte for byte, and the store must take new work.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StepOut, StepWireInput } from '../packages/core/src/domain/index.js';
import { StepwiseClient, StepwiseHttpError } from '../packages/core/src/sdk/client.js';
import { seededRandom, syntheticTrajectory } from '../src/cli/synthetic.js';
import { killAllServerProcesses, startServerProcess } from './support/server-process.js';

const CLIENTS = 32;
const INGEST_MS = 2_000;

interface TrajectoryRecord {
  uid: string;
  promptUid: string;
  steps: StepWireInput[];
  /** Steps 0..acked-1 were acknowledged: their submit calls resolved. */
  acked: number;
  /** Set when a submit call failed: that step may or may not have been committed. */
  failedAt: number | null;
}

let tempDir: string | null = null;

/** Runs fn over items with at most `limit` calls in flight. */
async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

/** Asserts a stored step is exactly what was submitted (log-probs are kept at float32 precision). */
function expectIntact(stored: StepOut, sent: StepWireInput, uid: string): void {
  const where = `${uid} step ${sent.step_index}`;
  expect(stored.trajectory_uid, where).toBe(sent.trajectory_uid);
  expect(stored.prompt_uid, where).toBe(sent.prompt_uid);
  expect(stored.step_index, where).toBe(sent.step_index);
  expect(stored.prompt_ids, where).toEqual(sent.prompt_ids);
  expect(stored.response_ids, where).toEqual(sent.response_ids);
  expect(stored.rollout_log_probs, where).toEqual(sent.rollout_log_probs!.map((x) => Math.fround(x)));
  expect(stored.reward, where).toBe(sent.reward);
  expect(stored.is_last, where).toBe(sent.is_last);
  expect(stored.finish_reason, where).toBe(sent.finish_reason);
}

function makeTrajectory(uid: string, promptUid: string, random: () => number): StepWireInput[] {
  return syntheticTrajectory({
    trajectoryUid: uid,
    promptUid,
    steps: 2 + Math.floor(random() * 6),
    systemTokens: 48,
    observationTokens: 16,
    responseTokens: 24,
    breakProbability: 0.2,
    withLogprobs: true,
    random,
  });
}

describe('crash recovery of a real server process', () => {
  beforeAll(async () => {
    tempDir = await mkdtemp(join(tmpdir(), 'stepwise-crash-'));
  });

  afterAll(async () => {
    await killAllServerProcesses();
    if (tempDir) await rm(tempDir, { recursive: true, force: true });
    tempDir = null;
  });

  it('keeps every acknowledged step across a SIGKILL and accepts new work after restart', async () => {
    const started = Date.now();
    const dbPath = join(tempDir!, 'crash.db');

    // ---- phase 1: concurrent ingestion, then SIGKILL mid-stream --------------------------------
    const first = await startServerProcess(dbPath);
    const records: TrajectoryRecord[] = [];
    const unexpected: string[] = [];
    let killed = false;
    let inFlight = 0;
    let acknowledged = 0;
    let failedAfterKill = 0;

    const runClient = async (c: number) => {
      const client = new StepwiseClient({ baseUrl: first.url, timeoutMs: 15_000 });
      const random = seededRandom(1_000 + c);
      for (let t = 0; ; t++) {
        const uid = `crash-c${c}-t${t}`;
        const record: TrajectoryRecord = {
          uid,
          promptUid: `crash-c${c}-p${t >> 1}`,
          steps: makeTrajectory(uid, `crash-c${c}-p${t >> 1}`, random),
          acked: 0,
          failedAt: null,
        };
        records.push(record);
        for (const [i, step] of record.steps.entries()) {
          inFlight++;
          try {
            const result = await client.submitSteps([step]);
            if (result.inserted !== 1 || result.duplicates !== 0)
              unexpected.push(`${uid} step ${i}: ${JSON.stringify(result)}`);
            record.acked = i + 1;
            acknowledged++;
          } catch (error) {
            record.failedAt = i;
            if (killed) failedAfterKill++;
            else unexpected.push(`${uid} step ${i} failed before the kill: ${String(error)}`);
            return; // the server is gone: this client stops
          } finally {
            inFlight--;
          }
        }
      }
    };

    const clients = Array.from({ length: CLIENTS }, (_, c) => runClient(c));
    await new Promise((resolve) => setTimeout(resolve, INGEST_MS));
    const inFlightAtKill = inFlight;
    const ackedAtKill = acknowledged;
    killed = true;
    first.child.kill('SIGKILL');
    await first.exited;
    await Promise.all(clients);
    expect(first.child.signalCode).toBe('SIGKILL');

    expect(unexpected).toEqual([]);
    expect(inFlightAtKill).toBeGreaterThan(0);
    expect(failedAfterKill).toBe(CLIENTS);
    expect(acknowledged).toBeGreaterThan(CLIENTS);
    // Nothing can be acknowledged by a dead process except answers already on the wire.
    expect(acknowledged - ackedAtKill).toBeLessThanOrEqual(CLIENTS);

    // ---- phase 2: restart on the same file and audit every trajectory ---------------------------
    const second = await startServerProcess(dbPath);
    const client = new StepwiseClient({ baseUrl: second.url, timeoutMs: 15_000 });
    expect(await client.ready()).toBe(true);

    const storedCounts = await mapLimit(records, CLIENTS, async (record) => {
      let got: Awaited<ReturnType<StepwiseClient['getTrajectory']>>;
      try {
        got = await client.getTrajectory(record.uid);
      } catch (error) {
        if (error instanceof StepwiseHttpError && error.status === 404) {
          // Only a trajectory whose very first step was never acknowledged may be missing.
          expect(record.acked, `${record.uid} is missing`).toBe(0);
          return 0;
        }
        throw error;
      }
      const steps = [...got.steps].sort((a, b) => a.step_index - b.step_index);
      const attempted = record.failedAt === null ? record.acked : record.failedAt + 1;
      // All acknowledged steps, plus at most the one that was in flight when the server died.
      expect(steps.length, record.uid).toBeGreaterThanOrEqual(record.acked);
      expect(steps.length, record.uid).toBeLessThanOrEqual(attempted);
      expect(got.n_steps, record.uid).toBe(steps.length);
      for (const [j, stored] of steps.entries()) {
        expect(stored.step_index, record.uid).toBe(j);
        expectIntact(stored, record.steps[j]!, record.uid);
      }
      if (steps.length === record.steps.length) {
        expect(got.status, record.uid).toBe('complete');
        expect(got.reward, record.uid).toBe(record.steps.reduce((sum, s) => sum + (s.reward ?? 0), 0));
      } else {
        expect(got.status, record.uid).toBe('open');
      }
      return steps.length;
    });
    const stored = storedCounts.reduce((a, b) => a + b, 0);
    const listed = await client.listSteps({ limit: 1 });
    expect(listed.total).toBe(stored);
    expect(listed.total).toBeGreaterThanOrEqual(acknowledged);
    expect((await client.stats()).produced.steps).toBe(listed.total);

    // ---- phase 3: the restarted server takes new work --------------------------------------------
    // Finish every interrupted trajectory; the step that was in flight may already be stored, so
    // its resubmission must be accepted as a duplicate, never as a conflict.
    const interrupted = records.filter((r) => r.acked < r.steps.length);
    expect(interrupted.length).toBe(CLIENTS);
    await mapLimit(interrupted, CLIENTS, async (record) => {
      for (const step of record.steps.slice(record.acked)) {
        const result = await client.submitSteps([step]);
        expect(result.inserted + result.duplicates, `${record.uid} step ${step.step_index}`).toBe(1);
        // A last step that was already stored completed the trajectory before the crash.
        if (step.is_last) expect(result.completed).toEqual(result.inserted === 1 ? [record.uid] : []);
      }
      const got = await client.getTrajectory(record.uid);
      expect(got.status, record.uid).toBe('complete');
      expect(got.steps).toHaveLength(record.steps.length);
      const steps = [...got.steps].sort((a, b) => a.step_index - b.step_index);
      for (const [j, step] of steps.entries()) expectIntact(step, record.steps[j]!, record.uid);
    });

    // A brand-new trajectory, all steps in one call.
    const fresh = makeTrajectory('crash-after-restart', 'crash-after-restart-p', seededRandom(99));
    const result = await client.submitSteps(fresh);
    expect(result).toMatchObject({
      inserted: fresh.length,
      duplicates: 0,
      completed: ['crash-after-restart'],
    });
    const freshStored = await client.getTrajectory('crash-after-restart');
    expect(freshStored.steps).toHaveLength(fresh.length);
    for (const [j, step] of [...freshStored.steps].sort((a, b) => a.step_index - b.step_index).entries()) {
      expectIntact(step, fresh[j]!, 'crash-after-restart');
    }
    const finalTotal = (await client.listSteps({ limit: 1 })).total;
    expect(finalTotal).toBe(records.reduce((n, r) => n + r.steps.length, 0) + fresh.length);

    console.log(
      `crash test: ${records.length} trajectories, ${acknowledged} steps acknowledged ` +
        `(${inFlightAtKill} in flight at SIGKILL), ${stored} stored after restart, ` +
        `${Date.now() - started} ms`,
    );
  });
});

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type GuideDecision, readDecisions } from './guide-decisions.js';
import { readSampleState, type SampleResult, sampleKey } from './runner.js';

const dir = mkdtempSync(join(tmpdir(), 'stepwise-state-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let files = 0;
function file(lines: readonly string[]): string {
  const path = join(dir, `state-${files++}.jsonl`);
  writeFileSync(path, `${lines.join('\n')}\n`);
  return path;
}

const result = (over: Partial<SampleResult> = {}): SampleResult => ({
  taskId: 't1',
  category: 'files',
  sample: 0,
  groupId: 'run.t1',
  trajectoryUid: 'u1',
  status: 'complete',
  score: 1,
  code: 1,
  rubric: null,
  verifierFailed: false,
  agent: 'finished',
  reason: null,
  toolCalls: 3,
  toolErrors: 0,
  durationMs: 812.5,
  ...over,
});

const decision = (over: Partial<GuideDecision> = {}): GuideDecision => ({
  taskId: 't1',
  groupId: 'run.t1',
  rewards: [0, 0],
  hard: true,
  reason: null,
  guidance: {
    k: 2,
    strategy: 'adaptive',
    hint: '1. read a.txt',
    planSource: 'reference',
    planFrom: null,
    actions: 3,
    probes: [{ k: 1, rewards: [0, 1] }],
    groupId: 'run.t1.guided',
    rewards: [1, 0],
    rescued: true,
    replaced: ['u1', 'u2'],
    mode: 'user_prompt',
  },
  ...over,
});

describe('the gym state file', () => {
  it('reads the results it wrote; the last line of a sample wins and a torn line is skipped', () => {
    const first = result({ score: 0 });
    const again = result({ score: 1, gatewayRefused: ['GET /v1/stats'] });
    const other = result({ sample: 1, trajectoryUid: null, status: 'infra_failed' });
    const torn = JSON.stringify(result({ sample: 2 })).slice(0, 40);
    const done = readSampleState(
      file([JSON.stringify(first), JSON.stringify(other), JSON.stringify(again), torn]),
    );
    expect([...done.keys()]).toEqual([sampleKey('t1', 0), sampleKey('t1', 1)]);
    expect(done.get(sampleKey('t1', 0))).toEqual(again);
    expect(done.get(sampleKey('t1', 1))).toEqual(other);
  });

  it('refuses a line that is JSON but no result, naming the file, line and field', () => {
    const path = file([JSON.stringify(result()), JSON.stringify({ ...result(), sample: '1' })]);
    expect(() => readSampleState(path)).toThrow(
      expect.objectContaining({
        name: 'ValidationError',
        field: 'sample',
        message: expect.stringMatching(new RegExp(`^state file ${path} line 2: sample: `)),
      }),
    );
    // Another JSONL (a task file, say) given as the state file.
    expect(() => readSampleState(file(['{"id":"t1","prompt":"Do it."}']))).toThrow(/line 1: taskId: /);
  });
});

describe("the guide's decisions file", () => {
  it('reads the decisions it wrote, an easy one without guidance too, skipping a torn line', () => {
    const hard = decision();
    const easy = decision({ taskId: 't2', groupId: 'run.t2', rewards: [1, 0], hard: false, guidance: null });
    const decisions = readDecisions(
      file([JSON.stringify(hard), JSON.stringify(easy), '{"taskId":"t3","gro']),
    );
    expect(Object.fromEntries(decisions)).toEqual({ t1: hard, t2: easy });
  });

  it('refuses a decision of the wrong shape, naming the line and field', () => {
    const bad = decision();
    (bad.guidance!.probes[0]!.rewards as unknown[]).push('1');
    expect(() =>
      readDecisions(file([JSON.stringify(decision({ taskId: 't0' })), JSON.stringify(bad)])),
    ).toThrow(
      expect.objectContaining({
        field: 'guidance.probes.0.rewards.2',
        message: expect.stringMatching(/line 2: guidance\.probes\.0\.rewards\.2: /),
      }),
    );
  });
});

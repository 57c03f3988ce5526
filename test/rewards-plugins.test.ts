import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../packages/core/src/domain/index.js';
import {
  bandToScore,
  builtinPlugins,
  lastNumber,
  NotApplicableError,
  parseBand,
  parseGroupBands,
  RewardError,
  type RewardHandler,
  readScore,
  recordHumanFeedback,
  resolveRewardsConfig,
} from '../packages/core/src/rewards/index.js';
import type { TrajectoryView } from '../packages/core/src/rewards/plugin.js';
import { type GymTaskInput, taskToJsonLine } from '../packages/gym/src/tasks/index.js';
import { GymTask } from '../packages/gym/src/tasks/schema.js';
import { rewardPlugins } from '../src/cli/reward-plugins.js';
import {
  addTrajectory,
  type FakeServer,
  fakeJudge,
  fakeServer,
  openPool,
  refusedUrl,
  signal,
  viewOf,
} from './rewards-support.js';

/** A handler of one configured function, built through the config (so params are validated). */
function handlerOf(plugin: string, params: Record<string, unknown>): RewardHandler {
  const config = resolveRewardsConfig({ functions: { f: { plugin, params } } }, rewardPlugins());
  return config.functions.get('f')!.handler!;
}

const score = async (h: RewardHandler, views: TrajectoryView[]) => h(views, { signal });

const servers: FakeServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
const serve = async (s: Promise<FakeServer>) => {
  const server = await s;
  servers.push(server);
  return server;
};

describe('manifests', () => {
  it('every plugin the CLI serves has a manifest with a JSON Schema of its parameters and a target', () => {
    // The core ships all but `verifier`, which is the gym's (the core does not import the gym).
    expect(builtinPlugins().has('verifier')).toBe(false);
    const plugins = rewardPlugins();
    expect([...plugins.keys()].sort()).toEqual([
      'human',
      'judge',
      'judge_group',
      'rm',
      'rule',
      'rule_step',
      'verifier',
    ]);
    const targets = Object.fromEntries([...plugins].map(([k, p]) => [k, p.manifest.target]));
    expect(targets).toEqual({
      rule: 'trajectory',
      rule_step: 'step',
      verifier: 'trajectory',
      judge: 'trajectory',
      judge_group: 'group',
      rm: 'trajectory',
      human: 'trajectory',
    });
    const judge = plugins.get('judge')!.manifest;
    expect(judge.parameters).toMatchObject({ type: 'object', additionalProperties: false });
    expect((judge.parameters as { required: string[] }).required).toEqual(
      expect.arrayContaining(['base_url', 'model', 'rubric']),
    );
    const rule = plugins.get('rule')!.manifest.parameters as { oneOf?: unknown[]; anyOf?: unknown[] };
    expect((rule.oneOf ?? rule.anyOf)?.length).toBe(4);
  });

  it('rejects bad parameters with an error that names the field', () => {
    const bad = (params: Record<string, unknown>, plugin = 'rule') => {
      try {
        resolveRewardsConfig({ functions: { f: { plugin, params } } });
      } catch (error) {
        expect(error).toBeInstanceOf(ValidationError);
        return (error as ValidationError).field;
      }
      throw new Error('accepted');
    };
    expect(bad({ kind: 'numeric', expected: 1, tolerance: -1 })).toBe('functions.f.params.tolerance');
    expect(bad({ kind: 'regex', pattern: '(' })).toBe('functions.f.params.pattern');
    expect(bad({ kind: 'exact' })).toBe('functions.f.params.expected');
    expect(bad({ kind: 'exact', expected: 'a', expected_key: 'b' })).toBe('functions.f.params.expected_key');
    expect(bad({ kind: 'exact', expected: 'a', input: 'everything' })).toBe('functions.f.params.input');
    expect(bad({ kind: 'sql' })).toBe('functions.f.params.kind');
    expect(bad({ kind: 'json_path', path: '$..x', expected: 1 })).toBe('functions.f.params.path');
    expect(bad({ model: 'm', rubric: 'r' }, 'judge')).toBe('functions.f.params.base_url');
    expect(bad({ base_url: 'http://x/v1', model: 'm', rubric: 'r', bands: ['a'] }, 'judge')).toBe(
      'functions.f.params.bands',
    );
    expect(bad({ url: 'not a url' }, 'rm')).toBe('functions.f.params.url');
    expect(bad({ url: 'http://x', extra: 1 }, 'rm')).toBe('functions.f.params');
    expect(
      bad(
        { base_url: 'http://x/v1', model: 'm', rubric: 'r', api_key_env: 'STEPWISE_TEST_SURELY_UNSET' },
        'judge',
      ),
    ).toBe('functions.f.params.api_key_env');
    expect(() => resolveRewardsConfig({ functions: { f: { plugin: 'nope' } } })).toThrow(
      /functions\.f\.plugin: unknown plugin/,
    );
    expect(() => resolveRewardsConfig({ functions: { 'bad name': { plugin: 'human' } } })).toThrow(
      ValidationError,
    );
  });

  it('derives a version from the params unless one is given, so new params are a new version', () => {
    const v = (params: Record<string, unknown>, version?: string) =>
      resolveRewardsConfig({
        functions: { f: { plugin: 'rule', params, ...(version ? { version } : {}) } },
      }).functions.get('f')!.version;
    const a = v({ kind: 'exact', expected: '42' });
    expect(a).toMatch(/^1-[0-9a-f]{10}$/);
    expect(v({ expected: '42', kind: 'exact' })).toBe(a); // key order does not matter
    expect(v({ kind: 'exact', expected: '43' })).not.toBe(a);
    expect(v({ kind: 'exact', expected: '43' }, 'v7')).toBe('v7');
  });
});

describe('rule', () => {
  it('exact: literal or from metadata, trimmed, optionally case-insensitive', async () => {
    const literal = handlerOf('rule', { kind: 'exact', expected: 'Paris' });
    expect((await score(literal, [viewOf(['Lyon', '  Paris\n'])]))[0]).toMatchObject({
      stepIndex: null,
      value: 1,
    });
    expect((await score(literal, [viewOf(['paris'])]))[0]!.value).toBe(0);
    const loose = handlerOf('rule', { kind: 'exact', expected: 'Paris', case_sensitive: false });
    expect((await score(loose, [viewOf(['paris'])]))[0]!.value).toBe(1);
    const keyed = handlerOf('rule', { kind: 'exact', expected_key: '$.gold.answer' });
    expect((await score(keyed, [viewOf(['7'], { metadata: { gold: { answer: '7' } } })]))[0]!.value).toBe(1);
    expect((await score(keyed, [viewOf(['7'], { metadata: { gold: { answer: 7 } } })]))[0]!.value).toBe(1);
    await expect(score(keyed, [viewOf(['7'], { metadata: {} })])).rejects.toBeInstanceOf(NotApplicableError);
  });

  it('regex over the final answer, every tool output, or the last one', async () => {
    const answer = handlerOf('rule', { kind: 'regex', pattern: '\\bdone\\b', flags: 'i' });
    expect((await score(answer, [viewOf(['working', 'All DONE.'])]))[0]!.value).toBe(1);
    expect((await score(answer, [viewOf(['DONE', 'undone'])]))[0]!.value).toBe(0);
    const tools = handlerOf('rule', { kind: 'regex', pattern: 'exit code 0', input: 'tool_results' });
    const v = viewOf(['a', 'b'], { toolOutputs: ['exit code 0', 'exit code 1'] });
    expect((await score(tools, [v]))[0]!.value).toBe(1);
    const last = handlerOf('rule', { kind: 'regex', pattern: 'exit code 0', input: 'last_tool_result' });
    expect((await score(last, [v]))[0]!.value).toBe(0);
  });

  it('numeric: the last number in the answer, within an absolute or relative tolerance', async () => {
    expect(lastNumber('The total is 1,234.5 (about 1.2e3)')).toBe(1200);
    expect(lastNumber('x = -3.25.')).toBe(-3.25);
    expect(lastNumber('no digits')).toBeNull();
    const abs = handlerOf('rule', { kind: 'numeric', expected: 42, tolerance: 0.5 });
    expect((await score(abs, [viewOf(['I think 42.4'])]))[0]).toMatchObject({
      value: 1,
      details: { found: 42.4 },
    });
    expect((await score(abs, [viewOf(['I think 43'])]))[0]!.value).toBe(0);
    expect((await score(abs, [viewOf(['no idea'])]))[0]).toMatchObject({
      value: 0,
      details: { found: null },
    });
    const rel = handlerOf('rule', {
      kind: 'numeric',
      expected_key: 'answer',
      tolerance: 0.01,
      relative: true,
    });
    expect((await score(rel, [viewOf(['1,005'], { metadata: { answer: '1000' } })]))[0]!.value).toBe(1);
    expect((await score(rel, [viewOf(['1,011'], { metadata: { answer: 1000 } })]))[0]!.value).toBe(0);
    await expect(score(rel, [viewOf(['1'], { metadata: { answer: 'many' } })])).rejects.toBeInstanceOf(
      NotApplicableError,
    );
  });

  it('json_path: finds the JSON in the answer (fenced or bare) and compares structurally', async () => {
    const h = handlerOf('rule', {
      kind: 'json_path',
      path: '$.result.items[1]',
      expected: { id: 2, tags: ['a'] },
    });
    const fenced = 'Here you go:\n```json\n{"result": {"items": [{"id": 1}, {"tags": ["a"], "id": 2}]}}\n```';
    expect((await score(h, [viewOf([fenced])]))[0]!.value).toBe(1);
    expect((await score(h, [viewOf(['{"result": {"items": [{"id": 1}]}}'])]))[0]!.value).toBe(0);
    expect((await score(h, [viewOf(['not json at all'])]))[0]).toMatchObject({ value: 0 });
    const quoted = handlerOf('rule', { kind: 'json_path', path: "$['final answer']", expected: true });
    expect((await score(quoted, [viewOf(['{"final answer": true}'])]))[0]!.value).toBe(1);
  });

  it('is not applicable to a trajectory without steps or with token-only steps (never a 0)', async () => {
    const h = handlerOf('rule', { kind: 'exact', expected: 'x' });
    await expect(score(h, [viewOf([])])).rejects.toThrow(/no steps/);
    await expect(score(h, [viewOf([null])])).rejects.toThrow(/token-only/);
  });

  it('rule_step scores every step', async () => {
    const h = handlerOf('rule_step', { kind: 'regex', pattern: '^ok' });
    const scores = await score(h, [viewOf(['ok 1', 'fail', 'ok 3'])]);
    expect(scores.map((s) => [s.stepIndex, s.value])).toEqual([
      [0, 1],
      [1, 0],
      [2, 1],
    ]);
    const tools = handlerOf('rule_step', { kind: 'exact', expected: 'ERR', input: 'tool_results' });
    const byTool = await score(tools, [viewOf(['a', 'b'], { toolOutputs: ['fine', 'ERR'] })]);
    expect(byTool.map((s) => s.value)).toEqual([0, 1]);
  });
});

describe('judge', () => {
  const params = (url: string, extra: Record<string, unknown> = {}) => ({
    base_url: `${url}/v1`,
    model: 'judge-model',
    rubric: 'The answer must be the correct number.',
    ...extra,
  });

  it('reads the band from JSON, a "band:" line or a bare digit, ignoring think blocks and fences', () => {
    expect(parseBand('{"band": 4, "reason": "close"}')).toEqual({ band: 4, reason: 'close' });
    expect(parseBand('<think>band: 1? no</think>Mostly right.\n```json\n{"band": "5"}\n```')).toMatchObject({
      band: 5,
    });
    expect(parseBand('The work is fine {"x": 1} and then {"band": 2, "reason": "r"}')).toMatchObject({
      band: 2,
    });
    expect(parseBand('Reasoning...\n**Band:** 3')).toMatchObject({ band: 3 });
    expect(parseBand('  4  ')).toMatchObject({ band: 4 });
    expect(parseBand('4/5')).toMatchObject({ band: 4 });
    for (const garbage of [
      '',
      'great job!',
      '{"band": 6}',
      '{"band": 3.5}',
      'band: 0',
      '{"score": 4}',
      '12',
    ]) {
      expect(parseBand(garbage)).toHaveProperty('error');
    }
    expect([1, 2, 3, 4, 5].map(bandToScore)).toEqual([0, 0.25, 0.5, 0.75, 1]);
  });

  it('grades over a real OpenAI-compatible endpoint and maps the band to [0, 1]', async () => {
    const judge = await serve(
      fakeJudge(() => 'The answer is right.\n{"band": 4, "reason": "correct, terse"}'),
    );
    const h = handlerOf('judge', params(judge.url));
    const [s] = await score(h, [viewOf(['42'], { question: 'What is six times seven?' })]);
    expect(s).toMatchObject({ stepIndex: null, value: 0.75, details: { band: 4, reason: 'correct, terse' } });
    const sent = judge.requests[0]!;
    expect(sent.path).toBe('/v1/chat/completions');
    const body = sent.body as { model: string; messages: { role: string; content: string }[] };
    expect(body.model).toBe('judge-model');
    expect(body.messages[0]!.content).toContain('5 — excellent');
    expect(body.messages[1]!.content).toContain('The answer must be the correct number.');
    expect(body.messages[1]!.content).toContain('What is six times seven?');
    expect(body.messages[1]!.content).toContain('[assistant]\n42');
  });

  it('fails (retryably) on an unparseable verdict, an error status or a refused connection; never scores', async () => {
    const garbage = await serve(fakeJudge(() => 'I would say it is pretty good overall!'));
    const e1 = await score(handlerOf('judge', params(garbage.url)), [viewOf(['42'])]).catch((e) => e);
    expect(e1).toBeInstanceOf(RewardError);
    expect(e1).toMatchObject({ isRetryable: true, message: expect.stringMatching(/unparseable verdict/) });
    const failing = await serve(
      fakeServer(() => ({ status: 503, body: '{"error": {"message": "overloaded"}}' })),
    );
    const e2 = await score(handlerOf('judge', params(failing.url)), [viewOf(['42'])]).catch((e) => e);
    expect(e2).toMatchObject({ isRetryable: true, message: expect.stringMatching(/HTTP 503/) });
    const unauthorized = await serve(
      fakeServer(() => ({ status: 401, body: '{"error": {"message": "bad key"}}' })),
    );
    const e3 = await score(handlerOf('judge', params(unauthorized.url)), [viewOf(['42'])]).catch((e) => e);
    expect(e3).toMatchObject({ isRetryable: false, message: expect.stringMatching(/HTTP 401/) });
    const down = await refusedUrl();
    const e4 = await score(handlerOf('judge', params(down)), [viewOf(['42'])]).catch((e) => e);
    expect(e4).toMatchObject({ isRetryable: true, message: expect.stringMatching(/request failed/) });
  });

  it('judge_group grades the whole group in one call, one band per trajectory, and checks the shape', async () => {
    expect(parseGroupBands('{"bands": [5, "1", 3]}', 3)).toEqual({ bands: [5, 1, 3] });
    expect(parseGroupBands('[2, 2]', 2)).toEqual({ bands: [2, 2] });
    expect(parseGroupBands('{"bands": [5, 1]}', 3)).toHaveProperty('error');
    expect(parseGroupBands('{"bands": [5, 1, 9]}', 3)).toHaveProperty('error');
    expect(parseGroupBands('{"scores": [5, 1, 3]}', 3)).toHaveProperty('error');
    expect(parseGroupBands('no', 3)).toHaveProperty('error');

    const judge = await serve(fakeJudge(() => '```json\n{"bands": [5, 1, 3]}\n```'));
    const h = handlerOf('judge_group', params(judge.url, { show: 'answer' }));
    const views = [viewOf(['41'], { id: 'b' }), viewOf(['42'], { id: 'a' }), viewOf(['40'], { id: 'c' })];
    const scores = await score(h, views);
    expect(judge.requests).toHaveLength(1);
    // Candidates are shown in trajectory-id order.
    expect(scores.map((s) => [s.trajectoryId, s.value])).toEqual([
      ['a', 1],
      ['b', 0],
      ['c', 0.5],
    ]);
    const prompt = (judge.requests[0]!.body as { messages: { content: string }[] }).messages[1]!.content;
    expect(prompt.indexOf('### Candidate 1\n\n42')).toBeGreaterThan(0);
    expect(prompt).toContain('### Candidate 3\n\n40');

    const short = await serve(fakeJudge(() => '{"bands": [5, 1]}'));
    await expect(score(handlerOf('judge_group', params(short.url)), views)).rejects.toThrow(
      /2 bands for 3 candidates/,
    );
  });

  it('is not applicable to a trajectory with no text', async () => {
    const judge = await serve(fakeJudge(() => '{"band": 5}'));
    await expect(score(handlerOf('judge', params(judge.url)), [viewOf([null])])).rejects.toBeInstanceOf(
      NotApplicableError,
    );
    expect(judge.requests).toHaveLength(0);
  });
});

describe('rm', () => {
  it('POSTs the conversation with the configured headers and reads the number back', async () => {
    process.env.STEPWISE_TEST_RM_KEY = 'secret';
    const rm = await serve(
      fakeServer((_b, n) => ({
        body: n === 1 ? '{"score": 0.7}' : n === 2 ? '-1.5' : '{"out": {"r": [3]}}',
      })),
    );
    const h = handlerOf('rm', {
      url: `${rm.url}/score`,
      headers: { 'x-team': 'rl' },
      api_key_env: 'STEPWISE_TEST_RM_KEY',
    });
    const v = viewOf(['42'], { question: 'Q?', metadata: { k: 1 } });
    expect((await score(h, [v]))[0]!.value).toBe(0.7);
    expect((await score(h, [v]))[0]!.value).toBe(-1.5);
    const withPath = handlerOf('rm', { url: `${rm.url}/score`, score_path: '$.out.r[0]' });
    expect((await score(withPath, [v]))[0]!.value).toBe(3);
    const first = rm.requests[0]!;
    expect(first.path).toBe('/score');
    expect(first.headers['x-team']).toBe('rl');
    expect(first.headers.authorization).toBe('Bearer secret');
    expect(first.body).toMatchObject({
      trajectory_uid: v.trajectory.id,
      messages: [
        { role: 'user', content: 'Q?' },
        { role: 'assistant', content: '42' },
      ],
      final_answer: '42',
      metadata: { k: 1 },
    });
  });

  it('fails on errors, garbage and timeouts (5xx/timeouts retryable, other 4xx not)', async () => {
    expect(readScore({ reward: 2 }, undefined)).toBe(2);
    expect(typeof readScore({ score: 'high' }, undefined)).toBe('string');
    expect(typeof readScore(null, undefined)).toBe('string');
    const answers: Record<number, { status?: number; body: string; delayMs?: number }> = {
      1: { status: 500, body: 'oops' },
      2: { status: 422, body: '{"detail": "bad input"}' },
      3: { body: '<html>nope</html>' },
      4: { body: '{"score": null}' },
      5: { body: '1', delayMs: 2_000 },
    };
    const rm = await serve(fakeServer((_b, n) => answers[n]!));
    const h = handlerOf('rm', { url: rm.url, timeout_ms: 200 });
    const v = viewOf(['42']);
    const errors = [];
    for (let i = 0; i < 5; i++) errors.push(await score(h, [v]).catch((e) => e));
    expect(errors.map((e) => [e.constructor.name, e.isRetryable])).toEqual([
      ['RewardError', true],
      ['RewardError', false],
      ['RewardError', true],
      ['RewardError', true],
      ['RewardTimeoutError', true],
    ]);
    expect(errors[0].message).toMatch(/HTTP 500/);
    expect(errors[2].message).toMatch(/non-JSON/);
    const down = handlerOf('rm', { url: await refusedUrl() });
    await expect(score(down, [v])).rejects.toMatchObject({
      isRetryable: true,
      message: expect.stringMatching(/failed/),
    });
  });
});

describe('verifier', () => {
  let root: string;
  let tasksFile: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'rewards-verifier-'));
    const task: GymTaskInput = {
      id: 'report-1',
      prompt: 'Write report.md saying DONE.',
      verifier: {
        kind: 'checks',
        checks: [
          { kind: 'file_exists', name: 'exists', path: 'report.md' },
          { kind: 'text_contains', name: 'says_done', path: 'report.md', pattern: 'DONE' },
        ],
      },
    };
    tasksFile = join(root, 'tasks.jsonl');
    await writeFile(tasksFile, `${taskToJsonLine(GymTask.parse(task))}\n`);
    await mkdir(join(root, 'ws', 'good'), { recursive: true });
    await writeFile(join(root, 'ws', 'good', 'report.md'), 'All DONE here.');
    await mkdir(join(root, 'ws', 'half'), { recursive: true });
    await writeFile(join(root, 'ws', 'half', 'report.md'), 'not finished');
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("runs the task's verifier over the recorded workspace", async () => {
    const h = handlerOf('verifier', { tasks: tasksFile, workspace_root: join(root, 'ws') });
    const good = viewOf(['done'], { metadata: { task_id: 'report-1', workspace: 'good' } });
    const half = viewOf(['done'], { taskId: 'report-1', metadata: { workspace: join(root, 'ws', 'half') } });
    const [g] = await score(h, [good]);
    expect(g).toMatchObject({ value: 1, details: { task_id: 'report-1', code: 1 } });
    const [hf] = await score(h, [half]);
    expect(hf).toMatchObject({ value: 0.5, details: { subscores: { exists: 1, says_done: 0 } } });
  });

  it('is not applicable without a task, a known task, or a workspace inside the root', async () => {
    const h = handlerOf('verifier', { tasks: tasksFile, workspace_root: join(root, 'ws') });
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ workspace: 'good' }, /carries no gym task/],
      [{ task_id: 'other', workspace: 'good' }, /not in the task set/],
      [{ task_id: 'report-1' }, /records no workspace/],
      [{ task_id: 'report-1', workspace: 'gone' }, /no longer exists/],
      [{ task_id: 'report-1', workspace: root }, /outside workspace_root/],
      [{ task_id: 'report-1', workspace: '../ws/../..' }, /outside workspace_root/],
    ];
    for (const [metadata, message] of cases) {
      const error = await score(h, [viewOf(['x'], { metadata })]).catch((e) => e);
      expect(error).toBeInstanceOf(NotApplicableError);
      expect(error.message).toMatch(message);
    }
  });
});

describe('human', () => {
  it('has a manifest and no handler; the helper records thumbs, scores and corrections as human signals', async () => {
    const config = resolveRewardsConfig({ functions: { people: { plugin: 'human' } } });
    expect(config.functions.get('people')!.handler).toBeNull();
    const dir = await mkdtemp(join(tmpdir(), 'rewards-human-'));
    const pool = await openPool(join(dir, 'h.db'));
    try {
      const t = await addTrajectory(pool, { answers: ['a', 'b'] });
      await recordHumanFeedback(pool, {
        trajectoryId: t.id,
        stepIndex: 1,
        feedback: { kind: 'thumbs', up: true },
        author: 'ann',
      });
      await recordHumanFeedback(pool, { trajectoryId: t.id, feedback: { kind: 'score', value: 0.8 } });
      await recordHumanFeedback(pool, {
        trajectoryId: t.id,
        stepIndex: 0,
        feedback: { kind: 'correction', text: 'use b' },
      });
      await expect(
        recordHumanFeedback(pool, { trajectoryId: t.id, feedback: { kind: 'score', value: 3 } }),
      ).rejects.toThrow();
      const signals = await pool.getSignals(t.id);
      expect(signals.map((s) => [s.name, s.stepIndex, s.value, s.source, s.details.kind ?? null])).toEqual([
        ['user_feedback', 1, 1, 'human', 'thumbs_up'],
        ['human_score', null, 0.8, 'human', null],
        ['user_feedback', 0, -1, 'human', 'correction'],
      ]);
      expect(signals[0]!.details).toMatchObject({ implicit: false, author: 'ann' });
    } finally {
      await pool.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

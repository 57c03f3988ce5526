/**
 * LLM task synthesis (packages/gym-synth/src/llm.ts) end to end: the pipeline talks over real HTTP to the sim
 * engine, whose scripted policy answers by the request's content (the task id and the stage in the
 * first user message, the turn for follow-ups), and every candidate goes through the real gate and
 * sandbox. Also the lenient JSON reading, the check/action validation, dedup and the seeded plan.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimEngine } from '../packages/core/src/engines/sim/engine.js';
import { type PolicyContext, scriptedPolicy } from '../packages/core/src/engines/sim/policies.js';
import { createSimApp } from '../packages/core/src/engines/sim/server.js';
import { type Listening, listen } from '../packages/core/src/util/http-server.js';
import { gateTask } from '../packages/gym/src/gate.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { CATEGORIES, GymTask } from '../packages/gym/src/tasks/schema.js';
import { CLOSING_SENTENCE } from '../packages/gym-synth/src/index.js';
import {
  dropNearDuplicates,
  extractJson,
  jaccard,
  type LlmEndpoint,
  llmTaskPlan,
  readChecker,
  readFiles,
  readIntent,
  shingles,
  synthesizeWithLlm,
} from '../packages/gym-synth/src/llm.js';
import { MANIFEST_FILE, TASKS_FILE } from '../packages/gym-synth/src/output.js';
import { synthCli } from './support/synth-cli.js';

const sandbox = checkSandbox();
const noSandbox = !sandbox.ok;

// ---- a sim that answers by request content ---------------------------------------------------------

type Stage = 'intent' | 'files' | 'checker';
/** Replies per stage, by turn (the last one repeats). */
type Scenario = Record<Stage, string[]>;
interface SeenRequest {
  id: string;
  stage: Stage;
  turn: number;
  /** The last user message: the stage's request, or a follow-up. */
  last: string;
}

const scenarios = new Map<string, Scenario>();
const seen: SeenRequest[] = [];

function text(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => (p as { text?: string }).text ?? '').join('\n');
  return '';
}

function answerByContent(ctx: PolicyContext) {
  const users = ctx.messages.filter((m) => m.role === 'user').map((m) => text(m.content));
  const first = users[0] ?? '';
  const id = /^Task id: (\S+)/m.exec(first)?.[1] ?? '?';
  const stage: Stage = first.includes('Step 1 of 3')
    ? 'intent'
    : first.includes('Step 2 of 3')
      ? 'files'
      : 'checker';
  seen.push({ id, stage, turn: ctx.turn, last: users.at(-1) ?? '' });
  const replies = scenarios.get(id)?.[stage] ?? [`no scenario for ${id}`];
  return [{ answer: replies[Math.min(ctx.turn, replies.length - 1)]! }];
}

let server: Listening;
let llm: LlmEndpoint;
let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'gym-synth-llm-test-'));
  const engine = new SimEngine({ policy: scriptedPolicy(answerByContent), seed: 0 });
  const app = createSimApp({ engine, model: 'sim-synth' });
  server = await listen(app.fetch, '127.0.0.1', 0);
  llm = { baseURL: `${server.url}/v1`, apiKey: 'sk-test', model: 'sim-synth', timeoutMs: 20_000 };
});
afterAll(async () => {
  await server?.close(undefined, 500);
  await rm(tmp, { recursive: true, force: true });
});

const idOf = (seed: number | string, index: number) => `llm-${seed}-${String(index).padStart(5, '0')}`;
const requestsFor = (id: string, stage?: Stage) =>
  seen.filter((r) => r.id === id && (stage === undefined || r.stage === stage));

// ---- candidate replies -------------------------------------------------------------------------------

interface CountTask {
  /** Where the notes are (under input/) and where the count goes (under output/). */
  input: string;
  output: string;
  notes: string;
  /** Words that make the prompt its own. */
  story: string;
}

function nonEmptyLines(notes: string): number {
  return notes.split('\n').filter((l) => l.trim() !== '').length;
}

const intentReply = (t: CountTask) =>
  JSON.stringify({
    title: 'Count the note lines',
    prompt: `${t.story} The notes are in ${t.input}, one entry per line; blank lines are not entries. Please count the entries and write ${t.output} as a JSON object with one key, "lines", whose value is the number of non-empty lines as an integer. Do not change ${t.input}.`,
  });

const filesReply = (t: CountTask) => JSON.stringify({ files: [{ path: t.input, content: t.notes }] });

const checkerReply = (t: CountTask, expected = nonEmptyLines(t.notes)) =>
  JSON.stringify({
    checks: [
      { kind: 'parses', name: 'count_json', path: t.output, format: 'json' },
      { kind: 'json_value', name: 'lines', path: t.output, pointer: '/lines', expected },
    ],
    actions: [
      { name: 'read', arguments: { path: t.input } },
      {
        name: 'exec',
        arguments: {
          command: `mkdir -p output && python3 -c "import json; n = sum(1 for l in open('${t.input}') if l.strip()); json.dump({'lines': n}, open('${t.output}', 'w'))"`,
        },
      },
    ],
  });

const good = (t: CountTask): Scenario => ({
  intent: [intentReply(t)],
  files: [filesReply(t)],
  checker: [checkerReply(t)],
});

const bakery: CountTask = {
  input: 'input/notes.txt',
  output: 'output/count.json',
  notes: 'sourdough starter fed\n\ncroissant dough laminated\nrye boule proofing\n',
  story: 'I run the Main Street bakery and log what the night shift did in a plain notes file.',
};

// ---- the pipeline over HTTP ---------------------------------------------------------------------------

describe.skipIf(noSandbox)('synthesizeWithLlm against the sim engine', () => {
  it('(a) emits a candidate that passes the gate, with its provenance; reads a fenced reply after prose', async () => {
    const id = idOf(11, 0);
    scenarios.set(id, {
      ...good(bakery),
      intent: [
        `Here is a task for this persona:\n\n\`\`\`json\n${intentReply(bakery)}\n\`\`\`\nHope it helps!`,
      ],
    });
    const progress: [number, number][] = [];
    const { tasks, stats } = await synthesizeWithLlm({
      n: 1,
      seed: 11,
      llm,
      onProgress: (done, total) => progress.push([done, total]),
    });
    const plan = llmTaskPlan(11, 0);
    expect(stats).toMatchObject({
      requested: 1,
      accepted: 1,
      llmCalls: 3,
      rounds: { '1': 1 },
      dropped: { invalid_json: 0, invalid_checks: 0, gate_failed: 0, duplicate: 0, llm_error: 0 },
    });
    expect(progress).toEqual([[1, 1]]);
    expect(tasks).toHaveLength(1);
    const task = tasks[0]!;
    expect(GymTask.parse(task)).toEqual(task);
    expect(task.id).toBe(id);
    expect(task.prompt.endsWith(CLOSING_SENTENCE)).toBe(true);
    expect(task.prompt).toContain('write output/count.json as a JSON object');
    expect(task.files).toEqual([{ path: 'input/notes.txt', encoding: 'utf8', content: bakery.notes }]);
    expect(task.category).toBe(plan.category);
    expect(task.persona).toBe(plan.persona.role);
    expect(task.weights).toEqual({ code: 1, rubric: 0 });
    expect(task.verifier).toMatchObject({
      kind: 'checks',
      checks: [{ name: 'count_json' }, { name: 'lines' }],
    });
    expect(task.referenceActions?.map((a) => a.name)).toEqual(['read', 'exec']);
    expect(task.provenance).toMatchObject({
      source: 'llm-synth',
      model: 'sim-synth',
      seed: 11,
      index: 0,
      rounds: 1,
      persona: plan.persona.id,
      title: 'Count the note lines',
    });
    // The emitted task holds the gate on its own: 0 untouched, 0 scaffolded, 1 with its reference.
    const gate = await gateTask(task);
    expect(gate).toMatchObject({ ok: true, noopScore: 0, scaffoldScore: 0, referenceScore: 1 });
    // The stages went out in order, each once, and the request named who asks and the category.
    expect(requestsFor(id).map((r) => r.stage)).toEqual(['intent', 'files', 'checker']);
    const intentRequest = requestsFor(id, 'intent')[0]!.last;
    expect(intentRequest).toContain(plan.persona.role);
    expect(intentRequest).toContain(`Category: ${plan.category}`);
    expect(requestsFor(id, 'checker')[0]!.last).toContain(bakery.notes.trim());
  });

  it('(b) repairs a checker the gate rejects, with the gate problems in the follow-up', async () => {
    const id = idOf(12, 0);
    scenarios.set(id, { ...good(bakery), checker: [checkerReply(bakery, 4), checkerReply(bakery)] });
    const { tasks, stats } = await synthesizeWithLlm({ n: 1, seed: 12, llm });
    expect(stats).toMatchObject({ accepted: 1, rounds: { '2': 1 }, llmCalls: 4 });
    expect(tasks[0]?.provenance).toMatchObject({ source: 'llm-synth', rounds: 2 });
    expect(tasks[0]?.verifier).toMatchObject({ checks: [{}, { name: 'lines', expected: 3 }] });
    const checker = requestsFor(id, 'checker');
    expect(checker.map((r) => r.turn)).toEqual([0, 1]);
    expect(checker[1]!.last).toContain('The validation gate ran this task and rejected it');
    expect(checker[1]!.last).toMatch(/reference: scored 0\.5, expected 1 — lines=0/);
    expect(checker[1]!.last).toContain('Keep the request and the input files as they are');
  });

  it('drops a checker that still fails the gate after the repair rounds', async () => {
    const id = idOf(13, 0);
    scenarios.set(id, { ...good(bakery), checker: [checkerReply(bakery, 9)] });
    const { tasks, stats } = await synthesizeWithLlm({ n: 1, seed: 13, llm, repairRounds: 1 });
    expect(tasks).toEqual([]);
    expect(stats.dropped.gate_failed).toBe(1);
    expect(stats.drops).toEqual([
      {
        index: 0,
        id,
        reason: 'gate_failed',
        detail: expect.stringMatching(/^gate \(round 2\): reference: scored 0\.5/),
      },
    ]);
    expect(requestsFor(id, 'checker')).toHaveLength(2);
  });

  it('(c) counts and drops replies without JSON and invalid checks or actions, after asking again', async () => {
    const seed = 14;
    scenarios.set(idOf(seed, 0), { ...good(bakery), intent: ['Sure! I would love to help with that task.'] });
    scenarios.set(idOf(seed, 1), {
      ...good(bakery),
      checker: [
        JSON.stringify({
          checks: [{ kind: 'file_contains', name: 'x', path: 'output/count.json' }],
          actions: [],
        }),
      ],
    });
    scenarios.set(idOf(seed, 2), {
      ...good(bakery),
      checker: [
        JSON.stringify({
          checks: [{ kind: 'parses', name: 'count_json', path: 'output/count.json', format: 'json' }],
          actions: [{ name: 'write', arguments: { path: 'output/count.json', body: '{"lines": 3}' } }],
        }),
      ],
    });
    const other: CountTask = {
      ...bakery,
      story: 'Our podcast team keeps episode ideas in a text file, one per line.',
    };
    scenarios.set(idOf(seed, 3), {
      intent: ['no JSON here', intentReply(other)],
      files: [filesReply(other)],
      checker: [checkerReply(other)],
    });
    const { tasks, stats } = await synthesizeWithLlm({ n: 4, seed, llm, repairRounds: 1, concurrency: 2 });
    expect(tasks.map((t) => t.id)).toEqual([idOf(seed, 3)]);
    expect(stats.dropped).toEqual({
      invalid_json: 1,
      invalid_checks: 2,
      gate_failed: 0,
      duplicate: 0,
      llm_error: 0,
    });
    expect(stats.drops.map((d) => [d.index, d.reason])).toEqual([
      [0, 'invalid_json'],
      [1, 'invalid_checks'],
      [2, 'invalid_checks'],
    ]);
    // Asked once more (repairRounds 1) with what was wrong, then dropped; no later stage was asked.
    expect(requestsFor(idOf(seed, 0)).map((r) => r.stage)).toEqual(['intent', 'intent']);
    expect(requestsFor(idOf(seed, 0))[1]!.last).toMatch(/^That reply could not be used: no JSON object/);
    const badKind = requestsFor(idOf(seed, 1), 'checker');
    expect(badKind).toHaveLength(2);
    expect(badKind[1]!.last).toContain('checks.0.kind');
    expect(stats.drops[2]!.detail).toContain('write takes path, content, not body');
    // The fourth needed its follow-up on the request, then passed.
    expect(requestsFor(idOf(seed, 3), 'intent')).toHaveLength(2);
    expect(tasks[0]?.provenance.rounds).toBe(1);
  });

  it('(d) drops a near-duplicate prompt and identical files, keeping the earlier task', async () => {
    const seed = 15;
    const first: CountTask = {
      ...bakery,
      story:
        'I run the Main Street bakery and every night the closing baker writes down what was prepared for the morning, so the opening team knows where things stand when they arrive before dawn.',
    };
    // One word changed: most shingles are shared.
    const near: CountTask = {
      ...first,
      story: first.story.replace('closing baker', 'closing cook'),
      notes: 'baguettes shaped\nfocaccia dimpled\n',
    };
    // Another request over the very same file.
    const sameFiles: CountTask = {
      ...first,
      story: 'Our wedding planning studio tracks vendor calls in a log; I need to know how many we made.',
    };
    scenarios.set(idOf(seed, 0), good(first));
    scenarios.set(idOf(seed, 1), good(near));
    scenarios.set(idOf(seed, 2), good(sameFiles));
    const { tasks, stats } = await synthesizeWithLlm({ n: 3, seed, llm });
    expect(tasks.map((t) => t.id)).toEqual([idOf(seed, 0)]);
    expect(stats).toMatchObject({ accepted: 1, dropped: { duplicate: 2 } });
    expect(stats.drops).toEqual([
      {
        index: 1,
        id: idOf(seed, 1),
        reason: 'duplicate',
        detail: expect.stringMatching(
          new RegExp(`^near-duplicate of ${idOf(seed, 0)} \\(similarity 0\\.(8|9)\\d\\)$`),
        ),
      },
      {
        index: 2,
        id: idOf(seed, 2),
        reason: 'duplicate',
        detail: `near-duplicate of ${idOf(seed, 0)} (similarity 1.00)`,
      },
    ]);
  });

  it('drops candidates whose model cannot be reached as llm_error', async () => {
    const { tasks, stats } = await synthesizeWithLlm({
      n: 2,
      seed: 16,
      llm: { baseURL: 'http://127.0.0.1:9/v1', apiKey: 'x', model: 'm', maxRetries: 0, timeoutMs: 2_000 },
    });
    expect(tasks).toEqual([]);
    expect(stats.dropped.llm_error).toBe(2);
    expect(stats.drops[0]!.detail).toMatch(/^the model request failed/);
  });

  it('stepwise gym synth --mode llm writes the tasks and a manifest with the counts', async () => {
    scenarios.set(idOf(17, 0), good(bakery));
    scenarios.set(idOf(17, 1), { ...good(bakery), intent: ['nothing useful'] });
    const out = join(tmp, 'cli-llm');
    const run = await synthCli(
      '--mode',
      'llm',
      '--llm-url',
      llm.baseURL,
      '--llm-model',
      'sim-synth',
      '--n',
      '2',
      '--seed',
      '17',
      '--repair-rounds',
      '0',
      '--out',
      out,
    );
    expect(run.error).toBeNull();
    expect(run.out).toMatch(/^synth: 2\/2 tasks$/m);
    expect(run.out).toContain('accepted 1/2 tasks from sim-synth');
    expect(run.out).toContain('dropped: invalid_json 1');
    const lines = (await readFile(join(out, TASKS_FILE), 'utf8')).trim().split('\n');
    expect(lines.map((l) => JSON.parse(l).id)).toEqual([idOf(17, 0)]);
    const manifest = JSON.parse(await readFile(join(out, MANIFEST_FILE), 'utf8'));
    expect(manifest).toMatchObject({
      kind: 'stepwise.gym.synth',
      mode: 'llm',
      generator: { name: 'stepwise-llm-synth' },
      n: 1,
      seed: 17,
      llm: {
        model: 'sim-synth',
        repair_rounds: 0,
        requested: 2,
        accepted: 1,
        dropped: { invalid_json: 1, invalid_checks: 0, gate_failed: 0, duplicate: 0, llm_error: 0 },
        drops: [{ index: 1, reason: 'invalid_json' }],
      },
    });
    expect(manifest.counts.by_category).toEqual({ [llmTaskPlan(17, 0).category]: 1 });
  });
});

describe('stepwise gym synth --mode llm flags', () => {
  it('names the missing or misplaced flag', async () => {
    const missing = await synthCli('--mode', 'llm', '--llm-model', 'm', '--out', join(tmp, 'x1'));
    expect(missing.error).toBe('--llm-url is required with --mode llm');
    const misplaced = await synthCli('--llm-url', 'http://h/v1', '--out', join(tmp, 'x2'));
    expect(misplaced.error).toBe('--llm-url and --llm-model need --mode llm');
    const rounds = await synthCli('--mode', 'llm', '--repair-rounds', '11', '--out', join(tmp, 'x3'));
    expect(rounds.error).toMatch(/--repair-rounds must be an integer from 0 to 10/);
  });
});

// ---- the parts --------------------------------------------------------------------------------------------

describe('(e) the seeded plan', () => {
  it('gives the same persona × category for a seed, balanced categories, and other choices for another seed', () => {
    const a = Array.from({ length: 12 }, (_, i) => llmTaskPlan(7, i));
    const again = Array.from({ length: 12 }, (_, i) => llmTaskPlan('7', i));
    expect(again).toEqual(a);
    expect(new Set(a.slice(0, 6).map((p) => p.category))).toEqual(new Set(CATEGORIES));
    expect(a.slice(6).map((p) => p.category)).toEqual(a.slice(0, 6).map((p) => p.category));
    for (const p of a) for (const f of p.focus.slice(0, 2)) expect(p.persona.items).toContain(f);
    const b = Array.from({ length: 12 }, (_, i) => llmTaskPlan(8, i));
    const key = (ps: typeof a) => ps.map((p) => `${p.persona.id}/${p.category}`).join(' ');
    expect(key(b)).not.toBe(key(a));
    expect(a.map((p) => p.id).slice(0, 2)).toEqual(['llm-7-00000', 'llm-7-00001']);
  });
});

describe('extractJson', () => {
  it('reads a whole reply, a fenced block after prose, a balanced object in prose; skips <think>', () => {
    expect(extractJson('{"a": 1}')).toEqual({ value: { a: 1 } });
    expect(extractJson('Here you go:\n```json\n{"a": [1, "}"]}\n```\nEnjoy.')).toEqual({
      value: { a: [1, '}'] },
    });
    expect(extractJson('The answer is {"a": "b {"} and nothing else {x}')).toEqual({ value: { a: 'b {' } });
    expect(extractJson('<think>{"wrong": 1}</think>[1, 2] then {"o": 1}', 'object')).toEqual({
      value: { o: 1 },
    });
    expect(extractJson('[{"kind": "x"}]', 'array')).toEqual({ value: [{ kind: 'x' }] });
  });

  it('says why there is nothing to read', () => {
    expect(extractJson('no json, sorry')).toEqual({ error: 'no JSON value in the reply' });
    expect(extractJson('[1, 2]', 'object')).toEqual({ error: 'no JSON object in the reply' });
    expect(extractJson('  ')).toEqual({ error: 'the reply is empty' });
    expect(extractJson('{"a": 1,}')).toEqual({ error: 'no JSON value in the reply' });
  });
});

describe('reading the stages', () => {
  it('a request must name an input and an output path; the closing sentence is added', () => {
    const ok = readIntent(intentReply(bakery));
    expect('value' in ok && ok.value.prompt.endsWith(`\n\n${CLOSING_SENTENCE}`)).toBe(true);
    const noOutput = readIntent(
      JSON.stringify({ title: 't', prompt: 'Please summarise input/notes.txt for me in a short reply.' }),
    );
    expect(noOutput).toEqual({
      reason: 'invalid_json',
      error: expect.stringMatching(/names no output file under output\//),
    });
  });

  it('files stay under input/, within bounds, and cover every input the request names', () => {
    const prompt = 'Read input/a.csv and input/b.csv; write output/x.json.';
    expect(readFiles(JSON.stringify({ files: [{ path: 'input/a.csv', content: 'x' }] }), prompt)).toEqual({
      reason: 'invalid_json',
      error: 'files: the request names input/b.csv but no file has that path',
    });
    const outside = readFiles(JSON.stringify({ files: [{ path: '../etc/passwd', content: 'x' }] }), prompt);
    expect(outside).toMatchObject({ reason: 'invalid_json', error: expect.stringContaining('files.0.path') });
    const big = readFiles(
      JSON.stringify({
        files: [
          { path: 'input/a.csv', content: 'x'.repeat(20) },
          { path: 'input/b.csv', content: '' },
        ],
      }),
      prompt,
      { maxPromptChars: 100, maxFiles: 8, maxFileChars: 10, maxTotalChars: 100, maxChecks: 5, maxActions: 5 },
    );
    expect(big).toEqual({ reason: 'invalid_json', error: 'files.0.content: 20 characters, at most 10' });
  });

  it('checks follow the DSL with unique names; actions use the tools and their argument names', () => {
    const parses = { kind: 'parses', name: 'p', path: 'output/x.json', format: 'json' };
    const write = { name: 'write', arguments: { path: 'output/x.json', content: '{}' } };
    expect(readChecker(JSON.stringify({ checks: [parses], actions: [write] }))).toMatchObject({
      value: { checks: [parses], actions: [write] },
    });
    expect(readChecker(JSON.stringify({ checks: [parses, parses], actions: [write] }))).toEqual({
      reason: 'invalid_checks',
      error: 'checks: the name p is used twice (names must be unique)',
    });
    expect(
      readChecker(JSON.stringify({ checks: [parses], actions: [{ name: 'delete', arguments: {} }] })),
    ).toEqual({
      reason: 'invalid_checks',
      error: 'actions.0.name: unknown tool delete (tools: read, write, edit, exec, ls)',
    });
    expect(
      readChecker(
        JSON.stringify({ checks: [parses], actions: [{ name: 'edit', arguments: { path: 'a' } }] }),
      ),
    ).toEqual({ reason: 'invalid_checks', error: 'actions.0.arguments: edit needs oldText, newText' });
    expect(readChecker(JSON.stringify({ checks: [parses] }))).toMatchObject({ reason: 'invalid_checks' });
    expect(readChecker('checks: none')).toMatchObject({ reason: 'invalid_json' });
  });
});

describe('near-duplicates', () => {
  const task = (id: string, prompt: string, content = id) =>
    GymTask.parse({
      id,
      prompt,
      files: [{ path: 'input/a.txt', content }],
      verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'x', path: 'output/x' }] },
    });
  const long =
    'Read the weekly sales export in input/sales.csv and write output/summary.json with the total revenue per region, sorted by region name, rounded to two decimals, plus the best selling product overall.';

  it('scores shingle overlap on normalized text', () => {
    expect(jaccard(shingles('Hello,  WORLD again!'), shingles('hello world again'))).toBe(1);
    expect(jaccard(shingles(long), shingles(long.replace('weekly', 'monthly')))).toBeGreaterThanOrEqual(0.8);
    expect(
      jaccard(shingles(long), shingles('Count the lines of input/notes.txt into output/n.json.')),
    ).toBeLessThan(0.1);
  });

  it('keeps the first of near-duplicates and of identical files, in task order', () => {
    const { kept, duplicates } = dropNearDuplicates([
      task('t0', long),
      task('t1', long.replace('weekly', 'monthly')),
      task('t2', 'Something else entirely: input/a.txt to output/b.txt.', 't0'),
      task('t3', 'Translate input/a.txt into French as output/fr.txt, keeping the line breaks.'),
    ]);
    expect(kept.map((t) => t.id)).toEqual(['t0', 't3']);
    expect(duplicates.map((d) => [d.task.id, d.of])).toEqual([
      ['t1', 't0'],
      ['t2', 't0'],
    ]);
    // Below the threshold both stay.
    const apart = dropNearDuplicates([task('a', long), task('b', long.slice(0, 90))], 0.8);
    expect(apart.kept.map((t) => t.id)).toEqual(['a', 'b']);
  });
});

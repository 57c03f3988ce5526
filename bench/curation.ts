/**
 * Curation benchmark, three parts measured in one run (each against a baseline measured in the same run):
 *
 * 1. Reward-job throughput in process. N completed trajectories (two text steps each) are stored
 *    first; then a RewardService starts with the `rule` plugin (a numeric match of the final answer)
 *    and scores them all from the event log (backfill): scheduling, claiming, running, writing signals
 *    and marking jobs done, through the store's SQLite file. Reported: reward jobs per second until
 *    the queue is empty, with and without a combination (which adds one combine job per trajectory
 *    and writes the reward).
 * 2. Offline CLEANER purification (`purifyTrajectory`): synthetic stored agent trajectories with
 *    failed tool calls followed by a corrected retry (similar arguments: shallow repair; another
 *    approach: deep repair). Reported: trajectories purified per second (median of repeats), the
 *    repairs found, and the ratio to copying the same trajectories (`structuredClone`).
 * 3. Serving overhead of the curation pipeline: two channels of one SQLite store hold the same groups;
 *    one serves them through the full pipeline (zero variance, truncation, repetition, duplicates,
 *    min_trajectories), the other with the default (no curation). Every group is leased (and acked)
 *    from each, in alternating order, on fresh copies of the store. Reported: groups and steps
 *    served per second, the time per served group against the plain channel, and the groups dropped.
 *
 *   npm run bench:curation                      all three parts (~2-4 minutes)
 *   npm run bench:curation -- --quick           smaller sizes, fewer repeats (< 1 minute)
 *   npm run bench:curation -- --only cleaner,serving   some parts (reward, cleaner, serving)
 *   npm run bench:curation -- --concurrency 16  reward workers (default 4)
 *   npm run bench:curation -- --sync normal     SQLite synchronous mode of the stores (default full, as `serve`)
 *   npm run bench:curation -- --sizes 5000 --modes rule   reward: other sizes; only one mode (rule, combination)
 *   npm run bench:curation -- --trajectories 2000         cleaner: trajectories per repeat
 *   npm run bench:curation -- --groups 800                serving: groups per channel
 *   npm run bench:curation -- --repeats 9                 cleaner and serving: repeats (medians reported)
 *
 * Prints a markdown report only: run it on a quiet machine, paste it into bench/results/curation.md and
 * add its figures as a line of curation.jsonl.
 */

import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { type PurifiableStep, purifyTrajectory } from '../packages/core/src/curation/cleaner/index.js';
import {
  type ChannelCuration,
  type JsonObject,
  LeaseRequest,
  type NewStep,
  newStep,
  type ToolResult,
} from '../packages/core/src/domain/index.js';
import { poolOps } from '../packages/core/src/pool/core.js';
import { DataPool } from '../packages/core/src/pool/data-pool.js';
import {
  RewardService,
  type RewardsConfigFile,
  resolveRewardsConfig,
} from '../packages/core/src/rewards/index.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import type { SubmitRequest } from '../packages/core/src/store/store.js';
import { pick, type Random, randomInt, seededRandom } from '../packages/core/src/util/random.js';
import { codeVersion, exitOnHelp, fix, int, log, machineInfo } from './support.js';

const args = process.argv.slice(2);
exitOnHelp(import.meta.url, args);
const flag = (name: string) => args.includes(name);
const option = (name: string, fallback: string) => {
  const at = args.indexOf(name);
  return at >= 0 && args[at + 1] !== undefined ? args[at + 1]! : fallback;
};
const positiveInt = (name: string, fallback: number) => {
  const value = Number(option(name, String(fallback)));
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be an integer >= 1`);
  return value;
};

const PARTS = ['reward', 'cleaner', 'serving'] as const;
const quick = flag('--quick');
const only = option('--only', PARTS.join(',')).split(',');
if (only.some((p) => !(PARTS as readonly string[]).includes(p)))
  throw new Error(`--only takes a list of ${PARTS.join(', ')}`);
const sizes = option('--sizes', quick ? '200,1000' : '1000,10000')
  .split(',')
  .map((x) => Number(x));
if (sizes.some((x) => !Number.isInteger(x) || x < 1))
  throw new Error('--sizes must be integers, e.g. 1000,10000');
const modes = option('--modes', 'rule,combination').split(',');
const concurrency = Number(option('--concurrency', '4'));
const sync = option('--sync', 'full').toUpperCase() as 'FULL' | 'NORMAL';
if (!Number.isInteger(concurrency) || concurrency < 1)
  throw new Error('--concurrency must be an integer >= 1');
if (sync !== 'FULL' && sync !== 'NORMAL') throw new Error('--sync must be full or normal');
const cleanerTrajectories = positiveInt('--trajectories', quick ? 300 : 1000);
const servingGroups = positiveInt('--groups', quick ? 200 : 400);
const cleanerRepeats = positiveInt('--repeats', quick ? 5 : 7);
const servingRepeats = positiveInt('--repeats', quick ? 3 : 5);

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

const spread = (values: readonly number[], unit: (x: number) => string) =>
  `${unit(Math.min(...values))}–${unit(Math.max(...values))}`;

// ---- 1. reward jobs -----------------------------------------------------------------------------

interface RewardRow {
  trajectories: number;
  combination: boolean;
  jobs: number;
  seconds: number;
  functionJobsPerSecond: number;
  jobsPerSecond: number;
}

async function seedRewards(pool: DataPool, n: number): Promise<void> {
  const batch = 500;
  for (let start = 0; start < n; start += batch) {
    const ids: string[] = [];
    for (let i = start; i < Math.min(n, start + batch); i++) {
      const id = `bench-${i}`;
      ids.push(id);
      await pool.createTrajectory({ id, groupId: `g-${i}`, channel: 'train', nRollouts: 1, metadata: {} });
    }
    const steps = ids.flatMap((id, k) =>
      [0, 1].map((index) =>
        newStep({
          trajectoryId: id,
          groupId: `g-${start + k}`,
          index,
          promptIds: [1, 2, 3, 4, 5, 6, 7, 8],
          responseIds: [9, 10, 11, 12],
          isLast: index === 1,
          messages: [{ role: 'user', content: 'What is six times seven?' }],
          responseText: index === 1 ? `The answer is ${k % 2 === 0 ? 42 : 41}.` : 'Let me think.',
        }),
      ),
    );
    await pool.submitSteps(steps, { channel: 'train', nRollouts: 1 });
    for (const id of ids) await pool.completeTrajectory(id, { reward: null, status: 'complete' });
  }
}

async function runRewards(n: number, combination: boolean): Promise<RewardRow> {
  const dir = mkdtempSync(join(os.tmpdir(), 'bench-curation-'));
  const store = await openSqliteStore({ path: join(dir, 'bench.db'), synchronous: sync });
  const pool = new DataPool({ store, sweepIntervalMs: 60_000 });
  try {
    log(`seeding ${int(n)} trajectories`);
    await seedRewards(pool, n);
    const file: RewardsConfigFile = {
      functions: { answer: { plugin: 'rule', params: { kind: 'numeric', expected: 42 } } },
      channels: {
        train: { functions: ['answer'], ...(combination ? { combination: '0.9 * answer + 0.1' } : {}) },
      },
      workers: { concurrency, poll_ms: 20 },
      backfill: true,
    };
    const expected = combination ? 2 * n : n;
    log(
      `scoring ${int(n)} trajectories (${combination ? 'rule + combination' : 'rule'}, ${concurrency} workers)`,
    );
    const started = performance.now();
    const rewards = (await RewardService.open({ pool, config: resolveRewardsConfig(file) })).start();
    let seconds: number;
    for (;;) {
      const counts = await rewards.queue.counts();
      if (counts.failed > 0) throw new Error(`${counts.failed} reward jobs failed`);
      if (counts.done >= expected && counts.pending === 0 && counts.running === 0) {
        seconds = (performance.now() - started) / 1000;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    await rewards.close();
    return {
      trajectories: n,
      combination,
      jobs: expected,
      seconds,
      functionJobsPerSecond: n / seconds,
      jobsPerSecond: expected / seconds,
    };
  } finally {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

function rewardReport(rows: RewardRow[]): string[] {
  return [
    '#### 1. Reward jobs (rule plugin, in process)',
    '',
    `SQLite store (synchronous ${sync}) + reward job queue on the same file (synchronous NORMAL), ${concurrency} reward workers.`,
    '',
    '| trajectories | scoring | jobs | time (s) | trajectories scored / s | jobs / s |',
    '|---:|---|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${int(r.trajectories)} | ${r.combination ? 'rule + combination (writes reward)' : 'rule'} | ${int(r.jobs)} | ${fix(r.seconds)} | ${int(r.functionJobsPerSecond)} | ${int(r.jobsPerSecond)} |`,
    ),
    '',
    'Time runs from starting the reward service until its queue is empty: following the event log',
    '(backfill), queueing, claiming, running the rule, writing the signals (and the combined signal and',
    'reward), and marking the jobs done.',
  ];
}

// ---- 2. offline CLEANER purification ------------------------------------------------------------

const FAIL_SHARE = 0.3;
const SHALLOW_SHARE = 0.6;
const DIRS = ['parser', 'utils', 'io', 'models', 'cli', 'server', 'cache', 'auth'];
const NAMES = ['tokenizer', 'config', 'loader', 'schema', 'session', 'router', 'metrics', 'handler'];
const WORDS = ['empty', 'unicode', 'nested', 'timeout', 'retry', 'overflow', 'missing', 'default'];

function prose(random: Random, sentences: number): string {
  const out: string[] = [];
  for (let i = 0; i < sentences; i++) {
    const words = Array.from({ length: 8 + randomInt(random, 10) }, () =>
      pick(random, [...WORDS, ...NAMES, 'the', 'a', 'function', 'value', 'returns', 'when', 'input', 'is']),
    );
    out.push(`${words.join(' ')}.`);
  }
  return out.join(' ');
}

/** A correct tool call of an agent fixing a bug in a repository, with the output it gets. */
function toolCall(random: Random): { name: string; args: Record<string, unknown>; output: string } {
  const dir = pick(random, DIRS);
  const name = pick(random, NAMES);
  const path = `src/${dir}/${name}.py`;
  switch (randomInt(random, 4)) {
    case 0: {
      const start = 1 + randomInt(random, 200);
      return {
        name: 'read_file',
        args: { path, start_line: start, end_line: start + 60 },
        output: Array.from({ length: 12 }, (_, i) => `${start + i}: ${prose(random, 1)}`).join('\n'),
      };
    }
    case 1:
      return {
        name: 'search_code',
        args: { query: `def ${pick(random, WORDS)}_${name}`, path: `src/${dir}`, max_results: 20 },
        output: Array.from(
          { length: 5 },
          (_, i) => `${path}:${10 + i * 7}: def ${pick(random, WORDS)}_${name}(value):`,
        ).join('\n'),
      };
    case 2:
      return {
        name: 'run_tests',
        args: { path: `tests/test_${name}.py`, filter: `test_${name}_${pick(random, WORDS)}`, verbose: true },
        output: `collected 14 items\n\n${Array.from({ length: 14 }, (_, i) => `tests/test_${name}.py::test_${i} PASSED`).join('\n')}\n\n14 passed in 0.42s`,
      };
    default:
      return {
        name: 'edit_file',
        args: { path, old: prose(random, 1), new: prose(random, 1) },
        output: `Edited ${path}: 1 replacement.`,
      };
  }
}

/** The same call with a slip in one string argument (two letters swapped): a shallow repair's K. */
function withSlip(random: Random, args: Record<string, unknown>): Record<string, unknown> {
  const keys = Object.keys(args).filter((k) => typeof args[k] === 'string' && (args[k] as string).length > 3);
  const key = pick(random, keys);
  const value = args[key] as string;
  const at = 1 + randomInt(random, value.length - 2);
  return { ...args, [key]: value.slice(0, at - 1) + value[at] + value[at - 1] + value.slice(at + 1) };
}

/**
 * Another approach that failed: a deep repair's K. A different tool with long arguments of its own
 * (a rewritten module, a shell script), so that sim(K, K') stays under the threshold: the call
 * template every call shares makes short, unrelated calls look half alike.
 */
function wrongApproach(random: Random): { name: string; args: Record<string, unknown>; error: string } {
  const name = pick(random, NAMES);
  const word = pick(random, WORDS);
  if (randomInt(random, 2) === 0) {
    const body = Array.from(
      { length: 8 },
      (_, i) => `    if value is None or len(value) == ${i}:\n        return ${word.toUpperCase()}_${i}`,
    );
    return {
      name: 'write_file',
      args: {
        path: `src/${pick(random, DIRS)}/${name}_rewrite.py`,
        content: `def ${word}_${name}(value):\n${body.join('\n')}\n    return value\n`,
        overwrite: true,
      },
      error: 'Error: permission denied: the repository is read-only outside src/ (EACCES).',
    };
  }
  return {
    name: 'run_shell',
    args: {
      command: [
        'set -euo pipefail',
        'cd /workspace',
        `pip install --quiet --no-input ${name}-tools==2.${randomInt(random, 9)}.0`,
        `python -m pytest tests/ -x -q --timeout=30 -k "not slow and ${word}" --maxfail=1 -p no:cacheprovider`,
        'git diff --stat HEAD~1 | tail -n 20',
      ].join(' && '),
      timeout_s: 30,
    },
    error: 'Error: command timed out after 30 s (no output). The process was killed.',
  };
}

interface CleanerCorpus {
  trajectories: PurifiableStep[][];
  turns: number;
  failedTurns: number;
  injected: { shallow: number; deep: number };
  steps: number;
  messages: number;
}

/**
 * Stored-like agent trajectories: step i's messages are the conversation before its answer (each
 * step holds its own copy, as steps read back from the store do), its answer is the next assistant
 * turn, and the gateway's tool results are attached with `error: true` on failed calls. A failed
 * turn is followed directly by its corrected retry.
 */
function cleanerCorpus(n: number): CleanerCorpus {
  const corpus: CleanerCorpus = {
    trajectories: [],
    turns: 0,
    failedTurns: 0,
    injected: { shallow: 0, deep: 0 },
    steps: 0,
    messages: 0,
  };
  const system = `You are a coding agent working in a Python repository. ${prose(seededRandom('system'), 6)}`;
  for (let t = 0; t < n; t++) {
    const random = seededRandom('bench-cleaner', t);
    const conversation: JsonObject[] = [
      { role: 'system', content: system },
      {
        role: 'user',
        content: `Fix the failing test in the ${pick(random, NAMES)} module. ${prose(random, 3)}`,
      },
    ];
    const steps: PurifiableStep[] = [];
    let callId = 0;
    // One assistant turn: a step whose answer is `content` + one call, then the tool message.
    const turn = (content: string, name: string, args: Record<string, unknown>, result: ToolResult) => {
      const id = `call_${callId++}`;
      const calls = [{ id, type: 'function', function: { name, arguments: JSON.stringify(args) } }];
      const toolResult: ToolResult = { ...result, tool_call_id: id };
      steps.push({
        trajectoryId: `cleaner-${t}`,
        index: steps.length,
        messages: structuredClone(conversation),
        responseText: content,
        toolCalls: structuredClone(calls),
        toolResults: [toolResult],
      });
      conversation.push({ role: 'assistant', content, tool_calls: calls });
      conversation.push({ role: 'tool', tool_call_id: id, content: result.content });
    };
    const turns = 6 + randomInt(random, 7);
    for (let k = 0; k < turns; k++) {
      const call = toolCall(random);
      const reasoning = prose(random, 2);
      if (random() < FAIL_SHARE) {
        corpus.failedTurns++;
        if (random() < SHALLOW_SHARE) {
          corpus.injected.shallow++;
          const slipped = withSlip(random, call.args);
          turn(reasoning, call.name, slipped, {
            content: `Error: ${call.name} failed: no match for ${JSON.stringify(slipped)}`,
            error: true,
            error_type: 'invalid_argument',
          });
          turn(`There was a typo in the arguments; retrying. ${prose(random, 1)}`, call.name, call.args, {
            content: call.output,
            error: false,
          });
        } else {
          corpus.injected.deep++;
          const wrong = wrongApproach(random);
          turn(reasoning, wrong.name, wrong.args, {
            content: wrong.error,
            error: true,
            error_type: 'tool_error',
          });
          turn(`That approach cannot work here; ${prose(random, 2)}`, call.name, call.args, {
            content: call.output,
            error: false,
          });
        }
      } else {
        turn(reasoning, call.name, call.args, { content: call.output, error: false });
      }
      corpus.turns++;
    }
    steps.push({
      trajectoryId: `cleaner-${t}`,
      index: steps.length,
      messages: structuredClone(conversation),
      responseText: `The test passes now. ${prose(random, 2)}`,
      toolCalls: null,
      toolResults: null,
    });
    corpus.steps += steps.length;
    corpus.messages += conversation.length + 1;
    corpus.trajectories.push(steps);
  }
  return corpus;
}

/** The non-SAAR floor of a purification: copy the last step's conversation, append its answer, walk it. */
function readConversation(steps: readonly PurifiableStep[]): number {
  let last = steps[0]!;
  for (const s of steps) if (s.index > last.index) last = s;
  const messages = structuredClone(last.messages ?? []) as JsonObject[];
  messages.push({ role: 'assistant', content: last.responseText });
  let turns = 0;
  for (const m of messages) if (m.role === 'assistant' && Array.isArray(m.tool_calls)) turns++;
  return turns;
}

type CleanerPass = 'purify' | 'clone' | 'read';

interface CleanerResult {
  corpus: Omit<CleanerCorpus, 'trajectories'>;
  repairs: { total: number; shallow: number; deep: number; messagesRemoved: number };
  seconds: Record<CleanerPass, number[]>;
}

function benchCleaner(n: number, repeats: number): CleanerResult {
  log(`cleaner: building ${int(n)} synthetic trajectories`);
  const { trajectories, ...corpus } = cleanerCorpus(n);
  let sink = 0;
  const passes: Record<CleanerPass, () => void> = {
    purify: () => {
      for (const steps of trajectories) sink += purifyTrajectory(steps).messages.length;
    },
    clone: () => {
      for (const steps of trajectories) sink += structuredClone(steps).length;
    },
    read: () => {
      for (const steps of trajectories) sink += readConversation(steps);
    },
  };
  const repairs = { total: 0, shallow: 0, deep: 0, messagesRemoved: 0 };
  for (const steps of trajectories) {
    const purified = purifyTrajectory(steps);
    for (const r of purified.repairs) {
      repairs.total++;
      repairs[r.mode]++;
      repairs.messagesRemoved += r.removedMessages;
    }
  }
  if (repairs.total === 0)
    throw new Error(
      `cleaner: purifyTrajectory found no repairs in ${int(n)} trajectories with ${int(corpus.failedTurns)} injected failures — the synthetic data or the purification is broken`,
    );
  log(
    `cleaner: ${int(repairs.total)} repairs (${repairs.shallow} shallow, ${repairs.deep} deep) of ${int(corpus.failedTurns)} injected failures`,
  );
  // Warm-up (JIT) on every pass, then the repeats, rotating which pass goes first.
  const order: CleanerPass[] = ['purify', 'clone', 'read'];
  for (const pass of order) passes[pass]();
  const seconds: Record<CleanerPass, number[]> = { purify: [], clone: [], read: [] };
  for (let r = 0; r < repeats; r++) {
    for (let i = 0; i < order.length; i++) {
      const pass = order[(i + r) % order.length]!;
      const t0 = performance.now();
      passes[pass]();
      seconds[pass].push((performance.now() - t0) / 1000);
    }
    log(
      `cleaner repeat ${r + 1}/${repeats}: purify ${int(n / seconds.purify.at(-1)!)} /s, clone ${int(n / seconds.clone.at(-1)!)} /s, read ${int(n / seconds.read.at(-1)!)} /s`,
    );
  }
  if (sink === 0) throw new Error('cleaner: nothing was computed');
  return { corpus, repairs, seconds };
}

function cleanerReport(c: CleanerResult, n: number, repeats: number): string[] {
  const purify = median(c.seconds.purify);
  const row = (label: string, pass: CleanerPass) => {
    const s = median(c.seconds[pass]);
    return `| ${label} | ${fix(s * 1000, 1)} (${spread(c.seconds[pass], (x) => fix(x * 1000, 1))}) | ${int(n / s)} | ${fix((1e6 * s) / n, 1)} | ${pass === 'purify' ? '1.00' : fix(purify / s)} |`;
  };
  const injected = c.corpus.injected.shallow + c.corpus.injected.deep;
  return [
    '#### 2. Offline CLEANER purification (`purifyTrajectory`, in process)',
    '',
    `${int(n)} synthetic stored agent trajectories: ${fix(c.corpus.turns / n, 1)} tool turns each on average (6–12), ${int(c.corpus.failedTurns)} of ${int(c.corpus.turns)} turns (${fix((100 * c.corpus.failedTurns) / c.corpus.turns, 1)}%) first fail and are retried right after (${c.corpus.injected.shallow} with a slip in the same call, ${c.corpus.injected.deep} with another approach); ${fix(c.corpus.steps / n, 1)} steps and ${fix(c.corpus.messages / n, 1)} messages per trajectory, each step holding its own copy of the conversation so far. Median of ${repeats} repeats (min–max in brackets) after one warm-up pass; the passes take turns going first.`,
    '',
    `Repairs found: **${int(c.repairs.total)}** of ${int(injected)} injected failures (${c.repairs.shallow} shallow of ${c.corpus.injected.shallow}, ${c.repairs.deep} deep of ${c.corpus.injected.deep}); ${int(c.repairs.messagesRemoved)} messages rolled out.${c.repairs.shallow === c.corpus.injected.shallow && c.repairs.deep === c.corpus.injected.deep ? '' : ' **The repairs found differ from the failures injected.**'}`,
    '',
    '| pass | time for all (ms) | trajectories / s | µs / trajectory | purify time ÷ this |',
    '|---|---:|---:|---:|---:|',
    row('`purifyTrajectory(steps)` (SAAR replay)', 'purify'),
    row('baseline: `structuredClone(steps)` (every step copied)', 'clone'),
    row('baseline: copy and walk the last conversation (no SAAR)', 'read'),
  ];
}

// ---- 3. serving overhead of curation ------------------------------------------------------------

const ROLLOUTS = 8;
const BATCH = 16;
const WARMUP_GROUPS = BATCH;
const VOCAB = 151_000;
const FULL_CURATION: ChannelCuration = {
  zero_variance: 'drop',
  truncated: 'exclude',
  repetition: { ngram: 4, max_fraction: 0.5 },
  duplicates: 'exclude',
  min_trajectories: 2,
};
const SERVING_CHANNELS = ['plain', 'curated'] as const;
type ServingChannel = (typeof SERVING_CHANNELS)[number];

/**
 * One group's trajectories (2 steps, ~300-token prompts and 160-token responses), the same tokens in
 * every channel. Some groups have what each filter looks for: all rewards equal (1 in 4), a truncated
 * trajectory (1 in 5), a looping response (1 in 7), a duplicate pair (1 in 6), and 1 in 25 groups is
 * left with a single trajectory (all but one truncated).
 */
function groupSteps(channel: string, g: number): NewStep[][] {
  const zeroVariance = g % 4 === 0;
  const out: NewStep[][] = [];
  for (let t = 0; t < ROLLOUTS; t++) {
    // A duplicate replays trajectory 4's tokens.
    const random = seededRandom('bench-serving', g, g % 6 === 3 && t === 5 ? 4 : t);
    const tokens = (n: number) => Array.from({ length: n }, () => randomInt(random, VOCAB));
    const id = `${channel}-g${g}-t${t}`;
    const groupId = `${channel}-g${g}`;
    const truncated = (g % 5 === 1 && t === 7) || (g % 25 === 11 && t > 0);
    const looping = g % 7 === 2 && t === 6;
    const prompt0 = tokens(300);
    const response0 = tokens(160);
    const prompt1 = prompt0.concat(response0, tokens(64));
    const response1 = looping ? Array.from({ length: 160 }, (_, i) => 1000 + (i % 4)) : tokens(160);
    const reward = zeroVariance ? (g % 8 === 0 ? 1 : 0) : t % 2;
    out.push([
      newStep({
        trajectoryId: id,
        groupId,
        index: 0,
        promptIds: prompt0,
        responseIds: response0,
        finishReason: 'tool_calls',
      }),
      newStep({
        trajectoryId: id,
        groupId,
        index: 1,
        promptIds: prompt1,
        responseIds: response1,
        isLast: true,
        reward,
        finishReason: truncated ? 'length' : 'stop',
      }),
    ]);
  }
  return out;
}

/** The template store: both channels (and two small warm-up channels) filled and configured. */
async function fillServingTemplate(path: string, groups: number): Promise<void> {
  const store = await openSqliteStore({ path, synchronous: 'NORMAL' });
  const pool = new DataPool({ store, sweepIntervalMs: 600_000 });
  try {
    const fills: [string, number][] = [
      ...SERVING_CHANNELS.map((c): [string, number] => [c, groups]),
      ['warmup-plain', WARMUP_GROUPS],
      ['warmup-curated', WARMUP_GROUPS],
    ];
    for (const [channel, n] of fills) {
      await pool.configureChannel(channel, {
        n_rollouts: ROLLOUTS,
        ...(channel.endsWith('curated') ? { curation: FULL_CURATION } : {}),
      });
      for (let g0 = 0; g0 < n; g0 += 64) {
        const requests: SubmitRequest[] = [];
        for (let g = g0; g < Math.min(n, g0 + 64); g++)
          for (const steps of groupSteps(channel, g)) requests.push({ channel, nRollouts: ROLLOUTS, steps });
        const outcomes = await poolOps(store).submitBatch(requests, Date.now());
        for (const o of outcomes) if (!o.ok) throw o.error;
      }
    }
    for (const channel of SERVING_CHANNELS) {
      const stats = await pool.stats(channel);
      if (stats.groups.ready !== groups)
        throw new Error(`serving: ${channel} has ${stats.groups.ready} ready groups, expected ${groups}`);
    }
  } finally {
    await pool.close();
  }
}

interface Drain {
  seconds: number;
  leases: number;
  groups: number;
  steps: number;
  trajectories: number;
  excluded: number;
  dropped: number;
}

/** Leases every ready group of `channel` (batches of BATCH, then the remainder one by one), acking each. */
async function drain(pool: DataPool, channel: string): Promise<Drain> {
  const result: Drain = {
    seconds: 0,
    leases: 0,
    groups: 0,
    steps: 0,
    trajectories: 0,
    excluded: 0,
    dropped: 0,
  };
  const t0 = performance.now();
  for (const batchSize of [BATCH, 1]) {
    const request = LeaseRequest.parse({
      channel,
      batch_size: batchSize,
      n_rollouts: ROLLOUTS,
      consumer: 'bench',
    });
    for (;;) {
      const batch = await pool.lease(request);
      if (!batch) break;
      result.leases++;
      for (const g of batch.groups) {
        result.groups++;
        result.excluded += g.excluded?.length ?? 0;
        for (const t of g.trajectories) {
          result.trajectories++;
          result.steps += t.steps.length;
        }
      }
      await pool.ack(batch.lease.id);
    }
  }
  result.seconds = (performance.now() - t0) / 1000;
  const stats = await pool.stats(channel);
  result.dropped = Object.values(stats.dropped).reduce((a, b) => a + (b ?? 0), 0);
  return result;
}

interface ServingResult {
  runs: Record<ServingChannel, Drain[]>;
  dropReasons: Record<string, number>;
  excludedReasons: Record<string, number>;
}

async function benchServing(groups: number, repeats: number): Promise<ServingResult> {
  const dir = mkdtempSync(join(os.tmpdir(), 'bench-curation-serving-'));
  try {
    const template = join(dir, 'template.db');
    const t0 = performance.now();
    await fillServingTemplate(template, groups);
    log(
      `serving: filled 2 × ${int(groups)} groups × ${ROLLOUTS} trajectories × 2 steps in ${fix((performance.now() - t0) / 1000, 1)} s`,
    );
    const runs: Record<ServingChannel, Drain[]> = { plain: [], curated: [] };
    let dropReasons: Record<string, number> = {};
    let excludedReasons: Record<string, number> = {};
    for (let r = 0; r < repeats; r++) {
      // A fresh copy of the template each repeat; both channels drained from it, in alternating order.
      const path = join(dir, `run-${r}.db`);
      copyFileSync(template, path);
      if (existsSync(`${template}-wal`)) copyFileSync(`${template}-wal`, `${path}-wal`);
      const store = await openSqliteStore({ path, synchronous: sync });
      const pool = new DataPool({ store, sweepIntervalMs: 600_000 });
      try {
        // Prepares the statements of both paths (plain and curated) before anything is timed.
        await drain(pool, 'warmup-plain');
        await drain(pool, 'warmup-curated');
        const order: ServingChannel[] = r % 2 === 0 ? ['plain', 'curated'] : ['curated', 'plain'];
        for (const channel of order) {
          const d = await drain(pool, channel);
          if (d.groups + d.dropped !== groups)
            throw new Error(
              `serving: ${channel} served ${d.groups} and dropped ${d.dropped} of ${groups} groups`,
            );
          runs[channel].push(d);
        }
        const stats = await pool.stats('curated');
        dropReasons = { ...stats.dropped } as Record<string, number>;
        excludedReasons = { ...stats.excluded } as Record<string, number>;
      } finally {
        await pool.close();
        rmSync(path, { force: true });
        rmSync(`${path}-wal`, { force: true });
        rmSync(`${path}-shm`, { force: true });
      }
      const p = runs.plain.at(-1)!;
      const c = runs.curated.at(-1)!;
      log(
        `serving repeat ${r + 1}/${repeats} (${r % 2 === 0 ? 'plain first' : 'curated first'}): plain ${int(p.groups / p.seconds)} groups/s, curated ${int(c.groups / c.seconds)} groups/s (${c.dropped} dropped)`,
      );
    }
    if (runs.curated[0]!.dropped === 0) throw new Error('serving: curation dropped no group');
    return { runs, dropReasons, excludedReasons };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function servingReport(s: ServingResult, groups: number, repeats: number): string[] {
  const perGroup = (d: Drain) => d.seconds / d.groups;
  const med = (c: ServingChannel, f: (d: Drain) => number) => median(s.runs[c].map(f));
  const plainPerGroup = med('plain', perGroup);
  const curatedPerGroup = med('curated', perGroup);
  const plainSeconds = med('plain', (d) => d.seconds);
  const row = (c: ServingChannel) => {
    const d = s.runs[c][0]!;
    return `| ${c === 'plain' ? 'plain (default: no curation)' : 'curated (full pipeline)'} | ${int(groups)} | ${int(d.groups)} | ${int(d.dropped)} | ${int(d.excluded)} | ${int(d.steps)} | ${int(d.leases)} | ${fix(
      med(c, (x) => x.seconds),
      3,
    )} (${spread(
      s.runs[c].map((x) => x.seconds),
      (x) => fix(x, 3),
    )}) | ${int(med(c, (x) => x.groups / x.seconds))} | ${int(med(c, (x) => x.steps / x.seconds))} | ${fix(med(c, perGroup) * 1000, 3)} | ${c === 'plain' ? '1.00' : fix(curatedPerGroup / plainPerGroup)} | ${c === 'plain' ? '1.00' : fix(med(c, (x) => x.seconds) / plainSeconds)} |`;
  };
  const list = (o: Record<string, number>) =>
    Object.entries(o)
      .filter(([, n]) => n > 0)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ') || 'none';
  return [
    '#### 3. Serving overhead of curation (`DataPool.lease` + `ack`, in process)',
    '',
    `One SQLite store (synchronous ${sync}) holds two channels with the same ${int(groups)} ready groups (${ROLLOUTS} trajectories × 2 steps, 300-token prompts growing to 524, 160-token responses; 1 group in 4 with all rewards equal, and trajectories that are truncated, loop, or duplicate another). \`curated\` has \`curation: ${JSON.stringify(FULL_CURATION)}\`; \`plain\` the default. Each repeat copies the filled store afresh, leases one batch from two small warm-up channels (one of each config) so that statements are prepared, then leases every group of each channel (batch_size ${BATCH} until none is ready, then 1), acking each lease, in alternating order (plain first on even repeats). Median of ${repeats} repeats (min–max in brackets).`,
    '',
    '| channel | ready groups | served groups | dropped | trajectories excluded (served groups) | steps served | leases | time (s) | groups served / s | steps served / s | ms / served group | time per served group ÷ plain | total time ÷ plain |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    row('plain'),
    row('curated'),
    '',
    `Curation dropped ${list(s.dropReasons)} and excluded ${list(s.excludedReasons)} (trajectories). Curation reads every member's steps inside the lease transaction (to look for truncation, repetition and duplicates) and keeps them for serving; dropped groups are scanned, recorded (event + counter) and replaced by the next ready ones.`,
  ];
}

// ---- run ----------------------------------------------------------------------------------------

const loadAtStart = os.loadavg();
const codeAtStart = codeVersion();
const sections: string[][] = [];
if (only.includes('reward')) {
  const rows: RewardRow[] = [];
  for (const n of sizes) {
    if (modes.includes('rule')) rows.push(await runRewards(n, false));
    if (modes.includes('combination')) rows.push(await runRewards(n, true));
  }
  sections.push(rewardReport(rows));
}
if (only.includes('cleaner'))
  sections.push(
    cleanerReport(benchCleaner(cleanerTrajectories, cleanerRepeats), cleanerTrajectories, cleanerRepeats),
  );
if (only.includes('serving'))
  sections.push(
    servingReport(await benchServing(servingGroups, servingRepeats), servingGroups, servingRepeats),
  );

const report = [
  '### Curation',
  '',
  ...machineInfo(`npm run bench:curation -- ${args.join(' ')}`.trim(), loadAtStart, codeAtStart, {
    stack: `SQLite stores (synchronous ${sync})`,
    noise: only.includes('reward') ? 'the benchmark and the reward workers' : 'the benchmark',
    extra: [`- Parts: ${only.join(', ')}${quick ? ' (quick)' : ''}`],
  }),
  ...sections.flatMap((s) => ['', ...s]),
].join('\n');
console.log(report);

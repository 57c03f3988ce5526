/**
 * Serving benchmark: what it costs to hand a trainer a batch in each format (step rows and trajectory
 * rows), and prefix-tree packing.
 *
 *   npm run bench:serving              full run (~2-3 minutes), recorded in bench/results/serving.*
 *   npm run bench:serving -- --quick   8 groups, 2 reps, prints only
 *
 * A store is filled with 64 groups × 8 trajectories × 10 steps of realistic agent steps (~2k tokens
 * each: a shared system prompt, a per-group task, and a history that grows by the previous response
 * and a tool result every step). Each rep leases all 64 groups over real HTTP on loopback in one
 * format, reads every byte, and nacks the lease so the next rep gets the same groups. The server
 * runs in this process; the client is undici.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { type NewStep, newStep } from '../packages/core/src/domain/index.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { type BatchRequest, renderBatch } from '../packages/core/src/serving/batch.js';
import { packPrefixTree } from '../packages/core/src/serving/packing.js';
import { stitchTrajectory } from '../packages/core/src/serving/trajectory-rows.js';
import { seededRandom } from '../packages/core/src/util/random.js';
import { codeVersion, fix, int, log, machineInfo, mib, recordRun, round, verdict } from './support.js';

const PACKING_TARGET = 20e6; // tokens/s
const VOCAB = 151_000;

interface Shape {
  groups: number;
  rollouts: number;
  steps: number;
  systemTokens: number;
  taskTokens: number;
  responseTokens: number;
  toolTokens: number;
}

const SHAPE: Shape = {
  groups: 64,
  rollouts: 8,
  steps: 10,
  systemTokens: 1_400,
  taskTokens: 200,
  responseTokens: 60,
  toolTokens: 40,
};

/** One group's trajectories: each step's prompt is the last prompt + response + a tool result. */
function makeGroup(shape: Shape, g: number, system: number[], random: () => number): NewStep[][] {
  const tokens = (n: number) => Array.from({ length: n }, () => Math.floor(random() * VOCAB));
  const task = tokens(shape.taskTokens);
  const trajectories: NewStep[][] = [];
  for (let t = 0; t < shape.rollouts; t++) {
    const id = `bench-${g}-${t}`;
    const success = random() < 0.3;
    let prompt = system.concat(task);
    const steps: NewStep[] = [];
    for (let i = 0; i < shape.steps; i++) {
      const length = Math.round(shape.responseTokens * (0.5 + random()));
      const response = tokens(length);
      const last = i === shape.steps - 1;
      steps.push(
        newStep({
          trajectoryId: id,
          groupId: `group-${g}`,
          index: i,
          promptIds: prompt,
          responseIds: response,
          responseLogprobs: response.map(() => -random() * 2),
          reward: last ? (success ? 1 : 0) : null,
          policyVersion: 0,
          isLast: last,
          tokenSource: 'engine',
          finishReason: last ? 'stop' : 'tool_calls',
        }),
      );
      prompt = prompt.concat(response, tokens(shape.toolTokens));
    }
    trajectories.push(steps);
  }
  return trajectories;
}

const median = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

/** Packs every group `reps` times: with building the inputs (prompt + response), and packing alone. */
function benchPacking(
  groups: NewStep[][][],
  totalTokens: number,
  reps: number,
): { packRates: number[]; packOnlyRates: number[]; packed: number } {
  const inputsOf = (group: NewStep[][]) =>
    group
      .flat()
      .map((s) => ({ tokens: s.promptIds.concat(s.responseIds), promptLength: s.promptIds.length }));
  const packRates: number[] = [];
  let packed = 0;
  for (let rep = 0; rep < reps + 1; rep++) {
    packed = 0;
    const started = performance.now();
    for (const group of groups) packed += packPrefixTree(inputsOf(group)).tokens.length;
    const seconds = (performance.now() - started) / 1000;
    if (rep > 0) packRates.push(totalTokens / seconds); // rep 0 warms the JIT
  }
  const inputs = groups.map(inputsOf);
  const packOnlyRates: number[] = [];
  for (let rep = 0; rep < reps + 1; rep++) {
    const started = performance.now();
    for (const input of inputs) packPrefixTree(input);
    if (rep > 0) packOnlyRates.push(totalTokens / ((performance.now() - started) / 1000));
  }
  return { packRates, packOnlyRates, packed };
}

interface FormatCase {
  name: string;
  /** Its name in bench/results/serving.jsonl. */
  key: string;
  body: Partial<BatchRequest>;
}

const CASES: FormatCase[] = [
  { name: 'json', key: 'json', body: { format: 'json', advantage: 'grpo' } },
  {
    name: 'json + prefix_tree packing',
    key: 'json_packed',
    body: { format: 'json', advantage: 'grpo', pack: 'prefix_tree' },
  },
  { name: 'arrow', key: 'arrow', body: { format: 'arrow', advantage: 'grpo' } },
  { name: 'padded (.npz)', key: 'padded', body: { format: 'padded', advantage: 'grpo' } },
  // One stitched sequence per trajectory (docs/serving.md#trajectory-rows).
  {
    name: 'json, trajectory rows',
    key: 'json_trajectory_rows',
    body: { format: 'json', advantage: 'grpo', rows: 'trajectory' },
  },
  {
    name: 'arrow, trajectory rows',
    key: 'arrow_trajectory_rows',
    body: { format: 'arrow', advantage: 'grpo', rows: 'trajectory' },
  },
  {
    name: 'padded (.npz), trajectory rows',
    key: 'padded_trajectory_rows',
    body: { format: 'padded', advantage: 'grpo', rows: 'trajectory' },
  },
];

interface FormatResult {
  name: string;
  bytes: number;
  /** HTTP lease → last byte read, per rep. */
  totalMs: number[];
  /** Laying out the leased batch alone (renderBatch), per rep. */
  renderMs: number[];
  /** The store's lease (reading the groups and their steps), per rep. */
  leaseMs: number[];
}

/** What trajectory rows hold: each trajectory's history once (no prefix breaks in this workload). */
function stitchedTokenCount(groups: NewStep[][][]): number {
  return groups
    .flat()
    .flatMap((t) =>
      stitchTrajectory(
        { id: t[0]!.trajectoryId, guided: false },
        t.map((s) => ({ ...s, channel: 'train', policyVersion: 0, createdAt: 0 })),
      ),
    )
    .reduce((n, row) => n + row.tokens.length, 0);
}

/** One format, `reps` times after a warm-up: the HTTP lease, then the store's lease and the layout alone. */
async function benchFormat(
  server: RunningServer,
  dispatcher: Agent,
  leaseBody: { batch_size: number; n_rollouts: number; consumer: string },
  c: FormatCase,
  reps: number,
): Promise<FormatResult> {
  const result: FormatResult = { name: c.name, bytes: 0, totalMs: [], renderMs: [], leaseMs: [] };
  for (let rep = 0; rep < reps + 1; rep++) {
    const started = performance.now();
    const res = await request(`${server.url}/v1/batches/lease`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...leaseBody, ...c.body }),
      dispatcher,
      // A fresh connection per rep: a kept-alive one may be closed by the server while the
      // in-process part of the rep runs (the server's keep-alive timeout is 5 s).
      reset: true,
    });
    const bytes = (await res.body.arrayBuffer()).byteLength;
    const total = performance.now() - started;
    if (res.statusCode !== 200) throw new Error(`lease answered ${res.statusCode}`);
    const leaseId = String(res.headers['x-lease-id']);
    await server.pool.nack(leaseId);
    // The parts in process: the store's lease, then the layout alone.
    const leasing = performance.now();
    const batch = await server.pool.lease({
      ...leaseBody,
      channel: 'train',
      wait_ms: 0,
      ttl_ms: 300_000,
    });
    const leased = performance.now();
    if (!batch) throw new Error('no batch to lease');
    await renderBatch(batch, {
      ...leaseBody,
      channel: 'train',
      wait_ms: 0,
      ttl_ms: 300_000,
      overlong: 'reject',
      pad_token_id: 0,
      format: 'json',
      ...c.body,
    } as BatchRequest);
    const rendered = performance.now();
    await server.pool.nack(batch.lease.id);
    if (rep === 0) continue; // warm-up
    result.bytes = bytes;
    result.totalMs.push(total);
    result.leaseMs.push(leased - leasing);
    result.renderMs.push(rendered - leased);
    log(`${c.name} rep ${rep}: ${fix(total, 0)} ms, ${mib(bytes)}`);
  }
  return result;
}

/** Every format over HTTP, against a store of its own filled with the groups. */
async function benchFormats(groups: NewStep[][][], shape: Shape, reps: number): Promise<FormatResult[]> {
  const dir = mkdtempSync(join(os.tmpdir(), 'stepwise-bench-serving-'));
  const server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
  const dispatcher = new Agent({ connections: 2 });
  const results: FormatResult[] = [];
  try {
    const filling = performance.now();
    for (const group of groups)
      for (const trajectory of group)
        await server.pool.submitSteps(trajectory, { nRollouts: shape.rollouts });
    log(`filled the store in ${fix((performance.now() - filling) / 1000, 1)} s`);
    const leaseBody = { batch_size: shape.groups, n_rollouts: shape.rollouts, consumer: 'bench' };
    for (const c of CASES) results.push(await benchFormat(server, dispatcher, leaseBody, c, reps));
  } finally {
    await dispatcher.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return results;
}

/** What a run measured, for its report and its figures. */
interface Run {
  command: string;
  loadAtStart: number[];
  codeAtStart: string;
  shape: Shape;
  reps: number;
  steps: number;
  totalTokens: number;
  stitchedTokens: number;
  packing: ReturnType<typeof benchPacking>;
  results: FormatResult[];
}

/** The report printed (and recorded as serving.md): the formats' table, then packing's. */
function reportLines(run: Run): string[] {
  const { shape, reps, totalTokens, stitchedTokens, results } = run;
  const { packRates, packOnlyRates, packed } = run.packing;
  const packingRate = median(packOnlyRates);
  const jsonBytes = results[0]!.bytes;
  return [
    '## Serving benchmark (`bench/serving.ts`)',
    '',
    ...machineInfo(run.command, run.loadAtStart, run.codeAtStart, {
      stack: 'apache-arrow 21, in-process server + undici client on loopback',
      noise: 'server and client',
    }),
    '',
    `Workload: ${shape.groups} groups × ${shape.rollouts} trajectories × ${shape.steps} steps = ${int(run.steps)} steps, ${int(totalTokens)} tokens (${int(totalTokens / run.steps)} per step on average: a ${int(shape.systemTokens)}-token system prompt shared by all, a ${shape.taskTokens}-token task per group, and a history that grows by the last response (~${shape.responseTokens} tokens) and a ${shape.toolTokens}-token tool result each step). Medians over ${reps} reps after a warm-up; every rep leases all ${shape.groups} groups (\`batch_size: ${shape.groups}\`, \`advantage: grpo\`), reads every byte and nacks.`,
    '',
    '### Lease to bytes, per format',
    '',
    '| format | bytes | vs json | lease → last byte (HTTP) | tokens/s | of which: store lease | layout |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...results.map((r) => {
      const total = median(r.totalMs);
      return `| ${r.name} | ${mib(r.bytes)} | ${fix(r.bytes / jsonBytes, 2)}× | ${fix(total, 0)} ms | ${fix(totalTokens / (total / 1000) / 1e6, 1)}M | ${fix(median(r.leaseMs), 0)} ms | ${fix(median(r.renderMs), 0)} ms |`;
    }),
    '',
    `Tokens/s counts every prompt and response token of the batch's steps (the tokens a trainer receives as step rows), for every row kind, so the rates compare. Trajectory rows (\`rows: trajectory\`) send each trajectory's history once: ${int(stitchedTokens)} tokens, ${fix((100 * stitchedTokens) / totalTokens, 1)}% of the step rows' ${int(totalTokens)}.`,
    '',
    '"Store lease" is the pool handing out the groups (reading and decoding their steps); "layout" is building the response body from them; the rest of the HTTP time is moving the bytes. The padded layout is the largest (every row padded to the longest prompt and response, plus `prompts`/`responses` copies and float32 arrays of the response width) but is ready for `numpy.frombuffer` without parsing.',
    '',
    '### Prefix-tree packing',
    '',
    '| measure | value | target |',
    '|---|---:|---|',
    `| packing throughput (input tokens/s, ${shape.groups} groups of ${shape.rollouts * shape.steps} sequences) | ${fix(packingRate / 1e6, 1)}M | ≥ ${PACKING_TARGET / 1e6}M: ${verdict(packingRate >= PACKING_TARGET)} |`,
    `| with building the prompt + response inputs | ${fix(median(packRates) / 1e6, 1)}M | |`,
    `| packed / original tokens | ${int(packed)} / ${int(totalTokens)} = ${fix((100 * packed) / totalTokens, 1)}% | |`,
    '',
    "Each group's steps share the system prompt and task, and each step's prompt repeats the previous step's prompt and response, so a group packs to about the size of its trajectories' last steps.",
    '',
  ];
}

/** The figures recorded in serving.jsonl, per format under its key. */
function figures(run: Run) {
  const { totalTokens, stitchedTokens, results } = run;
  const { packRates, packOnlyRates, packed } = run.packing;
  const jsonBytes = results[0]!.bytes;
  const each = (f: (r: FormatResult, c: FormatCase) => number) =>
    Object.fromEntries(results.map((r, i) => [CASES[i]!.key, f(r, CASES[i]!)]));
  return {
    code: run.codeAtStart,
    tokens: totalTokens,
    bytes_mib: each((r) => round(r.bytes / 1024 / 1024, 1)),
    bytes_vs_json: each((r) => round(r.bytes / jsonBytes)),
    lease_to_last_byte_ms: each((r) => round(median(r.totalMs), 0)),
    http_m_tokens_per_s: each((r) => round(totalTokens / (median(r.totalMs) / 1000) / 1e6, 1)),
    store_lease_ms: each((r) => round(median(r.leaseMs), 0)),
    layout_ms: each((r) => round(median(r.renderMs), 0)),
    packing_m_tokens_per_s: round(median(packOnlyRates) / 1e6, 1),
    packing_with_inputs_m_tokens_per_s: round(median(packRates) / 1e6, 1),
    packed_vs_original_pct: round((100 * packed) / totalTokens, 1),
    trajectory_row_tokens: stitchedTokens,
    trajectory_rows_vs_step_tokens_pct: round((100 * stitchedTokens) / totalTokens, 1),
  };
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(
      'usage: npm run bench:serving [-- --quick]\n  --quick  8 groups and 2 reps; prints the report without recording the run\n',
    );
    return;
  }
  const quick = args.includes('--quick');
  const shape: Shape = quick ? { ...SHAPE, groups: 8 } : SHAPE;
  const reps = quick ? 2 : 5;
  const command =
    process.env.npm_lifecycle_event === 'bench:serving'
      ? `npm run bench:serving${args.length ? ` -- ${args.join(' ')}` : ''}  (tsx bench/serving.ts)`
      : `tsx bench/serving.ts${args.length ? ` ${args.join(' ')}` : ''}`;
  const loadAtStart = os.loadavg();
  const codeAtStart = codeVersion();
  const random = seededRandom(42);
  const system = Array.from({ length: shape.systemTokens }, () => Math.floor(random() * VOCAB));
  const groups = Array.from({ length: shape.groups }, (_, g) => makeGroup(shape, g, system, random));
  const allSteps = groups.flat(2);
  const totalTokens = allSteps.reduce((n, s) => n + s.promptIds.length + s.responseIds.length, 0);
  log(
    `${int(allSteps.length)} steps, ${int(totalTokens)} tokens (${fix(totalTokens / allSteps.length, 0)} per step)`,
  );
  const stitchedTokens = stitchedTokenCount(groups);

  // ---- packing, in process --------------------------------------------------------------------
  const packing = benchPacking(groups, totalTokens, reps);
  log(
    `packing: ${fix(median(packing.packOnlyRates) / 1e6, 1)}M tokens/s, ratio ${fix((100 * packing.packed) / totalTokens, 1)}%`,
  );

  // ---- formats over HTTP ----------------------------------------------------------------------
  const results = await benchFormats(groups, shape, reps);

  const run: Run = {
    command,
    loadAtStart,
    codeAtStart,
    shape,
    reps,
    steps: allSteps.length,
    totalTokens,
    stitchedTokens,
    packing,
    results,
  };
  const report = reportLines(run).join('\n');
  process.stdout.write(`${report}\n`);
  if (quick) return;
  log(`wrote ${recordRun('serving', figures(run), report).join(', ')}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

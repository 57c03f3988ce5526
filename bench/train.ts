/**
 * Trainer benchmark: what a training step costs on packed against padded batches, and whether
 * Stepwise (lease + tensors) is ever the bottleneck next to the model step.
 *
 *   npm run bench:train              2 groups × 8 rollouts × 6 steps, 3 reps; records the run in
 *                                    bench/results/train.jsonl and its report in train.md
 *   npm run bench:train -- --quick   1 group, 1 rep; its row in train.jsonl says quick
 *
 * The store holds agent-shaped steps (a shared system prompt, a per-group task, a history growing by
 * each response and tool result). The Python half (bench/train_step.py, the `train` extra) leases the
 * same groups packed (`json` + `prefix_tree`) and padded, builds the tensors and runs one forward +
 * backward of the policy-gradient loss on the tiny Qwen3-architecture model, in the same process and
 * minute; tokens/s counts the batch's real (unpadded, unpacked) tokens per second of model step.
 * It then builds the packed batch's FlexAttention tree BlockMask both ways, blockwise from the
 * packing (what the trainer uses) and `create_block_mask` over the T×T grid, and reports each one's
 * time and allocation peak, on the batch and on its groups repeated to 60k tokens (grid up to 16k).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { type NewStep, newStep } from '../packages/core/src/domain/index.js';
import { startServer } from '../packages/core/src/server/server.js';
import { seededRandom } from '../packages/core/src/util/random.js';
import { requireTrainPython, runPython } from '../src/train/python.js';
import { codeVersion, fix, int, log, machineInfo, mib, REPO_ROOT, recordRun } from './support.js';

const VOCAB = 151_669;

const SHAPE = {
  groups: 2,
  rollouts: 8,
  steps: 6,
  systemTokens: 500,
  taskTokens: 100,
  responseTokens: 40,
  toolTokens: 30,
};

function makeGroup(g: number, system: number[], random: () => number, shape = SHAPE): NewStep[][] {
  const tokens = (n: number) => Array.from({ length: n }, () => Math.floor(random() * VOCAB));
  const task = tokens(shape.taskTokens);
  return Array.from({ length: shape.rollouts }, (_, t) => {
    let prompt = system.concat(task);
    const reward = random() < 0.4 ? 1 : 0;
    return Array.from({ length: shape.steps }, (_, i) => {
      const response = tokens(Math.round(shape.responseTokens * (0.5 + random())));
      const last = i === shape.steps - 1;
      const step = newStep({
        trajectoryId: `bench-${g}-${t}`,
        groupId: `group-${g}`,
        index: i,
        promptIds: prompt,
        responseIds: response,
        responseLogprobs: response.map(() => -random() * 2),
        reward: last ? reward : null,
        policyVersion: 0,
        isLast: last,
        tokenSource: 'engine',
        finishReason: last ? 'stop' : 'tool_calls',
      });
      prompt = prompt.concat(response, tokens(shape.toolTokens));
      return step;
    });
  });
}

interface ModeResult {
  lease_s: number;
  tensor_s: number;
  step_s: number;
  tokens_per_s: number;
}
interface MaskBuild {
  s: number;
  peak_bytes: number | null;
}
interface MaskRow {
  tokens: number;
  groups: number;
  blocks_per_side: number;
  listed_blocks: number;
  full_blocks: number;
  blockwise: MaskBuild;
  grid: MaskBuild | null;
  same_blocks?: boolean;
}
interface MaskReport {
  block_size: number;
  peak_method: string;
  grid_limit_tokens: number;
  batch: MaskRow;
  large: MaskRow;
}
interface PythonReport {
  torch: string;
  mask: MaskReport;
  shape: Record<
    'packed' | 'padded',
    { computed_tokens: number; original_tokens: number; response_tokens: number }
  >;
  median: Record<'packed' | 'padded', ModeResult>;
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(
      'usage: npm run bench:train [-- --quick]\n  --quick  1 group and 1 rep; its row in bench/results/train.jsonl says quick\n',
    );
    return;
  }
  const quick = args.includes('--quick');
  const shape = quick ? { ...SHAPE, groups: 1 } : SHAPE;
  const reps = quick ? 1 : 3;
  const python = requireTrainPython();
  const loadAtStart = os.loadavg();
  const codeAtStart = codeVersion();
  const random = seededRandom(42);
  const system = Array.from({ length: shape.systemTokens }, () => Math.floor(random() * VOCAB));
  const dir = mkdtempSync(join(os.tmpdir(), 'stepwise-bench-train-'));
  const server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
  let report: PythonReport;
  try {
    for (let g = 0; g < shape.groups; g++)
      for (const trajectory of makeGroup(g, system, random, shape))
        await server.pool.submitSteps(trajectory, { nRollouts: shape.rollouts });
    log(`stored ${shape.groups} groups × ${shape.rollouts} rollouts × ${shape.steps} steps`);
    const out = await runPython(python, [
      join(REPO_ROOT, 'bench', 'train_step.py'),
      '--pool',
      server.url,
      '--groups',
      String(shape.groups),
      '--n-rollouts',
      String(shape.rollouts),
      '--reps',
      String(reps),
    ]);
    report = JSON.parse(out.trim().split('\n').at(-1)!) as PythonReport;
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const { packed, padded } = report.median;
  const speedup = packed.tokens_per_s / padded.tokens_per_s;
  const stepwiseShare = (m: ModeResult) => (m.lease_s + m.tensor_s) / m.step_s;
  const rows = [
    `| measure | packed (\`json\` + \`prefix_tree\`) | padded (verl's layout) |`,
    '|---|---:|---:|',
    `| tokens in the batch (real) / computed | ${int(report.shape.packed.original_tokens)} / ${int(report.shape.packed.computed_tokens)} | ${int(report.shape.padded.original_tokens)} / ${int(report.shape.padded.computed_tokens)} |`,
    `| response tokens | ${int(report.shape.packed.response_tokens)} | ${int(report.shape.padded.response_tokens)} |`,
    `| model step (forward + backward), median | ${fix(packed.step_s, 2)} s | ${fix(padded.step_s, 2)} s |`,
    `| trainer tokens/s (real tokens per second of model step) | ${int(packed.tokens_per_s)} | ${int(padded.tokens_per_s)} |`,
    `| lease over HTTP + decode, median | ${fix(packed.lease_s * 1000, 0)} ms | ${fix(padded.lease_s * 1000, 0)} ms |`,
    `| tensors from the lease, median | ${fix(packed.tensor_s * 1000, 0)} ms | ${fix(padded.tensor_s * 1000, 0)} ms |`,
    `| (lease + tensors) / model step | ${fix(stepwiseShare(packed), 3)} | ${fix(stepwiseShare(padded), 3)} |`,
  ];
  const mask = report.mask;
  const peak = (b: MaskBuild) => (b.peak_bytes === null ? 'n/a' : mib(b.peak_bytes));
  const build = (b: MaskBuild) => `${peak(b)} / ${fix(b.s * 1000, 0)} ms`;
  const grid = (r: MaskRow) =>
    r.grid
      ? `${build(r.grid)}${r.same_blocks ? ', same blocks' : ', **blocks differ**'}`
      : `not run (over ${int(mask.grid_limit_tokens)} tokens)`;
  const maskRow = (what: string, r: MaskRow) =>
    `| ${what} | ${int(r.tokens)} (${int(r.groups)} groups) | ${int(r.listed_blocks)} of ${int(r.blocks_per_side ** 2)} (${int(r.full_blocks)} full) | ${build(r.blockwise)} | ${grid(r)} |`;
  const maskRows = [
    `| tree BlockMask (${mask.block_size}-token blocks) | tokens | blocks listed | blockwise (\`flex_mask\`): peak / time | grid (\`create_block_mask\`): peak / time |`,
    '|---|---:|---:|---:|---:|',
    maskRow("the benchmark's packed batch", mask.batch),
    maskRow('its groups repeated', mask.large),
  ];
  const command = `npm run bench:train${args.length ? ` -- ${args.join(' ')}` : ''}  (tsx bench/train.ts)`;
  const section = [
    '## Trainer benchmark (`bench/train.ts`)',
    '',
    `Packed over padded trainer tokens/s: **${fix(speedup, 2)}×** in the same run (tiny Qwen3-architecture model, fp32, CPU, torch ${report.torch}; ${shape.groups} groups × ${shape.rollouts} rollouts × ${shape.steps} steps, ${reps} reps).`,
    '',
    ...rows,
    '',
    `The tree mask as a FlexAttention BlockMask, built on the CPU; peak: ${mask.peak_method}.`,
    '',
    ...maskRows,
    '',
    ...machineInfo(command, loadAtStart, codeAtStart, {
      stack: `Python trainer (torch ${report.torch})`,
      noise: 'Node, the pool and the trainer',
    }),
  ].join('\n');
  console.log(section);
  const written = recordRun(
    'train',
    { code: codeAtStart, quick, shape, reps, report },
    quick ? undefined : section,
  );
  log(`wrote ${written.join(', ')}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

/**
 * Exports over a real SQLite file: each kind's lines or rows against what the store holds, the
 * filters, the manifest, and the full-fidelity round trip through `import`.
 */

import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parquetMetadata, parquetReadObjects } from 'hyparquet';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkImport, importTrajectories } from '../packages/core/src/export/import.js';
import { ExportRequest } from '../packages/core/src/export/request.js';
import { type RunExportOptions, runExport } from '../packages/core/src/export/run-export.js';
import { type PoolCore, type PoolOps, poolOps } from '../packages/core/src/pool/core.js';
import type { DataPool } from '../packages/core/src/pool/data-pool.js';
import { groupAdvantages } from '../packages/core/src/serving/advantages.js';
import { openSqliteStore, type SqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import { buildFixture, SYSTEM, TOOLS, task } from './export-fixture.js';

let dir: string;
let pool: DataPool;
let store: PoolOps;
let close: () => Promise<void>;
let n = 0;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-export-'));
  const fixture = await buildFixture(join(dir, 'pool.db'));
  pool = fixture.pool;
  store = pool.store;
  close = fixture.close;
});
afterAll(async () => {
  await close();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs an export into a fresh directory with a small page size (so paging is exercised). */
async function exportTo(request: unknown, over: Partial<RunExportOptions> = {}) {
  const outDir = join(dir, `out-${n++}`);
  const manifest = await runExport({
    store,
    request: ExportRequest.parse(request),
    outDir,
    pageSize: 2,
    clock: () => Date.UTC(2025, 5, 1),
    ...over,
  });
  return { outDir, manifest, path: join(outDir, manifest.files[0]!.name) };
}

const readJsonl = (path: string) =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');
const readParquet = (path: string) => {
  const file = new Uint8Array(readFileSync(path)).buffer;
  return { rows: parquetReadObjects({ file }), metadata: parquetMetadata(file) };
};

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool']);

/** The runtime half of "is this OpenAI chat data": roles, fields, and every tool output answers a call. */
function checkOpenAiMessages(messages: unknown): asserts messages is ChatCompletionMessageParam[] {
  expect(Array.isArray(messages)).toBe(true);
  const calls = new Set<string>();
  for (const m of messages as Record<string, unknown>[]) {
    expect(ROLES.has(m.role as string), `role ${String(m.role)}`).toBe(true);
    if (m.role === 'assistant') {
      expect(typeof m.content === 'string' || m.content === null).toBe(true);
      if (m.content === null) expect(Array.isArray(m.tool_calls)).toBe(true);
      for (const c of (m.tool_calls ?? []) as Record<string, unknown>[]) {
        expect(c).toEqual({
          id: expect.any(String),
          type: 'function',
          function: { name: expect.any(String), arguments: expect.any(String) },
        });
        JSON.parse((c.function as { arguments: string }).arguments);
        calls.add(c.id as string);
      }
    } else if (m.role === 'tool') {
      expect(typeof m.content).toBe('string');
      expect(calls.has(m.tool_call_id as string), `tool output for ${String(m.tool_call_id)}`).toBe(true);
    } else {
      expect(typeof m.content === 'string' || Array.isArray(m.content)).toBe(true);
    }
  }
}

describe('sft export', () => {
  it('writes the last step’s conversation plus its answer for each complete trajectory, as OpenAI chat data', async () => {
    const { manifest, path } = await exportTo({ kind: 'sft', channel: 'train', min_reward: 0.5 });
    const lines = readJsonl(path);
    for (const line of lines) {
      expect(Object.keys(line).sort()).toEqual(['messages', 'tools']);
      checkOpenAiMessages(line.messages);
    }
    // a1 (1), b1 and b2 (0.5), c1 (1); w1 has no messages, u1 is curated out.
    expect(lines).toHaveLength(4);
    const a1: { messages: ChatCompletionMessageParam[]; tools: ChatCompletionTool[] } = {
      messages: [
        { role: 'system', content: SYSTEM.content },
        { role: 'user', content: 'Summarise notes.txt' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_a1',
              type: 'function',
              function: { name: 'read_file', arguments: '{"path":"notes.txt"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'call_a1', content: 'Ship on Friday.' },
        { role: 'assistant', content: 'Ship on Friday.' },
      ],
      tools: TOOLS as unknown as ChatCompletionTool[],
    };
    expect(lines[0]).toEqual(a1);
    // The white-box step's call had no id and object arguments; its output follows the call.
    const b1: { messages: ChatCompletionMessageParam[]; tools: ChatCompletionTool[] } = {
      messages: [
        { role: 'system', content: SYSTEM.content },
        { role: 'user', content: 'List the workspace' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_0_0', type: 'function', function: { name: 'read_file', arguments: '{"path":"."}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_0_0', content: 'notes.txt\ntodo.txt' },
      ],
      tools: TOOLS as unknown as ChatCompletionTool[],
    };
    expect(lines[1]).toEqual(b1);
    expect(manifest.counts).toMatchObject({
      trajectories: 6,
      records: 4,
      skipped: { no_messages: 1, untrainable: 1 },
      details: { tool_results_added: 2 },
    });
  });

  it('exports only the matching channel, status and labels', async () => {
    const val = readJsonl((await exportTo({ kind: 'sft', channel: 'val' })).path);
    expect(val).toHaveLength(1);
    expect(val[0]!.messages).toContainEqual({ role: 'assistant', content: 'Friday.' });
    const aborted = await exportTo({ kind: 'sft', status: 'aborted' });
    expect(aborted.manifest.counts).toMatchObject({ trajectories: 1, records: 1 });
    const gold = readJsonl((await exportTo({ kind: 'sft', tag: 'gold' })).path);
    expect(gold).toHaveLength(1);
    expect((gold[0]!.messages as { content: unknown }[]).at(-1)!.content).toBe('Ship on Friday.');
    const good = await exportTo({ kind: 'sft', quality: 'good', max_reward: 0.5 });
    expect(good.manifest.counts.records).toBe(0);
    expect(readFileSync(good.path, 'utf8')).toBe('');
    // Everything complete, any channel: all but the open and aborted ones, less the skipped.
    const all = await exportTo({ kind: 'sft' });
    expect(all.manifest.counts).toMatchObject({ trajectories: 10, records: 8 });
  });
});

describe('manifest', () => {
  it('records the source, the resolved filters, counts and the sha256 of the data file', async () => {
    const { outDir, manifest, path } = await exportTo({ kind: 'sft', channel: 'train', trainable: true });
    const onDisk = JSON.parse(readFileSync(join(outDir, 'manifest.json'), 'utf8'));
    expect(onDisk).toEqual(manifest);
    expect(manifest).toMatchObject({
      format: 'stepwise.export/1',
      id: expect.stringMatching(/^[0-9a-f]{32}$/),
      kind: 'sft',
      created_at: '2025-06-01T00:00:00.000Z',
      stepwise: { version: '0.1.0' },
      source: { store: 'sqlite', path: join(dir, 'pool.db') },
      filters: {
        channel: 'train',
        status: 'complete',
        trainable: true,
        min_reward: null,
        max_reward: null,
        quality: null,
        tag: null,
        group: null,
        task: null,
      },
    });
    expect(manifest.stepwise.commit === null || /^[0-9a-f]{40}$/.test(manifest.stepwise.commit)).toBe(true);
    // u1 carries trainable labels (true on step 0): it matches, and is then skipped as untrainable.
    expect(manifest.counts).toMatchObject({ trajectories: 1, records: 0, skipped: { untrainable: 1 } });
    expect(manifest.files).toEqual([
      {
        name: 'sft.jsonl',
        format: 'jsonl',
        records: 0,
        bytes: readFileSync(path).length,
        sha256: sha256(path),
      },
    ]);
    expect(readdirSync(outDir).sort()).toEqual(['manifest.json', 'sft.jsonl']);
  });

  it('refuses to write over an export and leaves it as it was', async () => {
    const first = await exportTo({ kind: 'sft', group: 'gA' });
    const before = sha256(first.path);
    await expect(
      runExport({ store, request: ExportRequest.parse({ kind: 'sft' }), outDir: first.outDir }),
    ).rejects.toMatchObject({ status: 409, field: 'out' });
    expect(sha256(first.path)).toBe(before);
    expect(readJsonl(first.path)).toHaveLength(3);
  });
});

describe('dpo export', () => {
  it('pairs the best and worst rollout of each group with a reward gap, over the same prompt', async () => {
    const { manifest, path } = await exportTo({ kind: 'dpo' });
    const lines = readJsonl(path);
    expect(lines).toHaveLength(1);
    const pair = lines[0]!;
    expect(pair).toMatchObject({
      chosen_reward: 1,
      rejected_reward: 0,
      group_id: 'gA',
      channel: 'train',
      chosen_trajectory_uid: 'a1',
      rejected_trajectory_uid: 'a3',
    });
    expect(pair.prompt).toEqual([SYSTEM, task('Summarise notes.txt')]);
    checkOpenAiMessages([...(pair.prompt as unknown[]), ...(pair.chosen as unknown[])]);
    checkOpenAiMessages([...(pair.prompt as unknown[]), ...(pair.rejected as unknown[])]);
    expect((pair.chosen as { role: string }[])[0]!.role).toBe('assistant');
    expect((pair.chosen as { content: unknown }[]).at(-1)).toEqual({
      role: 'assistant',
      content: 'Ship on Friday.',
    });
    expect((pair.rejected as { content: unknown }[]).at(-1)).toEqual({
      role: 'assistant',
      content: 'I could not read it.',
    });
    // gB ties, gC's rollouts saw different prompts, the rest have one rollout each.
    expect(manifest.counts.skipped).toMatchObject({
      group_below_margin: 1,
      group_prompt_mismatch: 1,
    });
    expect(manifest.counts.details).toMatchObject({ pairs: 1 });
  });

  it('leaves out pairs below --min-margin and pairs within the filtered trajectories only', async () => {
    const strict = await exportTo({ kind: 'dpo', min_margin: 1.5 });
    expect(strict.manifest.counts.records).toBe(0);
    expect(strict.manifest.options).toEqual({ min_margin: 1.5 });
    // Without a3 (reward 0), a2 (0.25) is the worst rollout of gA.
    const upper = readJsonl((await exportTo({ kind: 'dpo', min_reward: 0.2, min_margin: 0.5 })).path);
    expect(upper.map((p) => [p.chosen_trajectory_uid, p.rejected_trajectory_uid, p.chosen_reward])).toEqual([
      ['a1', 'a2', 1],
    ]);
  });
});

describe('rl export', () => {
  it('writes token columns as LIST<INT32> and the steps as the store holds them', async () => {
    const { manifest, path } = await exportTo({ kind: 'rl', channel: 'train' });
    const { rows, metadata } = readParquet(path);
    const schema = Object.fromEntries(metadata.schema.map((e) => [e.name, e]));
    const leaves = metadata.schema.filter((e) => e.num_children === undefined).map((e) => e.type);
    const columnTypes = metadata.row_groups[0]!.columns.map((c) => [
      c.meta_data!.path_in_schema.join('.'),
      c.meta_data!.type,
    ]);
    expect(columnTypes).toContainEqual(['prompt_ids.list.element', 'INT32']);
    expect(columnTypes).toContainEqual(['response_ids.list.element', 'INT32']);
    expect(columnTypes).toContainEqual(['response_logprobs.list.element', 'FLOAT']);
    expect(schema.prompt_ids).toMatchObject({ converted_type: 'LIST', repetition_type: 'REQUIRED' });
    expect(schema.response_logprobs).toMatchObject({ converted_type: 'LIST', repetition_type: 'OPTIONAL' });
    expect(leaves).not.toContain(undefined);
    expect(metadata.schema.some((e) => e.converted_type === 'JSON')).toBe(false);

    const read = await rows;
    // Every step of the train trajectories that are complete, minus u1's untrainable step 1.
    expect(manifest.counts).toMatchObject({ records: read.length, skipped: { untrainable_steps: 1 } });
    expect(manifest.files[0]).toMatchObject({
      format: 'parquet',
      records: read.length,
      sha256: sha256(path),
    });
    const expected = [];
    for await (const t of (async function* () {
      for (const id of ['a1', 'a2', 'a3', 'b1', 'b2', 'c1', 'c2', 'w1', 'u1'])
        yield (await store.getTrajectory(id))!;
    })()) {
      for (const s of await store.getTrajectorySteps(t.id)) {
        if (t.id === 'u1' && s.index === 1) continue;
        expected.push({
          trajectory_uid: t.id,
          group_id: t.groupId,
          channel: 'train',
          step_index: s.index,
          prompt_ids: s.promptIds,
          response_ids: s.responseIds,
          response_logprobs: s.responseLogprobs?.map((x) => Math.fround(x)),
          reward: s.reward,
          trajectory_reward: t.reward,
          policy_version: s.policyVersion,
          is_last: s.isLast,
          token_source: s.tokenSource,
          finish_reason: s.finishReason,
        });
      }
    }
    expect(read.map(({ advantage: _, ...r }) => r)).toEqual(expected);
    expect(read.find((r) => r.trajectory_uid === 'a1')!.policy_version).toBe(2);
  });

  it('broadcasts each group’s advantage over all its complete rollouts, whatever the filters keep', async () => {
    const rewards = await Promise.all(
      ['a1', 'a2', 'a3'].map(async (id) => (await store.getTrajectory(id))!.reward),
    );
    for (const estimator of ['grpo', 'rloo'] as const) {
      const { manifest, path } = await exportTo({
        kind: 'rl',
        group: 'gA',
        min_reward: 0.2,
        advantage: estimator,
      });
      const read = await readParquet(path).rows;
      const want = groupAdvantages(rewards, estimator).advantages;
      expect(read.map((r) => r.trajectory_uid)).toEqual(['a1', 'a1', 'a2', 'a2']);
      expect(read.map((r) => r.advantage)).toEqual([want[0], want[0], want[1], want[1]]);
      expect(manifest.options).toEqual({ advantage: estimator });
    }
    // GRPO's signs: the best rollout is above the group mean, and a rollout alone has no baseline.
    const single = await readParquet((await exportTo({ kind: 'rl', group: 'gE' })).path).rows;
    expect(single.map((r) => r.advantage)).toEqual([0, 0]);
    const aborted = await readParquet((await exportTo({ kind: 'rl', status: 'aborted' })).path).rows;
    expect(aborted.map((r) => [r.trajectory_uid, r.advantage])).toEqual([['x1', null]]);
  });

  it('cuts row groups by rows or tokens and reads back the same rows', async () => {
    const whole = await readParquet((await exportTo({ kind: 'rl', channel: 'train' })).path).rows;
    const byRows = await exportTo({ kind: 'rl', channel: 'train' }, { rowGroup: { tokens: 1e9, rows: 4 } });
    const byTokens = await exportTo(
      { kind: 'rl', channel: 'train' },
      { rowGroup: { tokens: 20, rows: 1e9 } },
    );
    for (const { path } of [byRows, byTokens]) {
      const { rows, metadata } = readParquet(path);
      expect(await rows).toEqual(whole);
      expect(metadata.row_groups.length).toBeGreaterThan(1);
    }
    expect(readParquet(byRows.path).metadata.row_groups.map((g) => Number(g.num_rows))).toEqual([4, 4, 4, 3]);
  });

  it('writes a readable, empty file when nothing matches', async () => {
    const { manifest, path } = await exportTo({ kind: 'rl', channel: 'nothing-here' });
    expect(manifest.counts.records).toBe(0);
    const { rows, metadata } = readParquet(path);
    expect(await rows).toEqual([]);
    expect(metadata.schema.map((e) => e.name)).toContain('prompt_ids');
  });
});

describe('trajectories export and import', () => {
  let imported: PoolOps;
  beforeAll(async () => {
    imported = poolOps(await openSqliteStore({ path: join(dir, 'imported.db') }));
  });
  afterAll(async () => {
    await imported.close();
  });

  it('exports everything the store holds and imports it back into a fresh store unchanged', async () => {
    const first = await exportTo({ kind: 'trajectories' });
    const lines = readJsonl(first.path);
    expect(lines.map((l) => l.trajectory_uid)).toEqual([
      'a1',
      'a2',
      'a3',
      'b1',
      'b2',
      'c1',
      'c2',
      'o1',
      'x1',
      'v1',
      'w1',
      'u1',
    ]);
    const c2 = lines.find((l) => l.trajectory_uid === 'c2')!;
    expect(c2).toMatchObject({
      guided: true,
      guidance_k: 1,
      derived_from: 'c1',
      task_id: 'task-7',
      derivation: { kind: 'rollback', at: 1 },
      reward: -0.5,
      n_rollouts: 2,
    });
    const u1 = lines.find((l) => l.trajectory_uid === 'u1')!;
    expect(u1.label_state).toEqual([
      { step_index: null, quality: null, trainable: false, tags: [], note: 'reward hack' },
      { step_index: 0, quality: null, trainable: true, tags: [], note: null },
    ]);

    const result = await importTrajectories({ store: imported, file: first.path });
    expect(result).toMatchObject({ trajectories: 12, steps: 20, labels: 4, verified: true });
    const again = await runExport({
      store: imported,
      request: ExportRequest.parse({ kind: 'trajectories' }),
      outDir: join(dir, 'again'),
    });
    expect(readJsonl(join(dir, 'again', 'trajectories.jsonl'))).toEqual(lines);
    expect(again.files[0]!.sha256).toBe(first.manifest.files[0]!.sha256);

    // What the store derives from the data agrees too: groups and labels in force serve the same.
    expect(await imported.getGroup('train', 'gA')).toMatchObject({
      expected: 3,
      nComplete: 3,
      state: 'ready',
    });
    expect(await imported.getCurrentLabels('u1')).toEqual(await store.getCurrentLabels('u1'));
    const rl = await exportTo({ kind: 'rl' });
    const rlAgain = await exportTo({ kind: 'rl' }, { store: imported });
    expect(sha256(rlAgain.path)).toBe(sha256(rl.path));
  });

  it('refuses a file with a bad line, naming the line and field, and stores nothing', async () => {
    const { path } = await exportTo({ kind: 'trajectories', group: 'gA' });
    const lines = readFileSync(path, 'utf8').split('\n');
    const broken = JSON.parse(lines[1]!);
    broken.steps[1].prompt_ids[2] = -4;
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(bad, [lines[0], JSON.stringify(broken), lines[2]].join('\n'));
    const fresh = poolOps(await openSqliteStore({ path: join(dir, 'fresh.db') }));
    try {
      await expect(importTrajectories({ store: fresh, file: bad })).rejects.toMatchObject({
        message: 'line 2: steps.1.prompt_ids.2: must be >= 0',
        field: 'steps.1.prompt_ids.2',
      });
      expect((await fresh.listTrajectories({ limit: 10, offset: 0 })).total).toBe(0);
      // Trajectories the store has already: refused, nothing written.
      const existing = join(dir, 'existing.jsonl');
      writeFileSync(existing, `${lines[0]}\n`);
      await importTrajectories({ store: fresh, file: existing });
      writeFileSync(existing, `${lines[2]}\n${lines[0]}\n`);
      await expect(importTrajectories({ store: fresh, file: existing })).rejects.toMatchObject({
        status: 409,
        message: 'line 2: trajectory a1 already exists in the store',
      });
      expect((await fresh.listTrajectories({ limit: 10, offset: 0 })).items.map((t) => t.id)).toEqual(['a1']);
    } finally {
      await fresh.close();
    }
  });

  it('refuses a manifest beside the file whose file list is malformed, naming the field', async () => {
    const { outDir, path } = await exportTo({ kind: 'trajectories', group: 'gB' });
    const manifestPath = join(outDir, 'manifest.json');
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
    // These were TypeErrors (`files.find`, a null entry's name).
    for (const [files, field] of [
      [{ [manifest.files[0].name]: manifest.files[0].sha256 }, 'manifest.files'],
      [[null, ...manifest.files], 'manifest.files.0'],
      [[{ ...manifest.files[0], sha256: 7 }], 'manifest.files.0.sha256'],
    ] as const) {
      writeFileSync(manifestPath, JSON.stringify({ ...manifest, files }));
      await expect(checkImport(path, null)).rejects.toMatchObject({
        name: 'ValidationError',
        field,
        message: expect.stringContaining(manifestPath),
      });
    }
    // Another tool's manifest, with no file list, leaves the file unverified as before.
    writeFileSync(manifestPath, JSON.stringify({ name: 'web-app', icons: [] }));
    expect((await checkImport(path, null)).verified).toBe(false);
  });

  it('refuses a file whose digest differs from its manifest', async () => {
    const { path } = await exportTo({ kind: 'trajectories', group: 'gB' });
    const truncated = readFileSync(path, 'utf8').split('\n')[0]!;
    writeFileSync(path, `${truncated}\n`);
    await expect(checkImport(path, null)).rejects.toMatchObject({ field: 'file', message: /sha256/ });
    const fresh = poolOps(await openSqliteStore({ path: join(dir, 'digest.db') }));
    try {
      await expect(importTrajectories({ store: fresh, file: path })).rejects.toMatchObject({ field: 'file' });
      expect((await fresh.listTrajectories({ limit: 10, offset: 0 })).total).toBe(0);
    } finally {
      await fresh.close();
    }
  });
});

describe('export requests', () => {
  it('name the field and the rule a bad request breaks', () => {
    const problem = (body: unknown) => {
      const r = ExportRequest.safeParse(body);
      return r.success
        ? null
        : { path: r.error.issues[0]!.path.join('.'), message: r.error.issues[0]!.message };
    };
    expect(problem({ kind: 'csv' })?.path).toBe('kind');
    expect(problem({ kind: 'sft', advantage: 'rloo' })).toEqual({
      path: 'advantage',
      message: 'applies to kind rl only',
    });
    expect(problem({ kind: 'rl', min_margin: 1 })).toEqual({
      path: 'min_margin',
      message: 'applies to kind dpo only',
    });
    expect(problem({ kind: 'sft', min_reward: 2, max_reward: 1 })).toEqual({
      path: 'max_reward',
      message: 'must be >= min_reward',
    });
    expect(problem({ kind: 'sft', channel: '../x' })?.path).toBe('channel');
    expect(problem({ kind: 'sft', limit: 3 })?.path).toBe('');
    expect(problem({ kind: 'dpo', min_margin: 0.5, status: 'any' })).toBeNull();
  });

  it('scan the store in storage order without sorting all matches for each page', async () => {
    const sqlite = (store as PoolCore).store as SqliteStore;
    const sorts = (query: Parameters<SqliteStore['explainScan']>[0]) =>
      sqlite.explainScan(query).filter((d) => /TEMP B-TREE|^SCAN trajectories/.test(d));
    for (const query of [
      { status: 'complete' as const },
      { status: 'complete' as const, channel: 'train' },
      { channel: 'train', rewardMin: 0.5 },
      {},
    ]) {
      expect(sorts({ ...query, after: '3', limit: 200 })).toEqual([]);
    }
  });
});

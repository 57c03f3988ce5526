import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type RunningSimServer, startSimServer } from '../packages/core/src/engines/sim/serve.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { loadTasks, workspaceFor, writeClawGymFolder } from '../packages/gym/src/tasks/index.js';
import { buildJudgeMessages, verify } from '../packages/gym/src/verify/index.js';

/*
 * ClawGym-SynData's rubric and aggregation fields. The fixtures are shaped exactly as its code writes
 * them: persona2task's run payload (12_assemble_run_payload_dataset: prompt, hook_code "python3
 * reward/test.py <ws>", hook_lang, rules [{name, file_path, scores}], category, macro_category,
 * action, input_files with reward/test.py last) and skill2task's task bundles (dataset_io.py:
 * data_entry.json with validation_mode, reward_aggregation and rules; a rubric-only bundle has no
 * reward/).
 */

const WS = '/root/.openclaw/workspace';
const tmp = mkdtempSync(join(tmpdir(), 'stepwise-syn-rules-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const sandboxReady = checkSandbox().ok;

const bands = (what: string) => ({
  '0': `output/report.md is missing or does not ${what}.`,
  '0.25': `It barely tries to ${what}.`,
  '0.5': `It partly manages to ${what}.`,
  '0.75': `It mostly manages to ${what}.`,
  '1': `It fully manages to ${what}.`,
});

const personaPayload = {
  prompt:
    'Summarise input/sales.csv into output/report.md with the total. All file paths are relative to the workspace directory.',
  hook_code: `python3 reward/test.py ${WS}`,
  hook_lang: 'bash',
  rules: [
    { name: 'states_total', file_path: 'output/report.md', scores: bands('state the total of 150') },
    // SynData stores a rule's file under output/ and accepts "1.0" / "0.0" / "0.50" for the bands.
    {
      name: 'tone',
      file_path: './report.md',
      scores: {
        '0.0': 'No summary.',
        '0.25': 'Hard to read.',
        '0.50': 'Readable.',
        '0.75': 'Clear.',
        '1.0': 'Clear and brief.',
      },
    },
  ],
  category: 'data_analysis',
  macro_category: 'analysis',
  action: ['read_file', 'write_file'],
  input_files: [
    { file_path: 'input/sales.csv', file_format: 'csv', content: 'month,amount\njan,50\nfeb,100\n' },
    {
      file_path: 'reward/test.py',
      file_format: 'py',
      content: 'import json\nprint(json.dumps({"a": 0.5}))\n',
    },
  ],
};

function writeJsonl(name: string, values: unknown[]): string {
  const path = join(tmp, name);
  writeFileSync(path, `${values.map((v) => JSON.stringify(v)).join('\n')}\n`);
  return path;
}

function bundle(name: string, entry: Record<string, unknown>, files: Record<string, string>): string {
  const dir = join(tmp, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'data_entry.json'), JSON.stringify(entry, null, 2));
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  return dir;
}

const skillRules = [
  { name: 'explains_steps', file_path: 'output/guide.md', scores: bands('explain each step') },
];

describe("ClawGym-SynData's rules", () => {
  it('a persona2task record keeps each rule’s file and score bands, and the judge is shown them', async () => {
    const [task] = await loadTasks(writeJsonl('persona.jsonl', [personaPayload]));
    expect(task!.rubric).toEqual([
      {
        name: 'states_total',
        description: 'It fully manages to state the total of 150.',
        weight: 1,
        filePath: 'output/report.md',
        scores: bands('state the total of 150'),
      },
      {
        name: 'tone',
        description: 'Clear and brief.',
        weight: 1,
        filePath: 'output/report.md',
        scores: {
          '0': 'No summary.',
          '0.25': 'Hard to read.',
          '0.5': 'Readable.',
          '0.75': 'Clear.',
          '1': 'Clear and brief.',
        },
      },
    ]);
    const prompt = buildJudgeMessages(task!, '(listing)')[1]!.content;
    expect(prompt).toContain('"states_total" (weight 1) [judges output/report.md]');
    expect(prompt).toContain('0.25: It barely tries to state the total of 150.');
    expect(prompt).toContain('0.5: Readable.');
    // Neither field says how to combine: ClawGym-Bench's 0.7 / 0.3 stays.
    expect(task!.weights).toEqual({ code: 0.7, rubric: 0.3 });
  });

  it('written as a folder, the rules stay in data_entry.json and read back the same', async () => {
    const [task] = await loadTasks(writeJsonl('persona2.jsonl', [personaPayload]));
    const dir = join(tmp, 'persona-folder');
    await writeClawGymFolder(task!, dir);
    const entry = JSON.parse(readFileSync(join(dir, 'data_entry.json'), 'utf8'));
    expect(entry.rules).toEqual(personaPayload.rules);
    const [again] = await loadTasks(dir);
    expect(again!.rubric).toEqual(task!.rubric);
  });

  it('a malformed rule is refused, naming the field', async () => {
    const bad = {
      ...personaPayload,
      rules: [{ name: 'x', file_path: 'output/a.md', scores: { '0': 'a', '1': 'b' } }],
    };
    await expect(loadTasks(writeJsonl('bad-rules.jsonl', [bad]))).rejects.toThrow(
      /rules\[0\]\.scores: bands 0\.25, 0\.5, 0\.75 are missing/,
    );
    const badAgg = { ...personaPayload, reward_aggregation: 'max' };
    await expect(loadTasks(writeJsonl('bad-agg.jsonl', [badAgg]))).rejects.toThrow(/reward_aggregation/);
  });

  it('a rubric-only skill2task bundle (no reward/) loads, judged alone', async () => {
    const dir = bundle(
      'task_0001',
      {
        task_id: '0001',
        user_query: 'Write a setup guide to output/guide.md.',
        validation_mode: 'rubric',
        reward_aggregation: 'rubric_only',
        rules: skillRules,
        input_mount_dir: '/workspace/input',
      },
      { 'input_files/notes.txt': 'install, configure, run\n' },
    );
    const [task] = await loadTasks(dir);
    expect(task!.verifier).toEqual({ kind: 'none' });
    expect(task!.weights).toEqual({ code: 0, rubric: 1 });
    expect(task!.rubric.map((r) => [r.name, r.filePath])).toEqual([['explains_steps', 'output/guide.md']]);
    // Without a judge there is nothing to score it: 0, and the reason says so.
    const ws = await workspaceFor(task!, join(tmp, 'ws-rubric-only'));
    const plain = await verify(task!, ws);
    expect(plain.score).toBe(0);
    expect(plain.reason).toMatch(/no code verifier/);
    // Written back, it is still a bundle without reward/.
    const out = join(tmp, 'task_0001-out');
    await writeClawGymFolder(task!, out);
    const [again] = await loadTasks(out);
    expect(again!.verifier).toEqual({ kind: 'none' });
  });

  it('a code bundle whose reward/ is missing is still refused', async () => {
    const dir = bundle('task_0002', { task_id: '0002', user_query: 'q', validation_mode: 'code' }, {});
    await expect(loadTasks(dir)).rejects.toThrow(/has no reward\/ folder/);
  });

  describe('reward_aggregation weighs code and rubric, with a real judge (sim engine over HTTP)', () => {
    const sims: RunningSimServer[] = [];
    afterAll(async () => {
      await Promise.all(sims.map((s) => s.close()));
    });
    const judge = async (answer: string) => {
      const s = await startSimServer({ port: 0, policy: 'scripted', script: [{ answer }] });
      sims.push(s);
      return { baseURL: `${s.url}/v1`, apiKey: 'sk-test', model: s.model };
    };
    // The checker prints 0.5; the judge gives the rule 1.
    const codeAndRubric = (aggregation: string | undefined) =>
      bundle(
        `task_agg_${aggregation ?? 'derived'}`,
        {
          task_id: `agg_${aggregation ?? 'derived'}`,
          user_query: 'Write a setup guide to output/guide.md.',
          validation_mode: aggregation === 'code_only' ? 'code' : 'code_and_rubric',
          ...(aggregation ? { reward_aggregation: aggregation } : {}),
          ...(aggregation === 'code_only' ? {} : { rules: skillRules }),
          input_mount_dir: '/workspace/input',
        },
        { 'reward/reward.sh': '#!/bin/bash\necho 0.5\n' },
      );

    it.skipIf(!sandboxReady)(
      'average_code_and_rubric is the plain mean (0.75, not 0.7·0.5 + 0.3·1 = 0.65)',
      async () => {
        for (const agg of ['average_code_and_rubric', undefined]) {
          const [task] = await loadTasks(codeAndRubric(agg));
          expect(task!.weights).toEqual({ code: 1, rubric: 1 });
          const ws = await workspaceFor(task!, join(tmp, `ws-${agg}`));
          const result = await verify(task!, ws, { judge: await judge('{"explains_steps": 1}') });
          expect([result.code, result.rubric, result.score]).toEqual([0.5, 1, 0.75]);
        }
      },
    );

    it.skipIf(!sandboxReady)('code_only ignores the judge; rubric_only ignores the code', async () => {
      const [codeOnly] = await loadTasks(codeAndRubric('code_only'));
      expect(codeOnly!.weights).toEqual({ code: 1, rubric: 0 });
      const ws1 = await workspaceFor(codeOnly!, join(tmp, 'ws-code-only'));
      expect((await verify(codeOnly!, ws1)).score).toBe(0.5);

      const [rubricOnly] = await loadTasks(join(tmp, 'task_0001'));
      const ws2 = await workspaceFor(rubricOnly!, join(tmp, 'ws-rubric-judged'));
      const judged = await verify(rubricOnly!, ws2, { judge: await judge('{"explains_steps": 0.25}') });
      expect([judged.code, judged.rubric, judged.score]).toEqual([0, 0.25, 0.25]);
    });
  });
});

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { loadTasks, workspaceFor, writeClawGymFolder } from '../packages/gym/src/tasks/index.js';
import { verify } from '../packages/gym/src/verify/index.js';

/*
 * ClawGym-SynData's Hugging Face form, `syn_task.jsonl`: records shaped as ClawGym's converter
 * (RL/data/build_dataset_from_hf.py) documents and reads them — prompt, hook_code, input_files
 * [{file_path, content}], rule, origin_template with an `id:` line — load as tasks that score like the
 * folders that converter writes.
 */

const WS = '/root/.openclaw/workspace';
const tmp = mkdtempSync(join(tmpdir(), 'stepwise-syn-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const sandboxReady = checkSandbox().ok;

const CHECK = [
  'import json, sys',
  'from pathlib import Path',
  'ws = Path(sys.argv[1] if len(sys.argv) > 1 else ".")',
  'ans = ws / "output" / "answer.txt"',
  'print(json.dumps({"has_input": 1.0 if (ws / "input" / "data.csv").is_file() else 0.0,',
  '                  "answer": 1.0 if ans.is_file() and ans.read_text().strip() == "150" else 0.0}))',
  '',
].join('\n');

const records = [
  {
    prompt: 'Read input/data.csv and write the total to output/answer.txt.',
    hook_code: `python3 reward/test.py ${WS}`,
    input_files: [
      { file_path: 'reward/test.py', content: CHECK },
      { file_path: 'input/data.csv', content: 'x\n50\n100\n' },
    ],
    rule: null,
    origin_template: '---\nid: task_00_sum_csv\nname: Sum a CSV\n---\nbody',
  },
  {
    prompt: 'Say hello in output/answer.txt.',
    hook_code: `python3 ${WS}/reward/check.py ${WS}`,
    input_files: [{ file_path: 'reward/check.py', content: 'print(0.25)\n' }],
    rule: 'The greeting is polite and names the user.',
    origin_template: 'no front matter here',
  },
  { prompt: 'Nothing to check.', hook_code: '', input_files: [], rule: null, origin_template: '' },
];

function writeJsonl(name: string, values: unknown[]): string {
  const path = join(tmp, name);
  writeFileSync(path, `${values.map((v) => JSON.stringify(v)).join('\n\n')}\n`);
  return path;
}

describe('syn_task.jsonl', () => {
  it("reads ids, workspace files, the verifier and the rule the way ClawGym's converter does", async () => {
    const tasks = await loadTasks(writeJsonl('syn_task.jsonl', records));
    // File order; ids from the template's `id:` line, else task_<record index, 5 digits>.
    expect(tasks.map((t) => t.id)).toEqual(['task_00_sum_csv', 'task_00001', 'task_00002']);
    const [sum, hello, empty] = tasks as [(typeof tasks)[0], (typeof tasks)[0], (typeof tasks)[0]];
    expect(sum.files.map((f) => f.path)).toEqual(['input/data.csv']);
    expect(sum.mountDir).toBe(WS);
    expect(sum.verifier.kind === 'script' && sum.verifier.files.map((f) => f.path)).toEqual([
      'reward/check.py',
      'reward/reward.sh',
    ]);
    const script = (t: typeof sum) =>
      t.verifier.kind === 'script'
        ? t.verifier.files.find((f) => f.path === 'reward/reward.sh')!.content
        : '';
    // Every hook form ends up calling <workspace>/reward/check.py on the workspace.
    for (const t of [sum, hello, empty])
      expect(script(t)).toContain(`python3 ${WS}/reward/check.py ${WS} | python3 -c`);
    expect(sum.rubric).toEqual([]);
    expect(hello.rubric).toEqual([
      { name: 'rule', description: 'The greeting is polite and names the user.', weight: 1 },
    ]);
  });

  it('writes the task folder ClawGym writes: data_entry.json with metadata.rule, input_files/, reward/', async () => {
    const [sum, hello] = await loadTasks(writeJsonl('syn_task2.jsonl', records.slice(0, 2)));
    const sumDir = join(tmp, 'out-sum');
    await writeClawGymFolder(sum!, sumDir);
    expect(readFileSync(join(sumDir, 'data_entry.json'), 'utf8')).toBe(
      '{\n  "task_id": "task_00_sum_csv",\n  "user_query": "Read input/data.csv and write the total to output/answer.txt.",\n  "metadata": {\n    "category": "",\n    "grading_type": "automated"\n  },\n  "input_mount_dir": "/root/.openclaw/workspace"\n}\n',
    );
    expect(readFileSync(join(sumDir, 'input_files', 'input', 'data.csv'), 'utf8')).toBe('x\n50\n100\n');
    const helloDir = join(tmp, 'out-hello');
    await writeClawGymFolder(hello!, helloDir);
    expect(JSON.parse(readFileSync(join(helloDir, 'data_entry.json'), 'utf8'))).toEqual({
      task_id: 'task_00001',
      user_query: 'Say hello in output/answer.txt.',
      metadata: {
        category: '',
        grading_type: 'automated',
        rule: 'The greeting is polite and names the user.',
      },
    });
    // Read back as a folder, the rule is still the judge's rubric.
    const [again] = await loadTasks(helloDir);
    expect(again!.rubric.map((r) => r.description)).toEqual(['The greeting is polite and names the user.']);
  });

  it.skipIf(!sandboxReady)(
    'its reward.sh averages the checker’s sub-scores, in the real sandbox',
    async () => {
      const [sum] = await loadTasks(writeJsonl('syn_task3.jsonl', records.slice(0, 1)));
      const ws = await workspaceFor(sum!, join(tmp, 'ws-sum'));
      expect((await verify(sum!, ws)).score).toBe(0.5);
      mkdirSync(join(ws, 'output'));
      writeFileSync(join(ws, 'output', 'answer.txt'), '150\n');
      expect((await verify(sum!, ws)).score).toBe(1);
    },
  );

  it('a bad record is refused, naming its line and field', async () => {
    const path = writeJsonl('bad.jsonl', [
      records[0],
      { prompt: 'p', hook_code: 'x', input_files: [{ content: 'c' }] },
    ]);
    await expect(loadTasks(path)).rejects.toThrow(/bad\.jsonl line 3.*input_files\.0\.file_path/);
  });

  it("follows the converter's Python: the first id line wins even when empty; [] and {} are no rule", async () => {
    const tasks = await loadTasks(
      writeJsonl('syn_task_py.jsonl', [
        { ...records[2], origin_template: '---\nid:\nname: x\nid: later_id\n---' },
        { ...records[2], rule: [] },
        { ...records[2], rule: {} },
      ]),
    );
    expect(tasks.map((t) => t.id)).toEqual(['task_00000', 'task_00001', 'task_00002']);
    for (const t of tasks.slice(1))
      expect((t.provenance.clawgym as { metadata: Record<string, unknown> }).metadata).toEqual({
        category: '',
        grading_type: 'automated',
      });
  });
});

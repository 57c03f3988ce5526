import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { loadTasks, workspaceFor, writeClawGymFolder } from '../packages/gym/src/tasks/index.js';
import { verify } from '../packages/gym/src/verify/index.js';

/*
 * ClawGym-SynData's single-file task items (skill2task's JSONL form, dataset_io.py
 * task_record_to_single_file_item): task_id, prompt, validation_mode, reward_aggregation, rules,
 * hook_code (reward.sh without its shebang), hook_lang "bash", input_files and reward_files as
 * {file_path, file_format, content}. They load as the bundle single_file_item_to_task_record makes:
 * the task_id kept, reward_files as the verifier beside the generated reward.sh.
 */

const tmp = mkdtempSync(join(tmpdir(), 'stepwise-syn-item-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const sandboxReady = checkSandbox().ok;

const CHECK = [
  'import json, sys',
  'from pathlib import Path',
  'ws = Path(sys.argv[1])',
  'ans = ws / "output" / "total.txt"',
  'print(json.dumps({"total": 1.0 if ans.is_file() and ans.read_text().strip() == "150" else 0.0}))',
  '',
].join('\n');

// The relative path profile: no input_mount_dir, files under input/ and reward/.
const codeItem = {
  task_id: 'csv_total_0007',
  prompt: 'Add up input/sales.csv and write the total to output/total.txt.',
  validation_mode: 'code',
  reward_aggregation: 'code_only',
  rules: [],
  hook_code:
    'python3 reward/check.py . | python3 -c "import json,sys; print(json.load(sys.stdin)[\'total\'])"',
  hook_lang: 'bash',
  input_files: [{ file_path: 'input/sales.csv', file_format: 'csv', content: 'amount\n50\n100\n' }],
  reward_files: [{ file_path: 'reward/check.py', file_format: 'py', content: CHECK }],
  metadata: { category: 'data' },
};

// The template profile's reward paths, and a rubric-only item (empty hook, rules, no reward files).
const rubricItem = {
  task_id: 'guide_0008',
  prompt: 'Write a setup guide to output/guide.md.',
  validation_mode: 'rubric',
  reward_aggregation: 'rubric_only',
  rules: [
    {
      name: 'complete',
      file_path: 'output/guide.md',
      scores: { '0': 'none', '0.25': 'few steps', '0.5': 'half', '0.75': 'most', '1': 'every step' },
    },
  ],
  hook_code: '',
  hook_lang: '',
  input_files: [],
  reward_files: [],
};

function writeJsonl(name: string, values: unknown[]): string {
  const path = join(tmp, name);
  writeFileSync(path, `${values.map((v) => JSON.stringify(v)).join('\n')}\n`);
  return path;
}

describe("ClawGym-SynData's single-file items", () => {
  it('keep their task_id, reward_files and hook (reward.sh = #!/bin/bash + hook)', async () => {
    const [code, rubric] = await loadTasks(writeJsonl('items.jsonl', [codeItem, rubricItem]));
    expect(code!.id).toBe('csv_total_0007');
    expect(code!.files.map((f) => f.path)).toEqual(['sales.csv']);
    expect(code!.verifier).toMatchObject({ kind: 'script', entry: 'reward/reward.sh' });
    const files = code!.verifier.kind === 'script' ? code!.verifier.files : [];
    expect(files.map((f) => [f.path, f.content])).toEqual([
      ['reward/reward.sh', `#!/bin/bash\n${codeItem.hook_code}\n`],
      ['reward/check.py', CHECK],
    ]);
    expect(code!.weights).toEqual({ code: 1, rubric: 0 });
    expect(code!.category).toBe('data');
    expect(rubric!.id).toBe('guide_0008');
    expect(rubric!.verifier).toEqual({ kind: 'none' });
    expect(rubric!.rubric.map((r) => r.filePath)).toEqual(['output/guide.md']);
  });

  it('write back as the bundle SynData writes', async () => {
    const [code] = await loadTasks(writeJsonl('items2.jsonl', [codeItem]));
    const dir = join(tmp, 'task_csv_total_0007');
    await writeClawGymFolder(code!, dir);
    expect(JSON.parse(readFileSync(join(dir, 'data_entry.json'), 'utf8'))).toEqual({
      task_id: 'csv_total_0007',
      user_query: codeItem.prompt,
      validation_mode: 'code',
      reward_aggregation: 'code_only',
      rules: [],
      metadata: { category: 'data' },
    });
    expect(readFileSync(join(dir, 'reward/check.py'), 'utf8')).toBe(CHECK);
    expect(statSync(join(dir, 'reward/reward.sh')).mode & 0o777).toBe(0o755);
    expect(readFileSync(join(dir, 'input_files/sales.csv'), 'utf8')).toBe('amount\n50\n100\n');
  });

  it('maps {{reward_dir}}/ and absolute /…/reward/ paths to reward/', async () => {
    const item = {
      ...codeItem,
      reward_files: [
        { file_path: '{{reward_dir}}/check.py', file_format: 'py', content: CHECK },
        { file_path: '/workspace/reward/data/expected.json', file_format: 'json', content: '{}' },
      ],
    };
    const [task] = await loadTasks(writeJsonl('items3.jsonl', [item]));
    const files = task!.verifier.kind === 'script' ? task!.verifier.files : [];
    expect(files.map((f) => f.path)).toEqual([
      'reward/reward.sh',
      'reward/check.py',
      'reward/data/expected.json',
    ]);
  });

  it('are refused as SynData refuses them, naming line and field', async () => {
    const noReward = { ...codeItem, reward_files: undefined };
    await expect(loadTasks(writeJsonl('bad1.jsonl', [noReward]))).rejects.toThrow(/line 1.*reward_files/);
    const hookless = { ...codeItem, hook_code: '' };
    await expect(loadTasks(writeJsonl('bad2.jsonl', [hookless]))).rejects.toThrow(/line 1.*hook_code/);
    const ruleless = { ...rubricItem, rules: [] };
    await expect(loadTasks(writeJsonl('bad3.jsonl', [ruleless]))).rejects.toThrow(/line 1.*rules/);
  });

  it.skipIf(!sandboxReady)('score with their own checker, in the real sandbox', async () => {
    const [code] = await loadTasks(writeJsonl('items4.jsonl', [codeItem]));
    const ws = await workspaceFor(code!, join(tmp, 'ws'));
    expect((await verify(code!, ws)).score).toBe(0);
    const { mkdirSync } = await import('node:fs');
    mkdirSync(join(ws, 'output'));
    writeFileSync(join(ws, 'output', 'total.txt'), '150\n');
    expect((await verify(code!, ws)).score).toBe(1);
  });
});

import { parseOrThrow } from '@stepwise/core';
import { z } from 'zod';
import type { ClawGymProvenance } from './clawgym.js';
import { DEFAULT_MOUNT_DIR, GymTask, type TaskFile } from './schema.js';
import { rubricOf, validationModeOf, weightsOf } from './syn-rules.js';

// ClawGym-SynData's Hugging Face form (`syn_task.jsonl`), made into the task ClawGym's own converter
// makes: docs/gym-tasks.md#two-forms-on-disk

const SynTaskFile = z.looseObject({ file_path: z.string().min(1), content: z.string() });

export const SynTaskRecord = z.looseObject({
  prompt: z.string().min(1),
  hook_code: z.string().nullish(),
  input_files: z.array(SynTaskFile).nullish(),
  rule: z.unknown().optional(),
  // persona2task's run payload: `rules` ({name, file_path, scores}) and how code and rubric combine.
  rules: z.unknown().optional(),
  reward_aggregation: z.unknown().optional(),
  validation_mode: z.unknown().optional(),
  origin_template: z.string().nullish(),
});
export type SynTaskRecord = z.infer<typeof SynTaskRecord>;

/**
 * A JSONL value in the syn_task form (a prompt and a hook, and none of a GymTask's own keys). A
 * `task_id` marks SynData's single-file item instead (syn-item.ts).
 */
export function isSynTaskRecord(value: unknown): boolean {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  return (
    'prompt' in value &&
    'hook_code' in value &&
    !('verifier' in value) &&
    !('id' in value) &&
    !('task_id' in value)
  );
}

const WORKSPACE = DEFAULT_MOUNT_DIR;

/** The template's `id:` line (its YAML front matter), as ClawGym's converter reads it. */
export function synTaskId(originTemplate: string | null | undefined, index: number): string {
  // The converter stops at the first `id:` line, even an empty one (then the index names the task).
  for (const line of (originTemplate ?? '').split('\n')) {
    const trimmed = line.trim();
    if (trimmed.startsWith('id:')) {
      const id = trimmed.slice(3).trim();
      if (id !== '') return id;
      break;
    }
  }
  return `task_${String(index).padStart(5, '0')}`;
}

/** The hook, pointed at `<workspace>/reward/check.py` however the record named its checker. */
export function normalizeHook(hook: string | null | undefined): string {
  if (!hook) return `python3 ${WORKSPACE}/reward/check.py ${WORKSPACE}`;
  return hook
    .replaceAll(`${WORKSPACE}/reward/`, 'reward/')
    .replaceAll('reward/test.py', 'reward/check.py')
    .replaceAll('reward/check.py', `${WORKSPACE}/reward/check.py`);
}

// The checker prints a JSON dict of sub-scores (or one number); the reward is their mean (else 0).
const AVERAGE_PY =
  'import json, sys; v = json.loads(sys.stdin.read().strip()); print(sum(float(x) for x in v.values()) / len(v) if isinstance(v, dict) and v else float(v) if isinstance(v, (int, float)) else 0.0)';

export function rewardScript(hook: string | null | undefined): string {
  return `#!/usr/bin/env bash\nset -euo pipefail\n\n${normalizeHook(hook)} | python3 -c '${AVERAGE_PY}'\n`;
}

/** Python's truth value of a JSON value (the converter's `if d.get("rule")`): [], {}, "", 0 are false. */
function pythonTruthy(value: unknown): boolean {
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === 'object' && value !== null) return Object.keys(value).length > 0;
  return Boolean(value);
}

/** One syn_task record (0-based `index` in its file) as a GymTask. */
export function synTaskToGymTask(
  value: unknown,
  index: number,
  where = `syn_task line ${index + 1}`,
): GymTask {
  const record = parseOrThrow(SynTaskRecord, value, where);
  const id = synTaskId(record.origin_template, index);
  const mode =
    record.validation_mode === undefined
      ? null
      : validationModeOf(record.validation_mode, `${where}: validation_mode`);
  const weights = weightsOf(record.reward_aggregation, mode, `${where}: reward_aggregation`);
  const reward: TaskFile[] = [];
  const files: TaskFile[] = [];
  for (const file of record.input_files ?? []) {
    if (file.file_path.startsWith('reward/')) {
      const path = file.file_path === 'reward/test.py' ? 'reward/check.py' : file.file_path;
      reward.push({ path, encoding: 'utf8', content: file.content });
    } else files.push({ path: file.file_path, encoding: 'utf8', content: file.content });
  }
  // The converter writes reward.sh last, over any of the record's own.
  const verifierFiles = reward.filter((f) => f.path !== 'reward/reward.sh');
  verifierFiles.push({
    path: 'reward/reward.sh',
    encoding: 'utf8',
    content: rewardScript(record.hook_code),
    mode: 0o755,
  });
  const metadata: Record<string, unknown> = { category: '', grading_type: 'automated' };
  if (pythonTruthy(record.rule)) metadata.rule = record.rule;
  const clawgym: ClawGymProvenance = {
    entryKeys: ['task_id', 'user_query', 'metadata', ...(files.length > 0 ? ['input_mount_dir'] : [])],
    // persona2task's fields ride along as skill2task's entry keys, so the folder keeps them.
    extra: Object.fromEntries(
      (['validation_mode', 'reward_aggregation', 'rules'] as const)
        .filter((k) => record[k] !== undefined)
        .map((k) => [k, record[k]]),
    ),
    metadata,
    format: { indent: 2, ensureAscii: false, trailingNewline: true },
    inputDir: files.length > 0,
    emptyDirs: [],
    otherFiles: [],
  };
  return parseOrThrow(
    GymTask,
    {
      id,
      prompt: record.prompt,
      files,
      mountDir: WORKSPACE,
      verifier: { kind: 'script', files: verifierFiles, entry: 'reward/reward.sh' },
      rubric: rubricOf(record, where),
      ...(weights ? { weights } : {}),
      provenance: {
        source: 'clawgym',
        clawgym,
        synTask: {
          line: index + 1,
          hook_code: record.hook_code ?? null,
          origin_template: record.origin_template ?? null,
        },
      },
    },
    `${where} (${id})`,
  );
}

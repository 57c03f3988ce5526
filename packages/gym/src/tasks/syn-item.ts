import { parseOrThrow, ValidationError } from '@stepwise/core';
import { z } from 'zod';
import type { ClawGymProvenance } from './clawgym.js';
import { DEFAULT_MOUNT_DIR, GymTask, type TaskFile, type Verifier } from './schema.js';
import { rubricOf, validationModeOf, weightsOf } from './syn-rules.js';

// ClawGym-SynData's single-file task item (skill2task's JSONL form), made into the bundle SynData's own
// conversion makes: docs/gym-tasks.md#two-forms-on-disk

const ItemFile = z.looseObject({
  file_path: z.string().trim().min(1),
  file_format: z.string().trim().min(1),
  content: z.string(),
});

export const SynDataItem = z.looseObject({
  task_id: z.string().trim().min(1),
  prompt: z.string().trim().min(1),
  validation_mode: z.unknown().optional(),
  reward_aggregation: z.string().trim().min(1).optional(),
  hook_code: z.string().default(''),
  hook_lang: z.string().default(''),
  input_files: z.array(ItemFile),
  reward_files: z.array(ItemFile),
  bundle_name: z.string().trim().min(1).optional(),
  input_mount_dir: z.string().trim().min(1).optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  data_entry_extra: z.record(z.string(), z.unknown()).optional(),
});

/** A JSONL value in SynData's single-file form: a task_id and a prompt (and no GymTask keys). */
export function isSynDataItem(value: unknown): boolean {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  return 'task_id' in value && 'prompt' in value && !('verifier' in value) && !('id' in value);
}

const TOKENS = { input: '{{input_dir}}', reward: '{{reward_dir}}' } as const;

/**
 * A single-file path as a path under its bundle folder: `{{input_dir}}/x`, `input/x` and an absolute
 * `/…/input/x` are `x` (likewise for `reward`), as SynData maps them.
 */
export function bundleSuffix(filePath: string, root: 'input' | 'reward', field: string): string {
  const token = TOKENS[root];
  let parts: string[];
  if (filePath === token || filePath.startsWith(`${token}/`)) {
    parts = filePath.slice(token.length).split('/');
  } else if (filePath.startsWith('/')) {
    const all = filePath.split('/').filter((p) => p !== '');
    const at = all.indexOf(root);
    if (at < 0) throw new ValidationError(`${field}: an absolute path must include /${root}/`, field);
    parts = all.slice(at + 1);
  } else {
    const all = filePath.split('/').filter((p) => p !== '' && p !== '.');
    if (all[0] !== root) throw new ValidationError(`${field}: must be under ${root}/ or ${token}/`, field);
    parts = all.slice(1);
  }
  parts = parts.filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new ValidationError(`${field}: must not leave its folder`, field);
  if (parts.length === 0) throw new ValidationError(`${field}: must name a file under ${root}/`, field);
  return parts.join('/');
}

/** One single-file item as the GymTask of the bundle SynData writes for it. */
export function synDataItemToGymTask(value: unknown, where: string): GymTask {
  const item = parseOrThrow(SynDataItem, value, where);
  const at = (f: string) => `${where}: ${f}`;
  const mode = validationModeOf(item.validation_mode ?? 'code', at('validation_mode'));
  const code = mode !== 'rubric';
  const rubric = rubricOf(item, where);
  if (code && (item.hook_code.trim() === '' || item.hook_lang.trim() === ''))
    throw new ValidationError(
      `${at('hook_code')}: ${mode} validation needs hook_code and hook_lang`,
      'hook_code',
    );
  if (!code && (item.hook_code.trim() !== '' || item.hook_lang.trim() !== ''))
    throw new ValidationError(`${at('hook_code')}: a rubric-only item has no hook`, 'hook_code');
  if (mode !== 'code' && rubric.length === 0)
    throw new ValidationError(`${at('rules')}: ${mode} validation needs rules`, 'rules');
  if (mode === 'code' && rubric.length > 0)
    throw new ValidationError(`${at('rules')}: code-only validation has no rules`, 'rules');
  // SynData builds reward.sh only for bash hooks.
  if (code && item.hook_lang.trim().toLowerCase() !== 'bash')
    throw new ValidationError(`${at('hook_lang')}: only bash hooks have a folder form`, 'hook_lang');
  const weights = weightsOf(item.reward_aggregation, mode, at('reward_aggregation'));
  const mountDir = item.input_mount_dir ?? DEFAULT_MOUNT_DIR;
  if (!mountDir.startsWith('/'))
    throw new ValidationError(`${at('input_mount_dir')}: must be an absolute path here`, 'input_mount_dir');

  const files: TaskFile[] = item.input_files.map((f, i) => ({
    path: bundleSuffix(f.file_path, 'input', at(`input_files.${i}.file_path`)),
    encoding: 'utf8',
    content: f.content,
  }));
  // reward.sh first, then the item's reward files; a later file of one path replaces an earlier one.
  const reward = new Map<string, TaskFile>();
  if (code)
    reward.set('reward/reward.sh', {
      path: 'reward/reward.sh',
      encoding: 'utf8',
      content: `#!/bin/bash\n${item.hook_code.trimEnd()}\n`,
      mode: 0o755,
    });
  item.reward_files.forEach((f, i) => {
    const path = `reward/${bundleSuffix(f.file_path, 'reward', at(`reward_files.${i}.file_path`))}`;
    reward.set(path, {
      path,
      encoding: 'utf8',
      content: f.content,
      ...(path === 'reward/reward.sh' ? { mode: 0o755 } : {}),
    });
  });
  const verifier: Verifier = code
    ? { kind: 'script', files: [...reward.values()], entry: 'reward/reward.sh', timeoutMs: 120_000 }
    : { kind: 'none' };

  const entry: Record<string, unknown> = {
    task_id: item.task_id,
    user_query: item.prompt,
    validation_mode: mode,
    reward_aggregation: item.reward_aggregation ?? null,
    rules: (item as Record<string, unknown>).rules ?? (item as Record<string, unknown>).rubrics ?? [],
    ...(item.input_mount_dir !== undefined ? { input_mount_dir: item.input_mount_dir } : {}),
    ...(item.metadata !== undefined ? { metadata: item.metadata } : {}),
    ...(item.data_entry_extra ?? {}),
  };
  if (item.reward_aggregation === undefined) delete entry.reward_aggregation;
  const { task_id: _t, user_query: _u, input_mount_dir: _i, metadata: _m, ...extra } = entry;
  const clawgym: ClawGymProvenance = {
    entryKeys: Object.keys(entry),
    extra,
    ...(item.metadata !== undefined ? { metadata: item.metadata } : {}),
    // SynData writes data_entry.json with indent 2, non-ASCII as is, and a final newline.
    format: { indent: 2, ensureAscii: false, trailingNewline: true },
    inputDir: files.length > 0,
    emptyDirs: [],
    otherFiles: code ? [] : [...reward.values()],
  };
  const category = typeof item.metadata?.category === 'string' ? item.metadata.category : '';
  return parseOrThrow(
    GymTask,
    {
      id: item.task_id,
      prompt: item.prompt,
      files,
      mountDir,
      verifier,
      rubric,
      ...(weights ? { weights } : {}),
      category,
      provenance: {
        source: 'clawgym',
        clawgym,
        synData: {
          hook_code: item.hook_code,
          hook_lang: item.hook_lang,
          bundle_name: item.bundle_name ?? null,
        },
      },
    },
    `${where} (${item.task_id})`,
  );
}

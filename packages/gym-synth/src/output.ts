import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ValidationError } from '@stepwise/core';
import type { GymTask } from '@stepwise/gym';
import { TASKS_FILE, writeClawGymFolder, writeTasksJsonl } from '@stepwise/gym';
import { toClawGymTask } from './folder.js';
import { contentHash, SYNTH_VERSION, type SynthSeed, TEMPLATES } from './index.js';

/*
 * Writing a synthesized task set: `tasks.jsonl` (one GymTask per line) or one ClawGym folder per task,
 * and beside it `manifest.json` (n, seed, counts per category / template / difficulty, and a content
 * hash over the tasks that does not depend on the format).
 */

export const SYNTH_FORMATS = ['jsonl', 'folders'] as const;
export type SynthFormat = (typeof SYNTH_FORMATS)[number];
export const MANIFEST_FILE = 'manifest.json';
export { TASKS_FILE };

export interface SynthManifest {
  kind: 'stepwise.gym.synth';
  generator: { name: 'stepwise-synth'; version: number };
  n: number;
  seed: SynthSeed;
  format: SynthFormat;
  counts: {
    by_category: Record<string, number>;
    by_template: Record<string, number>;
    by_difficulty: Record<string, number>;
  };
  templates_used: number;
  templates_available: number;
  /** sha256 over the tasks as canonical JSONL lines (the same for both formats). */
  content_hash: string;
  /** What was written: tasks.jsonl with its digest, or the task folders. */
  files: Array<{ path: string; sha256?: string; bytes?: number }>;
}

function countBy(tasks: readonly GymTask[], key: (t: GymTask) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const t of tasks) out[key(t)] = (out[key(t)] ?? 0) + 1;
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

export function manifestOf(
  tasks: readonly GymTask[],
  seed: SynthSeed,
  format: SynthFormat,
): Omit<SynthManifest, 'files'> {
  const byTemplate = countBy(tasks, (t) => String(t.provenance.template ?? 'unknown'));
  return {
    kind: 'stepwise.gym.synth',
    generator: { name: 'stepwise-synth', version: SYNTH_VERSION },
    n: tasks.length,
    seed,
    format,
    counts: {
      by_category: countBy(tasks, (t) => t.category),
      by_template: byTemplate,
      by_difficulty: countBy(tasks, (t) => t.difficulty ?? 'unknown'),
    },
    templates_used: Object.keys(byTemplate).length,
    templates_available: TEMPLATES.length,
    content_hash: `sha256:${contentHash(tasks)}`,
  };
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** Refuses an `--out` that exists and is not an empty directory: nothing of an earlier run is overwritten. */
export async function checkOutDir(dir: string): Promise<void> {
  let st: Awaited<ReturnType<typeof stat>>;
  try {
    st = await stat(dir);
  } catch {
    return;
  }
  if (!st.isDirectory()) throw new ValidationError(`out: ${dir} is not a directory`, 'out');
  if ((await readdir(dir)).length > 0) throw new ValidationError(`out: ${dir} is not empty`, 'out');
}

export interface WriteOptions {
  tasks: readonly GymTask[];
  outDir: string;
  format: SynthFormat;
  seed: SynthSeed;
  onProgress?: (done: number, total: number) => void;
}

export async function writeSynthOutput(options: WriteOptions): Promise<SynthManifest> {
  const { tasks, outDir, format } = options;
  await checkOutDir(outDir);
  await mkdir(outDir, { recursive: true });
  const files: SynthManifest['files'] = [];
  if (format === 'jsonl') {
    const path = join(outDir, TASKS_FILE);
    let done = 0;
    await writeTasksJsonl(
      path,
      (function* () {
        for (const t of tasks) {
          yield t;
          options.onProgress?.(++done, tasks.length);
        }
      })(),
    );
    files.push({ path: TASKS_FILE, sha256: await sha256File(path), bytes: (await stat(path)).size });
  } else {
    for (const [i, task] of tasks.entries()) {
      await writeClawGymFolder(toClawGymTask(task), join(outDir, task.id));
      files.push({ path: `${task.id}/` });
      options.onProgress?.(i + 1, tasks.length);
    }
  }
  const manifest: SynthManifest = { ...manifestOf(tasks, options.seed, format), files };
  await writeFile(join(outDir, MANIFEST_FILE), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

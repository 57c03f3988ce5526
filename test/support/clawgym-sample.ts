import { existsSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The 40 real ClawGym tasks, read where they are: `STEPWISE_CLAWGYM_SAMPLE`, else
 * `../shared/clawgym-sample/tasks` from the repository root, else the machine's `/work/shared` copy
 * (a checkout elsewhere, e.g. CI's clean clone). Tests fail, not skip, when none exists.
 */
const candidates = [
  process.env.STEPWISE_CLAWGYM_SAMPLE,
  join(import.meta.dirname, '..', '..', '..', 'shared', 'clawgym-sample', 'tasks'),
  '/work/shared/clawgym-sample/tasks',
].filter((p): p is string => typeof p === 'string' && p !== '');

export const CLAWGYM_SAMPLE: string = candidates.find((p) => existsSync(p)) ?? candidates[0]!;

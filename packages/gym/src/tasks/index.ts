import { mkdir, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ValidationError } from '@stepwise/core';
import { INPUT_DIR, isClawGymFolder, readClawGymFolder } from './clawgym.js';
import { makeDirs, writeTaskFiles } from './files.js';
import { readTasksJsonl, TASKS_FILE } from './jsonl.js';
import type { GymTask } from './schema.js';

export {
  ClawGymProvenance,
  entryTextOf,
  isClawGymFolder,
  readClawGymFolder,
  writeClawGymFolder,
} from './clawgym.js';
export { taskFileBytes, taskFileFromBytes } from './files.js';
export {
  parseTaskLine,
  readTasksJsonl,
  TASKS_FILE,
  TaskLineError,
  taskToJsonLine,
  writeTasksJsonl,
} from './jsonl.js';
export { referenceTasks } from './reference.js';
export * from './schema.js';

/** What a task-set argument may name, for --help (every command reads it with loadTasks). */
export const TASK_SET_HELP =
  'a task set: a JSONL file, a folder holding tasks.jsonl (what gym synth --out writes), a ClawGym task folder or a folder of them';

// Folders are read a few at a time: each read touches every file of the task.
const LOAD_CONCURRENCY = 8;

function refuseDuplicates(tasks: readonly GymTask[], source: string): void {
  const seen = new Set<string>();
  for (const task of tasks) {
    if (seen.has(task.id)) throw new ValidationError(`${source}: task id ${task.id} appears twice`, 'id');
    seen.add(task.id);
  }
}

async function loadFolders(dirs: readonly string[]): Promise<GymTask[]> {
  const tasks: GymTask[] = new Array(dirs.length);
  let next = 0;
  const worker = async () => {
    while (next < dirs.length) {
      const i = next++;
      tasks[i] = await readClawGymFolder(dirs[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(LOAD_CONCURRENCY, dirs.length) }, worker));
  return tasks;
}

async function readJsonl(path: string): Promise<GymTask[]> {
  const tasks: GymTask[] = [];
  for await (const task of readTasksJsonl(path)) tasks.push(task);
  return tasks;
}

/** The ClawGym task folders directly inside `dir`, sorted by name. */
async function taskFoldersIn(dir: string): Promise<string[]> {
  const dirs: string[] = [];
  for (const entry of (await readdir(dir, { withFileTypes: true })).sort((a, b) =>
    a.name < b.name ? -1 : 1,
  )) {
    if (entry.isDirectory() && (await isClawGymFolder(join(dir, entry.name))))
      dirs.push(join(dir, entry.name));
  }
  return dirs;
}

/**
 * Loads tasks from a JSONL file (in file order), a task-set folder holding `tasks.jsonl` (what
 * `gym synth --out DIR` writes), a single ClawGym task folder, or a directory of task folders (sorted
 * by id; entries without a data_entry.json are ignored). Duplicate ids are refused.
 */
export async function loadTasks(source: string): Promise<GymTask[]> {
  const st = await stat(source).catch(() => {
    throw new ValidationError(`${source}: no such file or directory`, 'source');
  });
  let tasks: GymTask[];
  if (st.isFile()) {
    tasks = await readJsonl(source);
  } else if (await isClawGymFolder(source)) {
    tasks = [await readClawGymFolder(source)];
  } else {
    const dirs = await taskFoldersIn(source);
    const jsonl = join(source, TASKS_FILE);
    const hasJsonl = await stat(jsonl).then(
      (s) => s.isFile(),
      () => false,
    );
    // Both forms in one folder would be two task sets: which one was meant is the user's call.
    if (hasJsonl && dirs.length > 0) {
      throw new ValidationError(
        `${source}: holds both ${TASKS_FILE} and ${dirs.length} task folder(s); name the one to read (${jsonl} or a task folder)`,
        'source',
      );
    }
    if (hasJsonl) tasks = await readJsonl(jsonl);
    else if (dirs.length > 0)
      tasks = (await loadFolders(dirs)).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    else
      throw new ValidationError(
        `${source}: neither a JSONL file, a folder with ${TASKS_FILE}, a task folder nor a folder of tasks`,
        'source',
      );
  }
  refuseDuplicates(tasks, source);
  return tasks;
}

/** Empty directories of the task's starting workspace (ClawGym folders may carry some). */
function workspaceEmptyDirs(task: GymTask): string[] {
  const clawgym = task.provenance.clawgym as { emptyDirs?: unknown } | undefined;
  const dirs = Array.isArray(clawgym?.emptyDirs) ? clawgym.emptyDirs : [];
  const prefix = `${INPUT_DIR}/`;
  return dirs
    .filter((d): d is string => typeof d === 'string' && d.startsWith(prefix))
    .map((d) => d.slice(prefix.length));
}

/**
 * Materializes a task's starting workspace at `hostDir` (created; it must be absent or empty so that
 * nothing of an earlier episode leaks in): the task's files with their modes. Returns `hostDir`; the
 * caller owns it. The verifier's files are not written: the agent must never see them.
 */
export async function workspaceFor(task: GymTask, hostDir: string): Promise<string> {
  await mkdir(hostDir, { recursive: true });
  if ((await readdir(hostDir)).length > 0) {
    throw new ValidationError(`${hostDir}: a fresh workspace must be absent or empty`, 'workspace');
  }
  await writeTaskFiles(hostDir, task.files);
  await makeDirs(hostDir, workspaceEmptyDirs(task));
  return hostDir;
}

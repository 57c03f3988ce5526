import { once } from 'node:events';
import { createReadStream, createWriteStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { finished } from 'node:stream/promises';
import { ValidationError } from '@stepwise/core';
import { GymTask } from './schema.js';
import { isSynDataItem, synDataItemToGymTask } from './syn-item.js';
import { isSynTaskRecord, synTaskToGymTask } from './syn-task.js';

/*
 * The JSONL form of a task set: one GymTask per line (blank lines are skipped). Reading streams line by
 * line; an error names the file, the line number, the field and the rule it broke.
 */

/** The task file of a task-set folder (what `gym synth --out DIR` writes): DIR/tasks.jsonl. */
export const TASKS_FILE = 'tasks.jsonl';

/** A task line that does not parse; `line` is 1-based. */
export class TaskLineError extends ValidationError {
  constructor(
    message: string,
    field: string | undefined,
    readonly line: number,
  ) {
    super(message, field);
  }
}

/**
 * Parses one JSONL line into a GymTask (defaults filled in). A line in ClawGym-SynData's syn_task form
 * is converted (syn-task.ts); `record` is its 0-based index among the file's records (its default id).
 */
export function parseTaskLine(text: string, line: number, source = 'tasks', record = line - 1): GymTask {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new TaskLineError(
      `${source} line ${line}: not valid JSON (${(err as Error).message})`,
      undefined,
      line,
    );
  }
  if (isSynTaskRecord(value) || isSynDataItem(value)) {
    try {
      return isSynDataItem(value)
        ? synDataItemToGymTask(value, `${source} line ${line}`)
        : synTaskToGymTask(value, record, `${source} line ${line}`);
    } catch (err) {
      const field = (err as { field?: string }).field;
      throw new TaskLineError((err as Error).message, field, line);
    }
  }
  const result = GymTask.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const field = issue && issue.path.length > 0 ? issue.path.map(String).join('.') : '(task)';
  throw new TaskLineError(
    `${source} line ${line}: ${field}: ${issue?.message ?? 'invalid task'}`,
    field,
    line,
  );
}

/** Streams the tasks of a JSONL file, one at a time. */
export async function* readTasksJsonl(path: string): AsyncGenerator<GymTask> {
  const input = createReadStream(path, { encoding: 'utf8' });
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  let n = 0;
  let records = 0;
  try {
    for await (const text of lines) {
      n++;
      if (text.trim() === '') continue;
      yield parseTaskLine(text, n, path, records++);
    }
  } finally {
    lines.close();
    input.destroy();
  }
}

/** One task as a JSONL line (no newline); the task is validated first. */
export function taskToJsonLine(task: GymTask): string {
  const result = GymTask.safeParse(task);
  if (!result.success) {
    const issue = result.error.issues[0];
    const field = issue?.path.map(String).join('.') || '(task)';
    throw new ValidationError(`task ${String(task.id)}: ${field}: ${issue?.message ?? 'invalid'}`, field);
  }
  return JSON.stringify(result.data);
}

/** Writes tasks to a JSONL file (replacing it); returns the number written. */
export async function writeTasksJsonl(
  path: string,
  tasks: Iterable<GymTask> | AsyncIterable<GymTask>,
): Promise<number> {
  const out = createWriteStream(path, { encoding: 'utf8' });
  let count = 0;
  try {
    for await (const task of tasks) {
      if (!out.write(`${taskToJsonLine(task)}\n`)) await once(out, 'drain');
      count++;
    }
    out.end();
    await finished(out);
  } catch (err) {
    out.destroy();
    throw err;
  }
  return count;
}

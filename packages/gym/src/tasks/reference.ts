import type { ReferenceTask } from '@stepwise/core';
import type { GymTask } from './schema.js';

/** The reference actions of the tasks that have them, for the sim's `reference` policy. */
export function referenceTasks(tasks: readonly GymTask[]): ReferenceTask[] {
  return tasks
    .filter((t) => t.referenceActions && t.referenceActions.length > 0)
    .map((t) => ({ prompt: t.prompt, actions: t.referenceActions! }));
}

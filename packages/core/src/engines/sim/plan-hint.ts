/*
 * Reading a plan out of a prompt, for sim policies that "need" one (the reference policy's `needsPlan`):
 * a guided prompt lists the first actions of a solution as numbered lines, `1. read: {"path": "a"}`
 * (ActGuide-RL's hint format). The sim is not a model and does not read the plan's arguments: a step
 * counts as shown when a line starts with its number and its tool's name.
 */

/** How many of `actions`, from the first, the text's numbered plan lines show. */
export function shownPlanSteps(text: string, actions: readonly { name: string }[]): number {
  const lines = text.split('\n').map((l) => l.trim());
  let shown = 0;
  for (const [i, action] of actions.entries()) {
    const prefix = `${i + 1}. ${action.name}: `;
    if (!lines.some((l) => l.startsWith(prefix))) break;
    shown = i + 1;
  }
  return shown;
}

/** Steps a plan must show before an episode can finish: ⌈share × n⌉ (within 1e-9 of an integer, that integer). */
export function neededPlanSteps(n: number, share: number): number {
  return Math.max(0, Math.min(n, Math.ceil(n * share - 1e-9)));
}

import type { Step } from '../domain/index.js';

/*
 * The drift report (`GET /v1/stats/drift`, docs/gateway.md#token-continuity): per model, how often a
 * step's prompt failed to extend the previous step's prompt + response (a prefix break), how many
 * tokens the engine had to prefill again because of it, and how token continuity took the calls.
 */

export interface ModelDrift {
  /** The engine's model name (`served_model`), else the agent's (`model`), else `unknown`. */
  model: string;
  trajectories: number;
  steps: number;
  prefix_breaks: number;
  /** Over the breaks: the tokens of the previous prompt + response the next prompt does not share. */
  reprefilled_tokens: number;
  /** Steps by how token continuity took them (`continued` or a fallback reason); empty when off. */
  continuity: Record<string, number>;
}

type DriftStep = Pick<Step, 'index' | 'promptIds' | 'responseIds' | 'metadata'>;

const modelOf = (step: DriftStep): string => {
  const { served_model: served, model } = step.metadata;
  return typeof served === 'string' ? served : typeof model === 'string' ? model : 'unknown';
};

/** How many leading ids `a` shares with `b`. */
function sharedPrefix(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** Tallies trajectories one at a time (so a report holds one trajectory's ids at once). */
export class DriftTally {
  private readonly models = new Map<string, ModelDrift>();

  /** One trajectory's steps, in index order. */
  add(steps: readonly DriftStep[]): void {
    const seen = new Set<string>();
    steps.forEach((step, i) => {
      const name = modelOf(step);
      let row = this.models.get(name);
      if (!row) {
        row = {
          model: name,
          trajectories: 0,
          steps: 0,
          prefix_breaks: 0,
          reprefilled_tokens: 0,
          continuity: {},
        };
        this.models.set(name, row);
      }
      if (!seen.has(name)) {
        seen.add(name);
        row.trajectories++;
      }
      row.steps++;
      const outcome = step.metadata.token_continuity;
      if (typeof outcome === 'string') row.continuity[outcome] = (row.continuity[outcome] ?? 0) + 1;
      const before = i > 0 ? steps[i - 1]! : null;
      if (before === null || before.index !== step.index - 1) return;
      const previous = [...before.promptIds, ...before.responseIds];
      const shared = sharedPrefix(step.promptIds, previous);
      if (shared < previous.length) {
        row.prefix_breaks++;
        row.reprefilled_tokens += previous.length - shared;
      }
    });
  }

  /** Per model, by name. */
  report(): ModelDrift[] {
    return [...this.models.values()].sort((a, b) => (a.model < b.model ? -1 : a.model > b.model ? 1 : 0));
  }
}

/**
 * The report over trajectories' steps (each trajectory's in index order). A step counts for its own
 * model; a break is judged between consecutive indexes, as the store counts `prefix_breaks`: the
 * step's prompt does not start with the previous prompt + response.
 */
export function driftReport(trajectories: readonly (readonly DriftStep[])[]): ModelDrift[] {
  const tally = new DriftTally();
  for (const steps of trajectories) tally.add(steps);
  return tally.report();
}

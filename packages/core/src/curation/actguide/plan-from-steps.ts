import type { Step } from '../../domain/step.js';
import type { PlanAction } from './hint.js';

/*
 * Action data from a stored trajectory: the tool calls a successful rollout made, in order, as a plan
 * for guiding later rollouts of the same task (ActGuide-RL uses any action data: reference solutions,
 * or trajectories that solved the task). Calls that failed are not part of the plan: a call whose tool
 * result is flagged as an error, or whose arguments are not a JSON object.
 */

export type PlanSourceStep = Pick<Step, 'index' | 'toolCalls' | 'toolResults'>;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

function parseArguments(raw: unknown): Record<string, unknown> | null {
  if (isObject(raw)) return raw;
  if (typeof raw !== 'string') return null;
  try {
    const parsed: unknown = JSON.parse(raw);
    return isObject(parsed) ? parsed : null;
  } catch {
    return null;
  }
}

/** The successful tool calls of a trajectory's steps, in step order. */
export function planFromSteps(steps: readonly PlanSourceStep[]): PlanAction[] {
  const plan: PlanAction[] = [];
  for (const step of [...steps].sort((a, b) => a.index - b.index)) {
    const failed = new Set(
      (step.toolResults ?? []).filter((r) => r.error && r.tool_call_id).map((r) => r.tool_call_id),
    );
    for (const call of step.toolCalls ?? []) {
      const fn = isObject(call.function) ? call.function : null;
      if (!fn || typeof fn.name !== 'string' || fn.name === '') continue;
      if (typeof call.id === 'string' && failed.has(call.id)) continue;
      const args = parseArguments(fn.arguments);
      if (args === null) continue;
      plan.push({ name: fn.name, arguments: args });
    }
  }
  return plan;
}

import type { Trajectory } from '../domain/index.js';

/**
 * What the API asks of this process's LLM gateway (packages/core/src/gateway), when it runs one: the gateway
 * implements it, the server passes it in, and no API module depends on the gateway itself.
 */
export interface LiveGateway {
  /** Completes a trajectory once its captured steps are written. */
  completeTrajectory(
    id: string,
    input: { reward: number | null; status?: 'complete' | 'aborted' | 'infra_failed' },
  ): Promise<Trajectory>;
  /** Sets the policy version; with `drain`, once the running generations finish (or time out). */
  setPolicyVersion(version: number, drain: boolean): Promise<{ waitedMs: number; timedOut: boolean }>;
  /** Switches the engines' weights and the version together (gateway/weight-switch.ts). */
  switchWeights(request: {
    version: number;
    mode: 'abort' | 'keep' | 'wait';
    weights: { path: string } | { update_info: Record<string, unknown> } | null;
  }): Promise<object>;
  /** This process's gateway counters. */
  stats(): object;
}

import type { RewardPlugin } from '../plugin.js';
import { humanPlugin } from './human.js';
import { judgeGroupPlugin, judgePlugin } from './judge.js';
import { rmPlugin } from './rm.js';
import { rulePlugin, ruleStepPlugin } from './rule.js';

export { HUMAN_SCORE_SIGNAL, HumanFeedback, recordHumanFeedback, USER_FEEDBACK_SIGNAL } from './human.js';
export { bandToScore, DEFAULT_BANDS, parseBand, parseGroupBands } from './judge.js';
export { readScore } from './rm.js';
export { lastNumber, matchText } from './rule.js';

/**
 * The plugins the core ships, by name (a fresh map: callers add their own; the CLI adds the gym's
 * `verifier`).
 */
export function builtinPlugins(): Map<string, RewardPlugin<unknown>> {
  const plugins = [rulePlugin, ruleStepPlugin, judgePlugin, judgeGroupPlugin, rmPlugin, humanPlugin];
  return new Map(plugins.map((p) => [p.manifest.name, p as RewardPlugin<unknown>]));
}

import { builtinPlugins } from '@stepwise/core/rewards/index.js';
import type { RewardPlugin } from '@stepwise/core/rewards/plugin.js';
import { verifierPlugin } from '@stepwise/gym';

/** The reward plugins the CLI serves: the core's, and the gym's `verifier` (the core cannot import the gym). */
export function rewardPlugins(): Map<string, RewardPlugin<unknown>> {
  const plugins = builtinPlugins();
  plugins.set(verifierPlugin.manifest.name, verifierPlugin as RewardPlugin<unknown>);
  return plugins;
}

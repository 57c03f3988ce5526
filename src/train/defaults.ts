// The defaults of `stepwise train` (src/train/loop.ts), shared with its command line and its outputs.

/**
 * Adam steps every weight by about `lr`, however small its gradient: at 1e-8 (torch's default) the
 * whole tied 151k-id LM head moved with each update and RL at 2e-3 broke the policy (docs/trainers.md).
 */
export const DEFAULT_ADAM_EPS = 1e-5;
/**
 * The RL updates' learning rate. At 2e-3 a single update late in a run, on a batch of mostly solved
 * groups, now and then undid most of what the run had learned (docs/trainers.md, "The learning rate").
 */
export const DEFAULT_LR = 1e-3;
/** PPO clip range: each version may move a token's probability by at most this factor of it. */
export const DEFAULT_CLIP = 0.2;
/** Tasks (groups) per round when not given. */
export const DEFAULT_GROUPS = 8;
/** Tasks of each kind in a registered set: 48 prompts in the mixed set, 6 rounds of 8 groups. */
export const DEFAULT_PROMPTS_PER_KIND = 16;

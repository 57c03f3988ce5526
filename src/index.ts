/*
 * The package entry: what other programs import from `stepwise` (the CLI is `bin/stepwise.js`).
 * The SDK for agents and trainers, and the data operators as plain functions.
 */

export {
  chooseGuidanceK,
  isHardGroup,
  planFromSteps,
  promptViews,
  renderHint,
} from '@stepwise/core/curation/actguide/index.js';
export {
  callSimilarity,
  purifyStore,
  purifyTrajectory,
  SaarSession,
  sequenceRatio,
  toolCallText,
} from '@stepwise/core/curation/cleaner/index.js';
export { curateGroup, repetitionFraction } from '@stepwise/core/curation/pipeline.js';
export {
  ChannelConfig,
  type ChannelCuration,
  DEFAULT_CHANNEL_CONFIG,
} from '@stepwise/core/domain/channel.js';
export {
  type BinaryBatch,
  type BinaryLeaseOptions,
  type InitTrajectoryOptions,
  type InitTrajectoryResult,
  type LeaseOptions,
  StepwiseClient,
  type StepwiseClientOptions,
  StepwiseHttpError,
} from '@stepwise/core/sdk/client.js';

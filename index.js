// The package entry for plain Node: registers tsx (a dependency) and re-exports src/index.ts, the
// same way bin/stepwise.js runs the CLI, so the installed package always matches its source.
import { register } from 'tsx/esm/api';

register();
const api = await import('./src/index.ts');

export const {
  chooseGuidanceK,
  isHardGroup,
  planFromSteps,
  promptViews,
  renderHint,
  callSimilarity,
  purifyStore,
  purifyTrajectory,
  SaarSession,
  sequenceRatio,
  toolCallText,
  curateGroup,
  repetitionFraction,
  StepwiseClient,
  StepwiseHttpError,
  ChannelConfig,
  DEFAULT_CHANNEL_CONFIG,
} = api;

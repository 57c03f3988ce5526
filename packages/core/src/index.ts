/*
 * @stepwise/core's public API: what the gym, the synthesis and other programs may import. The CLI is
 * the composition root and reaches modules by path (`@stepwise/core/<module>.js`); a package built on
 * the core imports from here only (test/import-graph.test.ts holds that).
 */

export {
  chooseGuidanceK,
  GUIDE_STRATEGIES,
  GuidanceConfig,
  type GuidanceConfigInput,
  type GuidanceProbe,
  type GuideStrategy,
  guidedPrompt,
  INJECTION_MODES,
  type InjectionMode,
  isHardGroup,
  jsonTextAt,
  type PlanAction,
  planFromSteps,
  promptViews,
  renderHint,
} from './curation/actguide/index.js';
export { toolCallStart } from './curation/cleaner/graft.js';
export {
  callSimilarity,
  purifyStore,
  purifyTrajectory,
  SaarSession,
  sequenceRatio,
  toolCallText,
} from './curation/cleaner/index.js';
export {
  type CleanerReport,
  chatTurn,
  cleanerMetadata,
  type RepairRecord,
  repairedAssistantMessage,
} from './curation/cleaner/report.js';
export { CleanerOptions, type ToolResultsDecision, withRetryNote } from './curation/cleaner/saar.js';
export { curateGroup, repetitionFraction } from './curation/pipeline.js';
export { ChannelConfig, type ChannelCuration, DEFAULT_CHANNEL_CONFIG } from './domain/channel.js';
export {
  fromZodError,
  NotFoundError,
  parseOrThrow,
  StepwiseError,
  ValidationError,
} from './domain/errors.js';
export type { Evidence, EvidenceEntry, EvidenceSummary } from './domain/evidence.js';
export { JsonObject } from './domain/json.js';
export type { Signal, SignalInput, SignalWire } from './domain/signal.js';
export type { Trajectory } from './domain/trajectory.js';
export type { InjectedErrorKind, ReferenceTask } from './engines/sim/policies.js';
export { parseEngineSpec } from './engines/upstream.js';
export {
  definePlugin,
  errorMessage,
  NotApplicableError,
  RewardError,
  type RewardPlugin,
  type TrajectoryView,
} from './rewards/plugin.js';
export {
  type BinaryBatch,
  type BinaryLeaseOptions,
  type InitTrajectoryOptions,
  type InitTrajectoryResult,
  type LeaseOptions,
  type ScheduledPrompt,
  StepwiseClient,
  type StepwiseClientOptions,
  StepwiseHttpError,
} from './sdk/client.js';
export { redactUrl } from './store/postgres/connect.js';
export { createModelAdapter, type ModelAdapter, qwen3Adapter } from './text/model-adapter.js';
export { ModelAdapters, type ModelRef } from './text/model-ref.js';
export { KEEP_ALIVE_MS } from './util/http-server.js';
export { progressReporter } from './util/progress.js';
export { hashSeed, type Random, randomInt, seededRandom } from './util/random.js';

export {
  type Combination,
  CombinationEvalError,
  type CombinationNode,
  CombinationSyntaxError,
  type Evaluation,
  evaluateCombination,
  parseCombination,
  requiredSignalNames,
  type SignalRef,
} from './combination.js';
export {
  type CombinationRule,
  loadRewardsConfig,
  type RewardFunction,
  type RewardsConfig,
  RewardsConfigFile,
  resolveRewardsConfig,
  type Scoring,
  scoringFor,
  taskIdOf,
  type WorkerSettings,
} from './config.js';
export {
  type AttemptError,
  type EnqueueOutcome,
  type JobFilter,
  type JobKind,
  type JobRequest,
  type JobState,
  openPostgresRewardJobQueue,
  openRewardJobQueue,
  type PostgresRewardJobQueueOptions,
  type RewardJob,
  type RewardJobQueue,
  StoredRewardJobQueue,
} from './job-queue.js';
export {
  definePlugin,
  isRetryable,
  NotApplicableError,
  type RewardContext,
  RewardError,
  type RewardHandler,
  type RewardManifest,
  type RewardPlugin,
  type RewardScore,
  RewardTarget,
  RewardTimeoutError,
  type TrajectoryView,
  validateParams,
} from './plugin.js';
export * from './plugins/index.js';
export { ComputeRewardBody, computeRewardResponse, jobToWire, mountRewardRoutes } from './routes.js';
export {
  type ComputeRewardAnswer,
  type ComputeRewardOptions,
  type FunctionOutcome,
  type RecomputeRequest,
  type RequiredSignalsStatus,
  RewardService,
  type RewardServiceOptions,
  requiredSignalsStatus,
} from './service.js';
export { type JobOutcome, type JobRunner, RewardWorkers, type RewardWorkersOptions } from './workers.js';

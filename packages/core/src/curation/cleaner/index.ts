/* CLEANER (arXiv 2601.15141): similarity-aware rollback of self-corrected tool errors. See docs/cleaner.md. */

export {
  derivedTrajectoryId,
  type PurifiedEntry,
  type PurifyStoreOptions,
  type PurifySummary,
  purifyStore,
} from './derive.js';
export {
  defaultToolCallTokenId,
  type GraftRecord,
  type GraftRepair,
  graftTokenId,
  type ModelOfStep,
  type OnlineCleaner,
  onlineCleaner,
  onlineRepairs,
  TOOL_CALL_TOKEN,
  type TrainingView,
  toolCallStart,
  trainingSteps,
  trainingView,
} from './graft.js';
export {
  type OfflineRepair,
  type PurifiableStep,
  type PurifiedDerivation,
  type PurifiedTrajectory,
  type PurifyOptions,
  purifyTrajectory,
} from './purify.js';
export {
  type ChatToolCall,
  type CleanerReport,
  chatTurn,
  cleanerMetadata,
  purifiedStepIndices,
  type RepairRecord,
  repairedAssistantMessage,
} from './report.js';
export {
  CLEANER_DEFAULTS,
  type CleanerMetrics,
  CleanerOptions,
  callSimilarity,
  finishSaar,
  initialSaarState,
  onAbandoned,
  onRegenerated,
  onToolResults,
  QWEN_EOS_TEXT,
  type RegenerationDecision,
  type RepairMode,
  type ResolvedCleanerOptions,
  type RollbackOffReason,
  resolveCleanerOptions,
  responseCallText,
  retryNote,
  SaarSession,
  type SaarState,
  type SaarToolCall,
  type SaarTurn,
  type ToolAttempt,
  type ToolResultsDecision,
  toolCallText,
  withRetryNote,
} from './saar.js';
export { findLongestMatch, type MatchingBlock, matchingBlocks, sequenceRatio } from './sequence-matcher.js';

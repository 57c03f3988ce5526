export {
  jsonForSchema,
  type ResponseFormatInput,
  resolveResponseFormat,
  resolveToolChoice,
  type SimToolChoice,
  structuredAnswer,
  type ToolChoiceInput,
} from './controls.js';
export {
  COMPLETIONS_DEFAULT_MAX_TOKENS,
  type SimChatRequest,
  type SimCompletionRequest,
  SimEngine,
  type SimEngineOptions,
  type SimGeneration,
  type SimResult,
  type SimTextResult,
  type SimUsage,
  type TopLogprob,
} from './engine.js';
export {
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChunkDelta,
  type CompletionLogprobs,
  finishReasonOf,
  type ResponseMeta,
  type TextCompletion,
  type TextCompletionChunk,
  type TimedChunk,
  toChatCompletion,
  toChatCompletionChunks,
  toTextCompletion,
  toTextCompletionChunks,
} from './format.js';
export { instantLatency, type LatencyModel, type LatencyModelOptions, latencyModel } from './latency.js';
export {
  assistantTurns,
  assistantTurnsInPrompt,
  echoPolicy,
  episodeSeed,
  type InjectedErrorKind,
  injectError,
  namedPolicies,
  type PastToolCall,
  type Policy,
  type PolicyContext,
  type PolicyOutput,
  type PolicyToolCall,
  pastTurnCalls,
  type RandomPolicyOptions,
  type ReferencePolicyOptions,
  type ReferenceTask,
  randomPolicy,
  referencePolicy,
  type ScriptedPolicyOptions,
  type ScriptSource,
  type ScriptStep,
  scriptedPolicy,
} from './policies.js';
export { buildSimApp, type RunningSimServer, type SimServerOptions, startSimServer } from './serve.js';
export { createSimApp, DEFAULT_SIM_MODEL, type SimAppOptions, type SimStreamEnd } from './server.js';
export { adaptCall } from './tool-adapter.js';

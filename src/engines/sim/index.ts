export {
  type SimChatRequest,
  SimEngine,
  type SimEngineOptions,
  type SimResult,
  type SimUsage,
  type TopLogprob,
} from './engine.js';
export {
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChunkDelta,
  finishReasonOf,
  type ResponseMeta,
  type TimedChunk,
  toChatCompletion,
  toChatCompletionChunks,
} from './format.js';
export { instantLatency, type LatencyModel, type LatencyModelOptions, latencyModel } from './latency.js';
export {
  assistantTurns,
  echoPolicy,
  type InjectedErrorKind,
  injectError,
  namedPolicies,
  type Policy,
  type PolicyContext,
  type PolicyOutput,
  type PolicyToolCall,
  type RandomPolicyOptions,
  randomPolicy,
  type ScriptedPolicyOptions,
  type ScriptSource,
  type ScriptStep,
  scriptedPolicy,
} from './policies.js';
export { type RunningSimServer, type SimServerOptions, startSimServer } from './serve.js';
export { createSimApp, DEFAULT_SIM_MODEL, type SimAppOptions, type SimStreamEnd } from './server.js';

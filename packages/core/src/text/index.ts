export {
  type ChatContent,
  ChatMessage,
  type ChatMessageInput,
  ChatTool,
  ChatToolCall,
  type ChatToolInput,
  type RenderChatInput,
  renderChat,
  tokenizeChat,
} from './chat-template.js';
export { contentText } from './content.js';
export {
  createModelAdapter,
  detectModelFamily,
  KNOWN_FAMILIES,
  type ModelAdapter,
  type ModelAdapterOptions,
  type ModelFamily,
  ModelFeatureError,
  qwen3Adapter,
} from './model-adapter.js';
export {
  createFolderTokenizer,
  loadModelFolder,
  type ModelFolder,
  ModelFolderError,
  selectChatTemplate,
} from './model-folder.js';
export {
  encodeSseComment,
  encodeSseDone,
  encodeSseEvent,
  formatSseEvent,
  isSseDone,
  SSE_DONE,
  SseDecoder,
  type SseDecoderOptions,
  type SseEvent,
  sseDecoderStream,
} from './sse.js';
export {
  type ChatTokenizer,
  type CompiledChatTemplate,
  type CreateTokenizerOptions,
  createChatTokenizer,
  type DecodeOptions,
  type EncodeOptions,
  loadQwen3Tokenizer,
} from './tokenizer.js';
export {
  newToolCallId,
  type ParsedCompletion,
  type ParseToolCallsOptions,
  parseToolCalls,
  randomToolCallId,
  renderCompletion,
  renderToolCalls,
  sequentialToolCallIds,
  type ToolCall,
  type ToolCallIdStyle,
  toTemplateJson,
} from './tool-calls.js';

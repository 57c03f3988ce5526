import { ValidationError } from '../../domain/errors.js';
import type { Step } from '../../domain/step.js';
import {
  type ChatMessageInput,
  type ChatTokenizer,
  loadQwen3Tokenizer,
  type RenderChatInput,
  tokenizeChat,
} from '../../text/index.js';

/** What renders a step's prompts: a model adapter (its family's template), or a bare Qwen3-style tokenizer. */
export type PromptRenderer = ChatTokenizer | { tokenize(input: RenderChatInput): number[] };

const tokenizeWith = (renderer: PromptRenderer, input: RenderChatInput): number[] =>
  'tokenize' in renderer ? renderer.tokenize(input) : tokenizeChat(input, renderer);

import { assistantPrefix, EMPTY_HINT, type InjectionMode, stripHint } from './hint.js';

// A guided step's two prompts: the behaviour prompt (with the hint, what the engine saw) and the training
// prompt (rebuilt without it, off-policy). docs/actguide.md#two-prompt-views

export interface StepPromptViews {
  /** What the engine saw: the stored prompt ids, hint included. */
  behaviourPromptIds: number[];
  /** The same conversation without the hint section, rendered with the chat template. */
  trainingPromptIds: number[];
  /** The generated ids, as stored. */
  responseIds: number[];
  /**
   * Rendering the stored messages reproduces `behaviourPromptIds` exactly: the template here is the
   * one the engine used, so the training view differs from the behaviour view by the hint alone.
   */
  behaviourReproduced: boolean;
}

export type GuidedStep = Pick<
  Step,
  'trajectoryId' | 'index' | 'promptIds' | 'responseIds' | 'messages' | 'tools' | 'metadata'
>;

type Content = ChatMessageInput['content'];

/** The content without the hint section, or null when the section is not in it. */
function contentWithoutHint(content: Content, hint: string): Content | null {
  if (typeof content === 'string') {
    const stripped = stripHint(content, hint);
    return stripped.removed ? stripped.text : null;
  }
  if (!Array.isArray(content)) return null;
  for (let i = 0; i < content.length; i++) {
    const part = content[i]!;
    if (typeof part.text !== 'string') continue;
    const stripped = stripHint(part.text, hint);
    if (stripped.removed) return content.map((p, j) => (j === i ? { ...p, text: stripped.text } : p));
  }
  return null;
}

/** The message's content as one string (text parts joined as the template joins them), or null. */
function contentText(content: Content): string | null {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return null;
  const texts = content.map((p) => p.text);
  return texts.every((t) => typeof t === 'string') ? texts.join('\n') : null;
}

/**
 * The step's conversation without the hint: in `user_prompt` mode the hint section taken out of the
 * first user message that holds it; in `assistant_prefix` mode the prefix message after it removed.
 */
export function messagesWithoutHint(
  step: GuidedStep,
  hint: string,
  mode: InjectionMode = 'user_prompt',
): ChatMessageInput[] {
  const where = `step ${step.index} of trajectory ${step.trajectoryId}`;
  if (!step.messages)
    throw new ValidationError(
      `${where} kept no chat messages: the training view is rebuilt from them`,
      'messages',
    );
  const messages = step.messages as unknown as ChatMessageInput[];
  if (mode === 'assistant_prefix') {
    // The hint None adds no prefix (as in the paper): the conversation is its own training view.
    if (hint === EMPTY_HINT) return messages;
    const prefix = assistantPrefix(hint);
    const user = messages.findIndex((m) => m.role === 'user');
    const at = messages.findIndex((m, i) => i > user && m.role === 'assistant');
    const text = at > 0 ? contentText(messages[at]!.content) : null;
    if (text === null || !text.startsWith(prefix))
      throw new ValidationError(`${where}: no assistant message opens with the hint prefix`, 'messages');
    // The first call's prefix is the open last message: without it the prompt asks for a new turn.
    if (at === messages.length - 1 && text === prefix) return messages.slice(0, at);
    // Later calls: the first reply opened with the prefix; the training view keeps the reply alone.
    return messages.map((m, i) => (i === at ? { ...m, content: text.slice(prefix.length) } : m));
  }
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role !== 'user') continue;
    const content = contentWithoutHint(m.content, hint);
    if (content !== null) return messages.map((x, j) => (j === i ? { ...x, content } : x));
  }
  throw new ValidationError(`${where}: no user message holds the hint section`, 'messages');
}

function enableThinking(metadata: GuidedStep['metadata']): boolean | undefined {
  const kwargs = metadata.chat_template_kwargs;
  if (typeof kwargs !== 'object' || kwargs === null || Array.isArray(kwargs)) return undefined;
  const value = (kwargs as Record<string, unknown>).enable_thinking;
  return typeof value === 'boolean' ? value : undefined;
}

/** Both prompt views of a guided step (see the module comment). */
export function promptViews(
  step: GuidedStep,
  hint: string,
  tokenizer: PromptRenderer = loadQwen3Tokenizer(),
  mode: InjectionMode = 'user_prompt',
): StepPromptViews {
  const training = messagesWithoutHint(step, hint, mode);
  const thinking = enableThinking(step.metadata);
  const render = (messages: readonly ChatMessageInput[], continueFinal: boolean) =>
    tokenizeWith(tokenizer, {
      messages,
      tools: (step.tools as never) ?? null,
      addGenerationPrompt: !continueFinal,
      continueFinalMessage: continueFinal,
      ...(thinking !== undefined ? { enableThinking: thinking } : {}),
    });
  // The engine continued the open prefix (metadata `continue_final_message`); the training view, the
  // prefix gone, opens the assistant's turn as an unguided rollout's prompt does.
  const behaviour = render(
    step.messages as unknown as ChatMessageInput[],
    step.metadata.continue_final_message === true,
  );
  return {
    behaviourPromptIds: step.promptIds,
    trainingPromptIds: render(training, false),
    responseIds: step.responseIds,
    behaviourReproduced:
      behaviour.length === step.promptIds.length && behaviour.every((id, i) => id === step.promptIds[i]),
  };
}

/**
 * The training prompt of a guided step as the gateway captures it, or why there is none: the hint is
 * not in the conversation, or this chat template does not reproduce what the engine saw (another
 * model's template), so a re-rendered prompt could not be trusted to differ by the hint alone.
 */
export function trainingPromptOf(
  step: GuidedStep,
  hint: string,
  tokenizer: PromptRenderer = loadQwen3Tokenizer(),
  mode: InjectionMode = 'user_prompt',
): { ids: number[]; problem: null } | { ids: null; problem: string } {
  let views: StepPromptViews;
  try {
    views = promptViews(step, hint, tokenizer, mode);
  } catch (error) {
    return { ids: null, problem: (error as Error).message };
  }
  if (!views.behaviourReproduced)
    return {
      ids: null,
      problem: 'the chat template does not reproduce the prompt the engine saw',
    };
  return { ids: views.trainingPromptIds, problem: null };
}

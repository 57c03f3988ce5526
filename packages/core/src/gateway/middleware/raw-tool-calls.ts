import { type NewStep, ValidationError } from '../../domain/index.js';
import type { CaptureTokenizer } from '../../services/capture-tokenizer.js';
import type { CompletionParts } from '../../text/adapter-text.js';
import { renderCompletion, type ToolCall } from '../../text/tool-calls.js';
import type { Answer } from '../answer.js';
import type { CallMiddleware } from '../call-context.js';
import { isObject } from '../call-request.js';
import type { RoutedCall } from '../capture.js';

/**
 * Raw tool-call text (`raw_tool_calls`, Claw-R1's gateway): a chat answer carries its tool calls and
 * reasoning as the text the model generated, in `content`. Offered for whole answers only: a stream
 * is refused, naming the field.
 */
export function rawToolCalls(tokenizing: Pick<CaptureTokenizer, 'decodeGenerated'>): CallMiddleware {
  return async (ctx, next) => {
    const { chat, session } = ctx;
    if (chat === null || !session.rawToolCalls) return next(ctx);
    if (chat.stream === true)
      throw new ValidationError(
        `stream: trajectory ${session.id} asks for raw tool-call text in content (raw_tool_calls), which is offered for whole answers only (stream: false, as Claw-R1's gateway answers)`,
        'stream',
      );
    let step: Pick<NewStep, 'responseIds' | 'tokenSource'> | null = null;
    ctx.stored.push((stored) => {
      step = stored;
    });
    const forward = ctx.forward;
    ctx.forward = async (call) => {
      const answer = await forward(call);
      return step === null ? answer : await rawAnswer(call, answer, step, tokenizing);
    };
    return next(ctx);
  };
}

/** A stored call's whole answer with its tool calls folded into `content` as generated. */
async function rawAnswer(
  call: RoutedCall,
  answer: Answer,
  step: Pick<NewStep, 'responseIds' | 'tokenSource'>,
  tokenizing: Pick<CaptureTokenizer, 'decodeGenerated'>,
): Promise<Answer> {
  if (answer.status !== 200 || !(answer.body instanceof Uint8Array)) return answer;
  const parsed: unknown = JSON.parse(Buffer.from(answer.body).toString('utf8'));
  if (!isObject(parsed)) return answer;
  const { engine } = call.routed;
  // The text of the ids the step holds, as generated; rebuilt ids are no record of spacing.
  const generated =
    step.tokenSource === 'engine' ? await tokenizing.decodeGenerated(step.responseIds, engine.model) : null;
  const adapter = engine.adapter;
  const raw = rawToolCallAnswer(
    parsed,
    generated,
    adapter ? (parts) => adapter.completion(parts).text : undefined,
  );
  return raw === null ? answer : { ...answer, body: raw };
}

/**
 * Claw-R1's form of a chat answer: the text in `content`, no `tool_calls`, `stop` for `tool_calls`.
 * The text is `generated` (the decoded ids), else rendered from the parsed parts in the engine's
 * model's format (`render`; Qwen3's when the engine names no folder). Null with no tool call or
 * reasoning to fold in, or (without `generated`) a call it cannot render.
 */
export function rawToolCallAnswer(
  answer: Record<string, unknown>,
  generated: string | null,
  render: (parts: CompletionParts) => string = renderCompletion,
): string | null {
  if (!Array.isArray(answer.choices)) return null;
  let changed = false;
  const out = answer.choices.map((choice: unknown) => {
    const message = isObject(choice) && isObject(choice.message) ? choice.message : null;
    if (!isObject(choice) || !message) return choice;
    const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as ToolCall[]) : [];
    const reasoning = message.reasoning_content ?? message.reasoning;
    if (calls.length === 0 && typeof reasoning !== 'string') return choice;
    let text: string;
    try {
      text =
        generated ??
        render({
          content: typeof message.content === 'string' ? message.content : null,
          ...(typeof reasoning === 'string' ? { reasoning } : {}),
          toolCalls: calls,
        });
    } catch {
      return choice;
    }
    changed = true;
    const { tool_calls: _calls, reasoning_content: _rc, reasoning: _r, ...rest } = message;
    return {
      ...choice,
      message: { ...rest, content: text },
      finish_reason: choice.finish_reason === 'tool_calls' ? 'stop' : choice.finish_reason,
    };
  });
  return changed ? JSON.stringify({ ...answer, choices: out }) : null;
}

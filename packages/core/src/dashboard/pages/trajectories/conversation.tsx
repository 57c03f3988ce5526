import type { JsonObject, Step, ToolResult } from '../../../domain/index.js';
import { contentText } from '../../../text/index.js';
import { BoundedList, type Budget, JsonBlock, LIMITS, short, TextBlock } from '../../bounded.js';
import { parseJsonSafe } from './common.js';
import type { TokenDecoders } from './decoders.js';
import { DecodedText, whole } from './tokens.js';

/*
 * The conversation as the agent saw it: the last step's `messages` (every earlier turn, as the
 * harness sent it) followed by that step's own answer. Tool messages are matched to the stored
 * `toolResults` of the step whose call they answer, so failed tools are flagged by the step's own
 * record rather than guessed from the text.
 */

export interface ConversationItem {
  message: JsonObject;
  /** The step whose response this assistant message is, when the turns line up with the steps. */
  step: number | null;
  /** The stored result of a tool message, when one matches. */
  result: ToolResult | null;
  /** The last step's own answer (not part of any prompt). */
  answer: boolean;
}

/** Harnesses rewrite call ids (`call_1` → `call1`): compare letters and digits only. */
const normalizedId = (id: unknown) =>
  typeof id === 'string' || typeof id === 'number'
    ? String(id)
        .slice(0, 256)
        .replace(/[^0-9a-z]/gi, '')
    : '';
/**
 * Tool results are matched by call id and content. The key holds the content's length and ends only
 * (hashing megabytes of tool output per result would cost seconds); candidates are compared whole.
 */
const resultKey = (id: unknown, content: string) =>
  `${normalizedId(id)}\u0000${content.length}\u0000${content.slice(0, 64)}\u0000${content.slice(-64)}`;

export function conversationOf(steps: readonly Step[]): ConversationItem[] | null {
  const last = steps.at(-1);
  if (!last || last.messages === null) return null;
  const byKey = new Map<string, ToolResult[]>();
  for (const s of steps)
    for (const r of s.toolResults ?? []) {
      const key = resultKey(r.tool_call_id, r.content);
      const same = byKey.get(key);
      if (same) same.push(r);
      else byKey.set(key, [r]);
    }
  const assistants = last.messages.filter((m) => m.role === 'assistant').length;
  // Step k's answer is the k-th assistant message when each step added exactly one turn.
  const aligned = assistants === steps.length - 1;
  const items: ConversationItem[] = [];
  let turn = -1;
  let toolAt = 0;
  for (const message of last.messages) {
    if (message.role === 'assistant') {
      turn++;
      toolAt = 0;
      items.push({
        message,
        step: aligned ? (steps[turn]?.index ?? null) : null,
        result: null,
        answer: false,
      });
      continue;
    }
    let result: ToolResult | null = null;
    if (message.role === 'tool') {
      const content = contentText(message.content);
      const positional = turn >= 0 ? steps[turn]?.toolResults?.[toolAt] : undefined;
      result =
        positional && positional.content === content
          ? positional
          : (byKey.get(resultKey(message.tool_call_id, content))?.findLast((r) => r.content === content) ??
            null);
      toolAt++;
    }
    items.push({ message, step: null, result, answer: false });
  }
  const answer: JsonObject = { role: 'assistant', content: last.responseText ?? '' };
  if (last.toolCalls && last.toolCalls.length > 0) answer.tool_calls = last.toolCalls;
  items.push({ message: answer, step: last.index, result: null, answer: true });
  for (const r of last.toolResults ?? []) {
    const message: JsonObject = { role: 'tool', content: r.content };
    if (r.tool_call_id !== undefined) message.tool_call_id = r.tool_call_id;
    if (r.name !== undefined) message.name = r.name;
    items.push({ message, step: null, result: r, answer: false });
  }
  return items;
}

/**
 * One tool call: the function's name and its arguments as JSON (raw text when they do not parse, or
 * are longer than the block could show).
 */
export function ToolCallView({ call, budget }: { call: unknown; budget: Budget }) {
  const c = (typeof call === 'object' && call !== null ? call : {}) as {
    id?: unknown;
    function?: { name?: unknown; arguments?: unknown };
  };
  const name = typeof c.function?.name === 'string' ? short(c.function.name) : '(unnamed)';
  const raw = c.function?.arguments;
  // Parsing costs what the text holds: only arguments the block could show whole are parsed.
  const parseable = typeof raw === 'string' && raw.length <= Math.min(LIMITS.parseChars, budget.left);
  const parsed = typeof raw === 'string' ? (parseable ? parseJsonSafe(raw) : undefined) : raw;
  return (
    <div class="tool-call">
      <span class="tool-name">{name}</span>
      {typeof c.id === 'string' ? <span class="muted"> · {short(c.id, 80)}</span> : null}
      {parsed !== undefined ? (
        <JsonBlock value={parsed} budget={budget} />
      ) : (
        <TextBlock text={typeof raw === 'string' ? raw : ''} budget={budget} cls="json" />
      )}
    </div>
  );
}

function MessageView({
  item,
  stepHref,
  budget,
}: {
  item: ConversationItem;
  stepHref: string;
  budget: Budget;
}) {
  const m = item.message;
  const role = typeof m.role === 'string' ? m.role : 'unknown';
  const text = contentText(m.content);
  const failed = item.result?.error === true;
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
  const reasoning = typeof m.reasoning_content === 'string' ? m.reasoning_content : '';
  const cls = `msg role-${role.slice(0, 40).replace(/[^a-z_]/gi, '')}${failed ? ' error' : ''}${item.answer ? ' answer' : ''}`;
  const toolName = typeof m.name === 'string' ? m.name : item.result?.name;
  // The message's share is split so a long reasoning or tool call cannot crowd out the text itself.
  const weights = {
    text: text === '' ? 0 : 2,
    reasoning: reasoning === '' ? 0 : 1,
    calls: calls.length > 0 ? 2 : 0,
  };
  const sum = weights.text + weights.reasoning + weights.calls || 1;
  const left = budget.left;
  const share = (w: number) => budget.part(Math.floor((left * w) / sum));
  const head = (
    <>
      <span class="role">{short(role, 40)}</span>
      {role === 'tool' && toolName ? <span class="tool-name"> {short(toolName)}</span> : null}
      {item.step !== null ? (
        <a class="step-link" href={`${stepHref}#step-${item.step}`}>
          step {item.step}
          {item.answer ? ' (final answer)' : ''}
        </a>
      ) : null}
      {failed ? (
        <span class="tag bad">
          error{item.result?.error_type ? `: ${short(item.result.error_type, 60)}` : ''}
        </span>
      ) : null}
    </>
  );
  if (role === 'system') {
    return (
      <li class={cls}>
        <details>
          <summary>
            {head} <span class="muted">{text.length > 100 ? `${text.slice(0, 100)}…` : text}</span>
          </summary>
          <TextBlock text={text} budget={budget} />
        </details>
      </li>
    );
  }
  const own = { text: share(weights.text), reasoning: share(weights.reasoning), calls: share(weights.calls) };
  return (
    <li class={cls}>
      <div class="msg-head">{head}</div>
      {reasoning !== '' ? (
        <details>
          <summary>reasoning</summary>
          <TextBlock text={reasoning} budget={own.reasoning} />
        </details>
      ) : null}
      {text !== '' ? <TextBlock text={text} budget={own.text} /> : null}
      {calls.length > 0 ? (
        <BoundedList
          items={calls}
          budget={own.calls}
          noun={['tool call', 'tool calls']}
          render={(call) => <ToolCallView call={call} budget={own.calls} />}
          wrap={(children) => children}
        />
      ) : null}
      {text === '' && calls.length === 0 && reasoning === '' ? <p class="muted">(empty)</p> : null}
    </li>
  );
}

/** What a message's frame takes besides its texts (role, links, tags). */
const MESSAGE_FRAME_BYTES = 512;

/**
 * `stepHref`: the page holding the steps' token views (default: this one). The messages share
 * `budget` evenly (a long one is cut, not the ones after it); past it they are counted.
 */
export function Conversation({
  steps,
  decoders,
  label,
  budget,
  stepHref = '',
}: {
  steps: readonly Step[];
  decoders: TokenDecoders;
  label: string;
  budget: Budget;
  stepHref?: string;
}) {
  const items = conversationOf(steps);
  const last = steps.at(-1);
  if (items === null)
    return last === undefined ? (
      <p class="muted">No steps.</p>
    ) : (
      <>
        <p class="muted">No messages recorded; the last step's prompt and response, decoded:</p>
        <DecodedText
          ranges={[whole(last.promptIds), whole(last.responseIds)]}
          decoder={decoders.of(last.metadata)}
          budget={budget}
        />
      </>
    );
  return (
    <BoundedList
      items={items}
      budget={budget}
      noun={['message', 'messages']}
      reserve={MESSAGE_FRAME_BYTES}
      render={(item, _, own) => <MessageView item={item} stepHref={stepHref} budget={own} />}
      wrap={(children) => (
        <ol class="conversation" aria-label={label}>
          {children}
        </ol>
      )}
    />
  );
}

import type { JsonObject, Step, ToolResult } from '../../../domain/index.js';
import { contentText } from '../../../text/index.js';
import { parseJsonSafe } from './common.js';
import { decode } from './tokens.js';

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
const normalizedId = (id: unknown) => String(id ?? '').replace(/[^0-9a-z]/gi, '');
const resultKey = (id: unknown, content: string) => `${normalizedId(id)}\u0000${content}`;

export function conversationOf(steps: readonly Step[]): ConversationItem[] | null {
  const last = steps.at(-1);
  if (!last || last.messages === null) return null;
  const byKey = new Map<string, ToolResult>();
  for (const s of steps)
    for (const r of s.toolResults ?? []) byKey.set(resultKey(r.tool_call_id, r.content), r);
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
          : (byKey.get(resultKey(message.tool_call_id, content)) ?? null);
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

/** One tool call: the function's name and its arguments as JSON (raw text when they do not parse). */
export function ToolCallView({ call }: { call: unknown }) {
  const c = (typeof call === 'object' && call !== null ? call : {}) as {
    id?: unknown;
    function?: { name?: unknown; arguments?: unknown };
  };
  const name = typeof c.function?.name === 'string' ? c.function.name : '(unnamed)';
  const raw = c.function?.arguments;
  const parsed = typeof raw === 'string' ? parseJsonSafe(raw) : raw;
  const args =
    parsed === undefined ? String(raw ?? '') : (JSON.stringify(parsed, null, 2) ?? String(raw ?? ''));
  return (
    <div class="tool-call">
      <span class="tool-name">{name}</span>
      {typeof c.id === 'string' ? <span class="muted"> · {c.id}</span> : null}
      <pre class="json">{args}</pre>
    </div>
  );
}

function MessageView({ item, stepHref }: { item: ConversationItem; stepHref: string }) {
  const m = item.message;
  const role = typeof m.role === 'string' ? m.role : 'unknown';
  const text = contentText(m.content);
  const failed = item.result?.error === true;
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
  const reasoning = typeof m.reasoning_content === 'string' ? m.reasoning_content : '';
  const cls = `msg role-${role.replace(/[^a-z_]/gi, '')}${failed ? ' error' : ''}${item.answer ? ' answer' : ''}`;
  const head = (
    <>
      <span class="role">{role}</span>
      {role === 'tool' && (typeof m.name === 'string' || item.result?.name) ? (
        <span class="tool-name"> {typeof m.name === 'string' ? m.name : item.result?.name}</span>
      ) : null}
      {item.step !== null ? (
        <a class="step-link" href={`${stepHref}#step-${item.step}`}>
          step {item.step}
          {item.answer ? ' (final answer)' : ''}
        </a>
      ) : null}
      {failed ? (
        <span class="tag bad">error{item.result?.error_type ? `: ${item.result.error_type}` : ''}</span>
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
          <pre class="content">{text}</pre>
        </details>
      </li>
    );
  }
  return (
    <li class={cls}>
      <div class="msg-head">{head}</div>
      {reasoning !== '' ? (
        <details>
          <summary>reasoning</summary>
          <pre class="content">{reasoning}</pre>
        </details>
      ) : null}
      {text !== '' ? <pre class="content">{text}</pre> : null}
      {calls.map((call) => (
        <ToolCallView call={call} />
      ))}
      {text === '' && calls.length === 0 && reasoning === '' ? <p class="muted">(empty)</p> : null}
    </li>
  );
}

/** `stepHref`: the page holding the steps' token views (default: this one). */
export function Conversation({
  steps,
  label,
  stepHref = '',
}: {
  steps: readonly Step[];
  label: string;
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
        <pre class="content decoded">{decode([...last.promptIds, ...last.responseIds])}</pre>
      </>
    );
  return (
    <ol class="conversation" aria-label={label}>
      {items.map((item) => (
        <MessageView item={item} stepHref={stepHref} />
      ))}
    </ol>
  );
}

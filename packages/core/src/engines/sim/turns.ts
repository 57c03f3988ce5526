import type { ChatMessageInput } from '../../text/index.js';
import type { ModelAdapter } from '../../text/model-adapter.js';

/*
 * Where the assistant turns of a raw prompt begin, for any family's template: the sim reads its
 * own past turns (and their calls) back from a /v1/completions prompt by these markers.
 */

/**
 * The texts that open an assistant turn in this family's template, longest first: what it writes
 * after a user's text through its generation prompt (Mistral's `[/INST]`: it has no generation
 * prompt of its own), and after a tool result where the model answers next (DeepSeek-V3 opens no
 * `<｜Assistant｜>` there: the model writes straight after `<｜tool▁outputs▁end｜>`).
 */
export function turnOpeners(adapter: ModelAdapter): string[] {
  // Stand-in texts: an opener is what the template writes after them, generation prompt included.
  const mark = 'sim7f3a';
  const after = (messages: ChatMessageInput[]): string => {
    const text = adapter.render({ messages, addGenerationPrompt: true });
    const at = text.lastIndexOf(mark);
    return at === -1 ? '' : text.slice(at + mark.length);
  };
  const openers = new Set<string>();
  // The generation prompt where the template has one (gpt-oss's `<|start|>assistant`, which also
  // opens each further message of a turn); else what follows a user's text (Mistral's `[/INST]`).
  const opening = { role: 'user' as const, content: '.' };
  const open = adapter.render({ messages: [opening], addGenerationPrompt: true });
  const closed = adapter.render({ messages: [opening], addGenerationPrompt: false });
  const prompt = open.startsWith(closed) ? open.slice(closed.length) : '';
  const afterUser = prompt !== '' ? prompt : after([{ role: 'user', content: mark }]);
  if (afterUser !== '') openers.add(afterUser);
  try {
    // The id may be written after the result (Mistral's `"call_id": ...`): two ids, the common tail.
    const [one, two] = ['a1b2c3d4e', 'z9y8x7w6v'].map((id) =>
      after([
        { role: 'user', content: '.' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id, type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: id, content: mark },
      ]),
    ) as [string, string];
    let n = 0;
    while (n < one.length && n < two.length && one[one.length - 1 - n] === two[two.length - 1 - n]) n++;
    const afterTool = one.slice(one.length - n);
    // Only where it differs: most families open the same way after a result as after a user.
    if (afterTool !== '' && !afterTool.endsWith(afterUser)) openers.add(afterTool);
  } catch {
    // A template that cannot render a call turn has no turns after results to find.
  }
  return [...openers].sort((a, b) => b.length - a.length);
}

/** The pieces of `text` after each occurrence of any of `markers` (tried longest first), with the marker. */
export function turnsAfter(text: string, markers: readonly string[]): { marker: string; piece: string }[] {
  const escaped = markers.map((m) => m.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  // A capturing split keeps each marker: [before, marker, piece, marker, piece, ...].
  const parts = text.split(new RegExp(`(${escaped.join('|')})`));
  const out: { marker: string; piece: string }[] = [];
  for (let i = 1; i + 1 < parts.length; i += 2) out.push({ marker: parts[i]!, piece: parts[i + 1]! });
  return out;
}

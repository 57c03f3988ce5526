import { GymTask } from '../gym/tasks/schema.js';
import type { Random } from '../util/random.js';

/*
 * The gym task `stepwise train` teaches a tiny model: copy a word through two tool calls.
 *
 * The workspace holds `input.txt`: one word of `COPY_WORDS` on each of its lines. The agent must
 * read it (a `read` call), write that word to `answer.txt` (a `write` call) and then answer without
 * a tool call; the verifier scores 1 when answer.txt holds exactly the word. Each task's prompt
 * carries a ticket number drawn at random, so the prompt never tells the word: only the tool result
 * does.
 *
 * Why a 2-layer, 64-wide model with random weights learns it in minutes on 2 CPU cores: everything
 * but one token of the three turns is a fixed pattern, which the warm-up teaches; the one decision
 * (which word) is a copy of a single token from the tool result into the write call. Every word is
 * one token of Qwen3's vocabulary, the same id in both places, and the model's embeddings are tied
 * with its LM head. The word fills the file, so even attention spread evenly over the (short)
 * context carries it: the gradient toward copying is there from the first update. (Said once, the
 * word would first have to be found by attention, a plateau a tiny model sits on for hundreds of
 * steps.) A short warm-up learns the protocol and which words answers hold, not the copy: it
 * scores about 1 / |words|. RL through Stepwise has to find the copy.
 */

/** One token each in Qwen3's vocabulary, the same id after `"` as at the start of a line. */
export const COPY_WORDS = ['red', 'blue', 'green', 'black', 'white', 'pink', 'gray', 'gold'] as const;

export const COPY_INPUT = 'input.txt';
export const COPY_OUTPUT = 'answer.txt';
/** Lines of input.txt, each the word. */
export const COPY_LINES = 16;

/** The task for `word` under a ticket number (which only makes the prompt distinct). */
export function copyTask(word: string, ticket: number, idPrefix = 'copy'): GymTask {
  return GymTask.parse({
    id: `${idPrefix}-${ticket}-${word}`,
    prompt: `Ticket ${ticket}: read ${COPY_INPUT} and write the word it holds to ${COPY_OUTPUT}.`,
    files: [{ path: COPY_INPUT, content: `${Array(COPY_LINES).fill(word).join('\n')}\n` }],
    verifier: {
      kind: 'checks',
      checks: [
        {
          kind: 'text_contains',
          name: 'copied',
          path: COPY_OUTPUT,
          pattern: `^\\s*${word}\\s*$`,
          regex: true,
        },
      ],
    },
    referenceActions: [
      { name: 'read', arguments: { path: COPY_INPUT } },
      { name: 'write', arguments: { path: COPY_OUTPUT, content: word } },
    ],
    category: 'Systems & Automation',
    difficulty: 'easy',
    provenance: { generator: 'stepwise-train-copy', word, ticket },
  });
}

/**
 * `count` tasks (one per word when omitted), the words taken in turn, each under a fresh ticket
 * number from `random` (distinct within the set).
 */
export function copyTasks(
  random: Random,
  words: readonly string[] = COPY_WORDS,
  idPrefix = 'copy',
  count = words.length,
): GymTask[] {
  const used = new Set<number>();
  return Array.from({ length: count }, (_, i) => {
    let ticket: number;
    do ticket = 1000 + Math.floor(random() * 9000);
    while (used.has(ticket));
    used.add(ticket);
    return copyTask(words[i % words.length]!, ticket, idPrefix);
  });
}

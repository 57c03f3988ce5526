import type { Random } from '@stepwise/core/util/random.js';
import { GymTask } from '@stepwise/gym/tasks/schema.js';

// The copy task `stepwise train` teaches a tiny model, and why the file to name is the one thing RL has
// to learn: docs/trainers.md#stepwise-train-the-loop-as-one-command ("The task", "Why a tiny model").

/** Words input.txt may hold; one token each in Qwen3's vocabulary. */
export const COPY_WORDS = ['red', 'blue', 'green', 'black', 'white', 'pink', 'gray', 'gold'] as const;

export const COPY_INPUT = 'input.txt';
/**
 * Where the warm-up's tasks copy to; each stem one token after a space. RL's tasks use the first.
 * Not `.txt`: then the token after which the command names its target (input's `.txt`) would be the
 * token after which it ends (the target's `.txt`), and RL, raising ` answer` there, made the policy
 * write `cp input.txt answer.txt answer.txt`.
 */
export const COPY_TARGETS = [
  'answer.md',
  'output.md',
  'result.md',
  'copy.md',
  'out.md',
  'final.md',
  'target.md',
  'notes.md',
] as const;
export const COPY_OUTPUT = COPY_TARGETS[0];

/** The task: copy input.txt (holding `word`) to `target`, under a ticket number. */
export function copyTask(
  word: string,
  ticket: number,
  idPrefix = 'copy',
  target: string = COPY_OUTPUT,
): GymTask {
  return GymTask.parse({
    id: `${idPrefix}-${ticket}-${word}`,
    prompt: `Ticket ${ticket}: copy ${COPY_INPUT} to ${target}.`,
    files: [{ path: COPY_INPUT, content: `${word}\n` }],
    verifier: {
      kind: 'checks',
      checks: [
        { kind: 'text_contains', name: 'copied', path: target, pattern: `^\\s*${word}\\s*$`, regex: true },
      ],
    },
    referenceActions: [{ name: 'exec', arguments: { command: `cp ${COPY_INPUT} ${target}` } }],
    category: 'Systems & Automation',
    difficulty: 'easy',
    provenance: { generator: 'stepwise-train-copy', word, ticket, target },
  });
}

/**
 * `count` tasks, the words and `targets` taken in turn, each under a fresh ticket number from
 * `random` (distinct within the set).
 */
export function copyTasks(
  random: Random,
  count: number,
  idPrefix = 'copy',
  targets: readonly string[] = [COPY_OUTPUT],
  words: readonly string[] = COPY_WORDS,
): GymTask[] {
  const used = new Set<number>();
  return Array.from({ length: count }, (_, i) => {
    let ticket: number;
    do ticket = 1000 + Math.floor(random() * 9000);
    while (used.has(ticket));
    used.add(ticket);
    return copyTask(words[i % words.length]!, ticket, idPrefix, targets[i % targets.length]!);
  });
}

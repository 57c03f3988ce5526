import { GymTask } from '../gym/tasks/schema.js';
import type { Random } from '../util/random.js';

/*
 * The gym task `stepwise train` teaches a tiny model: copy a file with one shell command.
 *
 * The workspace holds `input.txt`, one word. The prompt asks to copy it to a file it names; the
 * agent has one tool, `exec` (bash in the sandbox), and must run `cp input.txt <file>`, then answer
 * without a tool call (two turns). The verifier scores 1 when the named file holds exactly the word.
 * Each prompt carries a ticket number drawn at random, so no two tasks read the same.
 *
 * The warm-up's reference rollouts copy to any of `COPY_TARGETS`, a few of each. A 2-layer,
 * 64-wide model with random weights learns from them, in a few minutes on CPU, every token of both
 * turns but one: which file the command names. Copying that name from the prompt is an attention
 * pattern such a model does not pick up in a short warm-up, so it names one of the files it has
 * seen and is right about 1 time in |targets|. The tasks RL trains on all name `answer.md`: that
 * the command must name it is the one thing the verifier's reward teaches, through the rollouts
 * that happened to. The choice is one token (` answer` is one id of Qwen3's vocabulary, as is
 * each target's stem) after a prefix all rollouts share, so the policy gradient on it is strong
 * from the first update: RL through Stepwise lifts the reward from about 0.1 past 0.8 within 12
 * policy versions, and the control run (no updates) stays where it started (docs/trainers.md).
 */

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

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

/**
 * How hard a task of the mixed set is for the tiny model (`--tasks mixed`, the scheduler comparison):
 * - `easy`: always solved. Its check holds for the untouched workspace (input.txt still holds its
 *   word), and the agent's only tool copies from input.txt, never into it: every rollout scores 1.
 * - `learnable`: the copy task, solved about 1 time in 8 after the warm-up and learned by RL.
 * - `hard`: never solved. Its check asks for a random token that appears nowhere in the prompt or
 *   the workspace, so no command the model can write meets it: every rollout scores 0.
 * Easy and hard groups are all-equal, so they carry no GRPO signal: rollouts spent on them are wasted.
 */
export type TaskKind = 'easy' | 'learnable' | 'hard';
export const TASK_KINDS: readonly TaskKind[] = ['easy', 'learnable', 'hard'];

const GENERATOR_OF: Record<TaskKind, string> = {
  easy: 'stepwise-train-keep',
  learnable: 'stepwise-train-copy',
  hard: 'stepwise-train-code',
};

/** The kind of one of this file's tasks (from its provenance); null for any other task. */
export function taskKind(task: GymTask): TaskKind | null {
  return TASK_KINDS.find((kind) => task.provenance.generator === GENERATOR_OF[kind]) ?? null;
}

/** An always-solved task: leave input.txt (holding `word`) as it is; the check reads input.txt. */
export function keepTask(word: string, ticket: number): GymTask {
  return GymTask.parse({
    id: `keep-${ticket}-${word}`,
    prompt: `Ticket ${ticket}: leave ${COPY_INPUT} as it is.`,
    files: [{ path: COPY_INPUT, content: `${word}\n` }],
    verifier: {
      kind: 'checks',
      checks: [
        { kind: 'text_contains', name: 'kept', path: COPY_INPUT, pattern: `^\\s*${word}\\s*$`, regex: true },
      ],
    },
    category: 'Systems & Automation',
    difficulty: 'easy',
    provenance: { generator: GENERATOR_OF.easy, word, ticket },
  });
}

/** A never-solved task: write an access code to answer.md; the code (`token`) is given nowhere. */
export function codeTask(word: string, ticket: number, token: string): GymTask {
  return GymTask.parse({
    id: `code-${ticket}-${word}`,
    prompt: `Ticket ${ticket}: write the access code to ${COPY_OUTPUT}.`,
    files: [{ path: COPY_INPUT, content: `${word}\n` }],
    verifier: {
      kind: 'checks',
      checks: [{ kind: 'text_contains', name: 'code', path: COPY_OUTPUT, pattern: token }],
    },
    category: 'Systems & Automation',
    difficulty: 'hard',
    provenance: { generator: GENERATOR_OF.hard, word, ticket, token },
  });
}

const TOKEN_CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789';

/**
 * `perKind` tasks of each kind, interleaved (easy, learnable, hard, easy, ...) as a task list that
 * mixes difficulties would be, so in-order sampling serves every kind in every round. Tickets are
 * distinct across the set; everything is drawn from `random`, so one seed gives one set.
 */
export function mixedTasks(random: Random, perKind: number): GymTask[] {
  const used = new Set<number>();
  const ticket = () => {
    let t: number;
    do t = 1000 + Math.floor(random() * 9000);
    while (used.has(t));
    used.add(t);
    return t;
  };
  const token = () => Array.from({ length: 16 }, () => TOKEN_CHARS[Math.floor(random() * 36)]).join('');
  return Array.from({ length: perKind }, (_, i) => {
    const word = COPY_WORDS[i % COPY_WORDS.length]!;
    return [keepTask(word, ticket()), copyTask(word, ticket(), 'copy'), codeTask(word, ticket(), token())];
  }).flat();
}

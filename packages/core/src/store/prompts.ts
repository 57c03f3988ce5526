import type { Rule } from './rule.js';

/*
 * The prompt scheduler's rows and the primitives its rules run on (pool/schedule.ts, and the
 * over-sampling of pool/admission.ts, which reads the channel's counters), inside a
 * transaction of either backend (sqlite/prompts.ts, postgres/prompts.ts). No scheduling rule lives
 * here: which prompt goes next is decided once, there.
 */

/** A `prompts` row: one prompt (a task id) of a channel's task set, with its history. */
export interface PromptRow {
  channel: string;
  task_id: string;
  /** The task set it came from (mixtures weigh sets). */
  task_set: string;
  /** Registration order: `in_order` walks it. */
  position: number;
  /** Times handed out. */
  handed: number;
  /** In flight (handed out, its group not settled) until then; null: free. */
  claimed_until: number | null;
  last_handed_at: number | null;
  /** Groups of it that settled with rewards. */
  groups: number;
  /** Rollouts of it that were scored, and those that passed. */
  attempts: number;
  passes: number;
  /** Its latest scored group: size, pass rate, mean and standard deviation of the rewards. */
  last_n: number | null;
  last_pass_rate: number | null;
  last_mean: number | null;
  last_std: number | null;
  /** The policy version in force when that group settled. */
  last_version: number | null;
  added_at: number;
}

/** A prompt to register: its task id and task set. */
export interface NewPrompt {
  taskId: string;
  taskSet: string;
}

/** What a settled group of a prompt says about it. */
export interface PromptOutcome {
  n: number;
  passes: number;
  mean: number;
  std: number;
  version: number;
}

export interface PromptTx {
  /** Adds the prompts not yet registered, after the channel's last; returns how many were new. */
  addPrompts(channel: string, prompts: readonly NewPrompt[], now: number): Rule<number>;
  /** The channel's prompts free at `now` (not in flight), in registration order. */
  freePrompts(channel: string, now: number): Rule<PromptRow[]>;
  /** Marks a prompt handed out, in flight until `until`. */
  claimPrompt(channel: string, taskId: string, until: number, now: number): Rule<void>;
  /** Frees a prompt whose group settled, adding what the group says (null: no scores). */
  settlePrompt(channel: string, taskId: string, outcome: PromptOutcome | null): Rule<void>;
  /** Whether the channel has any prompt (a group's settling looks no further when not). */
  hasPrompts(channel: string): Rule<boolean>;
  /** The task a group's rollouts ran (any of them: a group is one prompt), null if none says. */
  taskOfGroup(channel: string, groupId: string): Rule<string | null>;
  /** The task set of a group's prompt (its rollouts' task, registered in the channel), null if none. */
  taskSetOfGroup(channel: string, groupId: string): Rule<string | null>;
  /** Every prompt of the channel, in registration order. */
  prompts(channel: string): Rule<PromptRow[]>;
  /** The channel's committed counters of these names (0 where never counted). */
  counters(channel: string, names: readonly string[]): Rule<Record<string, number>>;
}

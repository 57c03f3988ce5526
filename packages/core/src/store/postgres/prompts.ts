import type { NewPrompt, PromptOutcome, PromptRow, PromptTx } from '../prompts.js';
import type { Rule } from '../tx.js';

/* The prompt scheduler's primitives (store/prompts.ts) on PostgreSQL: each yields its query. */

/** What they use of a PgTx (its type is not imported: tx.ts imports this file). */
interface PgQueries {
  rows<T>(text: string, values?: unknown[]): Promise<T[]>;
  run(text: string, values?: unknown[]): Promise<number>;
}

export function postgresPromptTx(tx: PgQueries): PromptTx {
  return {
    *addPrompts(channel: string, prompts: readonly NewPrompt[], now: number): Rule<number> {
      if (prompts.length === 0) return 0;
      // New ones take positions after the channel's last, in the order given; known ones are kept.
      return (yield tx.run(
        `INSERT INTO prompts (channel, task_id, task_set, position, added_at)
         SELECT $1, u.task_id, u.task_set,
                COALESCE((SELECT MAX(position) FROM prompts WHERE channel = $1), -1)
                  + ROW_NUMBER() OVER (ORDER BY u.i), $4
         FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS u(task_id, task_set, i)
         WHERE NOT EXISTS (SELECT 1 FROM prompts p WHERE p.channel = $1 AND p.task_id = u.task_id)
         ON CONFLICT (channel, task_id) DO NOTHING`,
        [channel, prompts.map((p) => p.taskId), prompts.map((p) => p.taskSet), now],
      )) as number;
    },
    *freePrompts(channel: string, now: number): Rule<PromptRow[]> {
      return (yield tx.rows<PromptRow>(
        `SELECT * FROM prompts WHERE channel = $1 AND (claimed_until IS NULL OR claimed_until <= $2)
         ORDER BY position`,
        [channel, now],
      )) as PromptRow[];
    },
    *claimPrompt(channel: string, taskId: string, until: number, now: number): Rule<void> {
      yield tx.run(
        `UPDATE prompts SET handed = handed + 1, claimed_until = $3, last_handed_at = $4
         WHERE channel = $1 AND task_id = $2`,
        [channel, taskId, until, now],
      );
    },
    *settlePrompt(channel: string, taskId: string, o: PromptOutcome | null): Rule<void> {
      if (o === null) {
        yield tx.run('UPDATE prompts SET claimed_until = NULL WHERE channel = $1 AND task_id = $2', [
          channel,
          taskId,
        ]);
        return;
      }
      yield tx.run(
        `UPDATE prompts SET claimed_until = NULL, groups = groups + 1, attempts = attempts + $3,
           passes = passes + $4, last_n = $3, last_pass_rate = $5, last_mean = $6, last_std = $7,
           last_version = $8
         WHERE channel = $1 AND task_id = $2`,
        [channel, taskId, o.n, o.passes, o.passes / o.n, o.mean, o.std, o.version],
      );
    },
    *hasPrompts(channel: string): Rule<boolean> {
      const rows = (yield tx.rows('SELECT 1 FROM prompts WHERE channel = $1 LIMIT 1', [
        channel,
      ])) as unknown[];
      return rows.length > 0;
    },
    *taskOfGroup(channel: string, groupId: string): Rule<string | null> {
      const rows = (yield tx.rows<{ task_id: string }>(
        'SELECT task_id FROM trajectories WHERE group_id = $1 AND channel = $2 AND task_id IS NOT NULL LIMIT 1',
        [groupId, channel],
      )) as { task_id: string }[];
      return rows[0]?.task_id ?? null;
    },
    *counters(channel: string, names: readonly string[]): Rule<Record<string, number>> {
      const rows = (yield tx.rows<{ name: string; value: number }>(
        'SELECT name, value FROM counters WHERE channel = $1 AND name = ANY($2::text[])',
        [channel, names],
      )) as { name: string; value: number }[];
      const found = new Map(rows.map((r) => [r.name, Number(r.value)]));
      return Object.fromEntries(names.map((name) => [name, found.get(name) ?? 0]));
    },
    *taskSetOfGroup(channel: string, groupId: string): Rule<string | null> {
      const rows = (yield tx.rows<{ task_set: string }>(
        `SELECT p.task_set FROM trajectories t JOIN prompts p ON p.channel = t.channel AND p.task_id = t.task_id
         WHERE t.group_id = $1 AND t.channel = $2 LIMIT 1`,
        [groupId, channel],
      )) as { task_set: string }[];
      return rows[0]?.task_set ?? null;
    },
    *prompts(channel: string): Rule<PromptRow[]> {
      return (yield tx.rows<PromptRow>('SELECT * FROM prompts WHERE channel = $1 ORDER BY position', [
        channel,
      ])) as PromptRow[];
    },
  };
}

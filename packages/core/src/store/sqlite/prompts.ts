import type { NewPrompt, PromptOutcome, PromptRow, PromptTx } from '../prompts.js';
import { done, type Rule } from '../tx.js';
import type { Statement } from './statements.js';

/* The prompt scheduler's primitives (store/prompts.ts) on SQLite: synchronous, in the open transaction. */

export function sqlitePromptTx(stmt: (source: string) => Statement): PromptTx {
  return {
    addPrompts(channel: string, prompts: readonly NewPrompt[], now: number): Rule<number> {
      const last = stmt('SELECT MAX(position) AS p FROM prompts WHERE channel = ?').get(channel) as {
        p: number | null;
      };
      const insert = stmt(
        `INSERT INTO prompts (channel, task_id, task_set, position, added_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (channel, task_id) DO NOTHING`,
      );
      let position = last.p ?? -1;
      let added = 0;
      for (const p of prompts) {
        if (insert.run(channel, p.taskId, p.taskSet, position + 1, now).changes === 0) continue;
        position += 1;
        added += 1;
      }
      return done(added);
    },
    freePrompts(channel: string, now: number): Rule<PromptRow[]> {
      return done(
        stmt(
          `SELECT * FROM prompts WHERE channel = ? AND (claimed_until IS NULL OR claimed_until <= ?)
           ORDER BY position`,
        ).all(channel, now) as PromptRow[],
      );
    },
    claimPrompt(channel: string, taskId: string, until: number, now: number): Rule<void> {
      stmt(
        `UPDATE prompts SET handed = handed + 1, claimed_until = ?, last_handed_at = ?
         WHERE channel = ? AND task_id = ?`,
      ).run(until, now, channel, taskId);
      return done(undefined);
    },
    settlePrompt(channel: string, taskId: string, o: PromptOutcome | null): Rule<void> {
      if (o === null) {
        stmt('UPDATE prompts SET claimed_until = NULL WHERE channel = ? AND task_id = ?').run(
          channel,
          taskId,
        );
        return done(undefined);
      }
      stmt(
        `UPDATE prompts SET claimed_until = NULL, groups = groups + 1, attempts = attempts + ?,
           passes = passes + ?, last_n = ?, last_pass_rate = ?, last_mean = ?, last_std = ?, last_version = ?
         WHERE channel = ? AND task_id = ?`,
      ).run(o.n, o.passes, o.n, o.passes / o.n, o.mean, o.std, o.version, channel, taskId);
      return done(undefined);
    },
    hasPrompts(channel: string): Rule<boolean> {
      return done(stmt('SELECT 1 FROM prompts WHERE channel = ? LIMIT 1').get(channel) !== undefined);
    },
    taskOfGroup(channel: string, groupId: string): Rule<string | null> {
      const row = stmt(
        'SELECT task_id FROM trajectories WHERE group_id = ? AND channel = ? AND task_id IS NOT NULL LIMIT 1',
      ).get(groupId, channel) as { task_id: string } | undefined;
      return done(row?.task_id ?? null);
    },
    counters(channel: string, names: readonly string[]): Rule<Record<string, number>> {
      const read = stmt('SELECT value FROM counters WHERE channel = ? AND name = ?');
      return done(
        Object.fromEntries(
          names.map((name) => [name, (read.get(channel, name) as { value: number } | undefined)?.value ?? 0]),
        ),
      );
    },
    taskSetOfGroup(channel: string, groupId: string): Rule<string | null> {
      const row = stmt(
        `SELECT p.task_set FROM trajectories t JOIN prompts p ON p.channel = t.channel AND p.task_id = t.task_id
         WHERE t.group_id = ? AND t.channel = ? LIMIT 1`,
      ).get(groupId, channel) as { task_set: string } | undefined;
      return done(row?.task_set ?? null);
    },
    prompts(channel: string): Rule<PromptRow[]> {
      return done(
        stmt('SELECT * FROM prompts WHERE channel = ? ORDER BY position').all(channel) as PromptRow[],
      );
    },
  };
}

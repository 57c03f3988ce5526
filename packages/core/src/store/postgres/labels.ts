import type { LabelInput, Signal } from '../../domain/index.js';
import {
  currentSignalsByTrajectory,
  type LabelCurrentRow,
  type LabelRow,
  labelValues,
  type SignalRow,
  toCurrentLabel,
} from '../rows.js';
import type { Rule } from '../tx.js';
import type { CurrentLabel } from '../types.js';
import { one, type PgQueries, select, update } from './queries.js';

/* PgTx's label and signal primitives (store/tx.ts): the label_current, label_tags and signals rows, kept
   apart from the class so postgres/tx.ts stays in size; PgTx delegates to them. */

export function* currentLabels(tx: PgQueries, ids: readonly string[]): Rule<Map<string, CurrentLabel[]>> {
  const out = new Map<string, CurrentLabel[]>();
  if (ids.length === 0) return out;
  const rows = yield* select<LabelCurrentRow>(
    tx,
    'SELECT * FROM label_current WHERE trajectory_id = ANY($1::text[]) ORDER BY trajectory_id, step_index',
    [ids],
  );
  for (const row of rows) {
    const list = out.get(row.trajectory_id);
    if (list) list.push(toCurrentLabel(row));
    else out.set(row.trajectory_id, [toCurrentLabel(row)]);
  }
  return out;
}

export function* currentSignals(tx: PgQueries, ids: readonly string[]): Rule<Map<string, Signal[]>> {
  if (ids.length === 0) return new Map();
  const rows = yield* select<SignalRow>(
    tx,
    'SELECT * FROM signals WHERE trajectory_id = ANY($1::text[]) ORDER BY trajectory_id, created_at, id',
    [ids],
  );
  return currentSignalsByTrajectory(rows);
}

export function* insertLabel(
  tx: PgQueries,
  trajectoryId: string,
  stepIndex: number | null,
  input: LabelInput,
  now: number,
): Rule<LabelRow> {
  return (yield* one<LabelRow>(
    tx,
    `INSERT INTO labels (trajectory_id, step_index, quality, trainable, tags, note, author, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *`,
    labelValues(trajectoryId, stepIndex, input, now),
  ))!;
}

export function currentLabel(
  tx: PgQueries,
  trajectoryId: string,
  key: number,
): Rule<LabelCurrentRow | undefined> {
  return one<LabelCurrentRow>(
    tx,
    'SELECT * FROM label_current WHERE trajectory_id = $1 AND step_index = $2',
    [trajectoryId, key],
  );
}

export function* setCurrentLabel(
  tx: PgQueries,
  row: LabelCurrentRow,
  tags: readonly string[] | undefined,
): Rule<void> {
  yield* update(
    tx,
    `INSERT INTO label_current (trajectory_id, step_index, quality, trainable, tags, note, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (trajectory_id, step_index) DO UPDATE SET quality = excluded.quality,
         trainable = excluded.trainable, tags = excluded.tags, note = excluded.note, updated_at = excluded.updated_at`,
    [row.trajectory_id, row.step_index, row.quality, row.trainable, row.tags, row.note, row.updated_at],
  );
  if (tags === undefined) return;
  yield* update(tx, 'DELETE FROM label_tags WHERE trajectory_id = $1 AND step_index = $2', [
    row.trajectory_id,
    row.step_index,
  ]);
  if (tags.length > 0)
    yield* update(
      tx,
      `INSERT INTO label_tags (tag, trajectory_id, step_index)
         SELECT DISTINCT unnest($1::text[]), $2::text, $3::int ON CONFLICT DO NOTHING`,
      [tags, row.trajectory_id, row.step_index],
    );
}

export function* insertSignal(
  tx: PgQueries,
  trajectoryId: string,
  signal: Omit<Signal, 'createdAt'>,
  now: number,
): Rule<void> {
  const details = Object.keys(signal.details).length > 0 ? JSON.stringify(signal.details) : null;
  yield* update(
    tx,
    `INSERT INTO signals (trajectory_id, step_index, name, value, source, version, details, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [trajectoryId, signal.stepIndex, signal.name, signal.value, signal.source, signal.version, details, now],
  );
}

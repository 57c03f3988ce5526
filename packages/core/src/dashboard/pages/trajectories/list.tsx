import type { Trajectory } from '../../../domain/index.js';
import { Quality, TrajectoryStatus } from '../../../domain/index.js';
import type { Page as ResultPage } from '../../../store/store.js';
import { CsrfField } from '../../csrf.js';
import { fmt, Page } from '../../layout.js';
import {
  Alert,
  Clip,
  groupHref,
  LIST_PATH,
  TrajectoryCells,
  TrajectoryHeaderCells,
  trajectoryHref,
} from './common.js';
import { type ListFormValues, listUrl, PAGE_SIZE } from './filters.js';

/*
 * The trajectory list: a GET form of filters over listTrajectories (compact rows only; no steps are
 * read), 50 rows a page, and a bulk form to mark the chosen rows trainable, untrainable or tagged.
 */

function TextFilter({
  name,
  label,
  values,
  placeholder,
}: {
  name: string;
  label: string;
  values: ListFormValues;
  placeholder?: string;
}) {
  return (
    <div>
      <label for={`f-${name}`}>{label}</label>
      <input id={`f-${name}`} name={name} value={values[name] ?? ''} placeholder={placeholder} size={12} />
    </div>
  );
}

function SelectFilter({
  name,
  label,
  values,
  options,
}: {
  name: string;
  label: string;
  values: ListFormValues;
  options: readonly string[];
}) {
  const chosen = values[name] ?? 'any';
  return (
    <div>
      <label for={`f-${name}`}>{label}</label>
      <select id={`f-${name}`} name={name}>
        {['any', ...options].map((o) => (
          <option value={o} selected={o === chosen}>
            {o}
          </option>
        ))}
      </select>
    </div>
  );
}

function Filters({ values }: { values: ListFormValues }) {
  const yesNo = ['yes', 'no'] as const;
  return (
    <form class="filters card" method="get" action={LIST_PATH} aria-label="Filters">
      <TextFilter name="channel" label="Channel" values={values} placeholder="all" />
      <TextFilter name="group" label="Group" values={values} />
      <TextFilter name="task" label="Task" values={values} />
      <TextFilter name="reward_min" label="Reward min" values={values} />
      <TextFilter name="reward_max" label="Reward max" values={values} />
      <SelectFilter name="status" label="Status" values={values} options={TrajectoryStatus.options} />
      <TextFilter name="policy_version" label="Policy version" values={values} />
      <TextFilter name="tag" label="Label tag" values={values} />
      <SelectFilter name="quality" label="Quality" values={values} options={Quality.options} />
      <SelectFilter name="trainable" label="Trainable" values={values} options={yesNo} />
      <SelectFilter name="guided" label="Guided" values={values} options={yesNo} />
      <SelectFilter name="probe" label="Probe" values={values} options={yesNo} />
      <SelectFilter name="derived" label="Derived" values={values} options={yesNo} />
      <div class="filter-actions">
        <button type="submit">Filter</button>
        <a href={LIST_PATH}>Clear</a>
      </div>
    </form>
  );
}

function Rows({ items }: { items: Trajectory[] }) {
  return (
    <tbody>
      {items.map((t) => (
        <tr>
          <td>
            <input
              type="checkbox"
              name="id"
              value={t.id}
              form="bulk"
              id={`pick-${t.id}`}
              aria-label={`Choose trajectory ${t.id}`}
            />
          </td>
          <th scope="row">
            <a href={trajectoryHref(t.id)} title={t.id}>
              <code>{t.id.length > 14 ? `${t.id.slice(0, 12)}…` : t.id}</code>
            </a>
          </th>
          <td>
            <Clip text={t.channel} max={8} />
          </td>
          <td>
            <a href={groupHref(t.channel, t.groupId)}>
              <Clip text={t.groupId} max={16} />
            </a>
          </td>
          <td>{t.taskId === null ? <span class="muted">–</span> : <Clip text={t.taskId} max={14} />}</td>
          <TrajectoryCells trajectory={t} />
        </tr>
      ))}
    </tbody>
  );
}

export interface ListPageProps {
  values: ListFormValues;
  /** null when the filters were invalid (nothing was queried). */
  result: ResultPage<Trajectory> | null;
  page: number;
  errors: string[];
  /** This page's own URL: the bulk form returns here. */
  self: string;
}

export function ListPage({ values, result, page, errors, self }: ListPageProps) {
  const from = (page - 1) * PAGE_SIZE;
  const pages = result ? Math.max(1, Math.ceil(result.total / PAGE_SIZE)) : 1;
  return (
    <Page title="Trajectories" current={LIST_PATH} scripts={['trajectory.js']}>
      <Filters values={values} />
      <Alert errors={errors} />
      {result === null ? null : (
        <>
          <p class="summary" aria-live="polite">
            <strong id="traj-total">{fmt(result.total)}</strong>{' '}
            {result.total === 1 ? 'trajectory' : 'trajectories'}
            {result.items.length > 0
              ? ` · showing ${fmt(from + 1)}–${fmt(from + result.items.length)} · page ${page} of ${pages}`
              : ''}
          </p>
          <form
            id="bulk"
            method="post"
            action="/dashboard/labels"
            class="bulk"
            aria-label="Curate chosen trajectories"
          >
            <input type="hidden" name="back" value={self} />
            <CsrfField />
            <span class="muted">With the chosen rows:</span>
            <button type="submit" name="action" value="untrainable">
              Mark untrainable
            </button>
            <button type="submit" name="action" value="trainable">
              Mark trainable
            </button>
            <label for="bulk-tag">Tag</label>
            <input id="bulk-tag" name="tag" size={12} />
            <button type="submit" name="action" value="tag">
              Add tag
            </button>
          </form>
          {result.items.length === 0 ? (
            <p class="muted">
              {page > 1 ? 'No trajectories on this page.' : 'No trajectories match these filters.'}
            </p>
          ) : (
            <div class="table-wrap">
              <table class="trajectories">
                <caption class="sr-only">Trajectories matching the filters</caption>
                <thead>
                  <tr>
                    <th scope="col">
                      <input
                        type="checkbox"
                        id="pick-all"
                        aria-label="Choose every row on this page"
                        hidden
                      />
                    </th>
                    <th scope="col">id</th>
                    <th scope="col">channel</th>
                    <th scope="col">group</th>
                    <th scope="col">task</th>
                    <TrajectoryHeaderCells />
                  </tr>
                </thead>
                <Rows items={result.items} />
              </table>
            </div>
          )}
          <nav class="pager" aria-label="Pages">
            {page > 1 ? (
              <a href={listUrl(values, page - 1)} rel="prev">
                ← previous
              </a>
            ) : (
              <span class="muted">← previous</span>
            )}
            {from + result.items.length < result.total ? (
              <a href={listUrl(values, page + 1)} rel="next">
                next →
              </a>
            ) : (
              <span class="muted">next →</span>
            )}
          </nav>
        </>
      )}
    </Page>
  );
}

import type { Hono } from 'hono';
import { z } from 'zod';
import { ChannelName, fromZodError, type Trajectory } from '../../domain/index.js';
import type { DataPool } from '../../pool/data-pool.js';
import type { GymRunSummary } from '../../store/store.js';
import { formatTime } from '../assets/event-summary.js';
import { fmt, Page } from '../layout.js';
import type { DashboardEnv, DashboardOptions } from '../options.js';
import { html } from '../respond.js';
import { Bars } from './overview.js';

/*
 * Gym: the evaluation runs the store holds (trajectories carrying metadata run_id, task_id and
 * category): one row per run with its scores, mean score per category as bars, and one run's tasks
 * (the newest run's unless another is chosen) with links into its trajectories.
 */

const RUNS = 50;
/** Trajectories of the run's channel read for its task table (newest first). */
const TASK_SCAN = 2000;

const blank = (v: unknown) => (v === '' ? undefined : v);
const GymQuery = z.object({
  run: z.preprocess(blank, z.string().max(256, 'must be at most 256 characters').optional()),
  channel: z.preprocess(blank, ChannelName.optional()),
});

const pct = (v: number | null) => (v === null ? '–' : `${(100 * v).toFixed(1)}%`);
const runHref = (r: GymRunSummary) =>
  `/dashboard/gym?${new URLSearchParams({ run: r.runId, channel: r.channel })}#tasks`;
const trajectoriesHref = (channel: string, task?: string) =>
  `/dashboard/trajectories?${new URLSearchParams(task === undefined ? { channel } : { channel, task })}`;

function When({ ts }: { ts: number }) {
  return <time datetime={new Date(ts).toISOString()}>{formatTime(ts)}</time>;
}

interface TaskRow {
  task: string;
  category: string;
  samples: number;
  scored: number;
  sum: number;
  passed: number;
  infra: number;
}

/** A run's tasks from its trajectories (the newest TASK_SCAN of its channel), as gymRuns counts them. */
async function runTasks(
  pool: DataPool,
  run: GymRunSummary,
): Promise<{ tasks: TaskRow[]; complete: boolean }> {
  const page = await pool.listTrajectories({
    channel: run.channel,
    probe: false,
    derived: false,
    limit: TASK_SCAN,
    offset: 0,
  });
  const byTask = new Map<string, TaskRow>();
  const mine = page.items.filter((t: Trajectory) => String(t.metadata.run_id ?? '') === run.runId);
  for (const t of mine) {
    const task = t.taskId ?? '';
    const category = typeof t.metadata.category === 'string' ? t.metadata.category : '';
    const key = `${category}\u0000${task}`;
    const row = byTask.get(key) ?? { task, category, samples: 0, scored: 0, sum: 0, passed: 0, infra: 0 };
    row.samples++;
    if (t.status === 'infra_failed') row.infra++;
    if (t.status === 'complete' && t.reward !== null) {
      row.scored++;
      row.sum += t.reward;
      if (t.reward >= 1) row.passed++;
    }
    byTask.set(key, row);
  }
  const tasks = [...byTask.values()].sort((a, b) =>
    a.category === b.category ? a.task.localeCompare(b.task) : a.category.localeCompare(b.category),
  );
  return { tasks, complete: page.total <= TASK_SCAN };
}

function RunsTable({ runs, selected }: { runs: GymRunSummary[]; selected: GymRunSummary | null }) {
  return (
    <table class="runs">
      <thead>
        <tr>
          <th scope="col">run</th>
          <th scope="col">channel</th>
          <th scope="col">started (UTC)</th>
          <th scope="col">finished (UTC)</th>
          <th scope="col" class="num">
            tasks
          </th>
          <th scope="col" class="num">
            samples
          </th>
          <th scope="col" class="num">
            mean score
          </th>
          <th scope="col" class="num">
            pass@1
          </th>
          <th scope="col" class="num">
            pass@k
          </th>
          <th scope="col" class="num">
            infra failures
          </th>
          <th scope="col">trajectories</th>
        </tr>
      </thead>
      <tbody>
        {runs.map((r) => (
          <tr
            data-run-id={r.runId}
            aria-current={
              selected && selected.runId === r.runId && selected.channel === r.channel ? 'true' : undefined
            }
          >
            <th scope="row">
              <a href={runHref(r)}>{r.runId}</a>
            </th>
            <td>{r.channel}</td>
            <td class="nowrap">
              <When ts={r.startedAt} />
            </td>
            <td class="nowrap">
              {r.finishedAt === null ? <span class="tag">running</span> : <When ts={r.finishedAt} />}
            </td>
            <td class="num">{fmt(r.tasks)}</td>
            <td class="num">{fmt(r.samples)}</td>
            <td class="num" data-field="mean-score">
              {fmt(r.meanScore)}
            </td>
            <td class="num">{pct(r.passAt1)}</td>
            <td class="num">{pct(r.passAtK)}</td>
            <td class="num">{fmt(r.infraFailed)}</td>
            <td>
              <a href={trajectoriesHref(r.channel)}>{`in ${r.channel}`}</a>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function RunTasks({ run, tasks, complete }: { run: GymRunSummary; tasks: TaskRow[]; complete: boolean }) {
  return (
    <section class="card" aria-labelledby="tasks" id="run-tasks">
      <h2 id="tasks">{`Tasks of run ${run.runId} (${run.channel})`}</h2>
      {complete ? null : (
        <p class="muted">{`From the newest ${fmt(TASK_SCAN)} trajectories of the channel: older samples are not counted here.`}</p>
      )}
      {tasks.length === 0 ? (
        <p class="muted">No trajectories of this run among them.</p>
      ) : (
        <table class="tasks">
          <thead>
            <tr>
              <th scope="col">task</th>
              <th scope="col">category</th>
              <th scope="col" class="num">
                samples
              </th>
              <th scope="col" class="num">
                mean score
              </th>
              <th scope="col" class="num">
                passed
              </th>
              <th scope="col" class="num">
                infra failures
              </th>
            </tr>
          </thead>
          <tbody>
            {tasks.map((t) => (
              <tr>
                <th scope="row">
                  {t.task === '' ? (
                    <span class="muted">no task id</span>
                  ) : (
                    <a href={trajectoriesHref(run.channel, t.task)}>{t.task}</a>
                  )}
                </th>
                <td>{t.category || 'uncategorized'}</td>
                <td class="num">{fmt(t.samples)}</td>
                <td class="num">{fmt(t.scored === 0 ? null : t.sum / t.scored)}</td>
                <td class="num">{`${t.passed} / ${t.scored}`}</td>
                <td class="num">{fmt(t.infra)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function GymPage({
  runs,
  selected,
  tasks,
  error,
}: {
  runs: GymRunSummary[];
  selected: GymRunSummary | null;
  tasks: { tasks: TaskRow[]; complete: boolean } | null;
  error?: string;
}) {
  return (
    <Page title="Gym" current="/dashboard/gym">
      {error ? (
        <p class="error" role="alert">
          {error}
        </p>
      ) : null}
      {runs.length === 0 ? (
        <p class="muted">
          No gym runs in this store yet: <code>stepwise gym run</code> records each sample as a trajectory
          with its run id, task and category.
        </p>
      ) : (
        <>
          <section class="card" aria-labelledby="runs">
            <h2 id="runs">Runs</h2>
            <p class="muted">
              Newest first. Mean score over scored samples; pass@1: share of scored samples scoring 1; pass@k:
              share of tasks with a sample scoring 1.
            </p>
            <RunsTable runs={runs} selected={selected} />
          </section>
          <section class="grid category-bars" aria-label="Scores by category">
            {runs.map((r) => (
              <Bars
                label={`Mean score by category: ${r.runId} (${r.channel})`}
                entries={r.categories.map((c) => [
                  c.meanScore === null ? `${c.category} (no scores)` : c.category,
                  c.meanScore ?? 0,
                ])}
              />
            ))}
          </section>
        </>
      )}
      {selected && tasks ? <RunTasks run={selected} tasks={tasks.tasks} complete={tasks.complete} /> : null}
    </Page>
  );
}

export function mountGymPages(app: Hono<DashboardEnv>, { pool }: DashboardOptions): void {
  app.get('/dashboard/gym', async (c) => {
    const parsed = GymQuery.safeParse({ run: c.req.query('run'), channel: c.req.query('channel') });
    const runs = await pool.store.gymRuns(RUNS);
    if (!parsed.success)
      return html(
        c,
        <GymPage runs={runs} selected={null} tasks={null} error={fromZodError(parsed.error).message} />,
        400,
      );
    const { run, channel } = parsed.data;
    const selected =
      run === undefined
        ? (runs[0] ?? null)
        : (runs.find((r) => r.runId === run && (channel === undefined || r.channel === channel)) ?? null);
    if (run !== undefined && selected === null)
      return html(
        c,
        <GymPage
          runs={runs}
          selected={null}
          tasks={null}
          error={`run ${run}: not among the ${RUNS} newest runs`}
        />,
        404,
      );
    const tasks = selected ? await runTasks(pool, selected) : null;
    return html(c, <GymPage runs={runs} selected={selected} tasks={tasks} />);
  });
}

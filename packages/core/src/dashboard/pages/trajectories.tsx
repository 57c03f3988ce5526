import type { Context, Hono } from 'hono';
import { derivedTrajectoryId } from '../../curation/cleaner/derive.js';
import {
  ChannelName,
  ClientId,
  fromZodError,
  LabelInput,
  LIST_METADATA_BYTES,
  MAX_METADATA_BYTES,
  StepwiseError,
  type Trajectory,
} from '../../domain/index.js';
import type { DataPool } from '../../pool/data-pool.js';
import type { DashboardEnv, DashboardOptions } from '../options.js';
import { html, readForm } from '../respond.js';
import { type GroupDetail, GroupPage, MAX_GROUP_TRAJECTORIES } from './group.js';
import { errorPage, LIST_PATH, rawTrajectoryHref, trajectoryHref } from './trajectories/common.js';
import { TokenDecoders } from './trajectories/decoders.js';
import { DetailPage, type TrajectoryDetail } from './trajectories/detail.js';
import { parseListFilters } from './trajectories/filters.js';
import {
  bulkLabels,
  isStepIndex,
  labelFormValues,
  labelsFromForm,
  parseBulk,
} from './trajectories/label-forms.js';
import { ListPage } from './trajectories/list.js';

/*
 * Trajectory pages: the filtered list (compact rows from listTrajectories), one trajectory in full
 * (its steps read once), its group with the packed prefix tree, and the curation forms, which write
 * labels with author `dashboard` and send the browser back where it came from (303). A bad form or
 * filter is answered with the page again and a message naming the field; nothing is written.
 */

type Ctx = Context<DashboardEnv>;

/** The list page for a query string's filters, with any errors from a form posted on it. */
async function renderList(
  c: Ctx,
  pool: DataPool,
  raw: Record<string, string>,
  self: string,
  errors: string[] = [],
) {
  const filters = parseListFilters(raw);
  if (!filters.ok)
    return html(
      c,
      <ListPage
        values={filters.values}
        result={null}
        page={1}
        errors={[...errors, ...filters.errors]}
        self={self}
      />,
      400,
    );
  const result = await pool.listTrajectories({ ...filters.query, inlineMetadataBytes: LIST_METADATA_BYTES });
  return html(
    c,
    <ListPage values={filters.values} result={result} page={filters.page} errors={errors} self={self} />,
    errors.length > 0 ? 400 : 200,
  );
}

async function loadDetail(pool: DataPool, t: Trajectory, decoders: TokenDecoders): Promise<TrajectoryDetail> {
  const [steps, group, signals, current, history, original, derived] = await Promise.all([
    pool.getTrajectorySteps(t.id),
    pool.store.getGroup(t.channel, t.groupId),
    pool.getSignals(t.id),
    pool.store.getCurrentLabels(t.id),
    pool.labels(t.id),
    t.derivedFrom === null
      ? null
      : pool
          .getTrajectory(t.derivedFrom)
          .then(async (o) => (o ? { trajectory: o, steps: await pool.getTrajectorySteps(o.id) } : null)),
    // CLEANER's offline ids are a hash of the source: one lookup finds a purified version.
    t.derivedFrom === null ? pool.getTrajectory(derivedTrajectoryId(t.id)) : null,
  ]);
  return { trajectory: t, steps, group, signals, current, history, original, derived, decoders };
}

/** A stored trajectory named by the route, or the error page to answer instead. */
async function findTrajectory(c: Ctx, pool: DataPool): Promise<Trajectory | Response> {
  const parsed = ClientId.safeParse(c.req.param('id'));
  if (!parsed.success) return errorPage(c, 400, fromZodError(parsed.error, 'trajectory id').message);
  const t = await pool.getTrajectory(parsed.data, { inlineMetadataBytes: MAX_METADATA_BYTES });
  return t ?? errorPage(c, 404, `No trajectory ${parsed.data}.`);
}

/** Turns a store's refusal (unknown step, bad label) into a message; anything else is a real fault. */
function refusal(error: unknown): string {
  if (error instanceof StepwiseError) return error.message;
  throw error;
}

/** The bulk form on the list: labels every checked trajectory, or answers the list with what was wrong. */
async function postBulkLabels(c: Ctx, pool: DataPool) {
  const { request, errors } = parseBulk(await readForm(c));
  const back = new URL(request.back, 'http://dashboard.invalid');
  const rerender = (messages: string[]) =>
    renderList(c, pool, Object.fromEntries(back.searchParams), request.back, messages);
  if (errors.length > 0) return rerender(errors);
  const currentTags = new Map<string, string[]>();
  if (request.action === 'tag') {
    await Promise.all(
      request.ids.map(async (id) => {
        const own = (await pool.store.getCurrentLabels(id)).find((l) => l.stepIndex === null);
        currentTags.set(id, own?.tags ?? []);
      }),
    );
  }
  const labels = bulkLabels(request, currentTags);
  for (const [i, label] of labels.entries()) {
    const checked = LabelInput.safeParse(label);
    if (!checked.success) return rerender([`${request.ids[i]}: ${fromZodError(checked.error).message}`]);
  }
  try {
    await pool.addLabels(labels);
  } catch (error) {
    return rerender([refusal(error)]);
  }
  return c.redirect(request.back, 303);
}

/** The label form on a trajectory's page: writes its labels, or answers the page with what was wrong. */
async function postTrajectoryLabels(c: Ctx, pool: DataPool, decoders: TokenDecoders) {
  const t = await findTrajectory(c, pool);
  if (t instanceof Response) return t;
  const form = labelFormValues(await readForm(c));
  const current = await pool.store.getCurrentLabels(t.id);
  let { labels, errors } = labelsFromForm(t.id, form, isStepIndex, current);
  if (errors.length === 0) {
    try {
      await pool.addLabels(labels);
    } catch (error) {
      errors = [refusal(error)];
    }
  }
  if (errors.length > 0)
    return html(
      c,
      <DetailPage d={await loadDetail(pool, t, decoders)} form={form} errors={errors} />,
      400,
      rawTrajectoryHref(t.id),
    );
  return c.redirect(`${trajectoryHref(t.id)}#labels`, 303);
}

/** A group's page: its record and up to MAX_GROUP_TRAJECTORIES trajectories with their steps. */
async function groupPage(c: Ctx, pool: DataPool, decoders: TokenDecoders) {
  const channel = ChannelName.safeParse(c.req.param('channel'));
  if (!channel.success) return errorPage(c, 400, fromZodError(channel.error, 'channel').message);
  const id = ClientId.safeParse(c.req.param('id'));
  if (!id.success) return errorPage(c, 400, fromZodError(id.error, 'group id').message);
  const [group, page] = await Promise.all([
    pool.store.getGroup(channel.data, id.data),
    pool.listTrajectories({
      channel: channel.data,
      groupId: id.data,
      limit: MAX_GROUP_TRAJECTORIES,
      offset: 0,
      inlineMetadataBytes: LIST_METADATA_BYTES,
    }),
  ]);
  if (!group && page.total === 0) return errorPage(c, 404, `No group ${id.data} in channel ${channel.data}.`);
  const trajectories = await Promise.all(
    page.items.map(async (trajectory) => ({
      trajectory,
      steps: await pool.getTrajectorySteps(trajectory.id),
    })),
  );
  const d: GroupDetail = {
    channel: channel.data,
    groupId: id.data,
    group,
    total: page.total,
    trajectories,
    decoders,
  };
  return html(c, <GroupPage d={d} />);
}

export function mountTrajectoryPages(app: Hono<DashboardEnv>, { pool, models }: DashboardOptions): void {
  // Pages that decode token ids wait for the decoding tables, which load off the event loop.
  const decoders = new TokenDecoders(models ?? []);
  const decoding = async (_: unknown, next: () => Promise<void>) => {
    await decoders.ready();
    await next();
  };
  app.use(`${LIST_PATH}/*`, decoding);
  app.use('/dashboard/groups/*', decoding);
  app.get(LIST_PATH, async (c) => {
    const url = new URL(c.req.url);
    return renderList(c, pool, c.req.query(), url.pathname + url.search);
  });
  app.post('/dashboard/labels', (c) => postBulkLabels(c, pool));
  app.get(`${LIST_PATH}/:id`, async (c) => {
    const t = await findTrajectory(c, pool);
    if (t instanceof Response) return t;
    return html(c, <DetailPage d={await loadDetail(pool, t, decoders)} />, 200, rawTrajectoryHref(t.id));
  });
  app.post(`${LIST_PATH}/:id/labels`, (c) => postTrajectoryLabels(c, pool, decoders));
  app.get('/dashboard/groups/:channel/:id', (c) => groupPage(c, pool, decoders));
}

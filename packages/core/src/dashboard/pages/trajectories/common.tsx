import type { Context } from 'hono';
import type { Trajectory } from '../../../domain/index.js';
import { fmt, Page } from '../../layout.js';
import { html } from '../../respond.js';

/* Small pieces the trajectory, group and curation pages share. */

export const LIST_PATH = '/dashboard/trajectories';

export const trajectoryHref = (id: string) => `${LIST_PATH}/${encodeURIComponent(id)}`;
/** A trajectory as stored, in full, as application/json (the API route; admin holds its scope). */
export const rawTrajectoryHref = (id: string) => `/v1/trajectories/${encodeURIComponent(id)}`;
export const groupHref = (channel: string, groupId: string) =>
  `/dashboard/groups/${encodeURIComponent(channel)}/${encodeURIComponent(groupId)}`;

/** A timestamp as people compare them (UTC, seconds), in a <time> element. */
export function Time({ ms }: { ms: number | null | undefined }) {
  if (ms === null || ms === undefined) return <span class="muted">–</span>;
  const iso = new Date(ms).toISOString();
  return <time datetime={iso}>{`${iso.slice(0, 10)} ${iso.slice(11, 19)}`}</time>;
}

/** A long id or name cut to fit a table cell; the whole value stays in the title and the text. */
export function Clip({ text, max = 14 }: { text: string; max?: number }) {
  return (
    <span class="clip" title={text} style={`max-width:${max}rem`}>
      {text}
    </span>
  );
}

/** The provenance badges a trajectory earns: guided, probe, derived. */
export function Badges({ trajectory: t }: { trajectory: Trajectory }) {
  return (
    <>
      {t.guided ? (
        <span class="tag guided">guided{t.guidanceK !== null ? ` k=${t.guidanceK}` : ''}</span>
      ) : null}
      {t.probe ? <span class="tag">probe</span> : null}
      {t.derivedFrom !== null ? <span class="tag derived">derived</span> : null}
    </>
  );
}

export function StatusTag({ status }: { status: Trajectory['status'] }) {
  const tone = status === 'complete' ? 'good' : status === 'open' ? '' : 'bad';
  return <span class={`tag ${tone}`}>{status}</span>;
}

/** The header cells over `TrajectoryCells`. */
export function TrajectoryHeaderCells() {
  return (
    <>
      <th scope="col">status</th>
      <th scope="col" class="num">
        reward
      </th>
      <th scope="col" class="num">
        steps
      </th>
      <th scope="col">kind</th>
      <th scope="col">created (UTC)</th>
    </>
  );
}

/** The cells every trajectory table ends with: status, reward, steps, kind, created. */
export function TrajectoryCells({ trajectory: t }: { trajectory: Trajectory }) {
  return (
    <>
      <td>
        <StatusTag status={t.status} />
      </td>
      <td class="num">{fmt(t.reward)}</td>
      <td class="num">{fmt(t.nSteps)}</td>
      <td>
        <Badges trajectory={t} />
      </td>
      <td>
        <Time ms={t.createdAt} />
      </td>
    </>
  );
}

/** A validation or lookup failure as a page: the message names the field; nothing was changed. */
export function errorPage(c: Context, status: 400 | 404, message: string) {
  return html(
    c,
    <Page title={status === 404 ? 'Not found' : 'Invalid request'} current={LIST_PATH}>
      <p class="error" role="alert">
        {message}
      </p>
      <p>
        <a href={LIST_PATH}>Back to the trajectories</a>
      </p>
    </Page>,
    status,
  );
}

export function Alert({ errors }: { errors: readonly string[] }) {
  if (errors.length === 0) return null;
  return (
    <div class="card error-box" role="alert">
      <p>
        <strong>{errors.length === 1 ? 'Fix this and try again:' : 'Fix these and try again:'}</strong>
      </p>
      <ul>
        {errors.map((e) => (
          <li>{e}</li>
        ))}
      </ul>
    </div>
  );
}

/** JSON.parse that answers undefined instead of throwing (tool-call arguments are model output). */
export function parseJsonSafe(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

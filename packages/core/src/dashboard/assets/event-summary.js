// Stepwise dashboard: one line of text (with links) for a pool event. Shared by the server, which
// renders the latest events into the page, and the events page script, which renders the live ones,
// so both say the same thing. Plain data out (text and links); each side makes its own markup.

const MAX_LINKS = 3;

/** A number as people read it: integers grouped, fractions to 3 places. */
function num(value) {
  if (typeof value !== 'number' || Number.isNaN(value)) return String(value ?? '–');
  return Number.isInteger(value) ? value.toLocaleString('en-US') : value.toFixed(3);
}

/** Hash-like ids shortened for the eye, long names cut in the middle; links keep the whole id. */
function short(id) {
  const s = String(id);
  if (/^[0-9a-f-]{21,}$/i.test(s)) return `${s.slice(0, 12)}…`;
  return s.length > 48 ? `${s.slice(0, 22)}…${s.slice(-22)}` : s;
}

function plural(n, word) {
  return `${num(n)} ${word}${n === 1 ? '' : 's'}`;
}

function clip(text, max) {
  const s = typeof text === 'string' ? text : JSON.stringify(text);
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

function trajectoryLink(id) {
  if (typeof id !== 'string') return '–';
  return { text: short(id), href: `/dashboard/trajectories/${encodeURIComponent(id)}`, title: id };
}

function groupLink(channel, id) {
  if (typeof id !== 'string') return '–';
  if (typeof channel !== 'string') return short(id);
  return {
    text: short(id),
    href: `/dashboard/groups/${encodeURIComponent(channel)}/${encodeURIComponent(id)}`,
    title: id,
  };
}

/** Up to MAX_LINKS items joined by commas, then "+N more". */
function some(items, toSegment) {
  const out = [];
  items.slice(0, MAX_LINKS).forEach((item, i) => {
    if (i > 0) out.push(', ');
    out.push(toSegment(item));
  });
  if (items.length > MAX_LINKS) out.push(` +${items.length - MAX_LINKS} more`);
  return out;
}

/**
 * The segments of an event's summary: strings, and links `{text, href, title}`. Concatenated as they
 * come (the segments carry their own spaces).
 */
export function eventSummary(event) {
  const d = event.data ?? {};
  const ch = event.channel;
  const step = d.step_index === null || d.step_index === undefined ? [] : [` step ${num(d.step_index)}`];
  switch (event.type) {
    case 'steps_submitted': {
      const ts = Array.isArray(d.trajectories) ? d.trajectories : [];
      return [
        `${plural(d.count, 'step')}: `,
        ...some(ts, (t) => [trajectoryLink(t.trajectory_uid), ` ×${num(t.count)}`]).flat(),
      ];
    }
    case 'trajectory_created':
      return ['trajectory ', trajectoryLink(d.trajectory_uid), ' in group ', groupLink(ch, d.group_id)];
    case 'trajectory_completed':
      return [
        trajectoryLink(d.trajectory_uid),
        ` ${d.status}`,
        d.reward === null || d.reward === undefined ? '' : `, reward ${num(d.reward)}`,
        d.reason ? ` (${d.reason})` : '',
        ' · group ',
        groupLink(ch, d.group_id),
      ];
    case 'group_ready':
      return [
        'group ',
        groupLink(ch, d.group_id),
        ` ready, ${num(d.n_complete)} complete`,
        d.partial ? ', partial' : '',
      ];
    case 'group_dropped':
      return ['group ', groupLink(ch, d.group_id), ` dropped: ${d.reason}`];
    case 'trajectory_excluded':
      return [trajectoryLink(d.trajectory_id), ` excluded: ${d.reason} · group `, groupLink(ch, d.group_id)];
    case 'batch_leased': {
      const ids = Array.isArray(d.group_ids) ? d.group_ids : [];
      return [
        `lease ${d.lease_id} to ${d.consumer}: ${plural(ids.length, 'group')} (`,
        ...some(ids, (id) => groupLink(ch, id)),
        `), ${plural(d.n_steps, 'step')}`,
      ];
    }
    case 'batch_acked':
    case 'batch_nacked':
      return [
        `lease ${d.lease_id} ${event.type === 'batch_acked' ? 'acked' : 'nacked'} by ${d.consumer}, ${plural(d.groups, 'group')}`,
      ];
    case 'lease_expired':
      return [`lease ${d.lease_id} of ${d.consumer} expired, ${plural(d.groups_returned, 'group')} returned`];
    case 'label_changed': {
      const what = [];
      if (d.quality) what.push(`quality ${d.quality}`);
      if (d.trainable !== null && d.trainable !== undefined)
        what.push(d.trainable ? 'trainable' : 'untrainable');
      if (Array.isArray(d.tags) && d.tags.length > 0) what.push(`tags ${d.tags.join(', ')}`);
      return [trajectoryLink(d.trajectory_uid), ...step, `: ${what.join('; ') || 'cleared'}`];
    }
    case 'policy_version_changed':
      return [`policy version ${num(d.previous)} → ${num(d.version)}`];
    case 'channel_configured':
      return [`configured${d.by ? ` by ${d.by}` : ''}: ${clip(d.config ?? {}, 120)}`];
    case 'signal_added':
      return [
        trajectoryLink(d.trajectory_uid),
        ...step,
        `: ${d.name} = ${typeof d.value === 'number' ? num(d.value) : clip(d.value, 40)}`,
        d.source ? ` from ${d.source}` : '',
        d.version ? ` (v${d.version})` : '',
      ];
    case 'call_failed':
      return [
        trajectoryLink(d.trajectory_uid),
        ` ${d.kind}`,
        d.status ? ` ${d.status}` : '',
        d.message ? `: ${clip(d.message, 120)}` : '',
      ];
    default:
      return [clip(d, 160)];
  }
}

/** Where a signal came from (only signal events carry one); null for the others. */
export function eventSource(event) {
  const source = event.data?.source;
  return typeof source === 'string' ? source : null;
}

/** A timestamp in UTC, to the second: the same text on the server and in every browser. */
export function formatTime(ts) {
  return new Date(ts).toISOString().slice(0, 19).replace('T', ' ');
}

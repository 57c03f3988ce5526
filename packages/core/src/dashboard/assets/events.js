// Stepwise dashboard, events page: follows the pool's event stream (SSE) from the log position the
// page was rendered at, newest on top, at most data-cap rows; pause holds new events (up to the cap)
// until resumed; the signal-source filter applies in place as soon as it is chosen.
import { eventSource, eventSummary, formatTime } from './event-summary.js';

const root = document.getElementById('event-log');
const url = root?.getAttribute('data-stream');
if (root && url) follow(root, url);

function follow(root, url) {
  const rows = document.getElementById('ev-rows');
  const status = document.getElementById('ev-status');
  const pause = document.getElementById('ev-pause');
  const sourceInput = document.getElementById('ev-source');
  const cap = Number(root.getAttribute('data-cap')) || 500;
  const types = JSON.parse(root.getAttribute('data-types') || '[]');
  let lastSeq = Number(new URL(url, location.href).searchParams.get('cursor')) || 0;
  let paused = false;
  let held = [];
  let heldTotal = 0;
  let state = 'connecting';

  const sourceFilter = () => sourceInput?.value.trim() ?? '';
  const visible = (source) => {
    const want = sourceFilter();
    return want === '' || source === want;
  };
  const show = () => {
    const text = paused
      ? `paused, ${heldTotal} new event${heldTotal === 1 ? '' : 's'} held`
      : state === 'live'
        ? `live from log position ${lastSeq}`
        : state;
    status.textContent = text;
    root.setAttribute('data-state', paused ? 'paused' : state);
  };

  const add = (event) => {
    rows.querySelector('tr.empty')?.remove();
    rows.prepend(eventRow(event, visible));
    while (rows.rows.length > cap) rows.lastElementChild.remove();
  };

  const receive = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    // A reconnect resumes from Last-Event-ID; never show an event twice.
    if (typeof event.seq !== 'number' || event.seq <= lastSeq) return;
    lastSeq = event.seq;
    if (paused) {
      held.push(event);
      heldTotal++;
      if (held.length > cap) held.shift();
    } else add(event);
    show();
  };

  openStream(url, types, receive, (next) => {
    state = next;
    show();
  });

  pause.hidden = false;
  pause.addEventListener('click', () => {
    paused = !paused;
    pause.textContent = paused ? 'Resume' : 'Pause';
    if (!paused) {
      for (const event of held) add(event);
      held = [];
      heldTotal = 0;
    }
    show();
  });

  sourceInput?.addEventListener('change', () => {
    for (const tr of rows.rows) {
      if (tr.classList.contains('empty')) continue;
      tr.hidden = !visible(tr.dataset.source ?? null);
    }
  });
  show();
}

/** One table row for an event, hidden when the source filter rules it out (as the server renders it). */
function eventRow(event, visible) {
  const tr = document.createElement('tr');
  tr.dataset.seq = String(event.seq);
  const source = eventSource(event);
  if (source !== null) tr.dataset.source = source;
  tr.hidden = !visible(source);
  const cell = (cls) => {
    const td = document.createElement('td');
    if (cls) td.className = cls;
    tr.append(td);
    return td;
  };
  cell('num').textContent = String(event.seq);
  const time = document.createElement('time');
  time.dateTime = new Date(event.ts).toISOString();
  time.textContent = formatTime(event.ts);
  cell('nowrap').append(time);
  const tag = document.createElement('span');
  tag.className = 'tag';
  tag.textContent = event.type;
  cell().append(tag);
  cell().textContent = event.channel ?? '–';
  const summary = cell('summary');
  for (const segment of eventSummary(event)) {
    if (typeof segment === 'string') summary.append(segment);
    else {
      const a = document.createElement('a');
      a.href = segment.href;
      a.title = segment.title;
      a.textContent = segment.text;
      summary.append(a);
    }
  }
  return tr;
}

/** Follows the stream: each event type to `receive`, each change of connection state to `onState`. */
function openStream(url, types, receive, onState) {
  const stream = new EventSource(url);
  for (const type of types) stream.addEventListener(type, receive);
  stream.addEventListener('open', () => onState('live'));
  stream.addEventListener('error', () =>
    onState(stream.readyState === EventSource.CLOSED ? 'disconnected (reload to retry)' : 'reconnecting…'),
  );
  window.addEventListener('pagehide', () => stream.close());
}

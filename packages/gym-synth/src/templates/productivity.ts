import { addDays, byString, hhmm, inOrderRegex, minutesOf, pyFixed, toCsv } from '../format.js';
import type { Persona } from '../personas.js';
import type { Rng } from '../rng.js';
import {
  act,
  check,
  family,
  fullNames,
  givenNames,
  PY_READ_CSV,
  type TaskTemplate,
  type TemplateContext,
} from '../template.js';

const CATEGORY = 'Productivity & Collaboration' as const;

// ---- shared draws -------------------------------------------------------------------------------

/** A date in 2024–2025 (ISO), on a weekday when `weekdayOnly`. */
export function someDate(rng: Rng, weekdayOnly = false): string {
  for (;;) {
    const iso = addDays('2024-01-08', rng.int(0, 700));
    const day = new Date(`${iso}T00:00:00Z`).getUTCDay();
    if (!weekdayOnly || (day !== 0 && day !== 6)) return iso;
  }
}

const CHORES: ReadonlyArray<(item: string, place: string) => string> = [
  (i) => `Confirm ${i} pricing with the supplier`,
  (_, p) => `Draft the ${p} update for the newsletter`,
  (i) => `Book a call about ${i} delivery`,
  (i) => `Review the ${i} budget`,
  (_, p) => `Collect feedback from ${p}`,
  (i) => `Update the ${i} signage`,
  (i) => `Share photos of the new ${i}`,
  (_, p) => `Schedule a ${p} walkthrough`,
  (i) => `Write the ${i} FAQ`,
  (i, p) => `Move ${i} stock to ${p}`,
  (_, p) => `Send the ${p} schedule to everyone`,
  (i) => `Compare quotes for ${i}`,
];

/** `k` distinct chores drawn from the persona's items and places. */
export function chores(ctx: TemplateContext, k: number): string[] {
  const out = new Set<string>();
  while (out.size < k) {
    out.add(ctx.rng.pick(CHORES)(ctx.rng.pick(ctx.persona.items), ctx.rng.pick(ctx.persona.places)));
  }
  return [...out];
}

// ---- meeting actions ----------------------------------------------------------------------------

const MEETING = { csv: 'output/action_items.csv', owners: 'output/owners.json' } as const;

type ActionItem = { owner: string; task: string; due: string; done: boolean };

/** The notes' Markdown: about a third of the items carried over from last time, the rest new. */
function meetingNotes(
  { rng, persona }: TemplateContext,
  slug: string,
  date: string,
  people: readonly string[],
  items: readonly ActionItem[],
): string {
  const line = (it: ActionItem) => `- [${it.done ? 'x' : ' '}] @${it.owner}: ${it.task} (due ${it.due})`;
  const carried = rng.shuffle(items).slice(0, Math.ceil(items.length / 3));
  const fresh = items.filter((it) => !carried.includes(it));
  return [
    `# ${persona.org} — ${slug.slice(11)} meeting (${date})`,
    `Attendees: ${people.join(', ')}`,
    '',
    '## Follow-ups from last time',
    ...carried.map(line),
    '',
    '## Discussion',
    `- We talked about ${persona.event} and agreed ${people[0]} keeps the running list.`,
    `- ${people[1]} noted that ${rng.pick(persona.items)} numbers look steady.`,
    '- Nobody objected to moving the next meeting by a week.',
    '',
    '## New action items',
    ...fresh.map(line),
    '',
  ].join('\n');
}

const meetingActions = family({
  id: 'productivity.meeting-actions',
  category: CATEGORY,
  summary: 'extract open action items from meeting notes into a sorted CSV and a per-owner JSON summary',
  difficulty: 'easy',
  skills: ['markdown parsing', 'csv', 'json', 'sorting'],
  draw(ctx) {
    const { rng } = ctx;
    const people = givenNames(rng, rng.int(3, 5));
    const date = someDate(rng, true);
    const all = chores(ctx, rng.int(7, 11));
    const items: ActionItem[] = all.map((task, i) => ({
      owner: rng.pick(people),
      task,
      due: addDays(date, rng.int(2, 21)),
      done: i < 2 || rng.chance(0.15),
    }));
    const slug = `${date}-${rng.pick(['planning', 'sync', 'weekly', 'kickoff'])}`;
    const notes = meetingNotes(ctx, slug, date, people, items);
    const open = items
      .filter((it) => !it.done)
      .sort((a, b) => byString(a.due, b.due) || byString(a.owner, b.owner) || byString(a.task, b.task));
    // Every task needs an open item to check.
    if (open.length === 0) throw new Error('no open items');
    const byOwner: Record<string, number> = {};
    for (const it of [...open].sort((a, b) => byString(a.owner, b.owner)))
      byOwner[it.owner] = (byOwner[it.owner] ?? 0) + 1;
    return { people, items, notesPath: `notes/${slug}.md`, notes, open, byOwner };
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}, and after every team meeting I copy the action items into our tracker by hand. Please do it for the last meeting.`,
    inputs: [[d.notesPath, 'the meeting notes (Markdown)']],
    steps: [
      'An action item is a line of the form "- [ ] @Owner: task (due YYYY-MM-DD)". Lines with "[x]" are done: skip them. Items can appear in any section of the notes.',
      'Write every open item to the CSV with the columns owner, task, due (owner without the "@", task without the due part).',
      'Sort the rows by due date ascending, then owner, then task.',
      'Summarize in JSON: "open_items" (number of open items), "by_owner" (object: owner -> number of open items, only owners who have some), "next_due" (the earliest due date).',
    ],
    outputs: [
      [MEETING.csv, 'header row owner,task,due'],
      [MEETING.owners, 'the summary object'],
    ],
  }),
  files: (d) => [{ path: d.notesPath, content: d.notes }],
  checks: ({ open, byOwner }) => [
    check.nonEmpty('action_items_exists', MEETING.csv),
    check.parses('action_items_parses', MEETING.csv, 'csv'),
    check.columns('action_items_columns', MEETING.csv, ['owner', 'task', 'due']),
    check.rows(
      'action_items_rows_in_order',
      MEETING.csv,
      ['owner', 'task', 'due'],
      open.map((it) => [it.owner, it.task, it.due]),
      true,
    ),
    check.parses('owners_parses', MEETING.owners, 'json'),
    check.keys('owners_keys', MEETING.owners, ['open_items', 'by_owner', 'next_due']),
    check.value('open_items_count', MEETING.owners, '/open_items', open.length),
    check.value('by_owner_counts', MEETING.owners, '/by_owner', byOwner),
    check.value('next_due_date', MEETING.owners, '/next_due', open[0]!.due),
  ],
  reference: (d) => [
    act.ls('notes'),
    act.read(d.notesPath),
    act.python(meetingActionsScript(d.notesPath)),
    act.exec(`cat ${MEETING.owners} && head -n 4 ${MEETING.csv}`),
  ],
  params: (d) => ({ people: d.people.length, items: d.items.length, open: d.open.length }),
});

function meetingActionsScript(notesPath: string): string {
  return `${PY_READ_CSV}
import re
items = []
for line in open(${JSON.stringify(notesPath)}, encoding='utf-8').read().splitlines():
    m = re.match(r'^- \\[ \\] @([^:]+): (.+) \\(due (\\d{4}-\\d{2}-\\d{2})\\)$', line.strip())
    if m:
        items.append((m.group(1), m.group(2), m.group(3)))
items.sort(key=lambda r: (r[2], r[0], r[1]))
write_csv(${JSON.stringify(MEETING.csv)}, ['owner', 'task', 'due'], items)
by_owner = {}
for owner, _, _ in items:
    by_owner[owner] = by_owner.get(owner, 0) + 1
write_json(${JSON.stringify(MEETING.owners)}, {'open_items': len(items), 'by_owner': by_owner, 'next_due': items[0][2]})`;
}

// ---- common free slots --------------------------------------------------------------------------

const BUSY_TITLES = [
  'Standup',
  'Client call',
  'Focus block',
  'Lunch',
  'Vendor demo',
  'Interview',
  '1:1',
  'Site visit',
  'Budget review',
];

const SLOTS = {
  calendars: 'input/calendars.json',
  slots: 'output/free_slots.json',
  invite: 'output/invite.md',
} as const;

type Busy = { start: string; end: string; title: string };
type Slot = { start: string; end: string };

function calendarsOf(rng: Rng, people: readonly string[], ws: number, we: number) {
  return people.map((name) => {
    const blocks: Busy[] = [];
    const k = rng.int(2, 4);
    for (let i = 0; i < k; i++) {
      const s = ws + 15 * rng.int(0, (we - ws) / 15 - 2);
      const e = Math.min(we, s + 15 * rng.int(2, 8));
      blocks.push({ start: hhmm(s), end: hhmm(e), title: rng.pick(BUSY_TITLES) });
    }
    blocks.sort((a, b) => byString(a.start, b.start));
    return { name, busy: blocks };
  });
}

/** Common free runs of at least `duration` minutes; unlike the reference's sweep, it marks each busy minute. */
function freeSlots(
  calendars: ReadonlyArray<{ busy: readonly Busy[] }>,
  ws: number,
  we: number,
  duration: number,
): Slot[] {
  const busy = new Array<boolean>(we - ws).fill(false);
  for (const c of calendars)
    for (const b of c.busy) for (let m = minutesOf(b.start); m < minutesOf(b.end); m++) busy[m - ws] = true;
  const slots: Slot[] = [];
  let runStart: number | null = null;
  for (let m = ws; m <= we; m++) {
    const free = m < we && !busy[m - ws];
    if (free && runStart === null) runStart = m;
    if (!free && runStart !== null) {
      if (m - runStart >= duration) slots.push({ start: hhmm(runStart), end: hhmm(m) });
      runStart = null;
    }
  }
  return slots;
}

const commonFreeSlots = family({
  id: 'productivity.common-free-slots',
  category: CATEGORY,
  summary: "find everyone's common free time in a day's calendars and propose the first slot that fits",
  difficulty: 'medium',
  skills: ['calendars', 'interval arithmetic', 'json'],
  draw({ rng }) {
    for (;;) {
      const people = givenNames(rng, rng.int(3, 4));
      const date = someDate(rng, true);
      const start = rng.pick(['08:00', '08:30', '09:00']);
      const end = rng.pick(['16:30', '17:00', '17:30', '18:00']);
      const duration = rng.pick([30, 45, 60, 90]);
      const ws = minutesOf(start);
      const we = minutesOf(end);
      const calendars = calendarsOf(rng, people, ws, we);
      const slots = freeSlots(calendars, ws, we, duration);
      if (slots.length === 0 || slots.length > 5) continue;
      const first = slots[0]!;
      const firstFit = { start: first.start, end: hhmm(minutesOf(first.start) + duration) };
      const calendarsDoc = { date, working_hours: { start, end }, people: calendars };
      return { people, date, duration, slots, firstFit, calendarsDoc };
    }
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. I need a ${d.duration}-minute slot on ${d.date} when ${d.people.join(', ')} are all free, and I'm tired of comparing calendars by eye.`,
    inputs: [
      [
        SLOTS.calendars,
        'each person\'s busy blocks ("HH:MM" 24-hour times; a block ends at its end time) and our working hours',
      ],
    ],
    steps: [
      'Find the common free intervals: times inside the working hours when nobody is busy. Busy blocks may overlap; a free interval runs until the next busy block starts.',
      `Keep only free intervals at least ${d.duration} minutes long, in chronological order.`,
      'The proposal is the first kept interval, starting at its start and lasting exactly the meeting length.',
    ],
    outputs: [
      [
        SLOTS.slots,
        `JSON object with "date", "duration_minutes" (${d.duration}), "slots" (list of {"start": "HH:MM", "end": "HH:MM"}) and "first_fit" ({"start", "end"} of the proposal)`,
      ],
      [SLOTS.invite, `a short invite for the team that includes the line "Proposed: <date> <start>-<end>"`],
    ],
  }),
  files: (d) => [{ path: SLOTS.calendars, content: `${JSON.stringify(d.calendarsDoc, null, 2)}\n` }],
  checks: (d) => [
    check.nonEmpty('slots_file_exists', SLOTS.slots),
    check.parses('slots_file_parses', SLOTS.slots, 'json'),
    check.keys('slots_file_keys', SLOTS.slots, ['date', 'duration_minutes', 'slots', 'first_fit']),
    check.value('duration_recorded', SLOTS.slots, '/duration_minutes', d.duration),
    check.value('free_slots', SLOTS.slots, '/slots', d.slots),
    check.value('first_fit', SLOTS.slots, '/first_fit', d.firstFit),
    check.nonEmpty('invite_exists', SLOTS.invite),
    check.contains(
      'invite_proposes_first_fit',
      SLOTS.invite,
      `Proposed: ${d.date} ${d.firstFit.start}-${d.firstFit.end}`,
    ),
  ],
  reference: (d) => [
    act.read(SLOTS.calendars),
    act.python(commonFreeSlotsScript(d.duration)),
    act.exec(`cat ${SLOTS.slots} ${SLOTS.invite}`),
  ],
  params: (d) => ({ people: d.people.length, duration: d.duration, slots: d.slots.length }),
});

function commonFreeSlotsScript(duration: number): string {
  return `${PY_READ_CSV}
d = json.load(open(${JSON.stringify(SLOTS.calendars)}, encoding='utf-8'))
M = ${duration}
def mins(s):
    h, m = s.split(':')
    return int(h) * 60 + int(m)
def hm(x):
    return f'{x // 60:02d}:{x % 60:02d}'
ws, we = mins(d['working_hours']['start']), mins(d['working_hours']['end'])
busy = sorted((max(ws, mins(b['start'])), min(we, mins(b['end']))) for p in d['people'] for b in p['busy'])
slots, cur = [], ws
for s, e in busy:
    if s - cur >= M:
        slots.append((cur, s))
    cur = max(cur, e)
if we - cur >= M:
    slots.append((cur, we))
first = {'start': hm(slots[0][0]), 'end': hm(slots[0][0] + M)}
write_json(${JSON.stringify(SLOTS.slots)}, {'date': d['date'], 'duration_minutes': M, 'slots': [{'start': hm(s), 'end': hm(e)} for s, e in slots], 'first_fit': first})
names = ', '.join(p['name'] for p in d['people'])
write_text(${JSON.stringify(SLOTS.invite)}, f"# Team sync\\n\\nHi {names},\\n\\nProposed: {d['date']} {first['start']}-{first['end']}\\n\\nEveryone is free then; reply if that no longer works.\\n")`;
}

// ---- task board report --------------------------------------------------------------------------

const STATUSES = ['todo', 'in_progress', 'blocked', 'done'] as const;

const BOARD = {
  tasks: 'input/tasks.csv',
  summary: 'output/board_summary.json',
  standup: 'output/standup.md',
} as const;

type BoardTask = { id: string; title: string; assignee: string; status: string; points: number; due: string };

const byDueThenId = (a: { due: string; id: string }, b: { due: string; id: string }) =>
  byString(a.due, b.due) || byString(a.id, b.id);

/** Points, open points per assignee, overdue ids and the first open task, as the prompt defines them. */
function boardNumbers(tasks: readonly BoardTask[], assignees: readonly string[], today: string) {
  const open = tasks.filter((t) => t.status !== 'done');
  const total = tasks.reduce((s, t) => s + t.points, 0);
  const done = total - open.reduce((s, t) => s + t.points, 0);
  const byAssignee: Record<string, number> = {};
  for (const a of [...assignees].sort(byString)) {
    if (!tasks.some((t) => t.assignee === a)) continue;
    byAssignee[a] = open.filter((t) => t.assignee === a).reduce((s, t) => s + t.points, 0);
  }
  const overdue = open
    .filter((t) => t.due < today)
    .sort(byDueThenId)
    .map((t) => t.id);
  const sample = open.sort(byDueThenId)[0]!;
  return { total, done, pct: (done * 100) / total, byAssignee, overdue, sample };
}

const taskBoardReport = family({
  id: 'productivity.task-board-report',
  category: CATEGORY,
  summary:
    'summarize a task board CSV: points, completion, open work per assignee, overdue tasks, standup notes',
  difficulty: 'medium',
  skills: ['csv', 'aggregation', 'dates', 'markdown'],
  draw(ctx) {
    const { rng } = ctx;
    const today = someDate(rng, true);
    const assignees = givenNames(rng, rng.int(3, 4));
    const titles = chores(ctx, rng.int(9, 13));
    const first = rng.int(100, 400);
    const tasks: BoardTask[] = titles.map((title, i) => ({
      id: `T-${first + i}`,
      title,
      assignee: rng.pick(assignees),
      status: i === 0 ? 'done' : i === 1 ? 'todo' : rng.pick(STATUSES),
      points: rng.pick([1, 2, 3, 5, 8]),
      due: addDays(today, i === 1 ? -rng.int(1, 6) : rng.int(-10, 14)),
    }));
    return { today, tasks, ...boardNumbers(tasks, assignees, today) };
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. Our task board for ${persona.event} is exported below; today is ${d.today}. Please prepare the numbers and the standup notes.`,
    inputs: [
      [
        BOARD.tasks,
        'columns id, title, assignee, status (todo, in_progress, blocked, done), points, due (YYYY-MM-DD)',
      ],
    ],
    steps: [
      'A task is open unless its status is "done". A task is overdue when it is open and its due date is before today.',
      'Compute "total_points" (all tasks), "done_points", "completion_pct" (done_points / total_points * 100, rounded to one decimal), "open_points_by_assignee" (every assignee in the file -> sum of points of their open tasks, 0 if none) and "overdue" (ids of overdue tasks sorted by due date, then id).',
      `Write standup notes: a first line "# Standup ${d.today}", then one "## <assignee>" section per assignee in alphabetical order, listing each open task as "- <id> <title> [<status>]" (sorted by due date, then id), or "- nothing open".`,
    ],
    outputs: [
      [BOARD.summary, 'the five fields above'],
      [BOARD.standup, 'the standup notes'],
    ],
  }),
  files: (d) => [
    {
      path: BOARD.tasks,
      content: toCsv(
        ['id', 'title', 'assignee', 'status', 'points', 'due'],
        d.tasks.map((t) => [t.id, t.title, t.assignee, t.status, t.points, t.due]),
      ),
    },
  ],
  checks: (d) => [
    check.nonEmpty('summary_exists', BOARD.summary),
    check.parses('summary_parses', BOARD.summary, 'json'),
    check.keys('summary_keys', BOARD.summary, [
      'total_points',
      'done_points',
      'completion_pct',
      'open_points_by_assignee',
      'overdue',
    ]),
    check.value('total_points', BOARD.summary, '/total_points', d.total),
    check.value('done_points', BOARD.summary, '/done_points', d.done),
    check.value('completion_pct', BOARD.summary, '/completion_pct', Number(pyFixed(d.pct, 1)), 0.051),
    check.value('open_points_by_assignee', BOARD.summary, '/open_points_by_assignee', d.byAssignee),
    check.value('overdue_ids', BOARD.summary, '/overdue', d.overdue),
    check.contains('standup_title', BOARD.standup, `# Standup ${d.today}`),
    check.matches(
      'standup_sections_in_order',
      BOARD.standup,
      inOrderRegex(Object.keys(d.byAssignee).map((a) => `## ${a}`)),
    ),
    check.contains(
      'standup_lists_open_task',
      BOARD.standup,
      `- ${d.sample.id} ${d.sample.title} [${d.sample.status}]`,
    ),
  ],
  reference: (d) => [
    act.read(BOARD.tasks),
    act.python(taskBoardScript(d.today)),
    act.exec(`cat ${BOARD.summary} && cat ${BOARD.standup}`),
  ],
  params: (d) => ({
    tasks: d.tasks.length,
    assignees: Object.keys(d.byAssignee).length,
    overdue: d.overdue.length,
  }),
});

function taskBoardScript(today: string): string {
  return `${PY_READ_CSV}
rows = read_csv(${JSON.stringify(BOARD.tasks)})
today = ${JSON.stringify(today)}
open_rows = [r for r in rows if r['status'] != 'done']
total = sum(int(r['points']) for r in rows)
done = sum(int(r['points']) for r in rows if r['status'] == 'done')
names = sorted(set(r['assignee'] for r in rows))
by = {n: sum(int(r['points']) for r in open_rows if r['assignee'] == n) for n in names}
overdue = [r['id'] for r in sorted(open_rows, key=lambda r: (r['due'], r['id'])) if r['due'] < today]
write_json(${JSON.stringify(BOARD.summary)}, {'total_points': total, 'done_points': done, 'completion_pct': round(done * 100 / total, 1), 'open_points_by_assignee': by, 'overdue': overdue})
lines = ['# Standup ' + today, '']
for n in names:
    lines.append('## ' + n)
    mine = sorted((r for r in open_rows if r['assignee'] == n), key=lambda r: (r['due'], r['id']))
    lines += [f"- {r['id']} {r['title']} [{r['status']}]" for r in mine] or ['- nothing open']
    lines.append('')
write_text(${JSON.stringify(BOARD.standup)}, '\\n'.join(lines))`;
}

// ---- contact dedupe -----------------------------------------------------------------------------

const MAIL_DOMAINS = ['mail.example', 'inbox.example', 'post.example', 'corp.example'];

function phoneVariants(digits: string): string[] {
  const a = digits.slice(0, 3);
  const b = digits.slice(3, 6);
  const c = digits.slice(6);
  return [`(${a}) ${b}-${c}`, `${a}.${b}.${c}`, `${a}-${b}-${c}`, `${a} ${b} ${c}`, digits];
}

const CONTACTS = {
  export: 'input/contacts_export.csv',
  clean: 'output/contacts_clean.csv',
  report: 'output/dedupe_report.json',
  columns: ['name', 'email', 'phone', 'company'],
} as const;

type ContactRow = { name: string; email: string; phone: string; company: string };

/** The export's rows: one per contact, messy, and a few duplicates inserted after their first row. */
function contactRows(rng: Rng, persona: Persona): ContactRow[] {
  const names = fullNames(rng, rng.int(7, 10));
  const companies = persona.places.map(
    (p) => `${p} ${rng.pick(['Partners', 'Group', 'Collective', 'Supply'])}`,
  );
  const contacts = names.map((name) => {
    const [f, l] = name.split(' ') as [string, string];
    return {
      name,
      email: `${f.toLowerCase()}.${l.toLowerCase()}@${rng.pick(MAIL_DOMAINS)}`,
      phone: Array.from({ length: 10 }, (_, i) => String(i === 0 ? rng.int(2, 9) : rng.int(0, 9))).join(''),
      company: rng.pick(companies),
    };
  });
  const rows: ContactRow[] = contacts.map((c) => ({
    name: rng.chance(0.3) ? `  ${c.name.replace(' ', '   ')} ` : c.name,
    email: c.email,
    phone: rng.chance(0.25) ? '' : rng.pick(phoneVariants(c.phone)),
    company: rng.chance(0.2) ? '' : c.company,
  }));
  const dupCount = rng.int(3, 5);
  for (let i = 0; i < dupCount; i++) {
    const c = rng.pick(contacts);
    const upper = c.email
      .replace(/^./, (ch) => ch.toUpperCase())
      .replace(/@(.)/, (_, ch: string) => `@${ch.toUpperCase()}`);
    const email = rng.pick([upper, ` ${c.email} `, c.email.toUpperCase()]);
    const dup = { name: c.name, email, phone: rng.pick(phoneVariants(c.phone)), company: c.company };
    rows.splice(rng.int(rows.indexOf(rows.find((r) => r.email === c.email)!) + 1, rows.length), 0, dup);
  }
  return rows;
}

const normalized = (r: ContactRow): ContactRow => ({
  name: r.name.trim().split(/\s+/).join(' '),
  email: r.email.trim().toLowerCase(),
  phone: r.phone.replace(/\D/g, ''),
  company: r.company.trim(),
});

/** Expected result, computed row by row: first row per email, gaps filled from later duplicates. */
function dedupe(rows: readonly ContactRow[]) {
  const kept = new Map<string, ContactRow>();
  let filled = 0;
  for (const raw of rows) {
    const r = normalized(raw);
    const have = kept.get(r.email);
    if (!have) kept.set(r.email, r);
    else {
      if (have.phone === '' && r.phone !== '') {
        have.phone = r.phone;
        filled++;
      }
      if (have.company === '' && r.company !== '') {
        have.company = r.company;
        filled++;
      }
    }
  }
  return { clean: [...kept.values()].sort((a, b) => byString(a.email, b.email)), filled };
}

const contactDedupe = family({
  id: 'productivity.contact-dedupe',
  category: CATEGORY,
  summary: 'normalize and deduplicate a contacts export by email, filling gaps from duplicates',
  difficulty: 'medium',
  skills: ['csv', 'data cleaning', 'deduplication'],
  draw({ rng, persona }) {
    const rows = contactRows(rng, persona);
    const phones = rng.pick(['two', 'three', 'four']);
    const source = rng.pick(['a spreadsheet', 'an old CRM export', 'a mailing-list export']);
    return { rows, ...dedupe(rows), phones, source };
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. Our contact list was merged from ${d.phones} phones and ${d.source}, so its ${d.rows.length} rows are full of duplicates. Please clean it up before I import it into ${persona.org}'s address book.`,
    inputs: [[CONTACTS.export, 'columns name, email, phone, company (some cells are empty)']],
    steps: [
      'Normalize every row: email trimmed and lower-cased; name trimmed with runs of spaces collapsed to one; phone reduced to its digits only (empty stays empty); company trimmed.',
      'Rows with the same normalized email are the same contact. Keep the first such row; if its phone or company is empty, fill it from the first later duplicate that has one.',
      'Sort the cleaned contacts by email.',
      'Report "input_rows" (data rows read), "unique_contacts", "duplicates_removed" and "fields_filled" (how many empty phone/company cells were filled from duplicates).',
    ],
    outputs: [
      [CONTACTS.clean, 'columns name,email,phone,company'],
      [CONTACTS.report, 'the four counts as a JSON object'],
    ],
  }),
  files: (d) => [
    {
      path: CONTACTS.export,
      content: toCsv(
        CONTACTS.columns,
        d.rows.map((r) => [r.name, r.email, r.phone, r.company]),
      ),
    },
  ],
  checks: ({ rows, clean, filled }) => [
    check.nonEmpty('clean_csv_exists', CONTACTS.clean),
    check.parses('clean_csv_parses', CONTACTS.clean, 'csv'),
    check.columns('clean_csv_columns', CONTACTS.clean, [...CONTACTS.columns]),
    check.rows(
      'clean_rows_sorted',
      CONTACTS.clean,
      [...CONTACTS.columns],
      clean.map((c) => [c.name, c.email, c.phone, c.company]),
      true,
    ),
    check.parses('report_parses', CONTACTS.report, 'json'),
    check.value('input_rows', CONTACTS.report, '/input_rows', rows.length),
    check.value('unique_contacts', CONTACTS.report, '/unique_contacts', clean.length),
    check.value('duplicates_removed', CONTACTS.report, '/duplicates_removed', rows.length - clean.length),
    check.value('fields_filled', CONTACTS.report, '/fields_filled', filled),
  ],
  reference: () => [
    act.read(CONTACTS.export),
    act.python(contactDedupeScript()),
    act.exec(`cat ${CONTACTS.report}; wc -l ${CONTACTS.clean}`),
  ],
  params: (d) => ({ rows: d.rows.length, unique: d.clean.length, filled: d.filled }),
});

function contactDedupeScript(): string {
  const cols = JSON.stringify(CONTACTS.columns);
  return `${PY_READ_CSV}
rows = read_csv(${JSON.stringify(CONTACTS.export)})
kept, order, filled = {}, [], 0
for r in rows:
    n = {'name': ' '.join(r['name'].split()), 'email': r['email'].strip().lower(),
         'phone': ''.join(ch for ch in r['phone'] if ch.isdigit()), 'company': r['company'].strip()}
    if n['email'] not in kept:
        kept[n['email']] = n
        continue
    have = kept[n['email']]
    for field in ('phone', 'company'):
        if not have[field] and n[field]:
            have[field] = n[field]
            filled += 1
clean = sorted(kept.values(), key=lambda c: c['email'])
write_csv(${JSON.stringify(CONTACTS.clean)}, ${cols}, [[c[k] for k in ${cols}] for c in clean])
write_json(${JSON.stringify(CONTACTS.report)}, {'input_rows': len(rows), 'unique_contacts': len(clean), 'duplicates_removed': len(rows) - len(clean), 'fields_filled': filled})`;
}

export const PRODUCTIVITY_TEMPLATES: readonly TaskTemplate[] = [
  meetingActions,
  commonFreeSlots,
  taskBoardReport,
  contactDedupe,
];

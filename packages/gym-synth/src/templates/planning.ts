import {
  addDays,
  byString,
  cents,
  centsValue,
  hhmm,
  inOrderRegex,
  minutesOf,
  slugify,
  toCsv,
  weekdayName,
} from '../format.js';
import type { Persona } from '../personas.js';
import type { Rng } from '../rng.js';
import {
  act,
  type CheckInput,
  check,
  family,
  givenNames,
  type PromptParts,
  PY_READ_CSV,
  type TaskTemplate,
  type TemplateContext,
} from '../template.js';
import { chores, someDate } from './productivity.js';

const CATEGORY = 'Planning & Knowledge' as const;

// ---- study plan ---------------------------------------------------------------------------------

const MODULE_TOPICS = [
  'Foundations',
  'Safety Basics',
  'Tools Overview',
  'Customer Care',
  'Budgeting',
  'Scheduling',
  'Quality Checks',
  'Reporting',
  'Negotiation',
  'Compliance',
];

const STUDY = {
  modules: 'input/modules.csv',
  constraints: 'input/constraints.json',
  plan: 'output/study_plan.csv',
  summary: 'output/plan_summary.json',
} as const;

/** Modules laid in order onto the study days (neither rest days nor blackout dates), hour by hour. */
function layOutStudy(
  modules: ReadonlyArray<{ module: string; hours: number }>,
  hoursPerDay: number,
  start: string,
  restDays: readonly string[],
  blackout: readonly string[],
) {
  const rows: Array<[string, string, number]> = [];
  const finish: Record<string, string> = {};
  let day = start;
  let studyDays = 0;
  const queue = modules.map((m) => ({ ...m }));
  while (queue.length > 0) {
    if (restDays.includes(weekdayName(day)) || blackout.includes(day)) {
      day = addDays(day, 1);
      continue;
    }
    studyDays++;
    let capacity = hoursPerDay;
    while (capacity > 0 && queue.length > 0) {
      const m = queue[0]!;
      const h = Math.min(capacity, m.hours);
      rows.push([day, m.module, h]);
      capacity -= h;
      m.hours -= h;
      if (m.hours === 0) {
        finish[m.module] = day;
        queue.shift();
      }
    }
    day = addDays(day, 1);
  }
  return { rows, finish, studyDays };
}

const studyPlan = family({
  id: 'planning.study-plan',
  category: CATEGORY,
  summary: 'lay training modules onto study days around rest days and blackout dates, hour by hour',
  difficulty: 'medium',
  skills: ['scheduling', 'dates', 'csv'],
  draw({ rng }) {
    const modules = rng
      .sample(MODULE_TOPICS, rng.int(4, 7))
      .map((m) => ({ module: m, hours: rng.int(2, 9) }));
    const hoursPerDay = rng.int(2, 4);
    const start = someDate(rng);
    const restDays = rng.pick([['Sunday'], ['Saturday', 'Sunday'], ['Wednesday', 'Sunday']]);
    const blackout = [addDays(start, rng.int(1, 6)), addDays(start, rng.int(7, 12))].filter(
      (d, i, a) => a.indexOf(d) === i,
    );
    const plan = layOutStudy(modules, hoursPerDay, start, restDays, blackout);
    const total = modules.reduce((s, m) => s + m.hours, 0);
    const studyDates = [...new Set(plan.rows.map((r) => r[0]))];
    return { modules, hoursPerDay, start, restDays, blackout, ...plan, total, studyDates };
  },
  prompt: (_, { persona }) => ({
    opening: `${persona.intro}. I'm putting new staff at ${persona.org} through a training course and want a day-by-day study plan.`,
    inputs: [
      [STUDY.modules, 'columns module, hours — the modules in the order they must be studied'],
      [
        STUDY.constraints,
        'start_date, hours_per_day, rest_days (weekday names) and blackout_dates (YYYY-MM-DD)',
      ],
    ],
    steps: [
      'Starting on start_date, every day that is neither a rest day nor a blackout date is a study day with hours_per_day hours.',
      'Fill study days with the modules in order: finish one module before starting the next; a module may continue on the next study day, and a day may hold the end of one module and the start of the next. Whole hours only.',
      'Write one row per (day, module) with the hours spent, in chronological order.',
      'Summary: "start_date" and "end_date" (first and last study day), "study_days", "total_hours" and "finish_dates" (module -> the day it is finished).',
    ],
    outputs: [
      [STUDY.plan, 'columns date,module,hours'],
      [STUDY.summary, 'the summary object'],
    ],
  }),
  files: (d) => [
    {
      path: STUDY.modules,
      content: toCsv(
        ['module', 'hours'],
        d.modules.map((m) => [m.module, m.hours]),
      ),
    },
    {
      path: STUDY.constraints,
      content: `${JSON.stringify({ start_date: d.start, hours_per_day: d.hoursPerDay, rest_days: d.restDays, blackout_dates: d.blackout }, null, 2)}\n`,
    },
  ],
  checks: (d) => [
    check.nonEmpty('plan_exists', STUDY.plan),
    check.columns('plan_columns', STUDY.plan, ['date', 'module', 'hours']),
    check.rows(
      'plan_rows_in_order',
      STUDY.plan,
      ['date', 'module', 'hours'],
      d.rows.map(([day, m, h]) => [day, m, String(h)]),
      true,
    ),
    check.parses('summary_parses', STUDY.summary, 'json'),
    check.value('start_date', STUDY.summary, '/start_date', d.studyDates[0]),
    check.value('end_date', STUDY.summary, '/end_date', d.studyDates.at(-1)),
    check.value('study_days', STUDY.summary, '/study_days', d.studyDays),
    check.value('total_hours', STUDY.summary, '/total_hours', d.total),
    check.value('finish_dates', STUDY.summary, '/finish_dates', d.finish),
  ],
  reference: () => [
    act.read(STUDY.modules),
    act.read(STUDY.constraints),
    act.python(studyPlanScript()),
    act.exec(`cat ${STUDY.summary}`),
  ],
  params: (d) => ({ modules: d.modules.length, hoursPerDay: d.hoursPerDay, studyDays: d.studyDays }),
});

function studyPlanScript(): string {
  return `${PY_READ_CSV}
from datetime import date, timedelta
mods = [[m['module'], int(m['hours'])] for m in read_csv(${JSON.stringify(STUDY.modules)})]
c = json.load(open(${JSON.stringify(STUDY.constraints)}))
day = date.fromisoformat(c['start_date'])
rows, finish, days = [], {}, []
while mods:
    if day.strftime('%A') in c['rest_days'] or day.isoformat() in c['blackout_dates']:
        day += timedelta(days=1)
        continue
    days.append(day.isoformat())
    cap = c['hours_per_day']
    while cap and mods:
        h = min(cap, mods[0][1])
        rows.append([day.isoformat(), mods[0][0], h])
        cap -= h
        mods[0][1] -= h
        if mods[0][1] == 0:
            finish[mods.pop(0)[0]] = day.isoformat()
    day += timedelta(days=1)
write_csv(${JSON.stringify(STUDY.plan)}, ['date', 'module', 'hours'], rows)
write_json(${JSON.stringify(STUDY.summary)}, {'start_date': days[0], 'end_date': days[-1], 'study_days': len(days), 'total_hours': sum(r[2] for r in rows), 'finish_dates': finish})`;
}

// ---- critical path ------------------------------------------------------------------------------

const CPM = {
  tasks: 'input/project_tasks.csv',
  schedule: 'output/schedule.csv',
  critical: 'output/critical_path.json',
  columns: ['id', 'earliest_start', 'earliest_finish', 'latest_start', 'slack'],
} as const;

type CpmTask = { id: string; name: string; duration: number; deps: string[] };

/** Forward and backward passes of the critical path method over tasks listed after their dependencies. */
function criticalPathOf(tasks: readonly CpmTask[]) {
  const es = new Map<string, number>();
  const ef = new Map<string, number>();
  for (const t of tasks) {
    const s = Math.max(0, ...t.deps.map((d) => ef.get(d)!));
    es.set(t.id, s);
    ef.set(t.id, s + t.duration);
  }
  const project = Math.max(...ef.values());
  const lf = new Map<string, number>();
  const ls = new Map<string, number>();
  for (const t of [...tasks].reverse()) {
    const succ = tasks.filter((u) => u.deps.includes(t.id));
    const f = succ.length === 0 ? project : Math.min(...succ.map((u) => ls.get(u.id)!));
    lf.set(t.id, f);
    ls.set(t.id, f - t.duration);
  }
  const rows = [...tasks].sort((a, b) => es.get(a.id)! - es.get(b.id)! || byString(a.id, b.id));
  const critical = rows.filter((t) => ls.get(t.id) === es.get(t.id)).map((t) => t.id);
  const schedule = rows.map((t) => [
    t.id,
    String(es.get(t.id)),
    String(ef.get(t.id)),
    String(ls.get(t.id)),
    String(ls.get(t.id)! - es.get(t.id)!),
  ]);
  return { project, critical, schedule };
}

const criticalPath = family({
  id: 'planning.critical-path',
  category: CATEGORY,
  summary: 'earliest start/finish, slack and the critical tasks of a dependency graph (CPM)',
  difficulty: 'hard',
  skills: ['project planning', 'graphs', 'critical path method'],
  draw(ctx) {
    const { rng } = ctx;
    const n = rng.int(7, 11);
    const names = chores(ctx, n);
    const tasks: CpmTask[] = names.map((name, i) => {
      const earlier = Array.from({ length: i }, (_, j) => `T${String(j + 1).padStart(2, '0')}`);
      const deps =
        i === 0
          ? []
          : rng.sample(earlier, Math.min(earlier.length, rng.int(i < 3 ? 1 : 0, 2))).sort(byString);
      return { id: `T${String(i + 1).padStart(2, '0')}`, name, duration: rng.int(1, 8), deps };
    });
    return { n, tasks, ...criticalPathOf(tasks), startDate: someDate(rng) };
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. We're preparing ${persona.event} (${d.n} tasks, starting ${d.startDate}) and I need to know which tasks can't slip.`,
    inputs: [
      [CPM.tasks, 'columns id, name, duration_days, depends_on (ids separated by ";", empty when none)'],
    ],
    steps: [
      'The project starts at day 0. A task starts when all tasks it depends on have finished: earliest_start = max earliest_finish of its dependencies (0 if none), earliest_finish = earliest_start + duration.',
      'The project duration is the largest earliest_finish. Going backwards: latest_finish = min latest_start of the tasks that depend on it (the project duration if none), latest_start = latest_finish - duration, slack = latest_start - earliest_start.',
      'Write one row per task sorted by earliest_start, then id.',
      'Also write "project_duration" and "critical_tasks" (ids with zero slack, in the same order as the schedule).',
    ],
    outputs: [
      [CPM.schedule, `columns ${CPM.columns.join(',')}`],
      [CPM.critical, 'the project duration and critical tasks'],
    ],
  }),
  files: (d) => [
    {
      path: CPM.tasks,
      content: toCsv(
        ['id', 'name', 'duration_days', 'depends_on'],
        d.tasks.map((t) => [t.id, t.name, t.duration, t.deps.join(';')]),
      ),
    },
  ],
  checks: (d) => [
    check.nonEmpty('schedule_exists', CPM.schedule),
    check.columns('schedule_columns', CPM.schedule, [...CPM.columns]),
    check.rows('schedule_rows', CPM.schedule, [...CPM.columns], d.schedule, true),
    check.parses('critical_path_parses', CPM.critical, 'json'),
    check.value('project_duration', CPM.critical, '/project_duration', d.project),
    check.value('critical_tasks', CPM.critical, '/critical_tasks', d.critical),
  ],
  reference: () => [
    act.read(CPM.tasks),
    act.python(criticalPathScript()),
    act.exec(`cat ${CPM.schedule} ${CPM.critical}`),
  ],
  params: (d) => ({ tasks: d.n, duration: d.project, critical: d.critical.length }),
});

function criticalPathScript(): string {
  return `${PY_READ_CSV}
tasks = read_csv(${JSON.stringify(CPM.tasks)})
deps = {t['id']: [d for d in t['depends_on'].split(';') if d] for t in tasks}
dur = {t['id']: int(t['duration_days']) for t in tasks}
es, ef = {}, {}
def finish(i):
    if i not in ef:
        es[i] = max((finish(d) for d in deps[i]), default=0)
        ef[i] = es[i] + dur[i]
    return ef[i]
for t in tasks:
    finish(t['id'])
total = max(ef.values())
ls = {}
def latest(i):
    if i not in ls:
        succ = [j for j in deps if i in deps[j]]
        ls[i] = min((latest(j) for j in succ), default=total) - dur[i]
    return ls[i]
order = sorted(dur, key=lambda i: (es[i], i))
rows = [[i, es[i], ef[i], latest(i), latest(i) - es[i]] for i in order]
write_csv(${JSON.stringify(CPM.schedule)}, ${JSON.stringify(CPM.columns)}, rows)
write_json(${JSON.stringify(CPM.critical)}, {'project_duration': total, 'critical_tasks': [r[0] for r in rows if r[4] == 0]})`;
}

// ---- room conflicts -----------------------------------------------------------------------------

const EVENT_TITLES = [
  'Team sync',
  'Supplier meeting',
  'Training',
  'Interview',
  'Budget review',
  'Workshop',
  'Client visit',
  'Planning session',
  'All hands',
  'Demo',
];

const ROOMS = {
  events: 'input/events.csv',
  conflicts: 'output/conflicts.csv',
  usage: 'output/room_usage.json',
  columns: ['date', 'room', 'first_id', 'second_id'],
} as const;

type RoomEvent = { id: string; title: string; date: string; start: string; end: string; room: string };

/** Every overlapping pair of events in the same room on the same day, sorted by date, room and ids. */
function roomConflicts(events: readonly RoomEvent[]): string[][] {
  const conflicts: string[][] = [];
  for (const a of events)
    for (const b of events) {
      if (a.id >= b.id || a.date !== b.date || a.room !== b.room) continue;
      if (minutesOf(a.start) < minutesOf(b.end) && minutesOf(b.start) < minutesOf(a.end))
        conflicts.push([a.date, a.room, a.id, b.id]);
    }
  return conflicts.sort(
    (x, y) =>
      byString(x[0]!, y[0]!) || byString(x[1]!, y[1]!) || byString(x[2]!, y[2]!) || byString(x[3]!, y[3]!),
  );
}

/** Per room that has events: their count and booked minutes. */
function roomUsage(rooms: readonly string[], events: readonly RoomEvent[]) {
  const usage = Object.fromEntries(
    [...rooms].sort(byString).map((r) => {
      const mine = events.filter((e) => e.room === r);
      return [
        r,
        {
          events: mine.length,
          booked_minutes: mine.reduce((s, e) => s + minutesOf(e.end) - minutesOf(e.start), 0),
        },
      ];
    }),
  );
  for (const [r, u] of Object.entries(usage)) if (u.events === 0) delete usage[r];
  return usage;
}

const calendarConflicts = family({
  id: 'planning.room-conflicts',
  category: CATEGORY,
  summary: 'detect double-booked rooms in an events CSV and total the booked minutes per room',
  difficulty: 'medium',
  skills: ['calendars', 'interval overlap', 'csv'],
  draw({ rng, persona }) {
    for (;;) {
      const rooms = rng.sample(persona.places, rng.int(2, 3));
      const d0 = someDate(rng, true);
      const dates = [d0, addDays(d0, 1)];
      const events: RoomEvent[] = Array.from({ length: rng.int(9, 15) }, (_, i) => {
        const s = 8 * 60 + 15 * rng.int(0, 36);
        const e = s + 15 * rng.int(2, 8);
        return {
          id: `E${String(i + 1).padStart(2, '0')}`,
          title: rng.pick(EVENT_TITLES),
          date: rng.pick(dates),
          start: hhmm(s),
          end: hhmm(e),
          room: rng.pick(rooms),
        };
      });
      const conflicts = roomConflicts(events);
      if (conflicts.length < 1 || conflicts.length > 6) continue;
      return { rooms, d0, events, conflicts, usage: roomUsage(rooms, events) };
    }
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. People book our spaces through a shared sheet and we keep getting double bookings on ${d.d0} and the day after.`,
    inputs: [[ROOMS.events, 'columns id, title, date, start, end (HH:MM, 24-hour), room']],
    steps: [
      'Two events conflict when they are on the same date in the same room and their times overlap (one starts before the other ends; an event ending at 10:00 does not conflict with one starting at 10:00).',
      'List every conflicting pair once, with the smaller id as first_id. Sort by date, room, first_id, second_id.',
      'Per room (rooms that have events): "events" (count) and "booked_minutes" (sum of durations, overlaps counted twice). Also add "conflict_count" at the top level.',
    ],
    outputs: [
      [ROOMS.conflicts, `columns ${ROOMS.columns.join(',')}`],
      [ROOMS.usage, 'JSON object: "rooms" (room -> {"events", "booked_minutes"}) and "conflict_count"'],
    ],
  }),
  files: (d) => [
    {
      path: ROOMS.events,
      content: toCsv(
        ['id', 'title', 'date', 'start', 'end', 'room'],
        d.events.map((e) => [e.id, e.title, e.date, e.start, e.end, e.room]),
      ),
    },
  ],
  checks: (d) => [
    check.nonEmpty('conflicts_exist', ROOMS.conflicts),
    check.columns('conflicts_columns', ROOMS.conflicts, [...ROOMS.columns]),
    check.rows('conflict_pairs', ROOMS.conflicts, [...ROOMS.columns], d.conflicts, true),
    check.parses('usage_parses', ROOMS.usage, 'json'),
    check.value('conflict_count', ROOMS.usage, '/conflict_count', d.conflicts.length),
    check.value('room_usage', ROOMS.usage, '/rooms', d.usage),
  ],
  reference: () => [
    act.read(ROOMS.events),
    act.python(roomConflictsScript()),
    act.exec(`cat ${ROOMS.conflicts} ${ROOMS.usage}`),
  ],
  params: (d) => ({ events: d.events.length, rooms: d.rooms.length, conflicts: d.conflicts.length }),
});

function roomConflictsScript(): string {
  return `${PY_READ_CSV}
ev = read_csv(${JSON.stringify(ROOMS.events)})
def m(s):
    h, mm = s.split(':')
    return int(h) * 60 + int(mm)
pairs = []
for a in ev:
    for b in ev:
        if a['id'] < b['id'] and a['date'] == b['date'] and a['room'] == b['room'] and m(a['start']) < m(b['end']) and m(b['start']) < m(a['end']):
            pairs.append([a['date'], a['room'], a['id'], b['id']])
pairs.sort()
write_csv(${JSON.stringify(ROOMS.conflicts)}, ${JSON.stringify(ROOMS.columns)}, pairs)
rooms = {}
for e in ev:
    r = rooms.setdefault(e['room'], {'events': 0, 'booked_minutes': 0})
    r['events'] += 1
    r['booked_minutes'] += m(e['end']) - m(e['start'])
write_json(${JSON.stringify(ROOMS.usage)}, {'rooms': rooms, 'conflict_count': len(pairs)})`;
}

// ---- knowledge index ----------------------------------------------------------------------------

const TAGS = ['operations', 'finance', 'onboarding', 'suppliers', 'safety', 'marketing', 'how-to', 'policy'];
const NOTE_KINDS = [
  'checklist',
  'pricing notes',
  'supplier contacts',
  'FAQ',
  'incident notes',
  'setup guide',
  'ideas',
  'policy',
];

const KNOWLEDGE = {
  tags: 'output/tag_index.json',
  backlinks: 'output/backlinks.json',
  index: 'output/INDEX.md',
} as const;

type Note = { title: string; file: string; tags: string[]; links: string[]; updated: string };
type NoteSet = {
  notes: Note[];
  tagIndex: Record<string, string[]>;
  backlinks: Record<string, string[]>;
  asker: string;
  org: string;
};
type NoteProbe = { tag: string; title: string; file: string; backlinked: string };

/** Notes with distinct files and at least two backlinked notes, their tag index and backlinks. */
function drawNotes({ rng, persona }: TemplateContext): NoteSet {
  for (;;) {
    const titles = new Set<string>();
    const want = rng.int(6, 9);
    while (titles.size < want)
      titles.add(`${rng.pick([...persona.items, ...persona.places])} ${rng.pick(NOTE_KINDS)}`);
    const tagPool = rng.sample(TAGS, 5);
    const notes: Note[] = [...titles].map((title) => ({
      title,
      file: `${slugify(title)}.md`,
      tags: rng.sample(tagPool, rng.int(1, 3)).sort(byString),
      links: [],
      updated: someDate(rng),
    }));
    for (const n of notes)
      n.links = rng.sample(
        notes.filter((o) => o !== n).map((o) => o.title),
        rng.int(0, 3),
      );
    if (new Set(notes.map((n) => n.file)).size !== notes.length) continue;
    const tagIndex: Record<string, string[]> = {};
    for (const tag of [...new Set(notes.flatMap((n) => n.tags))].sort(byString))
      tagIndex[tag] = notes
        .filter((n) => n.tags.includes(tag))
        .map((n) => n.title)
        .sort(byString);
    const backlinks: Record<string, string[]> = {};
    for (const n of notes) {
      const from = notes
        .filter((o) => o.links.includes(n.title))
        .map((o) => o.title)
        .sort(byString);
      if (from.length > 0) backlinks[n.title] = from;
    }
    if (Object.keys(backlinks).length < 2) continue;
    return { notes, tagIndex, backlinks, asker: givenNames(rng, 1)[0]!, org: persona.org };
  }
}

function noteFiles({ notes, org }: NoteSet) {
  return notes.map((n) => ({
    path: `notes/${n.file}`,
    content: [
      '---',
      `title: ${n.title}`,
      `tags: [${n.tags.join(', ')}]`,
      `updated: ${n.updated}`,
      '---',
      '',
      `Notes about ${n.title.toLowerCase()} for ${org}.`,
      ...n.links.map((l) => `- Related: [[${l}]]`),
      '',
    ].join('\n'),
  }));
}

function knowledgePrompt(d: NoteSet, persona: Persona): PromptParts {
  return {
    opening: `${persona.intro}. Our team wiki is just a folder of ${d.notes.length} Markdown notes and ${d.asker} can never find anything; please build an index.`,
    inputs: [
      [
        'notes/',
        'Markdown notes; each starts with front matter (title, tags as [a, b], updated) and may link to other notes as [[Title]]',
      ],
    ],
    steps: [
      'Tag index: tag -> the titles of the notes carrying it, sorted alphabetically.',
      'Backlinks: note title -> the titles of the notes that link to it with [[...]], sorted; only notes that have at least one backlink.',
      'INDEX.md: a first line "# Index", then a "## <tag>" section per tag in alphabetical order listing "- [<title>](../notes/<file name>)" for each note with that tag, sorted by title.',
    ],
    outputs: [
      [KNOWLEDGE.tags, 'the tag index'],
      [KNOWLEDGE.backlinks, 'the backlinks'],
      [KNOWLEDGE.index, 'the index page'],
    ],
  };
}

/** The tag and backlinked note the checks probe; drawn after the prompt's composition. */
function drawNoteProbe(rng: Rng, d: NoteSet): NoteProbe {
  const tag = rng.pick(Object.keys(d.tagIndex));
  const title = d.tagIndex[tag]![0]!;
  const file = d.notes.find((n) => n.title === title)!.file;
  return { tag, title, file, backlinked: rng.pick(Object.keys(d.backlinks)) };
}

function knowledgeChecks(d: NoteSet, probe: NoteProbe): CheckInput[] {
  return [
    check.nonEmpty('tag_index_exists', KNOWLEDGE.tags),
    check.parses('tag_index_parses', KNOWLEDGE.tags, 'json'),
    check.value('tag_index', KNOWLEDGE.tags, '', d.tagIndex),
    check.parses('backlinks_parse', KNOWLEDGE.backlinks, 'json'),
    check.value('backlinks', KNOWLEDGE.backlinks, '', d.backlinks),
    check.value(
      `backlinks_of_one_note`,
      KNOWLEDGE.backlinks,
      `/${probe.backlinked.replace(/~/g, '~0').replace(/\//g, '~1')}`,
      d.backlinks[probe.backlinked],
    ),
    check.contains('index_title', KNOWLEDGE.index, '# Index'),
    check.matches(
      'index_sections_in_order',
      KNOWLEDGE.index,
      inOrderRegex(Object.keys(d.tagIndex).map((t) => `## ${t}`)),
    ),
    check.contains('index_link', KNOWLEDGE.index, `- [${probe.title}](../notes/${probe.file})`),
  ];
}

function knowledgeIndexScript(): string {
  return `${PY_READ_CSV}
import glob, os, re
notes = []
for path in sorted(glob.glob('notes/*.md')):
    text = open(path, encoding='utf-8').read()
    front = text.split('---')[1]
    meta = dict(line.split(': ', 1) for line in front.strip().splitlines())
    tags = [t.strip() for t in meta['tags'].strip('[]').split(',') if t.strip()]
    notes.append({'title': meta['title'], 'file': os.path.basename(path), 'tags': tags, 'links': re.findall(r'\\[\\[([^\\]]+)\\]\\]', text)})
tag_index = {}
for n in notes:
    for t in n['tags']:
        tag_index.setdefault(t, []).append(n['title'])
tag_index = {t: sorted(v) for t, v in sorted(tag_index.items())}
back = {}
for n in notes:
    for l in n['links']:
        back.setdefault(l, set()).add(n['title'])
write_json(${JSON.stringify(KNOWLEDGE.tags)}, tag_index)
write_json(${JSON.stringify(KNOWLEDGE.backlinks)}, {k: sorted(v) for k, v in back.items()})
by_title = {n['title']: n for n in notes}
out = ['# Index', '']
for t, titles in tag_index.items():
    out += ['## ' + t, ''] + [f"- [{x}](../notes/{by_title[x]['file']})" for x in titles] + ['']
write_text(${JSON.stringify(KNOWLEDGE.index)}, '\\n'.join(out))`;
}

const knowledgeIndex = family({
  id: 'planning.knowledge-index',
  category: CATEGORY,
  summary: 'index a folder of Markdown notes by front-matter tags and wiki-link backlinks',
  difficulty: 'medium',
  skills: ['markdown', 'front matter', 'knowledge management'],
  draw: drawNotes,
  prompt: (data, { persona }) => knowledgePrompt(data, persona),
  late: (data, rng) => ({ probe: drawNoteProbe(rng, data) }),
  files: noteFiles,
  checks: (data) => knowledgeChecks(data, data.probe),
  reference: ({ notes }) => [
    act.ls('notes'),
    act.read(`notes/${notes[0]!.file}`),
    act.python(knowledgeIndexScript()),
    act.exec(`cat ${KNOWLEDGE.index}`),
  ],
  params: ({ notes, tagIndex }) => ({ notes: notes.length, tags: Object.keys(tagIndex).length }),
});

// ---- trip budget --------------------------------------------------------------------------------

const CURRENCIES: Record<string, number> = { USD: 9215, GBP: 11702, CHF: 10431, JPY: 61, SEK: 873, CZK: 398 };
const ACTIVITIES = [
  'Hotel',
  'Train',
  'Dinner',
  'Museum',
  'Taxi',
  'Lunch',
  'Conference fee',
  'Ferry',
  'Walking tour',
];
const CITIES: Record<string, string[]> = {
  USD: ['Boston', 'Chicago'],
  GBP: ['London', 'Edinburgh'],
  CHF: ['Zurich', 'Geneva'],
  JPY: ['Tokyo', 'Osaka'],
  SEK: ['Stockholm', 'Gothenburg'],
  CZK: ['Prague', 'Brno'],
  EUR: ['Lisbon', 'Vienna'],
};

const TRIP = {
  itinerary: 'input/itinerary.csv',
  rates: 'input/rates.json',
  byDay: 'output/budget_by_day.csv',
  summary: 'output/budget.json',
} as const;

type TripItem = { day: number; city: string; item: string; amount: number; currency: string };

/** EUR per unit of a currency, in ten-thousandths. */
const rate = (cur: string) => (cur === 'EUR' ? 10_000 : CURRENCIES[cur]!);
/** Cents converted to EUR cents, halves rounded up. */
const eur = (amount: number, cur: string) => Math.floor((amount * rate(cur) + 5000) / 10_000);

function tripItems(rng: Rng, legs: readonly string[], days: number): TripItem[] {
  const items: TripItem[] = [];
  for (let d = 1; d <= days; d++) {
    const cur = legs[Math.min(legs.length - 1, Math.floor(((d - 1) * legs.length) / days))]!;
    const city = CITIES[cur]![d % 2]!;
    for (let k = rng.int(2, 4); k > 0; k--) {
      const amount = cur === 'JPY' ? rng.int(8, 400) * 100 * 100 : rng.int(900, 30000);
      items.push({ day: d, city, item: rng.pick(ACTIVITIES), amount, currency: cur });
    }
  }
  return items;
}

const tripBudget = family({
  id: 'planning.trip-budget',
  category: CATEGORY,
  summary: 'convert a multi-currency itinerary to EUR with cent rounding, per-day totals and over-cap days',
  difficulty: 'hard',
  skills: ['currency conversion', 'rounding', 'budgeting'],
  draw({ rng }) {
    for (;;) {
      const currencies = rng.sample(Object.keys(CURRENCIES), 2);
      const legs = [...currencies, 'EUR'];
      const days = rng.int(4, 7);
      const cap = rng.int(2, 6) * 10_000;
      const items = tripItems(rng, legs, days);
      const perDay = Array.from({ length: days }, (_, i) => {
        const mine = items.filter((x) => x.day === i + 1);
        return {
          day: i + 1,
          city: mine[0]!.city,
          total: mine.reduce((s, x) => s + eur(x.amount, x.currency), 0),
        };
      });
      const max = Math.max(...perDay.map((p) => p.total));
      if (perDay.filter((p) => p.total === max).length > 1) continue;
      const over = perDay.filter((p) => p.total > cap).map((p) => p.day);
      const byCurrency: Record<string, number> = {};
      for (const x of items) byCurrency[x.currency] = (byCurrency[x.currency] ?? 0) + x.amount;
      const traveller = givenNames(rng, 1)[0]!;
      return { legs, days, cap, items, perDay, max, over, byCurrency, traveller };
    }
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. ${d.traveller} from our team is going on a ${d.days}-day trip for ${persona.org} and I need the budget in euros (our daily cap is ${cents(d.cap)} EUR).`,
    inputs: [
      [TRIP.itinerary, 'columns day, city, item, amount, currency'],
      [TRIP.rates, 'EUR per unit of each currency ("to_eur"), four decimals; EUR itself is 1'],
    ],
    steps: [
      'Convert each line to EUR: amount * rate, rounded to the cent with halves rounded up, before adding anything up.',
      'Per day: the city (every line of a day has the same city) and total_eur (two decimals). One row per day, in day order.',
      `Summary: "total_eur", "most_expensive_day" (day number), "days_over_cap" (day numbers whose total is above ${cents(d.cap)}, ascending) and "by_currency" (currency -> sum of the original amounts, two decimals, as numbers).`,
    ],
    outputs: [
      [TRIP.byDay, 'columns day,city,total_eur'],
      [TRIP.summary, 'the summary object'],
    ],
  }),
  files: (d) => [
    {
      path: TRIP.itinerary,
      content: toCsv(
        ['day', 'city', 'item', 'amount', 'currency'],
        d.items.map((x) => [x.day, x.city, x.item, cents(x.amount), x.currency]),
      ),
    },
    {
      path: TRIP.rates,
      content: `${JSON.stringify({ base: 'EUR', to_eur: Object.fromEntries(d.legs.map((c) => [c, rate(c) / 10_000])) }, null, 2)}\n`,
    },
  ],
  checks: (d) => [
    check.nonEmpty('budget_table_exists', TRIP.byDay),
    check.columns('budget_table_columns', TRIP.byDay, ['day', 'city', 'total_eur']),
    check.rows(
      'budget_rows',
      TRIP.byDay,
      ['day', 'city', 'total_eur'],
      d.perDay.map((p) => [String(p.day), p.city, cents(p.total)]),
      true,
    ),
    check.parses('budget_parses', TRIP.summary, 'json'),
    check.value(
      'total_eur',
      TRIP.summary,
      '/total_eur',
      centsValue(d.perDay.reduce((s, p) => s + p.total, 0)),
      0.005,
    ),
    check.value(
      'most_expensive_day',
      TRIP.summary,
      '/most_expensive_day',
      d.perDay.find((p) => p.total === d.max)!.day,
    ),
    check.value('days_over_cap', TRIP.summary, '/days_over_cap', d.over),
    check.value(
      'by_currency',
      TRIP.summary,
      '/by_currency',
      Object.fromEntries(Object.entries(d.byCurrency).map(([k, v]) => [k, centsValue(v)])),
      0.005,
    ),
  ],
  reference: (d) => [
    act.read(TRIP.itinerary),
    act.read(TRIP.rates),
    act.python(tripBudgetScript(d.cap)),
    act.exec(`cat ${TRIP.byDay} ${TRIP.summary}`),
  ],
  params: (d) => ({ days: d.days, currencies: d.legs, cap: d.cap }),
});

function tripBudgetScript(cap: number): string {
  return `${PY_READ_CSV}
rows = read_csv(${JSON.stringify(TRIP.itinerary)})
rates = json.load(open(${JSON.stringify(TRIP.rates)}))['to_eur']
days, by_cur = {}, {}
for r in rows:
    c = round(float(r['amount']) * 100)
    r4 = round(rates[r['currency']] * 10000)
    e = (c * r4 + 5000) // 10000
    d = days.setdefault(int(r['day']), [r['city'], 0])
    d[1] += e
    by_cur[r['currency']] = by_cur.get(r['currency'], 0) + c
table = sorted(days.items())
write_csv(${JSON.stringify(TRIP.byDay)}, ['day', 'city', 'total_eur'], [[k, v[0], f'{v[1] // 100}.{v[1] % 100:02d}'] for k, v in table])
write_json(${JSON.stringify(TRIP.summary)}, {'total_eur': sum(v[1] for _, v in table) / 100, 'most_expensive_day': max(table, key=lambda kv: kv[1][1])[0],
    'days_over_cap': [k for k, v in table if v[1] > ${cap}], 'by_currency': {k: v / 100 for k, v in by_cur.items()}})`;
}

export const PLANNING_TEMPLATES: readonly TaskTemplate[] = [
  studyPlan,
  criticalPath,
  calendarConflicts,
  knowledgeIndex,
  tripBudget,
];

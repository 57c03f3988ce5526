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
import { act, check, composePrompt, givenNames, PY_READ_CSV, type TaskTemplate } from '../template.js';
import { chores, someDate } from './productivity.js';

const CATEGORY = 'Planning & Knowledge' as const;

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

const studyPlan: TaskTemplate = {
  id: 'planning.study-plan',
  category: CATEGORY,
  summary: 'lay training modules onto study days around rest days and blackout dates, hour by hour',
  build(ctx) {
    const { rng, persona } = ctx;
    const modules = rng
      .sample(MODULE_TOPICS, rng.int(4, 7))
      .map((m) => ({ module: m, hours: rng.int(2, 9) }));
    const hoursPerDay = rng.int(2, 4);
    const start = someDate(rng);
    const restDays = rng.pick([['Sunday'], ['Saturday', 'Sunday'], ['Wednesday', 'Sunday']]);
    const blackout = [addDays(start, rng.int(1, 6)), addDays(start, rng.int(7, 12))].filter(
      (d, i, a) => a.indexOf(d) === i,
    );
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
    const modulesPath = 'input/modules.csv';
    const constraintsPath = 'input/constraints.json';
    const csvPath = 'output/study_plan.csv';
    const jsonPath = 'output/plan_summary.json';
    const total = modules.reduce((s, m) => s + m.hours, 0);
    const prompt = composePrompt(rng, {
      opening: `${persona.intro}. I'm putting new staff at ${persona.org} through a training course and want a day-by-day study plan.`,
      inputs: [
        [modulesPath, 'columns module, hours — the modules in the order they must be studied'],
        [
          constraintsPath,
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
        [csvPath, 'columns date,module,hours'],
        [jsonPath, 'the summary object'],
      ],
    });
    const script = `${PY_READ_CSV}
from datetime import date, timedelta
mods = [[m['module'], int(m['hours'])] for m in read_csv(${JSON.stringify(modulesPath)})]
c = json.load(open(${JSON.stringify(constraintsPath)}))
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
write_csv(${JSON.stringify(csvPath)}, ['date', 'module', 'hours'], rows)
write_json(${JSON.stringify(jsonPath)}, {'start_date': days[0], 'end_date': days[-1], 'study_days': len(days), 'total_hours': sum(r[2] for r in rows), 'finish_dates': finish})`;
    const studyDates = [...new Set(rows.map((r) => r[0]))];
    return {
      prompt,
      files: [
        {
          path: modulesPath,
          content: toCsv(
            ['module', 'hours'],
            modules.map((m) => [m.module, m.hours]),
          ),
        },
        {
          path: constraintsPath,
          content: `${JSON.stringify({ start_date: start, hours_per_day: hoursPerDay, rest_days: restDays, blackout_dates: blackout }, null, 2)}\n`,
        },
      ],
      checks: [
        check.nonEmpty('plan_exists', csvPath),
        check.columns('plan_columns', csvPath, ['date', 'module', 'hours']),
        check.rows(
          'plan_rows_in_order',
          csvPath,
          ['date', 'module', 'hours'],
          rows.map(([d, m, h]) => [d, m, String(h)]),
          true,
        ),
        check.parses('summary_parses', jsonPath, 'json'),
        check.value('start_date', jsonPath, '/start_date', studyDates[0]),
        check.value('end_date', jsonPath, '/end_date', studyDates.at(-1)),
        check.value('study_days', jsonPath, '/study_days', studyDays),
        check.value('total_hours', jsonPath, '/total_hours', total),
        check.value('finish_dates', jsonPath, '/finish_dates', finish),
      ],
      actions: [
        act.read(modulesPath),
        act.read(constraintsPath),
        act.python(script),
        act.exec(`cat ${jsonPath}`),
      ],
      skills: ['scheduling', 'dates', 'csv'],
      difficulty: 'medium',
      params: { modules: modules.length, hoursPerDay, studyDays },
    };
  },
};

const criticalPath: TaskTemplate = {
  id: 'planning.critical-path',
  category: CATEGORY,
  summary: 'earliest start/finish, slack and the critical tasks of a dependency graph (CPM)',
  build(ctx) {
    const { rng, persona } = ctx;
    const n = rng.int(7, 11);
    const names = chores(ctx, n);
    const tasks = names.map((name, i) => {
      const earlier = Array.from({ length: i }, (_, j) => `T${String(j + 1).padStart(2, '0')}`);
      const deps =
        i === 0
          ? []
          : rng.sample(earlier, Math.min(earlier.length, rng.int(i < 3 ? 1 : 0, 2))).sort(byString);
      return { id: `T${String(i + 1).padStart(2, '0')}`, name, duration: rng.int(1, 8), deps };
    });
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
    const inputPath = 'input/project_tasks.csv';
    const csvPath = 'output/schedule.csv';
    const jsonPath = 'output/critical_path.json';
    const cols = ['id', 'earliest_start', 'earliest_finish', 'latest_start', 'slack'];
    const prompt = composePrompt(rng, {
      opening: `${persona.intro}. We're preparing ${persona.event} (${n} tasks, starting ${someDate(rng)}) and I need to know which tasks can't slip.`,
      inputs: [
        [inputPath, 'columns id, name, duration_days, depends_on (ids separated by ";", empty when none)'],
      ],
      steps: [
        'The project starts at day 0. A task starts when all tasks it depends on have finished: earliest_start = max earliest_finish of its dependencies (0 if none), earliest_finish = earliest_start + duration.',
        'The project duration is the largest earliest_finish. Going backwards: latest_finish = min latest_start of the tasks that depend on it (the project duration if none), latest_start = latest_finish - duration, slack = latest_start - earliest_start.',
        'Write one row per task sorted by earliest_start, then id.',
        'Also write "project_duration" and "critical_tasks" (ids with zero slack, in the same order as the schedule).',
      ],
      outputs: [
        [csvPath, `columns ${cols.join(',')}`],
        [jsonPath, 'the project duration and critical tasks'],
      ],
    });
    const script = `${PY_READ_CSV}
tasks = read_csv(${JSON.stringify(inputPath)})
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
write_csv(${JSON.stringify(csvPath)}, ${JSON.stringify(cols)}, rows)
write_json(${JSON.stringify(jsonPath)}, {'project_duration': total, 'critical_tasks': [r[0] for r in rows if r[4] == 0]})`;
    return {
      prompt,
      files: [
        {
          path: inputPath,
          content: toCsv(
            ['id', 'name', 'duration_days', 'depends_on'],
            tasks.map((t) => [t.id, t.name, t.duration, t.deps.join(';')]),
          ),
        },
      ],
      checks: [
        check.nonEmpty('schedule_exists', csvPath),
        check.columns('schedule_columns', csvPath, cols),
        check.rows(
          'schedule_rows',
          csvPath,
          cols,
          rows.map((t) => [
            t.id,
            String(es.get(t.id)),
            String(ef.get(t.id)),
            String(ls.get(t.id)),
            String(ls.get(t.id)! - es.get(t.id)!),
          ]),
          true,
        ),
        check.parses('critical_path_parses', jsonPath, 'json'),
        check.value('project_duration', jsonPath, '/project_duration', project),
        check.value('critical_tasks', jsonPath, '/critical_tasks', critical),
      ],
      actions: [act.read(inputPath), act.python(script), act.exec(`cat ${csvPath} ${jsonPath}`)],
      skills: ['project planning', 'graphs', 'critical path method'],
      difficulty: 'hard',
      params: { tasks: n, duration: project, critical: critical.length },
    };
  },
};

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

const calendarConflicts: TaskTemplate = {
  id: 'planning.room-conflicts',
  category: CATEGORY,
  summary: 'detect double-booked rooms in an events CSV and total the booked minutes per room',
  build(ctx) {
    const { rng, persona } = ctx;
    for (;;) {
      const rooms = rng.sample(persona.places, rng.int(2, 3));
      const d0 = someDate(rng, true);
      const dates = [d0, addDays(d0, 1)];
      const events = Array.from({ length: rng.int(9, 15) }, (_, i) => {
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
      const conflicts: string[][] = [];
      for (const a of events)
        for (const b of events) {
          if (a.id >= b.id || a.date !== b.date || a.room !== b.room) continue;
          if (minutesOf(a.start) < minutesOf(b.end) && minutesOf(b.start) < minutesOf(a.end))
            conflicts.push([a.date, a.room, a.id, b.id]);
        }
      if (conflicts.length < 1 || conflicts.length > 6) continue;
      conflicts.sort(
        (x, y) =>
          byString(x[0]!, y[0]!) ||
          byString(x[1]!, y[1]!) ||
          byString(x[2]!, y[2]!) ||
          byString(x[3]!, y[3]!),
      );
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
      const inputPath = 'input/events.csv';
      const csvPath = 'output/conflicts.csv';
      const jsonPath = 'output/room_usage.json';
      const cols = ['date', 'room', 'first_id', 'second_id'];
      const prompt = composePrompt(rng, {
        opening: `${persona.intro}. People book our spaces through a shared sheet and we keep getting double bookings on ${d0} and the day after.`,
        inputs: [[inputPath, 'columns id, title, date, start, end (HH:MM, 24-hour), room']],
        steps: [
          'Two events conflict when they are on the same date in the same room and their times overlap (one starts before the other ends; an event ending at 10:00 does not conflict with one starting at 10:00).',
          'List every conflicting pair once, with the smaller id as first_id. Sort by date, room, first_id, second_id.',
          'Per room (rooms that have events): "events" (count) and "booked_minutes" (sum of durations, overlaps counted twice). Also add "conflict_count" at the top level.',
        ],
        outputs: [
          [csvPath, `columns ${cols.join(',')}`],
          [jsonPath, 'JSON object: "rooms" (room -> {"events", "booked_minutes"}) and "conflict_count"'],
        ],
      });
      const script = `${PY_READ_CSV}
ev = read_csv(${JSON.stringify(inputPath)})
def m(s):
    h, mm = s.split(':')
    return int(h) * 60 + int(mm)
pairs = []
for a in ev:
    for b in ev:
        if a['id'] < b['id'] and a['date'] == b['date'] and a['room'] == b['room'] and m(a['start']) < m(b['end']) and m(b['start']) < m(a['end']):
            pairs.append([a['date'], a['room'], a['id'], b['id']])
pairs.sort()
write_csv(${JSON.stringify(csvPath)}, ${JSON.stringify(cols)}, pairs)
rooms = {}
for e in ev:
    r = rooms.setdefault(e['room'], {'events': 0, 'booked_minutes': 0})
    r['events'] += 1
    r['booked_minutes'] += m(e['end']) - m(e['start'])
write_json(${JSON.stringify(jsonPath)}, {'rooms': rooms, 'conflict_count': len(pairs)})`;
      return {
        prompt,
        files: [
          {
            path: inputPath,
            content: toCsv(
              ['id', 'title', 'date', 'start', 'end', 'room'],
              events.map((e) => [e.id, e.title, e.date, e.start, e.end, e.room]),
            ),
          },
        ],
        checks: [
          check.nonEmpty('conflicts_exist', csvPath),
          check.columns('conflicts_columns', csvPath, cols),
          check.rows('conflict_pairs', csvPath, cols, conflicts, true),
          check.parses('usage_parses', jsonPath, 'json'),
          check.value('conflict_count', jsonPath, '/conflict_count', conflicts.length),
          check.value('room_usage', jsonPath, '/rooms', usage),
        ],
        actions: [act.read(inputPath), act.python(script), act.exec(`cat ${csvPath} ${jsonPath}`)],
        skills: ['calendars', 'interval overlap', 'csv'],
        difficulty: 'medium',
        params: { events: events.length, rooms: rooms.length, conflicts: conflicts.length },
      };
    }
  },
};

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

const knowledgeIndex: TaskTemplate = {
  id: 'planning.knowledge-index',
  category: CATEGORY,
  summary: 'index a folder of Markdown notes by front-matter tags and wiki-link backlinks',
  build(ctx) {
    const { rng, persona } = ctx;
    for (;;) {
      const titles = new Set<string>();
      const want = rng.int(6, 9);
      while (titles.size < want)
        titles.add(`${rng.pick([...persona.items, ...persona.places])} ${rng.pick(NOTE_KINDS)}`);
      const tagPool = rng.sample(TAGS, 5);
      const notes = [...titles].map((title) => ({
        title,
        file: `${slugify(title)}.md`,
        tags: rng.sample(tagPool, rng.int(1, 3)).sort(byString),
        links: [] as string[],
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
      const files = notes.map((n) => ({
        path: `notes/${n.file}`,
        content: [
          '---',
          `title: ${n.title}`,
          `tags: [${n.tags.join(', ')}]`,
          `updated: ${n.updated}`,
          '---',
          '',
          `Notes about ${n.title.toLowerCase()} for ${persona.org}.`,
          ...n.links.map((l) => `- Related: [[${l}]]`),
          '',
        ].join('\n'),
      }));
      const tagsPath = 'output/tag_index.json';
      const backPath = 'output/backlinks.json';
      const mdPath = 'output/INDEX.md';
      const prompt = composePrompt(rng, {
        opening: `${persona.intro}. Our team wiki is just a folder of ${notes.length} Markdown notes and ${givenNames(rng, 1)[0]} can never find anything; please build an index.`,
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
          [tagsPath, 'the tag index'],
          [backPath, 'the backlinks'],
          [mdPath, 'the index page'],
        ],
      });
      const script = `${PY_READ_CSV}
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
write_json(${JSON.stringify(tagsPath)}, tag_index)
write_json(${JSON.stringify(backPath)}, {k: sorted(v) for k, v in back.items()})
by_title = {n['title']: n for n in notes}
out = ['# Index', '']
for t, titles in tag_index.items():
    out += ['## ' + t, ''] + [f"- [{x}](../notes/{by_title[x]['file']})" for x in titles] + ['']
write_text(${JSON.stringify(mdPath)}, '\\n'.join(out))`;
      const probeTag = rng.pick(Object.keys(tagIndex));
      const probeTitle = tagIndex[probeTag]![0]!;
      const probeFile = notes.find((n) => n.title === probeTitle)!.file;
      const probeBack = rng.pick(Object.keys(backlinks));
      return {
        prompt,
        files,
        checks: [
          check.nonEmpty('tag_index_exists', tagsPath),
          check.parses('tag_index_parses', tagsPath, 'json'),
          check.value('tag_index', tagsPath, '', tagIndex),
          check.parses('backlinks_parse', backPath, 'json'),
          check.value('backlinks', backPath, '', backlinks),
          check.value(
            `backlinks_of_one_note`,
            backPath,
            `/${probeBack.replace(/~/g, '~0').replace(/\//g, '~1')}`,
            backlinks[probeBack],
          ),
          check.contains('index_title', mdPath, '# Index'),
          check.matches(
            'index_sections_in_order',
            mdPath,
            inOrderRegex(Object.keys(tagIndex).map((t) => `## ${t}`)),
          ),
          check.contains('index_link', mdPath, `- [${probeTitle}](../notes/${probeFile})`),
        ],
        actions: [act.ls('notes'), act.read(files[0]!.path), act.python(script), act.exec(`cat ${mdPath}`)],
        skills: ['markdown', 'front matter', 'knowledge management'],
        difficulty: 'medium',
        params: { notes: notes.length, tags: Object.keys(tagIndex).length },
      };
    }
  },
};

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

const tripBudget: TaskTemplate = {
  id: 'planning.trip-budget',
  category: CATEGORY,
  summary: 'convert a multi-currency itinerary to EUR with cent rounding, per-day totals and over-cap days',
  build(ctx) {
    const { rng, persona } = ctx;
    for (;;) {
      const currencies = rng.sample(Object.keys(CURRENCIES), 2);
      const legs = [...currencies, 'EUR'];
      const days = rng.int(4, 7);
      const cap = rng.int(2, 6) * 10_000;
      const items: Array<{ day: number; city: string; item: string; amount: number; currency: string }> = [];
      for (let d = 1; d <= days; d++) {
        const cur = legs[Math.min(legs.length - 1, Math.floor(((d - 1) * legs.length) / days))]!;
        const city = CITIES[cur]![d % 2]!;
        for (let k = rng.int(2, 4); k > 0; k--) {
          const amount = cur === 'JPY' ? rng.int(8, 400) * 100 * 100 : rng.int(900, 30000);
          items.push({ day: d, city, item: rng.pick(ACTIVITIES), amount, currency: cur });
        }
      }
      const rate = (cur: string) => (cur === 'EUR' ? 10_000 : CURRENCIES[cur]!);
      const eur = (amount: number, cur: string) => Math.floor((amount * rate(cur) + 5000) / 10_000);
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
      const itineraryPath = 'input/itinerary.csv';
      const ratesPath = 'input/rates.json';
      const csvPath = 'output/budget_by_day.csv';
      const jsonPath = 'output/budget.json';
      const traveller = givenNames(rng, 1)[0]!;
      const prompt = composePrompt(rng, {
        opening: `${persona.intro}. ${traveller} from our team is going on a ${days}-day trip for ${persona.org} and I need the budget in euros (our daily cap is ${cents(cap)} EUR).`,
        inputs: [
          [itineraryPath, 'columns day, city, item, amount, currency'],
          [ratesPath, 'EUR per unit of each currency ("to_eur"), four decimals; EUR itself is 1'],
        ],
        steps: [
          'Convert each line to EUR: amount * rate, rounded to the cent with halves rounded up, before adding anything up.',
          'Per day: the city (every line of a day has the same city) and total_eur (two decimals). One row per day, in day order.',
          `Summary: "total_eur", "most_expensive_day" (day number), "days_over_cap" (day numbers whose total is above ${cents(cap)}, ascending) and "by_currency" (currency -> sum of the original amounts, two decimals, as numbers).`,
        ],
        outputs: [
          [csvPath, 'columns day,city,total_eur'],
          [jsonPath, 'the summary object'],
        ],
      });
      const script = `${PY_READ_CSV}
rows = read_csv(${JSON.stringify(itineraryPath)})
rates = json.load(open(${JSON.stringify(ratesPath)}))['to_eur']
days, by_cur = {}, {}
for r in rows:
    c = round(float(r['amount']) * 100)
    r4 = round(rates[r['currency']] * 10000)
    e = (c * r4 + 5000) // 10000
    d = days.setdefault(int(r['day']), [r['city'], 0])
    d[1] += e
    by_cur[r['currency']] = by_cur.get(r['currency'], 0) + c
table = sorted(days.items())
write_csv(${JSON.stringify(csvPath)}, ['day', 'city', 'total_eur'], [[k, v[0], f'{v[1] // 100}.{v[1] % 100:02d}'] for k, v in table])
write_json(${JSON.stringify(jsonPath)}, {'total_eur': sum(v[1] for _, v in table) / 100, 'most_expensive_day': max(table, key=lambda kv: kv[1][1])[0],
    'days_over_cap': [k for k, v in table if v[1] > ${cap}], 'by_currency': {k: v / 100 for k, v in by_cur.items()}})`;
      return {
        prompt,
        files: [
          {
            path: itineraryPath,
            content: toCsv(
              ['day', 'city', 'item', 'amount', 'currency'],
              items.map((x) => [x.day, x.city, x.item, cents(x.amount), x.currency]),
            ),
          },
          {
            path: ratesPath,
            content: `${JSON.stringify({ base: 'EUR', to_eur: Object.fromEntries(legs.map((c) => [c, rate(c) / 10_000])) }, null, 2)}\n`,
          },
        ],
        checks: [
          check.nonEmpty('budget_table_exists', csvPath),
          check.columns('budget_table_columns', csvPath, ['day', 'city', 'total_eur']),
          check.rows(
            'budget_rows',
            csvPath,
            ['day', 'city', 'total_eur'],
            perDay.map((p) => [String(p.day), p.city, cents(p.total)]),
            true,
          ),
          check.parses('budget_parses', jsonPath, 'json'),
          check.value(
            'total_eur',
            jsonPath,
            '/total_eur',
            centsValue(perDay.reduce((s, p) => s + p.total, 0)),
            0.005,
          ),
          check.value(
            'most_expensive_day',
            jsonPath,
            '/most_expensive_day',
            perDay.find((p) => p.total === max)!.day,
          ),
          check.value('days_over_cap', jsonPath, '/days_over_cap', over),
          check.value(
            'by_currency',
            jsonPath,
            '/by_currency',
            Object.fromEntries(Object.entries(byCurrency).map(([k, v]) => [k, centsValue(v)])),
            0.005,
          ),
        ],
        actions: [
          act.read(itineraryPath),
          act.read(ratesPath),
          act.python(script),
          act.exec(`cat ${csvPath} ${jsonPath}`),
        ],
        skills: ['currency conversion', 'rounding', 'budgeting'],
        difficulty: 'hard',
        params: { days, currencies: legs, cap },
      };
    }
  },
};

export const PLANNING_TEMPLATES: readonly TaskTemplate[] = [
  studyPlan,
  criticalPath,
  calendarConflicts,
  knowledgeIndex,
  tripBudget,
];

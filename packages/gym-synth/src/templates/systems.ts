import { addDays, byString, escapeRegex, inOrderRegex, pointer, slugify, toCsv, weekday } from '../format.js';
import type { Persona } from '../personas.js';
import type { Rng } from '../rng.js';
import {
  act,
  type CheckInput,
  check,
  family,
  type PromptParts,
  PY_READ_CSV,
  type TaskFileInput,
  type TaskTemplate,
  type TemplateContext,
} from '../template.js';
import { someDate } from './productivity.js';

const CATEGORY = 'Systems & Automation' as const;

// ---- log triage ---------------------------------------------------------------------------------

const LEVEL_MESSAGES: Record<string, readonly string[]> = {
  ERROR: [
    'timeout contacting upstream',
    'failed to write batch',
    'connection reset by peer',
    'upstream returned 503',
    'disk quota exceeded on /var/data',
    'certificate verification failed',
  ],
  WARN: ['slow response over 2s', 'retrying request', 'cache miss ratio high', 'queue depth above threshold'],
  INFO: ['request served', 'job finished', 'health check ok', 'session started', 'config reloaded'],
  DEBUG: ['payload parsed', 'cache lookup', 'span exported'],
};

const LOGS = { summary: 'output/log_summary.json', errors: 'output/errors.csv' } as const;

type LogLine = { ts: string; level: string; service: string; message: string; host: string };

function logLines(rng: Rng, date: string, services: readonly string[], hosts: readonly string[]): LogLine[] {
  let t = Date.parse(`${date}T${String(rng.int(0, 20)).padStart(2, '0')}:00:00Z`);
  const lines: LogLine[] = [];
  const n = rng.int(24, 40);
  for (let i = 0; i < n; i++) {
    t += rng.int(1, 240) * 1000;
    const level = rng.chance(0.22)
      ? 'ERROR'
      : rng.chance(0.25)
        ? 'WARN'
        : rng.chance(0.15)
          ? 'DEBUG'
          : 'INFO';
    lines.push({
      ts: new Date(t).toISOString().replace('.000Z', 'Z'),
      level,
      service: rng.pick(services),
      message: rng.pick(LEVEL_MESSAGES[level]!),
      host: rng.pick(hosts),
    });
  }
  return lines;
}

const logTriage = family({
  id: 'systems.log-triage',
  category: CATEGORY,
  summary:
    'parse several log files: counts per level, errors per service, first/last error, a chronological error CSV',
  difficulty: 'medium',
  skills: ['log parsing', 'regex', 'json', 'csv'],
  draw({ rng, persona }) {
    for (;;) {
      const services = rng.sample(persona.systems, rng.int(3, 4));
      const hosts = rng.sample(['app-1', 'app-2', 'worker-1', 'edge-1'], rng.int(2, 3));
      const date = someDate(rng);
      const lines = logLines(rng, date, services, hosts);
      const errors = lines.filter((l) => l.level === 'ERROR');
      if (errors.length < 3) continue;
      const errorsByService: Record<string, number> = {};
      for (const e of [...errors].sort((a, b) => byString(a.service, b.service)))
        errorsByService[e.service] = (errorsByService[e.service] ?? 0) + 1;
      const counts = Object.values(errorsByService).sort((a, b) => b - a);
      if (counts.length > 1 && counts[0] === counts[1]) continue;
      const top = Object.keys(errorsByService).find((s) => errorsByService[s] === counts[0])!;
      const byLevel: Record<string, number> = {};
      for (const l of lines) byLevel[l.level] = (byLevel[l.level] ?? 0) + 1;
      const logs = hosts.map((h) => {
        const mine = lines.filter((l) => l.host === h);
        const body = mine.map((l) => `${l.ts} [${l.level}] ${l.service}: ${l.message}`);
        return { path: `logs/${h}.log`, content: [`# log rotated ${date}`, ...body, ''].join('\n') };
      });
      const sortedErrors = [...errors].sort((a, b) => byString(a.ts, b.ts));
      return { date, lines, errors: sortedErrors, errorsByService, top, byLevel, logs };
    }
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. Something went wrong on ${d.date} and I need a quick triage of our logs before ${persona.event}.`,
    inputs: [
      [
        'logs/',
        `every *.log file in it (${d.logs.map((f) => f.path.slice(5)).join(', ')}); entries look like "2024-01-31T12:00:00Z [LEVEL] service: message", lines starting with "#" are comments`,
      ],
    ],
    steps: [
      'Parse every log entry of every file (skip comments and blank lines).',
      'Summarize: "total_lines" (entries parsed), "by_level" (level -> count, only levels that occur), "errors_by_service" (service -> number of ERROR entries, only services with errors), "top_error_service" (the service with the most errors), "first_error_at" and "last_error_at" (timestamps of the earliest and latest ERROR entries).',
      'List every ERROR entry in a CSV with columns timestamp, file, service, message (file is the log file name, e.g. app-1.log), sorted by timestamp.',
    ],
    outputs: [
      [LOGS.summary, 'the summary object'],
      [LOGS.errors, 'the error entries'],
    ],
  }),
  files: (d) => d.logs,
  checks: (d) => [
    check.nonEmpty('summary_exists', LOGS.summary),
    check.parses('summary_parses', LOGS.summary, 'json'),
    check.keys('summary_keys', LOGS.summary, [
      'total_lines',
      'by_level',
      'errors_by_service',
      'top_error_service',
      'first_error_at',
      'last_error_at',
    ]),
    check.value('total_lines', LOGS.summary, '/total_lines', d.lines.length),
    check.value('by_level', LOGS.summary, '/by_level', d.byLevel),
    check.value('errors_by_service', LOGS.summary, '/errors_by_service', d.errorsByService),
    check.value('top_error_service', LOGS.summary, '/top_error_service', d.top),
    check.value('first_error_at', LOGS.summary, '/first_error_at', d.errors[0]!.ts),
    check.value('last_error_at', LOGS.summary, '/last_error_at', d.errors.at(-1)!.ts),
    check.columns('errors_csv_columns', LOGS.errors, ['timestamp', 'file', 'service', 'message']),
    check.rows(
      'errors_csv_rows_in_order',
      LOGS.errors,
      ['timestamp', 'file', 'service', 'message'],
      d.errors.map((e) => [e.ts, `${e.host}.log`, e.service, e.message]),
      true,
    ),
  ],
  reference: (d) => [
    act.ls('logs'),
    act.read(d.logs[0]!.path),
    act.python(logTriageScript()),
    act.exec(`cat ${LOGS.summary}; head -n 5 ${LOGS.errors}`),
  ],
  params: (d) => ({ files: d.logs.length, lines: d.lines.length, errors: d.errors.length }),
});

function logTriageScript(): string {
  return `${PY_READ_CSV}
import glob, os, re
entries = []
for path in sorted(glob.glob('logs/*.log')):
    for line in open(path, encoding='utf-8'):
        m = re.match(r'^(\\S+) \\[(\\w+)\\] ([\\w.-]+): (.*)$', line.rstrip('\\n'))
        if m:
            entries.append({'ts': m.group(1), 'level': m.group(2), 'service': m.group(3), 'message': m.group(4), 'file': os.path.basename(path)})
by_level, by_service = {}, {}
for e in entries:
    by_level[e['level']] = by_level.get(e['level'], 0) + 1
errors = sorted((e for e in entries if e['level'] == 'ERROR'), key=lambda e: e['ts'])
for e in errors:
    by_service[e['service']] = by_service.get(e['service'], 0) + 1
write_json(${JSON.stringify(LOGS.summary)}, {'total_lines': len(entries), 'by_level': by_level, 'errors_by_service': by_service,
    'top_error_service': max(by_service, key=by_service.get), 'first_error_at': errors[0]['ts'], 'last_error_at': errors[-1]['ts']})
write_csv(${JSON.stringify(LOGS.errors)}, ['timestamp', 'file', 'service', 'message'], [[e['ts'], e['file'], e['service'], e['message']] for e in errors])`;
}

// ---- config merge -------------------------------------------------------------------------------

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type JsonObject = { [k: string]: Json };

function isObject(v: Json | undefined): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Deep merge as specified in the prompt: objects merge, everything else replaces, null deletes. */
function deepMerge(base: JsonObject, over: JsonObject): JsonObject {
  const out: JsonObject = structuredClone(base);
  for (const [k, v] of Object.entries(over)) {
    const have = out[k];
    if (v === null) delete out[k];
    else if (isObject(v) && isObject(have)) out[k] = deepMerge(have, v);
    else out[k] = structuredClone(v);
  }
  return out;
}

/** Leaf values by dotted path (arrays are leaves). */
function flatten(value: JsonObject, prefix = '', out = new Map<string, string>()): Map<string, string> {
  for (const [k, v] of Object.entries(value)) {
    if (isObject(v) && Object.keys(v).length > 0) flatten(v, `${prefix}${k}.`, out);
    else out.set(`${prefix}${k}`, JSON.stringify(v));
  }
  return out;
}

/** An override document holding each value at its path. */
function nest(overrides: ReadonlyArray<[string[], Json]>): JsonObject {
  const over: JsonObject = {};
  for (const [path, value] of overrides) {
    let at = over;
    for (const key of path.slice(0, -1)) {
      if (!isObject(at[key])) at[key] = {};
      at = at[key] as JsonObject;
    }
    at[path.at(-1)!] = value;
  }
  return over;
}

const CHANGES_PATH = 'output/changes.txt';

const configMerge = family({
  id: 'systems.config-merge',
  category: CATEGORY,
  summary:
    'deep-merge an environment override into a base JSON config (null deletes) and list the changed keys',
  difficulty: 'medium',
  skills: ['json', 'configuration', 'recursion'],
  draw({ rng, persona }) {
    const service = rng.pick(persona.systems);
    const env = rng.pick(['staging', 'production', 'eu-prod', 'canary']);
    const flags = rng.sample(
      ['new_checkout', 'dark_mode', 'beta_reports', 'bulk_export', 'smart_retry', 'audit_log'],
      4,
    );
    const base: JsonObject = {
      service: {
        name: service,
        port: rng.pick([8080, 8000, 3000, 9090]),
        log_level: 'info',
        workers: rng.int(2, 4),
      },
      database: { host: 'db.internal', port: 5432, pool: { min: 2, max: rng.pick([8, 10, 12]) }, ssl: false },
      features: Object.fromEntries(flags.slice(0, 3).map((f, i) => [f, i % 2 === 0])),
      allowed_origins: [`https://${slugify(persona.org)}.example`],
      timeouts: { read_ms: 3000, write_ms: 5000, idle_ms: 60000 },
    };
    const overrides: Array<[string[], Json]> = rng.sample(
      [
        [['service', 'log_level'], rng.pick(['warn', 'error'])],
        [['service', 'workers'], rng.int(6, 16)],
        [['database', 'host'], `db-${env}.internal`],
        [['database', 'pool', 'max'], rng.pick([20, 25, 40])],
        [['database', 'ssl'], true],
        [['features', flags[0]!], false],
        [['features', flags[3]!], true],
        [['allowed_origins'], [`https://${env}.${slugify(persona.org)}.example`, 'https://admin.example']],
        [['timeouts', rng.pick(['write_ms', 'idle_ms'])], null],
        [['cache'], { ttl_s: rng.pick([30, 60, 300]), backend: 'redis' }],
      ] as Array<[string[], Json]>,
      rng.int(5, 7),
    );
    const over = nest(overrides);
    const merged = deepMerge(base, over);
    const before = flatten(base);
    const after = flatten(merged);
    const changed = [...new Set([...before.keys(), ...after.keys()])]
      .filter((k) => before.get(k) !== after.get(k))
      .sort(byString);
    const paths = { base: 'config/base.json', over: `config/${env}.json`, out: `output/config.${env}.json` };
    return { service, env, base, overrides, over, merged, changed, paths };
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. Before we deploy ${d.service} to ${d.env}, I want to see the exact config it will run with and what differs from the base.`,
    inputs: [
      [d.paths.base, 'the base configuration'],
      [d.paths.over, `the ${d.env} overrides`],
    ],
    steps: [
      'Merge the overrides into the base: where both sides have an object, merge them key by key (recursively); otherwise the override value replaces the base value (arrays are replaced, not concatenated); an override value of null removes the key.',
      'Write the merged configuration as JSON.',
      'List the dotted paths (e.g. database.pool.max) of every leaf value that was added, removed or changed by the merge, one per line, sorted alphabetically. Arrays count as leaves.',
    ],
    outputs: [
      [d.paths.out, 'the merged configuration'],
      [CHANGES_PATH, 'the changed paths, one per line'],
    ],
  }),
  files: (d) => [
    { path: d.paths.base, content: `${JSON.stringify(d.base, null, 2)}\n` },
    { path: d.paths.over, content: `${JSON.stringify(d.over, null, 2)}\n` },
  ],
  checks: ({ paths, merged, changed }) => [
    check.nonEmpty('merged_exists', paths.out),
    check.parses('merged_parses', paths.out, 'json'),
    check.keys('merged_top_level_keys', paths.out, Object.keys(merged)),
    ...Object.keys(merged).map((k) => check.value(`merged_${k}`, paths.out, pointer(k), merged[k])),
    check.matches('changes_listed_in_order', CHANGES_PATH, inOrderRegex(changed)),
    check.words('changes_count', CHANGES_PATH, changed.length, changed.length),
    check.matches('changes_first_line', CHANGES_PATH, `^\\s*${escapeRegex(changed[0]!)}\\s*(\\n|$)`),
  ],
  reference: ({ paths }) => [
    act.read(paths.base),
    act.read(paths.over),
    act.python(configMergeScript(paths)),
    act.exec(`cat ${CHANGES_PATH}`),
  ],
  params: (d) => ({ env: d.env, overrides: d.overrides.length, changed: d.changed.length }),
});

function configMergeScript(paths: { base: string; over: string; out: string }): string {
  return `import json, os
base = json.load(open(${JSON.stringify(paths.base)}))
over = json.load(open(${JSON.stringify(paths.over)}))
def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out
def leaves(d, prefix=''):
    res = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            res.update(leaves(v, prefix + k + '.'))
        else:
            res[prefix + k] = v
    return res
merged = merge(base, over)
a, b = leaves(base), leaves(merged)
changed = sorted(k for k in set(a) | set(b) if a.get(k, '<absent>') != b.get(k, '<absent>'))
os.makedirs('output', exist_ok=True)
json.dump(merged, open(${JSON.stringify(paths.out)}, 'w'), indent=2)
open(${JSON.stringify(CHANGES_PATH)}, 'w').write('\\n'.join(changed) + '\\n')`;
}

// ---- file inventory -----------------------------------------------------------------------------

const EXTENSIONS = ['.csv', '.txt', '.json', '.md', '.log'];
const WORDS = [
  'alpha',
  'ledger',
  'north',
  'batch',
  'quota',
  'sample',
  'delta',
  'report',
  'metric',
  'notes',
  'draft',
  'final',
];
const ASKERS = [
  'our treasurer',
  'our auditor',
  'the new IT contractor',
  'my co-founder',
  'our office manager',
];

const INVENTORY = {
  csv: 'output/inventory.csv',
  summary: 'output/inventory_summary.json',
  columns: ['path', 'size_bytes', 'extension'],
} as const;

/** `count` files of random words at distinct paths under `dirs`. */
function dataFiles(rng: Rng, persona: Persona, dirs: readonly string[], count: number) {
  const files: Array<{ path: string; content: string }> = [];
  const used = new Set<string>();
  while (files.length < count) {
    const ext = rng.pick(EXTENSIONS);
    const path = `${rng.pick(dirs)}/${slugify(rng.pick(persona.items))}-${rng.pick(WORDS)}${ext}`;
    if (used.has(path)) continue;
    used.add(path);
    const lines = Array.from({ length: rng.int(1, 30) }, () =>
      Array.from({ length: rng.int(2, 9) }, () => rng.pick(WORDS)).join(' '),
    );
    files.push({ path, content: `${lines.join('\n')}\n` });
  }
  return files;
}

const fileInventory = family({
  id: 'systems.file-inventory',
  category: CATEGORY,
  summary:
    'walk a directory tree and report every file with its size, per-extension totals and the largest file',
  difficulty: 'easy',
  skills: ['filesystem', 'shell', 'csv', 'json'],
  draw({ rng, persona }) {
    for (;;) {
      const dirs = [
        'data',
        ...rng.sample(
          ['data/raw', 'data/reports', 'data/archive/2023', 'data/exports', 'data/notes'],
          rng.int(2, 3),
        ),
      ];
      const files = dataFiles(rng, persona, dirs, rng.int(8, 13));
      const sized = files.map((f) => ({
        path: f.path,
        size: Buffer.byteLength(f.content),
        ext: f.path.slice(f.path.lastIndexOf('.')),
      }));
      const maxSize = Math.max(...sized.map((s) => s.size));
      if (sized.filter((s) => s.size === maxSize).length > 1) continue;
      const sorted = [...sized].sort((a, b) => byString(a.path, b.path));
      const byExt: Record<string, { files: number; bytes: number }> = {};
      for (const s of sorted) {
        const e = byExt[s.ext] ?? { files: 0, bytes: 0 };
        byExt[s.ext] = e;
        e.files++;
        e.bytes += s.size;
      }
      const largest = sized.find((s) => s.size === maxSize)!;
      const totalBytes = sized.reduce((a, s) => a + s.size, 0);
      return { dirs, files, sorted, byExt, largest, totalBytes, asker: rng.pick(ASKERS) };
    }
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. Our shared drive's data/ folder keeps growing and ${d.asker} wants an inventory before anything is archived.`,
    inputs: [['data/', 'a folder tree of files (look in every subfolder)']],
    steps: [
      'List every regular file under data/ with its path relative to the workspace (e.g. data/raw/x.csv), its size in bytes and its extension (lower-case, with the dot, e.g. ".csv").',
      'Sort the list by path.',
      'Summarize: "total_files", "total_bytes", "largest_file" (path of the biggest file) and "by_extension" (extension -> {"files": count, "bytes": total size}).',
    ],
    outputs: [
      [INVENTORY.csv, 'columns path,size_bytes,extension'],
      [INVENTORY.summary, 'the summary object'],
    ],
  }),
  files: (d) => d.files,
  checks: (d) => [
    check.nonEmpty('inventory_exists', INVENTORY.csv),
    check.parses('inventory_parses', INVENTORY.csv, 'csv'),
    check.columns('inventory_columns', INVENTORY.csv, [...INVENTORY.columns]),
    check.rows(
      'inventory_rows_sorted',
      INVENTORY.csv,
      [...INVENTORY.columns],
      d.sorted.map((s) => [s.path, String(s.size), s.ext]),
      true,
    ),
    check.parses('summary_parses', INVENTORY.summary, 'json'),
    check.value('total_files', INVENTORY.summary, '/total_files', d.files.length),
    check.value('total_bytes', INVENTORY.summary, '/total_bytes', d.totalBytes),
    check.value('largest_file', INVENTORY.summary, '/largest_file', d.largest.path),
    check.value('by_extension', INVENTORY.summary, '/by_extension', d.byExt),
  ],
  reference: () => [
    act.exec('find data -type f | sort'),
    act.python(fileInventoryScript()),
    act.exec(`cat ${INVENTORY.summary}`),
  ],
  params: (d) => ({ files: d.files.length, dirs: d.dirs.length }),
});

function fileInventoryScript(): string {
  return `${PY_READ_CSV}
import os
rows = []
for root, _, names in os.walk('data'):
    for name in names:
        p = os.path.join(root, name).replace(os.sep, '/')
        rows.append([p, os.path.getsize(p), os.path.splitext(name)[1].lower()])
rows.sort()
by_ext = {}
for p, size, ext in rows:
    e = by_ext.setdefault(ext, {'files': 0, 'bytes': 0})
    e['files'] += 1
    e['bytes'] += size
write_csv(${JSON.stringify(INVENTORY.csv)}, ['path', 'size_bytes', 'extension'], rows)
write_json(${JSON.stringify(INVENTORY.summary)}, {'total_files': len(rows), 'total_bytes': sum(r[1] for r in rows),
    'largest_file': max(rows, key=lambda r: r[1])[0], 'by_extension': by_ext})`;
}

// ---- backup retention ---------------------------------------------------------------------------

const RETENTION = {
  manifest: 'backups/manifest.csv',
  keep: 'output/keep.txt',
  delete: 'output/delete.txt',
  summary: 'output/retention.json',
} as const;

type Backup = { file: string; date: string; size: number };

/** The union of the three rules: the newest few, the newest of each week, the oldest of each month. */
function retain(backups: readonly Backup[], keepNewest: number) {
  const keep = new Set<string>();
  const newestFirst = [...backups].sort((a, b) => byString(b.date, a.date));
  for (const b of newestFirst.slice(0, keepNewest)) keep.add(b.file);
  const weekOf = (iso: string) => addDays(iso, -weekday(iso));
  const seenWeek = new Set<string>();
  for (const b of newestFirst) {
    if (!seenWeek.has(weekOf(b.date))) keep.add(b.file);
    seenWeek.add(weekOf(b.date));
  }
  const seenMonth = new Set<string>();
  for (const b of [...newestFirst].reverse()) {
    if (!seenMonth.has(b.date.slice(0, 7))) keep.add(b.file);
    seenMonth.add(b.date.slice(0, 7));
  }
  const kept = newestFirst.filter((b) => keep.has(b.file));
  const deleted = newestFirst.filter((b) => !keep.has(b.file)).reverse();
  return { kept, deleted, freed: deleted.reduce((s, b) => s + b.size, 0) };
}

const backupRetention = family({
  id: 'systems.backup-retention',
  category: CATEGORY,
  summary:
    'apply a keep-newest / weekly / monthly retention policy to a backup manifest and total the space freed',
  difficulty: 'hard',
  skills: ['dates', 'retention policy', 'csv'],
  draw({ rng, persona }) {
    const system = rng.pick(persona.systems);
    const keepNewest = rng.int(3, 7);
    const start = someDate(rng);
    const span = rng.int(35, 70);
    const backups: Backup[] = [];
    for (let d = 0; d < span; d++) {
      if (rng.chance(0.2)) continue;
      const date = addDays(start, d);
      backups.push({
        file: `${system}-${date}.tar.gz`,
        date,
        size: rng.int(200, 900) * 1_000_000 + rng.int(0, 999_999),
      });
    }
    const shuffled = rng.shuffle(backups);
    return { system, keepNewest, backups, shuffled, ...retain(backups, keepNewest) };
  },
  prompt: (d, { persona }) => ({
    opening: `${persona.intro}. The backup disk for ${d.system} is nearly full; apply our retention policy to the backup manifest (don't delete anything yet, just tell me what would go).`,
    inputs: [
      [RETENTION.manifest, 'columns file, created (YYYY-MM-DD), size_bytes; not in any particular order'],
    ],
    steps: [
      `Keep the ${d.keepNewest} newest backups.`,
      'Also keep the newest backup of every calendar week (weeks run Monday to Sunday).',
      'Also keep the oldest backup of every calendar month.',
      'Every other backup is to be deleted.',
    ],
    outputs: [
      [RETENTION.keep, 'file names to keep, one per line, newest first'],
      [RETENTION.delete, 'file names to delete, one per line, oldest first'],
      [
        RETENTION.summary,
        'JSON object with "kept" (count), "deleted" (count) and "freed_bytes" (total size of the deleted backups)',
      ],
    ],
  }),
  files: (d) => [
    {
      path: RETENTION.manifest,
      content: toCsv(
        ['file', 'created', 'size_bytes'],
        d.shuffled.map((b) => [b.file, b.date, b.size]),
      ),
    },
  ],
  checks: ({ kept, deleted, freed }) => [
    check.nonEmpty('keep_list_exists', RETENTION.keep),
    check.matches('keep_list_newest_first', RETENTION.keep, inOrderRegex(kept.map((b) => b.file))),
    check.words('keep_list_count', RETENTION.keep, kept.length, kept.length),
    check.nonEmpty('delete_list_exists', RETENTION.delete),
    check.matches('delete_list_oldest_first', RETENTION.delete, inOrderRegex(deleted.map((b) => b.file))),
    check.words('delete_list_count', RETENTION.delete, deleted.length, deleted.length),
    check.parses('retention_parses', RETENTION.summary, 'json'),
    check.value('kept_count', RETENTION.summary, '/kept', kept.length),
    check.value('deleted_count', RETENTION.summary, '/deleted', deleted.length),
    check.value('freed_bytes', RETENTION.summary, '/freed_bytes', freed),
  ],
  reference: (d) => [
    act.read(RETENTION.manifest),
    act.python(backupRetentionScript(d.keepNewest)),
    act.exec(`cat ${RETENTION.summary}; head -n 3 ${RETENTION.keep}`),
  ],
  params: (d) => ({ backups: d.backups.length, keepNewest: d.keepNewest, kept: d.kept.length }),
});

function backupRetentionScript(keepNewest: number): string {
  return `${PY_READ_CSV}
from datetime import date, timedelta
rows = read_csv(${JSON.stringify(RETENTION.manifest)})
rows.sort(key=lambda r: r['created'], reverse=True)
keep = set(r['file'] for r in rows[:${keepNewest}])
weeks, months = {}, {}
for r in rows:
    d = date.fromisoformat(r['created'])
    weeks.setdefault(d - timedelta(days=d.weekday()), r['file'])
    months[r['created'][:7]] = r['file']
keep |= set(weeks.values()) | set(months.values())
kept = [r for r in rows if r['file'] in keep]
deleted = [r for r in reversed(rows) if r['file'] not in keep]
write_text(${JSON.stringify(RETENTION.keep)}, ''.join(r['file'] + '\\n' for r in kept))
write_text(${JSON.stringify(RETENTION.delete)}, ''.join(r['file'] + '\\n' for r in deleted))
write_json(${JSON.stringify(RETENTION.summary)}, {'kept': len(kept), 'deleted': len(deleted), 'freed_bytes': sum(int(r['size_bytes']) for r in deleted)})`;
}

// ---- batch rename -------------------------------------------------------------------------------

const RENAME = { captures: 'photos/captures.csv', log: 'output/rename_log.csv' } as const;

type Photo = { old: string; takenAt: string; place: string };
type Renamed = Photo & { new: string };
type PhotoSet = { places: string[]; photos: Photo[]; renames: Renamed[] };

/** Photos with distinct capture times, and their new names sorted by the new name. */
function drawPhotos({ rng, persona }: TemplateContext): PhotoSet {
  const places = rng.sample(persona.places, rng.int(2, 3));
  const days = [someDate(rng)];
  days.push(addDays(days[0]!, rng.int(1, 3)));
  const n = rng.int(6, 10);
  const first = rng.int(1000, 8000);
  const used = new Set<string>();
  const photos: Photo[] = [];
  for (let i = 0; i < n; i++) {
    let takenAt: string;
    do {
      takenAt = `${rng.pick(days)}T${String(rng.int(8, 19)).padStart(2, '0')}:${String(rng.int(0, 59)).padStart(2, '0')}:${String(rng.int(0, 59)).padStart(2, '0')}`;
    } while (used.has(takenAt));
    used.add(takenAt);
    photos.push({ old: `IMG_${first + 3 * i + rng.int(0, 2)}.jpg`, takenAt, place: rng.pick(places) });
  }
  const seq = new Map<string, number>();
  const renames = [...photos]
    .sort((a, b) => byString(a.takenAt, b.takenAt))
    .map((p) => {
      const key = `${p.takenAt.slice(0, 10)}_${slugify(p.place)}`;
      const k = (seq.get(key) ?? 0) + 1;
      seq.set(key, k);
      return { ...p, new: `${key}_${String(k).padStart(2, '0')}.jpg` };
    })
    .sort((a, b) => byString(a.new, b.new));
  return { places, photos, renames };
}

function renamePrompt(persona: Persona): PromptParts {
  return {
    opening: `${persona.intro}. I dumped the photos from ${persona.event} into photos/ and the camera names are useless. Please rename them.`,
    inputs: [
      [RENAME.captures, 'columns file, taken_at (YYYY-MM-DDTHH:MM:SS), place — one row per photo in photos/'],
    ],
    steps: [
      'Rename every photo listed in the CSV, inside photos/, to "<date>_<place-slug>_<NN>.jpg": date is the YYYY-MM-DD part of taken_at; place-slug is the place lower-cased with every run of non-alphanumeric characters replaced by one hyphen (no leading or trailing hyphen); NN is a two-digit sequence number (01, 02, ...) counting the photos of the same date and place in order of taken_at.',
      "Do not change the photos' contents, and leave captures.csv where it is.",
      'Log every rename in a CSV with columns old,new (file names only), sorted by the new name.',
    ],
    outputs: [[RENAME.log, 'the rename log']],
  };
}

function renameFiles(photos: readonly Photo[], listed: readonly Photo[]): TaskFileInput[] {
  return [
    {
      path: RENAME.captures,
      content: toCsv(
        ['file', 'taken_at', 'place'],
        listed.map((p) => [p.old, p.takenAt, p.place]),
      ),
    },
    ...photos.map((p) => ({ path: `photos/${p.old}`, content: `placeholder image data for ${p.old}\n` })),
  ];
}

function renameChecks({ photos, renames }: PhotoSet, probe: readonly Renamed[]): CheckInput[] {
  return [
    ...probe.map(
      (p, i): CheckInput => ({
        kind: 'file_exists',
        name: `renamed_file_${i + 1}_exists`,
        path: `photos/${p.new}`,
      }),
    ),
    ...probe.map(
      (p, i): CheckInput => ({
        kind: 'file_absent',
        name: `old_name_${i + 1}_gone`,
        path: `photos/${p.old}`,
      }),
    ),
    check.contains(
      'renamed_content_kept',
      `photos/${probe[0]!.new}`,
      `placeholder image data for ${probe[0]!.old}`,
    ),
    check.nonEmpty('rename_log_exists', RENAME.log),
    check.columns('rename_log_columns', RENAME.log, ['old', 'new']),
    check.rows(
      'rename_log_rows_sorted',
      RENAME.log,
      ['old', 'new'],
      renames.map((r) => [r.old, r.new]),
      true,
    ),
    check.command(
      'all_photos_renamed',
      `test "$(ls photos | grep -c '^IMG_')" = 0 && test "$(ls photos | grep -cE '^[0-9]{4}-[0-9]{2}-[0-9]{2}_[a-z0-9-]+_[0-9]{2}[.]jpg$')" = ${photos.length}`,
    ),
  ];
}

function batchRenameScript(): string {
  return `${PY_READ_CSV}
import os, re
rows = sorted(read_csv(${JSON.stringify(RENAME.captures)}), key=lambda r: r['taken_at'])
seq, log = {}, []
for r in rows:
    key = r['taken_at'][:10] + '_' + re.sub(r'[^a-z0-9]+', '-', r['place'].lower()).strip('-')
    seq[key] = seq.get(key, 0) + 1
    new = f"{key}_{seq[key]:02d}.jpg"
    os.rename(os.path.join('photos', r['file']), os.path.join('photos', new))
    log.append([r['file'], new])
log.sort(key=lambda x: x[1])
write_csv(${JSON.stringify(RENAME.log)}, ['old', 'new'], log)`;
}

const batchRename = family({
  id: 'systems.batch-rename',
  category: CATEGORY,
  summary: 'rename camera files to date_place_NN.jpg from a captures CSV and log the renames',
  difficulty: 'medium',
  skills: ['filesystem', 'renaming', 'csv'],
  draw: drawPhotos,
  prompt: (_data, { persona }) => renamePrompt(persona),
  /** The probed renames, then the CSV's row order: drawn after the prompt's composition. */
  late: ({ renames, photos }, rng) => ({ probe: rng.sample(renames, 2), listed: rng.shuffle(photos) }),
  files: ({ photos, listed }) => renameFiles(photos, listed),
  checks: (data) => renameChecks(data, data.probe),
  reference: () => [
    act.read(RENAME.captures),
    act.ls('photos'),
    act.python(batchRenameScript()),
    act.ls('photos'),
  ],
  params: ({ photos, places }) => ({ photos: photos.length, places: places.length }),
});

export const SYSTEMS_TEMPLATES: readonly TaskTemplate[] = [
  logTriage,
  configMerge,
  fileInventory,
  backupRetention,
  batchRename,
];

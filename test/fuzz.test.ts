import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveRewardsConfig } from '../packages/core/src/rewards/index.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * A property-based fuzz suite against the real HTTP API (issue 24, docs/security.md), on SQLite and
 * (with STEPWISE_TEST_PG_URL) PostgreSQL. Every route gets valid bodies, mutated ones, arbitrary JSON
 * and bytes, odd query strings, path params and headers, sent one at a time, and it checks:
 *   1. no 5xx, except the ones documented as intended (allowed5xx), and no hang (REQUEST_TIMEOUT_MS);
 *   2. the server stays ready: GET /ready answers 200, quickly, after each batch;
 *   3. a rejected request (4xx) changes nothing: the pool's fingerprint is the same before and after,
 *      except what a refusal records by design (recordedByDesign).
 * Fixed seed; STEPWISE_FUZZ_RUNS sets the number of batches, STEPWISE_FUZZ_SEED the seed. Below the
 * fuzzing, each bug it found is a plain regression test.
 */

const RUNS = Number(process.env.STEPWISE_FUZZ_RUNS ?? 600);
const SEED = Number(process.env.STEPWISE_FUZZ_SEED ?? 2024_12_04);
/** A request that takes longer than this hangs (the slowest legitimate one here is a 200 ms wait). */
const REQUEST_TIMEOUT_MS = 15_000;
/** Each store's runs and shrinking together (about 60 ms a batch here, a few minutes to shrink). */
const TIME_LIMIT_MS = Math.max(300_000, RUNS * 200);
/** How fast /ready must answer after a batch on a shared, slow CI machine. */
const READY_WITHIN_MS = 2_000;

const ADMIN = 'fuzz-admin-key-0123456789';
const TRAINER = 'fuzz-trainer-key-0123456789';
const RUNNER = 'fuzz-runner-key-0123456789';
const AGENT = 'fuzz-agent-key-0123456789';
const API_KEYS = [`${ADMIN}:admin`, `${TRAINER}:trainer`, `${RUNNER}:runner`, `${AGENT}:agent`];

// ---- servers ------------------------------------------------------------------------------------

const dirs: string[] = [];
const schemas: string[] = [];
afterAll(async () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

interface Started {
  server: RunningServer;
  /** Where exports land (SQLite only: a store without a file has none). */
  exportsDir: string | null;
  keyed: boolean;
}

/**
 * `keyed`: API keys and a rewards config (every route mounted, auth exercised); `open`: loopback
 * without keys or rewards (every route open; /compute_reward answers its documented 501).
 */
type Flavour = 'keyed' | 'open';

const rewardsConfig = () =>
  resolveRewardsConfig({
    functions: { exact: { plugin: 'rule', params: { kind: 'regex', pattern: '\\b42\\b' } } },
    channels: { train: { functions: ['exact'], combination: 'exact' } },
    // Fast, so background jobs settle quickly between requests (see settle()).
    workers: {
      concurrency: 1,
      timeout_ms: 5_000,
      max_attempts: 2,
      backoff_ms: 5,
      backoff_max_ms: 20,
      poll_ms: 10,
    },
  });

function serverOptions(flavour: Flavour): Partial<ServerOptions> {
  return {
    port: 0,
    engines: ['sim'],
    // Sessions and open trajectories close after idling: far beyond a run, so that nothing changes
    // between two requests (the sweep would, under whichever came next).
    gatewayOptions: { sessionIdleMs: 86_400_000 },
    channelDefaults: { idle_timeout_ms: 86_400_000 },
    ...(flavour === 'keyed' ? { apiKeys: API_KEYS, rewards: rewardsConfig() } : {}),
  };
}

const stores: [string, (flavour: Flavour) => Promise<Started>][] = [
  [
    'SQLite',
    async (flavour) => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-fuzz-'));
      dirs.push(dir);
      const server = await startServer({ dbPath: join(dir, 'pool.db'), ...serverOptions(flavour) });
      return { server, exportsDir: join(dir, 'exports'), keyed: flavour === 'keyed' };
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async (flavour) => {
      const schema = freshSchema('stepwise_fuzz');
      schemas.push(schema);
      const server = await startServer({
        dbPath: '',
        pg: { url: pgUrl!, schema },
        ...serverOptions(flavour),
      });
      return { server, exportsDir: null, keyed: flavour === 'keyed' };
    },
  ]);
}

// ---- raw HTTP -----------------------------------------------------------------------------------

interface FuzzRequest {
  method: string;
  /** Path and query, sent as written (already percent-encoded where it must be). */
  path: string;
  headers: Record<string, string>;
  body: Buffer | null;
}

interface FuzzResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  ms: number;
}

/** One request on its own connection, by node:http so that paths, headers and bytes go as written. */
function send(port: number, req: FuzzRequest): Promise<FuzzResponse> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const r = httpRequest(
      { host: '127.0.0.1', port, method: req.method, path: req.path, headers: req.headers, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        const done = () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            text: Buffer.concat(chunks).toString('utf8'),
            ms: performance.now() - started,
          });
        // An event stream never ends by itself: its status and first bytes are the answer.
        if (
          String(res.headers['content-type']).startsWith('text/event-stream') &&
          req.path.includes('/events')
        ) {
          res.once('data', (chunk: Buffer) => {
            chunks.push(chunk);
            res.destroy();
            done();
          });
          setTimeout(() => {
            res.destroy();
            done();
          }, 100).unref();
          return;
        }
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', done);
        res.on('error', reject);
      },
    );
    r.setTimeout(REQUEST_TIMEOUT_MS, () =>
      r.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms (a hang)`)),
    );
    r.on('error', reject);
    r.end(req.body ?? undefined);
  });
}

const describeRequest = (req: FuzzRequest) => {
  const body =
    req.body === null
      ? ''
      : ` body(${req.body.length}B)=${JSON.stringify(req.body.toString('utf8').slice(0, 300))}`;
  return `${req.method} ${req.path.slice(0, 300)} headers=${JSON.stringify(req.headers).slice(0, 400)}${body}`;
};

// ---- the pool's fingerprint ---------------------------------------------------------------------

/** Channels the fuzzer names (known ones and its own), whose configuration a rejection must keep. */
const CHANNELS = ['train', 'trusted', 'online', 'fz', 'fz-2'];

type Fingerprint = Record<string, unknown>;

/** What a request could change: counters, the event log, trajectories, steps, settings, jobs, files. */
async function fingerprint({ server, exportsDir }: Started): Promise<Fingerprint> {
  const { pool } = server;
  const trajectories = async () => {
    const hash = createHash('sha256');
    for (let offset = 0; ; offset += 500) {
      const page = await pool.listTrajectories({ limit: 500, offset });
      for (const t of page.items) hash.update(JSON.stringify(t));
      if (offset + 500 >= page.total) return `${page.total}:${hash.digest('hex')}`;
    }
  };
  const jobs = async () => {
    if (!server.rewards) return null;
    const [counts, last] = await Promise.all([
      server.rewards.queue.counts(),
      server.rewards.jobs({ limit: 1 }),
    ]);
    return JSON.stringify({ counts, last: last[0]?.id ?? 0 });
  };
  // Independent reads, in parallel: PostgreSQL answers them on several connections.
  const [stats, lastEventSeq, policyVersion, trajectoryHash, steps, channels, jobState] = await Promise.all([
    pool.stats(null),
    pool.store.lastEventSeq(),
    pool.store.getPolicyVersion(),
    trajectories(),
    pool.listSteps({ limit: 1, offset: 0 }).then((p) => p.total),
    Promise.all(CHANNELS.map((c) => pool.store.getChannelConfig(c))).then((c) => JSON.stringify(c)),
    jobs(),
  ]);
  const { lastEventSeq: statsEventSeq, ...rest } = stats;
  return {
    lastEventSeq,
    statsEventSeq,
    stats: JSON.stringify(rest),
    policyVersion,
    trajectories: trajectoryHash,
    steps,
    channels,
    jobs: jobState,
    exports: exportsDir && existsSync(exportsDir) ? readdirSync(exportsDir).sort().join(',') : '',
  };
}

const SCHEDULED_EVENTS = ['trajectory_completed', 'group_ready', 'signal_added'] as const;

/**
 * Waits for the work a request left behind (the reward scheduler following the event log, jobs it
 * queued), so that the next fingerprint sees the pool at rest. The pool's sweep acts only on
 * deadlines (lease ttl, idle and group timeouts) the generators keep far beyond a run.
 */
async function settle({ server }: Started): Promise<void> {
  const rewards = server.rewards;
  if (!rewards) return;
  const deadline = Date.now() + 10_000;
  for (;;) {
    const [cursor, counts] = await Promise.all([rewards.queue.cursor('scheduler'), rewards.queue.counts()]);
    const behind = await server.pool.events({ after: cursor ?? 0, limit: 1, types: [...SCHEDULED_EVENTS] });
    if (behind.length === 0 && counts.pending === 0 && counts.running === 0) return;
    if (Date.now() > deadline)
      throw new Error(`background reward work did not settle: ${JSON.stringify({ cursor, counts })}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

function changed(before: Fingerprint, after: Fingerprint): string[] {
  return Object.keys(before).filter((k) => JSON.stringify(before[k]) !== JSON.stringify(after[k]));
}

// ---- the world: real ids the generators draw from ---------------------------------------------------

interface World {
  port: number;
  keyed: boolean;
  /** Stored trajectories (the setup's), by id. */
  trajectories: string[];
  /** (trajectory, group) pairs of real base_urls. */
  baseUrls: { trajectory: string; group: string }[];
  /** Open trajectories only LLM calls name (no other route's generator does): they stay open. */
  calls: { trajectory: string; group: string }[];
  groups: string[];
  leases: string[];
  exports: string[];
  jobs: string[];
}

async function setUp(started: Started): Promise<World> {
  const { server } = started;
  const port = server.port;
  const auth: Record<string, string> = started.keyed ? { authorization: `Bearer ${ADMIN}` } : {};
  // biome-ignore lint/suspicious/noExplicitAny: set-up answers are read loosely
  const call = async (method: string, path: string, body?: unknown): Promise<any> => {
    const res = await send(port, {
      method,
      path,
      headers: { host: `127.0.0.1:${port}`, 'content-type': 'application/json', ...auth },
      body: body === undefined ? null : Buffer.from(JSON.stringify(body)),
    });
    expect(res.status, `${method} ${path}: ${res.text}`).toBeLessThan(300);
    return res.text ? JSON.parse(res.text) : null;
  };
  const chat = { model: 'sim', messages: [{ role: 'user', content: 'the answer is 42' }], max_tokens: 8 };
  await call('PUT', '/v1/channels/trusted', { trust_agent_reward: true });
  const calls: World['calls'] = [];
  for (const body of [{ group_id: 'g-calls' }, { group_id: 'g-calls' }, { channel: 'trusted' }]) {
    const t = await call('POST', '/init_trajectory', body);
    calls.push({ trajectory: t.trajectory_uid, group: t.group_id });
  }
  const open = await call('POST', '/init_trajectory', {
    group_id: 'g-open',
    n_rollouts: 2,
    metadata: { a: 1 },
  });
  await call('POST', `/${open.trajectory_uid}/g-open/v1/chat/completions`, chat);
  const trusted = await call('POST', '/init_trajectory', { channel: 'trusted' });
  await call('POST', `/${trusted.trajectory_uid}/${trusted.group_id}/v1/chat/completions`, chat);
  const steps = ['fz-done-0', 'fz-done-1', 'fz-done-2', 'fz-done-3'].map((id, i) => ({
    trajectory_uid: id,
    prompt_uid: i < 2 ? 'g-done' : 'g-done2',
    step_index: 0,
    prompt_ids: [1, 2, 3],
    response_ids: [4, 5],
    reward: i % 2,
    is_last: true,
    response_text: 'the answer is 42',
  }));
  await call('POST', '/v1/steps', { steps, n_rollouts: 2 });
  // Leased for a day: a lease that expired mid-run would change the pool between two requests.
  const lease = await call('POST', '/v1/batches/lease', { batch_size: 1, n_rollouts: 2, ttl_ms: 86_400_000 });
  await call('POST', '/v1/signals', {
    signals: [{ trajectory_uid: 'fz-done-0', step_index: 0, name: 'judge', value: 0.5, source: 'judge' }],
  });
  await call('POST', '/v1/labels', { labels: [{ trajectory_uid: 'fz-done-1', tags: ['seen'] }] });
  const exports: string[] = [];
  if (started.exportsDir) exports.push((await call('POST', '/v1/exports', { kind: 'trajectories' })).id);
  await settle(started);
  const jobs = server.rewards ? (await server.rewards.jobs({ limit: 5 })).map((j) => String(j.id)) : [];
  return {
    port,
    keyed: started.keyed,
    trajectories: [
      open.trajectory_uid,
      trusted.trajectory_uid,
      'fz-done-0',
      'fz-done-1',
      'fz-done-2',
      'fz-done-3',
    ],
    baseUrls: [
      { trajectory: open.trajectory_uid, group: 'g-open' },
      { trajectory: trusted.trajectory_uid, group: trusted.group_id },
    ],
    calls,
    groups: ['g-open', 'g-done', 'g-done2', trusted.group_id],
    leases: [lease.lease_id],
    exports,
    jobs,
  };
}

// ---- generators -----------------------------------------------------------------------------------

/** Percent-encodes everything but unreserved characters; a lone surrogate goes as U+FFFD's bytes. */
const pct = (s: string) =>
  [...Buffer.from(s, 'utf8')]
    .map((b) =>
      /[A-Za-z0-9._~-]/.test(String.fromCharCode(b))
        ? String.fromCharCode(b)
        : `%${b.toString(16).toUpperCase().padStart(2, '0')}`,
    )
    .join('');

/** Path segments nobody should send: encodings, traversal, NUL, invalid UTF-8, very long. */
const oddSegment = fc.oneof(
  fc.constantFrom(
    '',
    '.',
    '..',
    '%',
    '%zz',
    '%00',
    'a%00b',
    '%2F',
    '%2e%2e',
    '%ED%A0%80',
    '%FF',
    '%C0%AF',
    '%0D%0A',
    'null',
    '-1',
    '0',
    '1e400',
    '99999999999999999999',
    "a'b",
    'a"b',
    '<b>',
    'a:b',
    '__proto__',
    'constructor',
    '%E9',
    '\u00e9',
  ),
  fc.string({ unit: 'binary', maxLength: 12 }).map(pct),
  fc.constantFrom(128, 129, 2_000, 9_000).map((n) => 'a'.repeat(n)),
  // Beyond node's 16 KiB header limit: its 431, before any of our code.
  fc.constant('y'.repeat(20_000)),
);

/** A valid id that names nothing stored. */
const ID_CHARS = [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-'];
const fakeId = fc
  .string({ unit: fc.constantFrom(...ID_CHARS), minLength: 1, maxLength: 40 })
  .filter((s) => !s.startsWith('fz-'));

/** `abc` as `%61bc`: the Hono routes decode it; the direct LLM path leaves such paths to them. */
const encodeFirst = (id: string) => `%${id.charCodeAt(0).toString(16)}${id.slice(1)}`;

/** A path param: a stored id (as is or percent-encoded), a valid id naming nothing, or odd text. */
const idParam = (real: string[]) => {
  const odd = [
    { weight: 2, arbitrary: fakeId },
    { weight: 2, arbitrary: oddSegment },
  ];
  if (real.length === 0) return fc.oneof(...odd);
  const known = fc.constantFrom(...real);
  return fc.oneof({ weight: 5, arbitrary: known }, { weight: 1, arbitrary: known.map(encodeFirst) }, ...odd);
};

/** Text a store may choke on, percent-encoded: NUL, a lone surrogate, overlong and invalid UTF-8. */
const criticalText = fc.constantFrom(
  '%00',
  'a%00b',
  '%ED%A0%80',
  '%C0%80',
  '%FF',
  '%F4%90%80%80',
  '%EF%BF%BF',
);

/** Integers just past the columns they may be stored in or compared with (int4, uint32, int53). */
const CRITICAL_INTEGERS = [2 ** 31, 2 ** 32, 2 ** 40, 2 ** 53, -(2 ** 31) - 1];

const oddText = fc.oneof(
  { weight: 2, arbitrary: criticalText },
  { weight: 1, arbitrary: fc.constantFrom(...CRITICAL_INTEGERS.map(String)) },
  fc.constantFrom(
    '',
    ' ',
    '-1',
    '0',
    '1',
    '1.5',
    '1e309',
    '-1e309',
    'NaN',
    'Infinity',
    '-0',
    '0x1f',
    '9007199254740993',
    '99999999999999999999',
    '2147483648',
    'true',
    'false',
    'any',
    'yes',
    'no',
    'json',
    'complete',
    'good',
    'train',
    'trusted',
    'online',
    'auto',
    'a,b',
    ',',
    'steps_submitted,nope',
    'signal_added',
    '%',
    '%zz',
    '%00',
    '%ED%A0%80',
    '%FF',
    'x'.repeat(300),
  ),
  fc.string({ unit: 'binary', maxLength: 16 }).map(pct),
  fc.integer().map(String),
  fc.double().map(String),
);

/** A value each query parameter accepts, so that one odd value among valid ones is what is tested. */
const VALID_QUERY: Record<string, string> = {
  channel: 'train',
  reward_min: '0',
  reward_max: '1',
  status: 'complete',
  trainable: 'true',
  quality: 'good',
  label: 'fz',
  limit: '10',
  offset: '0',
  cursor: '0',
  type: 'signal_added,steps_submitted',
  current: 'true',
  task_id: 't-1',
  guided: 'false',
  probe: 'false',
  derived: 'false',
  policy_version: '0',
  state: 'done',
  kind: 'function',
  function: 'exact',
  before: '5',
  group: 'g-done',
  task: 't-1',
  tag: 'fz',
  page: '1',
  run: 'r-1',
  source: 'judge',
  next: '/dashboard/gym',
  batch_size: '2',
  n_rollouts: '2',
  max_staleness: '1',
};

/** Numbers as a query writes them, at and past every edge. */
const oddNumberText = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...CRITICAL_INTEGERS.map(String)) },
  fc.constantFrom('-1', '0', '1.5', '1e3', '1e309', 'NaN', '', ' 1', '0x10', '1_000', '9007199254740993'),
);

/** A query of known parameters: one with an odd value (or an odd one added), the others valid. */
const queryString = (keys: readonly string[], world: World) => {
  const numeric = (k: string) => VALID_QUERY[k] !== undefined && /^\d+$/.test(VALID_QUERY[k]);
  const odd = (k: string) =>
    fc.oneof(
      { weight: numeric(k) ? 3 : 0, arbitrary: oddNumberText },
      { weight: 3, arbitrary: oddText },
      { weight: 1, arbitrary: fc.constantFrom(...world.trajectories, ...world.groups) },
    );
  const names = keys.length > 0 ? fc.constantFrom(...keys) : fc.constant('x');
  const strange = fc.tuple(fc.constantFrom('', 'x', 'a[b]', '__proto__', 'constructor', '%', '%00'), oddText);
  const target = fc.oneof(
    { weight: 6, arbitrary: names.chain((k) => odd(k).map((v) => `${k}=${v}`)) },
    { weight: 1, arbitrary: strange.map(([k, v]) => `${k}=${v}`) },
    { weight: 2, arbitrary: fc.constant(null) },
  );
  const query = fc.tuple(target, fc.uniqueArray(names, { maxLength: 3 })).map(([t, valid]) => {
    const name = t?.slice(0, t.indexOf('='));
    const kv = valid.filter((k) => k !== name).map((k) => `${k}=${VALID_QUERY[k] ?? 'x'}`);
    if (t !== null) kv.push(t);
    return kv.length === 0 ? '' : `?${kv.join('&')}`;
  });
  return fc.oneof(
    { weight: 6, arbitrary: query },
    {
      weight: 1,
      arbitrary: fc.constantFrom('?', '?&&=&=', '??', '?a', '?=x', '?%', '?#frag', `?${'q=1&'.repeat(500)}`),
    },
  );
};

/** Header values node lets us send: printable ASCII and Latin-1. */
const headerText = (maxLength = 40) =>
  fc.string({
    unit: fc
      .integer({ min: 0x20, max: 0xff })
      .filter((c) => c !== 0x7f)
      .map((c) => String.fromCharCode(c)),
    maxLength,
  });

const RAW = '__raw__';
/** Number literals JSON.stringify cannot write (beyond a double, beyond int64): put in by text. */
const rawNumber = fc
  .constantFrom(
    '1e400',
    '-1e400',
    '123456789012345678901234567890',
    '-0',
    '1E2',
    '0.1e-400',
    '18446744073709551616',
  )
  .map((n) => `${RAW}${n}${RAW}`);

const nested = (depth: number, leaf: unknown = 1): unknown => {
  let v = leaf;
  for (let i = 0; i < depth; i++) v = i % 2 === 0 ? [v] : { d: v };
  return v;
};

/** Values that break assumptions: extremes of each type, NUL, lone surrogates, depth, size. */
const weirdValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.jsonValue({ stringUnit: 'binary', maxDepth: 2 }) },
  { weight: 1, arbitrary: fc.constantFrom('\u0000', 'a\u0000b', '\ud800', 'x\udfff', '\uffff') },
  { weight: 1, arbitrary: fc.constantFrom(...CRITICAL_INTEGERS) },
  {
    weight: 3,
    arbitrary: fc.constantFrom<unknown>(
      null,
      true,
      false,
      0,
      -1,
      1.5,
      2 ** 31 - 1,
      2 ** 31,
      2 ** 32,
      2 ** 53,
      -(2 ** 31) - 1,
      Number.MAX_SAFE_INTEGER,
      1e308,
      -1e308,
      5e-324,
      '',
      ' ',
      '\u0000',
      'a\u0000',
      '\ud800',
      'x\udc00',
      '\ufeff',
      'x'.repeat(5_000),
      [],
      {},
      [null],
      { '': null },
      { '\u0000': 1 },
      { __proto__: null, constructor: 1 },
    ),
  },
  { weight: 1, arbitrary: rawNumber },
  { weight: 1, arbitrary: fc.constantFrom(126, 127, 128, 129, 400).map((d) => nested(d)) },
  { weight: 1, arbitrary: fc.constantFrom(1_000, 30_000).map((n) => Array.from({ length: n }, (_, i) => i)) },
);

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Every path into a value (objects' keys, arrays' indices), the root excluded. */
function pathsOf(value: unknown, prefix: (string | number)[] = [], out: (string | number)[][] = []) {
  const children: [string | number, unknown][] = Array.isArray(value)
    ? value.map((v, i) => [i, v])
    : value !== null && typeof value === 'object'
      ? Object.entries(value)
      : [];
  for (const [key, child] of children) {
    out.push([...prefix, key]);
    pathsOf(child, [...prefix, key], out);
  }
  return out;
}

/** One change to a valid body: a field replaced by something weird, dropped, or an unknown one added. */
const mutation = fc.tuple(
  fc.nat(),
  fc.constantFrom('replace', 'replace', 'replace', 'drop', 'add'),
  weirdValue,
);

function mutate(value: unknown, [at, how, weird]: [number, string, unknown]): unknown {
  const copy = structuredClone(value) as Json;
  const paths = pathsOf(copy);
  if (paths.length === 0) return weird;
  const path = paths[at % paths.length]!;
  let parent = copy as Record<string | number, unknown>;
  for (const p of path.slice(0, -1)) parent = parent[p] as Record<string | number, unknown>;
  const last = path.at(-1)!;
  if (how === 'replace') parent[last] = weird;
  else if (how === 'drop') {
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else delete parent[last];
  } else if (!Array.isArray(parent)) parent.zz_unknown = weird;
  else parent.push(weird);
  return copy;
}

/**
 * Keeps what a valid body may schedule out of a run: a deadline (lease ttl, a channel's timeouts)
 * that passed between two requests would change the pool (the sweep) under a later one, and a long
 * wait (a lease or a reward with nothing ready) would read as a hang. Refused values stay as they are.
 */
function tame(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(tame);
  if (value === null || typeof value !== 'object') return value;
  // No prototype: a "__proto__" key (the fuzzer sends them) stays a key.
  const out: Record<string, unknown> = Object.create(null);
  // A lease request without a ttl would get the default five minutes: longer runs outlast it.
  if ('batch_size' in value && !('ttl_ms' in value)) out.ttl_ms = 86_400_000;
  for (const [key, v] of Object.entries(value)) {
    const n = typeof v === 'number' && Number.isInteger(v) ? v : null;
    if (n !== null && DEADLINES.has(key) && n >= 1 && n < 86_400_000) out[key] = 86_400_000;
    else if (n !== null && key === 'wait_ms' && n > 200 && n <= 600_000) out[key] = 200;
    else out[key] = tame(v);
  }
  return out;
}
const DEADLINES = new Set(['ttl_ms', 'group_timeout_ms', 'idle_timeout_ms']);

const bodyText = (value: unknown) =>
  JSON.stringify(value).replace(new RegExp(`"${RAW}(.*?)${RAW}"`, 'g'), '$1');

/** A body for a route: its valid template, mutated or not, or anything at all. */
function bodyFor(template: fc.Arbitrary<unknown> | null): fc.Arbitrary<Buffer | null> {
  const json = (v: fc.Arbitrary<unknown>) => v.map((x) => Buffer.from(bodyText(tame(x)), 'utf8'));
  const valid = template ?? fc.constant({});
  return fc.oneof(
    { weight: 8, arbitrary: json(valid) },
    {
      weight: 8,
      arbitrary: json(
        fc
          .tuple(valid, fc.array(mutation, { minLength: 1, maxLength: 2 }))
          .map(([v, ms]) => ms.reduce(mutate, v)),
      ),
    },
    { weight: 2, arbitrary: json(fc.jsonValue({ stringUnit: 'binary', maxDepth: 4 })) },
    { weight: 1, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 64 }).map((s) => Buffer.from(s, 'utf8')) },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(
          '{',
          '[',
          'null',
          '""',
          '1e400',
          '"\\u0000"',
          '{"a":1,"a":2}',
          '\ufeff{}',
          '{"__proto__":{"polluted":1}}',
          '{"constructor":{"prototype":{"polluted":1}}}',
          '{"x":"\\ud800"}',
          ' ',
          '\u0000',
        )
        .map((s) => Buffer.from(s, 'utf8')),
    },
    // Invalid UTF-8 inside a JSON string: a lone surrogate's and a stray continuation byte.
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x7d]),
        Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0x80, 0xff, 0x22, 0x7d]),
      ),
    },
  );
}

/** Form bodies for the dashboard's POSTs: known fields with odd values, or junk. */
const formBody = (fields: readonly string[], valid: fc.Arbitrary<[string, string][]>, world: World) => {
  const encode = (kv: [string, string][]) => Buffer.from(kv.map(([k, v]) => `${k}=${v}`).join('&'));
  const value = fc.oneof(
    oddText,
    fc.constantFrom(...world.trajectories, 'yes', 'no', 'add', 'tag', 'good', 'trainable'),
  );
  return fc.oneof(
    { weight: 3, arbitrary: valid.map(encode) },
    // A valid form with one field's value replaced (NUL, invalid UTF-8, huge numbers, ...).
    {
      weight: 3,
      arbitrary: fc
        .tuple(valid, fc.nat(), value)
        .map(([kv, at, v]) => encode(kv.map(([k, old], i) => [k, i === at % kv.length ? v : old]))),
    },
    {
      weight: 2,
      arbitrary: fc.array(fc.tuple(fc.constantFrom(...fields, 'x'), value), { maxLength: 6 }).map(encode),
    },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) },
    {
      weight: 1,
      arbitrary: fc.constant(
        Buffer.from('--zz\r\nContent-Disposition: form-data; name="key"\r\n\r\nv\r\n--zz--\r\n'),
      ),
    },
  );
};

// Templates: one valid body per route (then mutated); small waits and far deadlines only (see settle).
const chatBody = () =>
  fc.record({
    model: fc.constantFrom('sim', 'policy'),
    messages: fc.constantFrom(
      [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'what is 6*7?' },
      ],
      [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
      // A tool call answered: its result attaches to the step that made the call.
      [
        { role: 'user', content: 'list files' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'ls', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'a.txt' },
      ],
    ),
    tools: fc.constant([
      { type: 'function', function: { name: 'ls', parameters: { type: 'object', properties: {} } } },
    ]),
    max_tokens: fc.integer({ min: 1, max: 16 }),
    stream: fc.boolean(),
    temperature: fc.constantFrom(0, 0.7),
  });

/** The fuzzer's own trajectories, in a group of their own, so that valid steps are usually accepted. */
const FZ_TRAJECTORIES = ['fz-a', 'fz-b', 'fz-c', 'fz-d'];

const stepTemplate = (world: World) =>
  fc.record({
    trajectory_uid: fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(...FZ_TRAJECTORIES) },
      { weight: 1, arbitrary: fc.constantFrom(...world.trajectories) },
    ),
    prompt_uid: fc.constant('g-fz'),
    step_index: fc.integer({ min: 0, max: 3 }),
    prompt_ids: fc.constant([1, 2, 3]),
    response_ids: fc.constant([4, 5]),
    reward: fc.constantFrom(0, 1, null),
    is_last: fc.oneof(
      { weight: 4, arbitrary: fc.constant(false) },
      { weight: 1, arbitrary: fc.constant(true) },
    ),
    policy_version: fc.constantFrom(0, 1),
    metadata: fc.constant({ k: 'v' }),
    rollout_log_probs: fc.constant([-0.1, -0.2]),
    token_source: fc.constantFrom('engine', 'retokenized', 'submitted'),
    finish_reason: fc.constant('stop'),
    messages: fc.constant([{ role: 'user', content: 'hi' }]),
    tools: fc.constant([{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }]),
    response_text: fc.constant('hello'),
    tool_calls: fc.constant([{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }]),
    tool_results: fc.constant([{ tool_call_id: 'c1', name: 'f', content: 'ok', error: false }]),
    timings: fc.constant({ latency_ms: 12.5, ttft_ms: 3 }),
    engine_id: fc.constant('sim'),
  });

interface Route {
  method: string;
  /** The path, its params filled in (each already percent-encoded as it should be sent). */
  path: fc.Arbitrary<string>;
  query?: readonly string[];
  /** A valid JSON body (null: the route reads none; the fuzzer sends one anyway). */
  body?: fc.Arbitrary<unknown> | null;
  /** A form POST: its fields and a valid form. */
  form?: { fields: readonly string[]; valid: fc.Arbitrary<[string, string][]> };
  /** Extra headers this route reads. */
  headers?: fc.Arbitrary<Record<string, string>>;
}

function routes(world: World): Route[] {
  const traj = idParam(world.trajectories);
  const channel = fc.oneof(fc.constantFrom(...CHANNELS), oddSegment);
  const path = (...parts: (string | fc.Arbitrary<string>)[]) =>
    fc.tuple(...parts.map((p) => (typeof p === 'string' ? fc.constant(p) : p))).map((ps) => ps.join(''));
  // A base_url: a real pair, a real trajectory under another group, or made-up ids.
  const baseUrl = fc.oneof(
    { weight: 5, arbitrary: fc.constantFrom(...world.baseUrls).map((b) => `/${b.trajectory}/${b.group}`) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(...world.baseUrls).map((b) => `/${encodeFirst(b.trajectory)}/${b.group}`),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom(...world.trajectories), fakeId).map(([t, g]) => `/${t}/${g}`),
    },
    { weight: 2, arbitrary: fc.tuple(traj, idParam(world.groups)).map(([t, g]) => `/${t}/${g}`) },
  );
  // LLM calls mostly go to trajectories nothing else completes, so that most reach the engine.
  const callUrl = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...world.calls).map((b) => `/${b.trajectory}/${b.group}`) },
    { weight: 3, arbitrary: baseUrl },
  );
  const callTraj = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...world.calls.map((c) => c.trajectory)) },
    { weight: 1, arbitrary: fc.constantFrom(...world.trajectories) },
    { weight: 1, arbitrary: fakeId },
  );
  const realTraj = fc.constantFrom(...world.trajectories);
  const trajOrFake = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...world.trajectories, ...FZ_TRAJECTORIES) },
    { weight: 1, arbitrary: fakeId },
  );
  const stepsBody = fc.record({
    steps: fc.array(stepTemplate(world), { minLength: 1, maxLength: 2 }),
    channel: fc.constantFrom('fz', 'fz', 'train'),
    n_rollouts: fc.constantFrom(1, 2),
  });
  // The fixed base_url's ways to name a trajectory: a header, an online session, or both (a 400).
  const sessionHeaders = fc.oneof(
    { weight: 4, arbitrary: fc.record({ 'x-stepwise-trajectory': fc.oneof(callTraj, headerText()) }) },
    {
      weight: 3,
      arbitrary: fc.record(
        {
          'x-stepwise-session': fc.oneof(fc.constantFrom('auto', 'fz-session', 'fz-session-2'), headerText()),
          'x-stepwise-channel': fc.oneof(fc.constantFrom('online', 'fz'), headerText()),
          'user-agent': headerText(),
        },
        { requiredKeys: ['x-stepwise-session'] },
      ),
    },
    { weight: 1, arbitrary: fc.constant({}) },
    {
      weight: 1,
      arbitrary: fc.record({ 'x-stepwise-trajectory': callTraj, 'x-stepwise-session': fc.constant('auto') }),
    },
  );
  const signal = fc.record({
    trajectory_uid: trajOrFake,
    step_index: fc.constantFrom(0, 0, 1, null),
    name: fc.constantFrom('judge', 'exact', 'reward'),
    value: fc.constantFrom(0, 0.5, 1),
    source: fc.constantFrom('rule', 'verifier', 'judge', 'rm', 'human', 'env', 'agent'),
    version: fc.constant('1'),
    details: fc.constant({ why: 'fuzz' }),
  });
  const computeBody = fc.record(
    {
      trajectory_uid: trajOrFake,
      functions: fc.constant(['exact']),
      recompute: fc.boolean(),
      wait_ms: fc.constantFrom(0, 50, 200),
    },
    { requiredKeys: ['trajectory_uid', 'wait_ms'] },
  );
  return [
    { method: 'GET', path: fc.constant('/ready') },
    { method: 'POST', path: fc.constant('/v1/steps'), body: stepsBody },
    {
      method: 'POST',
      path: fc.constant('/submit_steps'),
      query: ['channel'],
      body: fc.oneof(stepsBody, fc.array(stepTemplate(world), { maxLength: 2 })),
    },
    {
      method: 'POST',
      path: path('/v1/trajectories/', traj, '/complete'),
      body: fc.record(
        {
          reward: fc.constantFrom(0, 1, null),
          status: fc.constantFrom('complete', 'aborted', 'infra_failed'),
        },
        { requiredKeys: [] },
      ),
    },
    {
      method: 'POST',
      path: path('/complete_trajectory/', traj),
      body: fc.record({ reward: fc.constantFrom(0, 1) }, { requiredKeys: [] }),
    },
    {
      method: 'POST',
      path: path('/v1/trajectories/', traj, '/metadata'),
      body: fc.constant({ metadata: { k: 'v', n: 1 } }),
    },
    {
      method: 'POST',
      path: path('/v1/trajectories/', traj, '/refusals'),
      body: fc.record(
        {
          attempts: fc.constant(['POST /v1/steps']),
          count: fc.constantFrom(1, 3),
          reason: fc.constant('sandbox'),
        },
        { requiredKeys: ['attempts', 'reason'] },
      ),
    },
    {
      method: 'POST',
      path: fc.constant('/v1/batches/lease'),
      body: fc.record(
        {
          channel: fc.constantFrom('train', 'fz'),
          batch_size: fc.constantFrom(1, 2),
          n_rollouts: fc.constantFrom(1, 2),
          max_staleness: fc.constantFrom(0, 5),
          wait_ms: fc.constantFrom(0, 20),
          consumer: fc.constant('fuzz'),
          ttl_ms: fc.constant(86_400_000),
          format: fc.constantFrom('json', 'arrow', 'padded'),
          advantage: fc.constantFrom('grpo', 'drgrpo', 'rloo'),
        },
        { requiredKeys: ['batch_size', 'ttl_ms'] },
      ),
    },
    { method: 'POST', path: path('/v1/batches/', idParam(world.leases), '/ack'), body: null },
    { method: 'POST', path: path('/v1/batches/', idParam(world.leases), '/nack'), body: null },
    {
      method: 'PUT',
      path: fc.constant('/v1/policy-version'),
      body: fc.record(
        { version: fc.constantFrom(0, 1, 2), drain: fc.boolean() },
        { requiredKeys: ['version'] },
      ),
    },
    { method: 'GET', path: fc.constant('/v1/policy-version') },
    { method: 'GET', path: fc.constant('/v1/stats'), query: ['channel'] },
    {
      method: 'GET',
      path: fc.constant('/v1/events'),
      query: ['cursor', 'limit', 'channel', 'type'],
      headers: fc.record(
        { accept: fc.constantFrom('text/event-stream', 'application/json', '*/*') },
        { requiredKeys: [] },
      ),
    },
    {
      method: 'GET',
      path: fc.constant('/v1/events/stream'),
      query: ['cursor', 'limit', 'channel', 'type'],
      headers: fc.record(
        {
          'last-event-id': fc.oneof(
            oddText.filter((s) => !s.includes('%')),
            headerText(),
          ),
        },
        { requiredKeys: [] },
      ),
    },
    {
      method: 'GET',
      path: fc.constant('/v1/steps'),
      query: [
        'channel',
        'trajectory_uid',
        'prompt_uid',
        'reward_min',
        'reward_max',
        'status',
        'trainable',
        'quality',
        'label',
        'limit',
        'offset',
      ],
    },
    {
      method: 'GET',
      path: fc.constant('/v1/trajectories'),
      query: [
        'channel',
        'prompt_uid',
        'task_id',
        'reward_min',
        'reward_max',
        'status',
        'guided',
        'probe',
        'derived',
        'policy_version',
        'trainable',
        'quality',
        'label',
        'limit',
        'offset',
      ],
    },
    { method: 'GET', path: path('/v1/trajectories/', traj) },
    { method: 'GET', path: path('/v1/trajectories/', traj, '/signals'), query: ['current'] },
    {
      method: 'POST',
      path: fc.constant('/v1/signals'),
      body: fc.record({ signals: fc.array(signal, { minLength: 1, maxLength: 2 }) }),
    },
    {
      method: 'POST',
      path: fc.constant('/v1/labels'),
      body: fc.record({
        labels: fc.array(
          fc.record(
            {
              trajectory_uid: trajOrFake,
              step_index: fc.constantFrom(0, 1, null),
              quality: fc.constantFrom('good', 'neutral', 'bad', null),
              trainable: fc.boolean(),
              tags: fc.constant(['fz']),
              note: fc.constant('a note'),
              author: fc.constant('fuzz'),
            },
            { requiredKeys: ['trajectory_uid', 'note'] },
          ),
          { minLength: 1, maxLength: 2 },
        ),
      }),
    },
    { method: 'GET', path: path('/v1/channels/', channel) },
    {
      method: 'PUT',
      path: path('/v1/channels/', fc.oneof(fc.constantFrom('fz', 'fz-2'), oddSegment)),
      body: fc.record(
        {
          n_rollouts: fc.constantFrom(1, 2, null),
          max_queue_size: fc.constantFrom(10, null),
          max_staleness: fc.constantFrom(0, 3, null),
          stale_policy: fc.constantFrom('drop', 'flag'),
          // Far beyond a run: a timeout that fired between two requests would change the pool.
          group_timeout_ms: fc.constantFrom(86_400_000, null),
          incomplete_policy: fc.constantFrom('drop', 'serve_partial'),
          idle_timeout_ms: fc.constant(86_400_000),
          curation: fc.constant({ zero_variance: 'keep', repetition: { ngram: 3, max_fraction: 0.5 } }),
          required_signals: fc.constantFrom([], ['reward']),
          trust_agent_reward: fc.boolean(),
        },
        { requiredKeys: [] },
      ),
    },
    {
      method: 'POST',
      path: fc.constant('/v1/exports'),
      body: fc.record(
        {
          kind: fc.constantFrom('sft', 'dpo', 'rl', 'trajectories'),
          channel: fc.constant('train'),
          status: fc.constantFrom('complete', 'any'),
          group: fc.constant('g-done'),
        },
        { requiredKeys: ['kind'] },
      ),
    },
    {
      method: 'GET',
      path: path(
        '/v1/exports/',
        idParam(world.exports),
        '/',
        fc.oneof(
          fc.constantFrom('manifest.json', 'trajectories.jsonl', 'sft.jsonl', 'rl.parquet'),
          oddSegment,
        ),
      ),
    },
    { method: 'GET', path: fc.constant('/v1/rewards') },
    {
      method: 'GET',
      path: fc.constant('/v1/rewards/jobs'),
      query: ['state', 'kind', 'channel', 'trajectory_uid', 'prompt_uid', 'function', 'before', 'limit'],
    },
    {
      method: 'GET',
      path: path(
        '/v1/rewards/jobs/',
        fc.oneof(idParam(world.jobs), fc.constantFrom('0', '1', '1.5', '-1', '1e3', '9007199254740993')),
      ),
    },
    { method: 'GET', path: path('/v1/rewards/status/', traj) },
    { method: 'POST', path: fc.constant('/v1/rewards/compute'), body: computeBody },
    {
      method: 'POST',
      path: fc.constant('/v1/rewards/recompute'),
      body: fc.record(
        {
          channel: fc.constantFrom('train', 'fz'),
          trajectory_uid: trajOrFake,
          function: fc.constantFrom('exact', 'reward', 'nope'),
        },
        { requiredKeys: [] },
      ),
    },
    {
      method: 'POST',
      path: fc.constant('/init_trajectory'),
      body: fc.record(
        {
          group_id: fc.constantFrom('g-fz', 'g-open', ...world.groups),
          channel: fc.constantFrom('train', 'trusted', 'fz'),
          metadata: fc.constant({ answer: '42' }),
          n_rollouts: fc.constantFrom(1, 2),
          guided: fc.boolean(),
          probe: fc.constant(false),
          guidance_k: fc.constantFrom(0, 1),
          guidance_hint: fc.constant('think'),
        },
        { requiredKeys: [] },
      ),
    },
    { method: 'POST', path: path(callUrl, '/v1/chat/completions'), query: ['x'], body: chatBody() },
    {
      method: 'POST',
      path: path(callUrl, '/v1/completions'),
      body: fc.record({
        model: fc.constant('sim'),
        prompt: fc.constantFrom('once upon', [1, 2, 3]),
        max_tokens: fc.integer({ min: 1, max: 8 }),
        stream: fc.boolean(),
      }),
    },
    { method: 'GET', path: path(callUrl, '/v1/models') },
    {
      method: 'POST',
      path: path(baseUrl, '/v1/register_trajectory'),
      body: fc.record({ metadata: fc.constant({ k: 'v' }) }, { requiredKeys: [] }),
    },
    {
      method: 'POST',
      path: path(baseUrl, '/v1/complete_trajectory'),
      body: fc.record(
        { reward: fc.constantFrom(0, 1), status: fc.constant('complete') },
        { requiredKeys: [] },
      ),
    },
    {
      method: 'POST',
      path: path(baseUrl, '/v1/signals'),
      body: fc.record({
        signals: fc.array(
          fc.record(
            {
              name: fc.constantFrom('done', 'judge'),
              value: fc.constantFrom(0, 1),
              source: fc.constantFrom('agent', 'judge'),
              step_index: fc.constantFrom(0, null),
            },
            { requiredKeys: ['name', 'value'] },
          ),
          { minLength: 1, maxLength: 2 },
        ),
      }),
    },
    { method: 'POST', path: fc.constant('/v1/chat/completions'), body: chatBody(), headers: sessionHeaders },
    {
      method: 'POST',
      path: fc.constant('/v1/chat/completions'),
      body: fc.tuple(callTraj, chatBody()).map(([t, b]) => ({ ...b, model: `${t}__sim` })),
      headers: fc.oneof({ weight: 4, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: sessionHeaders }),
    },
    {
      method: 'POST',
      path: fc.constant('/v1/completions'),
      body: fc.record({ model: fc.constant('sim'), prompt: fc.constant('hi'), max_tokens: fc.constant(4) }),
      headers: sessionHeaders,
    },
    { method: 'GET', path: fc.constant('/v1/models') },
    { method: 'GET', path: fc.constant('/v1/gateway/stats') },
    {
      method: 'POST',
      path: fc.constant('/generate'),
      body: fc.record(
        {
          prompt_ids: fc.constant([1, 2, 3]),
          sampling_params: fc.record(
            { max_new_tokens: fc.constantFrom(1, 4), temperature: fc.constantFrom(0, 1) },
            { requiredKeys: [] },
          ),
          trajectory_uid: fc.constantFrom(...world.trajectories),
          model: fc.constant('sim'),
        },
        { requiredKeys: ['prompt_ids'] },
      ),
    },
    { method: 'POST', path: fc.constant('/compute_reward'), body: computeBody },
    // The dashboard: pages, assets, sign-in and the curation forms.
    { method: 'GET', path: fc.constant('/dashboard'), query: ['channel'] },
    {
      method: 'GET',
      path: path(
        '/dashboard/assets/',
        fc.oneof(
          fc.constantFrom('dashboard.css', 'dashboard.js', 'uPlot.min.css', '..%2Fpackage.json'),
          oddSegment,
        ),
      ),
    },
    {
      method: 'GET',
      path: fc.constant('/dashboard/batches'),
      query: ['channel', 'batch_size', 'n_rollouts', 'max_staleness', 'offset'],
    },
    { method: 'GET', path: fc.constant('/dashboard/events'), query: ['channel', 'type', 'source'] },
    { method: 'GET', path: path('/dashboard/groups/', channel, '/', idParam(world.groups)) },
    { method: 'GET', path: fc.constant('/dashboard/gym'), query: ['run', 'channel'] },
    { method: 'GET', path: fc.constant('/dashboard/login'), query: ['next'] },
    {
      method: 'POST',
      path: fc.constant('/dashboard/login'),
      form: {
        fields: ['key', 'next'],
        valid: fc
          .tuple(fc.constantFrom(ADMIN, AGENT), fc.constantFrom('/dashboard', '/dashboard/gym'))
          .map(([k, n]): [string, string][] => [
            ['key', k],
            ['next', n],
          ]),
      },
    },
    {
      method: 'GET',
      path: fc.constant('/dashboard/trajectories'),
      query: [
        'channel',
        'group',
        'task',
        'reward_min',
        'reward_max',
        'status',
        'policy_version',
        'tag',
        'quality',
        'trainable',
        'guided',
        'probe',
        'derived',
        'page',
      ],
    },
    { method: 'GET', path: path('/dashboard/trajectories/', traj) },
    {
      method: 'POST',
      path: fc.constant('/dashboard/labels'),
      form: {
        fields: ['id', 'action', 'tag', 'back'],
        valid: fc
          .tuple(trajOrFake, realTraj, fc.constantFrom('trainable', 'untrainable', 'tag'))
          .map(([a, b, action]): [string, string][] => [
            ['id', a],
            ['id', b],
            ['action', action],
            ['tag', 'fz'],
            ['back', '/dashboard/trajectories?status=complete'],
          ]),
      },
    },
    {
      method: 'POST',
      path: path('/dashboard/trajectories/', traj, '/labels'),
      form: {
        fields: ['step', 'quality', 'trainable', 'tags', 'tag_mode', 'note'],
        valid: fc
          .tuple(
            fc.constantFrom('0', '1'),
            fc.constantFrom('good', 'keep', 'clear'),
            fc.constantFrom('yes', 'no', 'keep'),
            fc.constantFrom('add', 'replace', 'remove'),
          )
          .map(([step, quality, trainable, mode]): [string, string][] => [
            ['step', step],
            ['quality', quality],
            ['trainable', trainable],
            ['tags', 'a,b'],
            ['tag_mode', mode],
            ['note', 'looks+fine'],
          ]),
      },
    },
    // Anywhere else.
    {
      method: 'GET',
      path: fc.array(oddSegment, { minLength: 1, maxLength: 4 }).map((s) => `/${s.join('/')}`),
    },
    {
      method: 'POST',
      path: fc
        .array(fc.oneof(oddSegment, fc.constantFrom('v1', 'dashboard')), { minLength: 1, maxLength: 4 })
        .map((s) => `/${s.join('/')}`),
    },
  ].map((r) => ({ ...r, path: r.path.map((p) => (p.startsWith('/') ? p : `/${p}`)) }));
}

function requestArb(world: World): fc.Arbitrary<FuzzRequest> {
  const { port } = world;
  const own = `127.0.0.1:${port}`;
  const host = fc.oneof(
    { weight: 30, arbitrary: fc.constant(own) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(`localhost:${port}`, `[::1]:${port}`, '127.0.0.1', `LOCALHOST:${port}`),
    },
    // Foreign names: a 403 by design (DNS rebinding), and nothing may change.
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        'evil.example',
        `evil.example:${port}`,
        `127.0.0.1:${port}@evil.example`,
        '',
        '%',
        `127.0.0.1:${port}/x`,
      ),
    },
  );
  const origin = fc.oneof(
    { weight: 30, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.constant(`http://${own}`) },
    // Another site's (or no) origin on a state-changing request: a 403 by design.
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        'http://evil.example',
        'null',
        'garbage',
        `https://${own}`,
        `http://localhost:${port}`,
      ),
    },
  );
  const junkAuth = fc.oneof(
    fc.constantFrom(
      'Bearer',
      'Bearer ',
      'Basic YWxhZGRpbjpvcGVuc2VzYW1l',
      `bearer ${ADMIN}`,
      `Bearer ${ADMIN}x`,
      `Bearer  ${AGENT} `,
      `Bearer ${'k'.repeat(5_000)}`,
    ),
    headerText(),
  );
  const authorization = world.keyed
    ? fc.oneof(
        { weight: 16, arbitrary: fc.constant(`Bearer ${ADMIN}`) },
        { weight: 2, arbitrary: fc.constantFrom(TRAINER, RUNNER, AGENT).map((k) => `Bearer ${k}`) },
        { weight: 2, arbitrary: junkAuth },
        { weight: 1, arbitrary: fc.constant(undefined) },
      )
    : fc.oneof({ weight: 6, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: junkAuth });
  const contentType = fc.oneof(
    { weight: 8, arbitrary: fc.constant('application/json') },
    { weight: 2, arbitrary: fc.constant(undefined) },
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        'application/json; charset=utf-8',
        'APPLICATION/JSON',
        'text/plain',
        'text/plain;charset=UTF-8',
        'application/x-www-form-urlencoded',
        'multipart/form-data; boundary=zz',
        'multipart/form-data',
        'application/octet-stream',
        'application/json; charset=utf-16',
        'application/x-ndjson',
      ),
    },
    { weight: 1, arbitrary: headerText(30) },
  );
  const extraHeaders = fc.record(
    {
      'x-api-key': fc.oneof(fc.constantFrom(ADMIN, AGENT, ''), headerText()),
      cookie: fc.oneof(
        fc.constantFrom(`stepwise_key=${ADMIN}`, 'stepwise_key=', 'stepwise_key=%zz; a=b', ';;;'),
        headerText(),
      ),
      'x-stepwise-trajectory': headerText(),
      'x-stepwise-session': headerText(),
      'x-stepwise-policy-version': headerText(),
      accept: fc.constantFrom('text/event-stream', 'text/html', '*/*', ''),
    },
    { requiredKeys: [] },
  );
  // Encoded dot segments in front of a route's path (`/dashboard/%2e%2e/v1/labels` is `/v1/labels`):
  // every guard must see the path the route sees (one path rule, issue 38).
  const dotPrefix = fc.oneof(
    { weight: 14, arbitrary: fc.constant('') },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '/dashboard/%2e%2e',
        '/dashboard/%2E%2e',
        '/dashboard/.%2e',
        '/dashboard/x/%2e%2e/%2e%2e',
        '/dashboard/assets/%2e%2e/%2e%2e',
        '/a/%2e%2e',
        '/dashboard/%2e',
      ),
    },
  );
  const perRoute = routes(world).map((route) => {
    const methods = fc.oneof(
      { weight: 12, arbitrary: fc.constant(route.method) },
      { weight: 1, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS') },
    );
    const body =
      route.form !== undefined
        ? formBody(route.form.fields, route.form.valid, world)
        : route.body === null || route.method === 'GET'
          ? fc.oneof({ weight: 4, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: bodyFor(null) })
          : bodyFor(route.body ?? null);
    const formType =
      route.form !== undefined
        ? fc.oneof(
            { weight: 6, arbitrary: fc.constant('application/x-www-form-urlencoded') },
            {
              weight: 1,
              arbitrary: fc.constantFrom(
                'multipart/form-data; boundary=zz',
                'multipart/form-data',
                'text/plain',
              ),
            },
          )
        : null;
    return fc
      .record({
        method: methods,
        path: fc.tuple(dotPrefix, route.path).map(([prefix, path]) => prefix + path),
        query: route.query
          ? queryString(route.query, world)
          : fc.oneof(
              { weight: 6, arbitrary: fc.constant('') },
              { weight: 1, arbitrary: queryString([], world) },
            ),
        host,
        origin,
        authorization,
        contentType: formType ?? contentType,
        routeHeaders: route.headers ?? fc.constant({}),
        extra: fc.oneof({ weight: 4, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: extraHeaders }),
        body,
      })
      .map((r): FuzzRequest => {
        const headers: Record<string, string> = { host: r.host, ...r.extra, ...r.routeHeaders };
        if (r.origin !== undefined) headers.origin = r.origin;
        if (r.authorization !== undefined) headers.authorization = r.authorization;
        if (r.contentType !== undefined) headers['content-type'] = r.contentType;
        const body = r.method === 'GET' || r.method === 'HEAD' ? null : r.body;
        if (body !== null) headers['content-length'] = String(body.length);
        return { method: r.method, path: `${r.path}${r.query}`.replace(/ /g, '%20'), headers, body };
      });
  });
  return fc.oneof(...perRoute);
}

// ---- the properties -------------------------------------------------------------------------------

/**
 * 5xx answers that are intended, with why. Everything else is a bug. With the built-in sim engine the
 * engine's 502/503/504 (docs: engine failures reach the agent in OpenAI's format) never happen.
 */
function allowed5xx(req: FuzzRequest, res: FuzzResponse, started: Started): boolean {
  // No reward function configured: /compute_reward says so with a 501 (README, docs/rewards.md).
  return res.status === 501 && !started.keyed && req.path.split('?')[0] === '/compute_reward';
}

/**
 * A state-changing request with a body that is not JSON, to a path that resolves (dot segments, as
 * the URL parser resolves them) outside the dashboard: the guard must refuse it, whatever it was
 * spelled as, so no route may answer it with a 2xx.
 */
function sideDoor(req: FuzzRequest): boolean {
  if (['GET', 'HEAD', 'OPTIONS'].includes(req.method) || !req.body || req.body.length === 0) return false;
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (/^application\/(?:[\w.-]+\+)?json$/.test(type)) return false;
  let path: string;
  try {
    // Resolved as the URL parser does, then decoded as the routes decode it (`%64ashboard` is the dashboard).
    path = decodeURI(new URL(req.path, 'http://h').pathname);
  } catch {
    return false;
  }
  return !/^\/dashboard(\/|$)/.test(path);
}

const isLlmCall = (req: FuzzRequest) => /\/v1\/(chat\/)?completions(\?|$)/.test(req.path);

interface ByDesign {
  /** Event types it may add. */
  events: string[];
  /** A call_failed with the answer's status must be among them: the engine answered this call. */
  engineAnswered: boolean;
  /** Counters of /v1/stats those events move (null: any, as opening a trajectory and its group does). */
  stats: string[] | null;
  /** Whether it may open a trajectory (an online session's, when its first call reached the engine). */
  opens: boolean;
}

/**
 * What a 4xx may change by design, or null when nothing:
 * - a trust refusal (403 naming trust_agent_reward: completing, merging metadata, posting signals
 *   of another source under a base_url, joining a group) is recorded as `access_refused`
 *   (docs/security.md);
 * - an LLM call the gateway accepted and forwarded, which the engine then refused, is recorded as
 *   `call_failed` like every call that produced no step (README, the events table): the engine, not
 *   the gateway, judges what its model accepts (content parts, say). An online session's first call
 *   opened the session's trajectory before it went to the engine; the session's next call uses it.
 */
function recordedByDesign(req: FuzzRequest, res: FuzzResponse): ByDesign | null {
  if (res.status === 403 && res.text.includes('trust_agent_reward'))
    return { events: ['access_refused'], engineAnswered: false, stats: [], opens: false };
  if (isLlmCall(req)) {
    const session = req.headers['x-stepwise-session'] !== undefined;
    return {
      events: session ? ['call_failed', 'trajectory_created'] : ['call_failed'],
      engineAnswered: true,
      stats: session ? null : ['failedCalls'],
      opens: session,
    };
  }
  return null;
}

/** Whether a 4xx changed only what it records by design (see recordedByDesign). */
async function onlyRecorded(
  started: Started,
  req: FuzzRequest,
  res: FuzzResponse,
  before: Fingerprint,
  after: Fingerprint,
) {
  const allowed = recordedByDesign(req, res);
  if (!allowed) return false;
  const rest = (f: Fingerprint) => {
    const stats = allowed.stats && (JSON.parse(f.stats as string) as Record<string, unknown>);
    for (const key of allowed.stats ?? []) delete stats![key];
    const trajectories = allowed.opens ? null : f.trajectories;
    return JSON.stringify({ ...f, stats, trajectories, lastEventSeq: null, statsEventSeq: null });
  };
  if (rest(before) !== rest(after)) return false;
  const events = await started.server.pool.events({ after: before.lastEventSeq as number, limit: 100 });
  const failed = (e: (typeof events)[number]) =>
    e.type === 'call_failed' && (e.data as { status?: unknown }).status === res.status;
  return (
    events.every((e) => allowed.events.includes(e.type)) && (!allowed.engineAnswered || events.some(failed))
  );
}

/** Sends a batch one request at a time and checks the properties after each. */
async function checkBatch(started: Started, batch: FuzzRequest[]) {
  const { port } = started.server;
  // Taken afresh: a failed run (fast-check shrinking replays them) may have left changes behind.
  let before = await fingerprint(started);
  for (const req of batch) {
    let res: FuzzResponse;
    try {
      res = await send(port, req);
    } catch (error) {
      throw new Error(`${(error as Error).message}: ${describeRequest(req)}`);
    }
    if (res.status >= 500 && !allowed5xx(req, res, started))
      throw new Error(`${res.status} ${res.text.slice(0, 300)} for ${describeRequest(req)}`);
    if (res.status < 300 && sideDoor(req))
      throw new Error(
        `${res.status}: a route outside the dashboard ran on a non-JSON body: ${describeRequest(req)}`,
      );
    // The server runs in this process: a body that reached Object.prototype would show here.
    if (Object.hasOwn(Object.prototype, 'polluted'))
      throw new Error(`Object.prototype polluted by ${describeRequest(req)}`);
    await settle(started);
    const after = await fingerprint(started);
    const diff = changed(before, after);
    if (
      res.status >= 400 &&
      res.status < 500 &&
      diff.length > 0 &&
      !(await onlyRecorded(started, req, res, before, after))
    ) {
      const what = diff.map(
        (k) => `${k}: ${String(before[k]).slice(0, 200)} -> ${String(after[k]).slice(0, 200)}`,
      );
      const events = await started.server.pool.events({ after: before.lastEventSeq as number, limit: 10 });
      const added = events.map((e) => `${e.type} ${JSON.stringify(e.data).slice(0, 200)}`);
      throw new Error(
        `${res.status} ${res.text.slice(0, 300)} changed ${what.join('; ')}; events: ${added.join(', ')}; for ${describeRequest(req)}`,
      );
    }
    before = after;
  }
  const ready = await send(port, {
    method: 'GET',
    path: '/ready',
    headers: { host: `127.0.0.1:${port}` },
    body: null,
  });
  if (ready.status !== 200 || ready.ms > READY_WITHIN_MS)
    throw new Error(`not ready after the batch: ${ready.status} in ${Math.round(ready.ms)} ms`);
}

async function fuzz(started: Started, runs: number): Promise<void> {
  const world = await setUp(started);
  await fc.assert(
    fc.asyncProperty(fc.array(requestArb(world), { minLength: 1, maxLength: 6 }), (batch) =>
      checkBatch(started, batch),
    ),
    // A failure is shrunk by replaying batches: bounded, so that a failing CI run still ends and
    // reports the smallest counterexample found by then.
    { seed: SEED, numRuns: runs, interruptAfterTimeLimit: TIME_LIMIT_MS },
  );
}

for (const [name, start] of stores) {
  describe(`fuzzing the HTTP API on ${name}`, () => {
    it(
      'with API keys and rewards: no unintended 5xx, always ready, a rejected request changes nothing',
      async () => {
        const started = await start('keyed');
        try {
          await fuzz(started, RUNS);
        } finally {
          await started.server.close();
        }
      },
      TIME_LIMIT_MS + 60_000,
    );

    it(
      'open on loopback without keys or rewards: the same',
      async () => {
        const started = await start('open');
        try {
          await fuzz(started, Math.ceil(RUNS / 3));
        } finally {
          await started.server.close();
        }
      },
      TIME_LIMIT_MS + 60_000,
    );
  });
}

// ---- what the fuzzer found ------------------------------------------------------------------------

/** Each input the fuzzer found (shrunk), as a plain test: the 4xx naming the field, and no change. */
for (const [name, start] of stores) {
  describe(`what the fuzzer found, on ${name}`, () => {
    let started: Started;
    let world: World;
    beforeAll(async () => {
      started = await start('open');
      world = await setUp(started);
    });
    afterAll(() => started.server.close());

    /** Sends one request; its answer must be `status` naming `field`, and the pool must not change. */
    async function refused(
      req: { method: string; path: string; headers?: Record<string, string>; body?: string | Buffer },
      status: number,
      field: string,
    ): Promise<void> {
      const before = await fingerprint(started);
      const body =
        req.body === undefined ? null : Buffer.isBuffer(req.body) ? req.body : Buffer.from(req.body);
      const res = await send(started.server.port, {
        method: req.method,
        path: req.path,
        headers: {
          host: `127.0.0.1:${started.server.port}`,
          ...(body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {}),
          ...req.headers,
        },
        body,
      });
      expect(res.status, `${req.method} ${req.path}: ${res.text}`).toBe(status);
      const error = (JSON.parse(res.text) as { error: { field?: string; param?: string } }).error;
      expect(error.field ?? error.param).toBe(field);
      await settle(started);
      expect(changed(before, await fingerprint(started))).toEqual([]);
    }

    it('a dashboard form that is no form (multipart without its boundary) is a 400, not a 500', async () => {
      const body = '--zz\r\nContent-Disposition: form-data; name="key"\r\n\r\nv\r\n--zz--\r\n';
      const headers = { 'content-type': 'multipart/form-data' };
      for (const path of [
        '/dashboard/login',
        '/dashboard/labels',
        `/dashboard/trajectories/${world.trajectories[0]}/labels`,
      ])
        await refused({ method: 'POST', path, headers, body }, 400, 'body');
    });

    it('NUL in a dashboard form field is a 400 naming it, on PostgreSQL as on SQLite (it was a 500 there)', async () => {
      const form = { 'content-type': 'application/x-www-form-urlencoded' };
      const id = world.trajectories[2]!;
      await refused(
        { method: 'POST', path: `/dashboard/trajectories/${id}/labels`, headers: form, body: 'note=a%00b' },
        400,
        'note',
      );
      await refused(
        { method: 'POST', path: `/dashboard/trajectories/${id}/labels`, headers: form, body: 'tags=a%00b' },
        400,
        'tags',
      );
      await refused(
        { method: 'POST', path: '/dashboard/labels', headers: form, body: `id=${id}&action=tag&tag=x%00` },
        400,
        'tag',
      );
    });

    it('NUL in a query parameter is a 400 naming it (PostgreSQL could not run the filter: a 500)', async () => {
      await refused({ method: 'GET', path: '/v1/steps?label=a%00' }, 400, 'label');
      await refused({ method: 'GET', path: '/v1/trajectories?task_id=%00' }, 400, 'task_id');
      await refused({ method: 'GET', path: '/dashboard/trajectories?tag=%00' }, 400, 'tag');
    });

    it('NUL in a lease id is a 400 naming lease_id, not a 500', async () => {
      await refused({ method: 'POST', path: '/v1/batches/a%00b/nack' }, 400, 'lease_id');
      await refused({ method: 'POST', path: '/v1/batches/a%00b/ack' }, 400, 'lease_id');
    });

    it('a policy_version filter beyond a 32-bit integer is a 400 (PostgreSQL: out of range, a 500)', async () => {
      await refused(
        { method: 'GET', path: '/v1/trajectories?policy_version=2147483648' },
        400,
        'policy_version',
      );
      const page = await send(started.server.port, {
        method: 'GET',
        path: '/dashboard/trajectories?policy_version=2147483648',
        headers: { host: `127.0.0.1:${started.server.port}` },
        body: null,
      });
      // The list page reports its filters' mistakes on the page itself.
      expect(page.status).toBe(400);
      expect(page.text).toContain('must be &lt;= 2147483647');
    });

    it('a lone surrogate in a JSON body is a 400 naming the field (PostgreSQL refused it as JSON: a 500)', async () => {
      const trusted = world.baseUrls[1]!;
      const base = `/${trusted.trajectory}/${trusted.group}/v1`;
      await refused(
        {
          method: 'POST',
          path: `${base}/register_trajectory`,
          body: '{"metadata":{"k":{},"zz_unknown":"\\ud800"}}',
        },
        400,
        'metadata.zz_unknown',
      );
      await refused(
        { method: 'POST', path: '/init_trajectory', body: '{"metadata":{"k":"\\udc00"}}' },
        400,
        'metadata.k',
      );
      await refused(
        {
          method: 'POST',
          path: '/v1/signals',
          body: `{"signals":[{"trajectory_uid":"fz-done-0","name":"\\ud800","value":1,"source":"judge"}]}`,
        },
        400,
        'signals.0.name',
      );
    });

    it('an online session call refused for its body opens no trajectory', async () => {
      await refused(
        {
          method: 'POST',
          path: '/v1/completions',
          headers: { 'x-stepwise-session': 'fz-session' },
          body: '{"model":"sim","prompt":"hi","max_tokens":{"":null}}',
        },
        400,
        'max_tokens',
      );
    });

    it('/dashboard/assets/constructor is a 404, not a 500 (it found Object.prototype)', async () => {
      for (const asset of ['constructor', '__proto__', 'toString']) {
        const res = await send(started.server.port, {
          method: 'GET',
          path: `/dashboard/assets/${asset}`,
          headers: { host: `127.0.0.1:${started.server.port}` },
          body: null,
        });
        expect(res.status, asset).toBe(404);
      }
    });

    it("an engine's refusal is recorded (call_failed) before the agent gets it", async () => {
      const call = world.calls[0]!;
      const seq = await started.server.pool.store.lastEventSeq();
      const res = await send(started.server.port, {
        method: 'POST',
        path: `/${call.trajectory}/${call.group}/v1/chat/completions`,
        headers: { host: `127.0.0.1:${started.server.port}`, 'content-type': 'application/json' },
        // An image part: the gateway's schema takes it (OpenAI's spec does), the sim refuses it.
        body: Buffer.from(
          '{"model":"sim","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}',
        ),
      });
      expect(res.status).toBe(400);
      // No waiting: the event is in the log by the time the answer is.
      const events = await started.server.pool.events({ after: seq, limit: 10 });
      expect(events.map((e) => [e.type, (e.data as { status?: number }).status])).toEqual([
        ['call_failed', 400],
      ]);
    });
  });
}

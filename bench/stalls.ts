/**
 * The event loop under the largest requests a server takes (docs/security.md, "What every request
 * may cost"): the longest stall of a Stepwise server's event loop while each one runs, against an
 * idle loop's longest stall measured just before in the same process. Part of `npm run bench:gateway`.
 *
 * The server runs in this process (`startServer`, SQLite, the built-in sim on its worker thread), so
 * its event loop is this one; each request's body is built before the measurement starts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { Session } from 'node:inspector/promises';
import os, { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { MAX_METADATA_BYTES, MAX_PROMPT_TOKENS } from '../packages/core/src/domain/index.js';
import { startServer } from '../packages/core/src/server/server.js';
import { codeVersion, recordRun, round } from './support.js';

export interface Stall {
  /** A short name for the results file (bench/results/gateway.jsonl). */
  key: string;
  request: string;
  bodyBytes: number;
  status: number;
  /** Longest event-loop delay while it ran, ms. */
  stallMs: number;
  /** Its wall time, ms. */
  wallMs: number;
}

export interface StallSection {
  idleMs: number;
  stalls: Stall[];
}

const ids = (n: number, offset = 0) => Array.from({ length: n }, (_, i) => 100 + ((i + offset) % 50_000));

async function measure(
  run: () => Promise<number>,
  profile?: string,
): Promise<{ stallMs: number; wallMs: number; status: number }> {
  const session = profile === undefined ? null : new Session();
  if (session) {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 200 });
    await session.post('Profiler.start');
  }
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  const begin = performance.now();
  const status = await run();
  const wallMs = performance.now() - begin;
  h.disable();
  if (session && profile !== undefined) {
    const { profile: taken } = await session.post('Profiler.stop');
    writeFileSync(profile, JSON.stringify(taken));
    session.disconnect();
  }
  return { stallMs: h.max / 1e6, wallMs, status };
}

/** `--profile=DIR`: each measured request's CPU profile of the event loop's thread, as DIR/<key>.cpuprofile. */
const PROFILE_DIR = process.argv.find((a) => a.startsWith('--profile='))?.slice('--profile='.length);

/** Measures one request as a row (when wanted): `key`, the row's text, and the request itself. */
type Add = (key: string, request: string, method: string, path: string, body?: string) => Promise<void>;

/** A fresh trajectory from the server's `init_trajectory`. */
async function initTrajectory(url: string) {
  return (await (
    await fetch(`${url}/init_trajectory`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    })
  ).json()) as {
    trajectory_uid: string;
    base_url: string;
  };
}

/** The model calls: `/generate` with the most prompt ids it takes, and a chat call with one huge message. */
async function modelCallStalls(url: string, add: Add, quick: boolean): Promise<void> {
  const t = await initTrajectory(url);
  await add(
    `generate_${MAX_PROMPT_TOKENS}_ids`,
    `/generate, ${MAX_PROMPT_TOKENS.toLocaleString('en-US')} prompt ids (MAX_PROMPT_TOKENS)`,
    'POST',
    '/generate',
    JSON.stringify({
      trajectory_uid: t.trajectory_uid,
      prompt_ids: ids(MAX_PROMPT_TOKENS),
      sampling_params: { max_tokens: 8 },
    }),
  );
  const chat = await initTrajectory(url);
  const words = 'alpha beta gamma delta epsilon '.repeat(quick ? 20_000 : 60_000);
  await add(
    `chat_${Math.round(words.length / 1e6)}mb_message`,
    `chat call, one ${Math.round(words.length / 1e6)} MB user message (stored as its step)`,
    'POST',
    `${new URL(chat.base_url).pathname}/chat/completions`,
    JSON.stringify({ model: 'sim-qwen3', messages: [{ role: 'user', content: words }], max_tokens: 8 }),
  );
}

/**
 * One `/v1/steps` body of many big steps, stored on SQLite's thread, then the same on a second server
 * with SQLite on the event loop (its row pushed onto `stalls` directly: it is not `add`'s server).
 */
async function stepsBatchStalls(
  dir: string,
  add: Add,
  wanted: (key: string) => boolean,
  stalls: Stall[],
  quick: boolean,
): Promise<void> {
  const steps = quick ? 200 : 1_000;
  // Steps of trajectories of their own (POST /v1/steps opens them).
  const batchBody = (trajectory: string) =>
    JSON.stringify({
      steps: Array.from({ length: steps }, (_, i) => ({
        trajectory_uid: trajectory,
        prompt_uid: 'bench',
        step_index: i,
        prompt_ids: ids(4_096, i),
        response_ids: ids(64, i),
      })),
    });
  const label = `/v1/steps, ${steps.toLocaleString('en-US')} steps × 4,096 prompt ids in one body`;
  await add(
    'steps_batch_worker_store',
    `${label} (parsed on the offload thread, stored on SQLite's thread)`,
    'POST',
    '/v1/steps',
    batchBody(`bench-${process.pid}-batch`),
  );
  // The same with SQLite on the event loop (`--store-thread main`): storing is synchronous there,
  // about 7 ms per MiB (docs/security.md); shown for comparison, not a default.
  const onMain = !wanted('steps_batch_main_store')
    ? null
    : await startServer({
        dbPath: join(dir, 'main.db'),
        port: 0,
        engines: [],
        storeThread: 'main',
      });
  if (onMain)
    try {
      const body = Buffer.from(batchBody(`bench-${process.pid}-batch-m`));
      const m = await measure(
        () => rawSend(onMain.url, 'POST', '/v1/steps', body),
        PROFILE_DIR && join(PROFILE_DIR, 'steps_batch_main_store.cpuprofile'),
      );
      stalls.push({
        key: 'steps_batch_main_store',
        request: `${label}, \`--store-thread main\` (not a default)`,
        bodyBytes: body.length,
        ...m,
      });
    } finally {
      await onMain.close();
    }
}

/** A step holding the most prompt ids a step may, then its dashboard page (first view) and raw JSON. */
async function biggestStepStalls(url: string, add: Add): Promise<void> {
  const big = { trajectory_uid: `bench-${process.pid}-big` };
  await rawSend(
    url,
    'POST',
    '/v1/steps',
    JSON.stringify({
      steps: [
        {
          trajectory_uid: big.trajectory_uid,
          prompt_uid: 'bench',
          step_index: 0,
          prompt_ids: ids(MAX_PROMPT_TOKENS),
          response_ids: ids(64),
        },
      ],
    }),
  );
  await add(
    'dashboard_biggest_step_first_view',
    `dashboard page of a step with ${MAX_PROMPT_TOKENS.toLocaleString('en-US')} prompt ids (the most a step holds), first view`,
    'GET',
    `/dashboard/trajectories/${big.trajectory_uid}`,
  );
  await add(
    'raw_json_biggest_step',
    'its raw JSON (`GET /v1/trajectories/{id}`)',
    'GET',
    `/v1/trajectories/${big.trajectory_uid}`,
  );
}

/**
 * `only`: the keys of the rows to measure (`--only generate_262144_ids,raw_json_biggest_step`); the
 * requests the others need first still run, unmeasured. Null: every row.
 */
export async function benchStalls(
  quick: boolean,
  only: ReadonlySet<string> | null = null,
): Promise<StallSection> {
  const wanted = (key: string) => only === null || only.has(key);
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-bench-stalls-'));
  // `stepwise serve`'s defaults: SQLite on its own thread (a second server below shows the main-thread store).
  const server = await startServer({
    dbPath: join(dir, 'pool.db'),
    port: 0,
    engines: ['sim'],
    storeThread: 'worker',
  });
  const send = (method: string, path: string, body?: string | Buffer) =>
    rawSend(server.url, method, path, body);
  try {
    // Warm: the sim's worker and tokenizer, the routes.
    const warm = await initTrajectory(server.url);
    await send(
      'POST',
      '/generate',
      JSON.stringify({ trajectory_uid: warm.trajectory_uid, prompt_ids: ids(64) }),
    );

    const idle = await measure(async () => {
      await new Promise((r) => setTimeout(r, quick ? 500 : 2_000));
      return 0;
    });
    const stalls: Stall[] = [];
    const add: Add = async (key, request, method, path, body) => {
      if (!wanted(key)) return;
      // Encoded before the clock starts: the client shares this event loop, and its encoding of a
      // 30 MB string is not the server's work.
      const bytes = body === undefined ? undefined : Buffer.from(body);
      const m = await measure(
        () => send(method, path, bytes),
        PROFILE_DIR && join(PROFILE_DIR, `${key}.cpuprofile`),
      );
      stalls.push({ key, request, bodyBytes: bytes?.length ?? 0, ...m });
    };

    await modelCallStalls(server.url, add, quick);
    await stepsBatchStalls(dir, add, wanted, stalls, quick);
    await biggestStepStalls(server.url, add);
    if (METADATA_KEYS.some(wanted)) await metadataStalls(server, add);
    return { idleMs: idle.stallMs, stalls };
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * One request through node:http, its body written to the socket as it is: the client shares the
 * server's event loop here, and fetch's copy of a 30 MB body (undici clones it) is not the server's work.
 */
function rawSend(base: string, method: string, path: string, body?: string | Buffer): Promise<number> {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  return new Promise((resolve, reject) => {
    const req = request(
      new URL(path, base),
      {
        method,
        headers:
          bytes === undefined ? {} : { 'content-type': 'application/json', 'content-length': bytes.length },
      },
      (res) => {
        res.on('data', () => {});
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(bytes);
  });
}

const METADATA_KEYS = [
  'init_trajectory_big_metadata',
  'list_50_big_metadata',
  'dashboard_list_big_metadata',
  'dashboard_detail_big_metadata',
  'raw_json_big_metadata',
];

/** About 31.5 MB of small objects as JSON: the shape that costs the most to parse per byte. */
function bigMetadataText(): string {
  const parts: string[] = [];
  for (let i = 0; i < 1_565_000; i++) parts.push(`"k${i}":{"v":${i % 1000}}`);
  return `{${parts.join(',')}}`;
}

/**
 * Issue 38's rows: 31.5 MB of metadata sent to `init_trajectory` (refused off the loop), then lists
 * and pages over 50 trajectories holding big metadata: one of 31.5 MB (as a store written before the
 * cap may hold; put there through the gateway, past the HTTP cap) and 49 at the cap.
 */
async function metadataStalls(server: Awaited<ReturnType<typeof startServer>>, add: Add): Promise<void> {
  const text = bigMetadataText();
  const mb = (Buffer.byteLength(text) / 1e6).toFixed(1);
  await add(
    'init_trajectory_big_metadata',
    `\`init_trajectory\`, ${mb} MB of small-object metadata (refused: 400 naming \`metadata\`)`,
    'POST',
    '/init_trajectory',
    `{"metadata":${text}}`,
  );
  const atCap: Record<string, unknown> = {};
  for (let i = 0; Buffer.byteLength(JSON.stringify(atCap)) < MAX_METADATA_BYTES - 64; i++)
    atCap[`k${i}`] = { v: i };
  for (let i = 0; i < 49; i++) await server.gateway.initTrajectory({ channel: 'meta', metadata: atCap });
  const big = await server.gateway.initTrajectory({ channel: 'meta', metadata: JSON.parse(text) });
  await add(
    'list_50_big_metadata',
    `\`GET /v1/trajectories?limit=50\` over them (one ${mb} MB, 49 at the 256 KiB cap)`,
    'GET',
    '/v1/trajectories?channel=meta&limit=50',
  );
  await add(
    'dashboard_list_big_metadata',
    "the dashboard's trajectory list over them",
    'GET',
    '/dashboard/trajectories?channel=meta',
  );
  await add(
    'dashboard_detail_big_metadata',
    `the dashboard's page of the ${mb} MB one`,
    'GET',
    `/dashboard/trajectories/${big.id}`,
  );
  await add('raw_json_big_metadata', 'its `GET /v1/trajectories/{id}`', 'GET', `/v1/trajectories/${big.id}`);
}

export function stallReport(section: StallSection): string[] {
  return [
    '### The event loop under the largest requests',
    '',
    `The server in this process (\`stepwise serve\`'s defaults: SQLite on its own thread, the built-in sim on its worker thread); its event loop's longest stall while each request ran. Idle, in the seconds before: ${section.idleMs.toFixed(1)} ms.`,
    '',
    '| request | body | status | longest stall | × idle | wall |',
    '|---|---:|---:|---:|---:|---:|',
    ...section.stalls.map(
      (s) =>
        `| ${s.request} | ${(s.bodyBytes / 1024 / 1024).toFixed(1)} MiB | ${s.status} | ${s.stallMs.toFixed(1)} ms | ${(s.stallMs / Math.max(section.idleMs, 0.001)).toFixed(1)}× | ${Math.round(s.wallMs).toLocaleString('en-US')} ms |`,
    ),
  ];
}

if (process.argv[1]?.endsWith('stalls.ts')) {
  const args = process.argv.slice(2);
  const onlyArg = args.find((a) => a.startsWith('--only='));
  const only = onlyArg ? new Set(onlyArg.slice('--only='.length).split(',')) : null;
  const load = os.loadavg();
  const code = codeVersion();
  benchStalls(args.includes('--quick'), only).then((s) => {
    console.log(stallReport(s).join('\n'));
    console.log(
      `load average at start ${load.map((l) => l.toFixed(2)).join(' ')}, now ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
    );
    // `--write`: the run as a row of bench/results/gateway.jsonl (`"kind":"stalls"`), as in BENCHMARKS.md.
    if (!args.includes('--write')) return;
    const note = args.find((a) => a.startsWith('--note='))?.slice('--note='.length);
    const files = recordRun('gateway', {
      code,
      bench: 'gateway',
      kind: 'stalls',
      store_thread: 'worker',
      event_loop_stall_ms: {
        idle: round(s.idleMs, 1),
        ...Object.fromEntries(s.stalls.map((x) => [x.key, round(x.stallMs, 1)])),
      },
      note: `npx tsx bench/stalls.ts ${args.filter((a) => a !== '--write' && !a.startsWith('--note=')).join(' ')}, load ${load[0]!.toFixed(1)} at start${note ? `; ${note}` : ''}`,
    });
    console.log(`wrote ${files.join(', ')}`);
  });
}

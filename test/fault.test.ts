import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { StepWireInput } from '../packages/core/src/domain/index.js';
import { applicationName } from '../packages/core/src/store/postgres/connect.js';
import { seededRandom, syntheticTrajectory } from '../src/cli/synthetic.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { killAllServerProcesses, type ServerProcess, startServerProcess } from './support/server-process.js';

/*
 * Fault suite (issue 24, docs/security.md "No silent loss"), on real components: `stepwise serve`
 * as a child process, real HTTP on loopback, a real SQLite file or PostgreSQL, the official OpenAI
 * client as the agent. Every fault must lose no acknowledged write, give the caller a clear error,
 * and leave the same server taking work again:
 * - `kill -9` under load (SQLite and PostgreSQL): every answered call is a stored step after the
 *   restart, in order and with the text the agent saw;
 * - an engine that drops, garbles or stalls (test/gateway.test.ts checks a few of these in-process;
 *   the whole matrix is here): an OpenAI-style 502/504, a `call_failed` event, no step;
 * - a disk that fills under SQLite (a small tmpfs; skipped where mounting is not permitted);
 * - PostgreSQL connections terminated mid-transaction.
 */

const AGENTS = 6;
const LOAD_MS = 1_500;

const dirs: string[] = [];
const schemas: string[] = [];
afterAll(async () => {
  await killAllServerProcesses();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

interface Agent {
  trajectory: string;
  baseUrl: string;
  /** The text of every answer the agent received in full, in order. */
  answered: string[];
  /** Calls that failed before the kill (there must be none). */
  early: string[];
}

const stores: [string, () => { db: string; args: string[] }][] = [
  [
    'SQLite',
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-fault-'));
      dirs.push(dir);
      return { db: join(dir, 'pool.db'), args: [] };
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    () => {
      const schema = freshSchema('stepwise_fault');
      schemas.push(schema);
      return { db: '', args: ['--pg', pgUrl!, '--pg-schema', schema] };
    },
  ]);
}

const SERVE = ['--engine', 'sim', '--sim-policy', 'echo', '--sim-ttft-ms', '2'];

async function loop(server: ServerProcess, agent: Agent, stop: () => boolean, id: number): Promise<void> {
  const openai = new OpenAI({ baseURL: agent.baseUrl, apiKey: 'none', maxRetries: 0, timeout: 10_000 });
  for (let turn = 0; ; turn++) {
    const content = `agent ${id} turn ${turn}`;
    const messages = [{ role: 'user' as const, content }];
    try {
      let text = '';
      if (turn % 2 === 0) {
        const answer = await openai.chat.completions.create({ model: 'sim', messages });
        text = answer.choices[0]!.message.content ?? '';
      } else {
        const stream = await openai.chat.completions.create({ model: 'sim', messages, stream: true });
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      }
      agent.answered.push(text);
    } catch (error) {
      if (!stop()) agent.early.push(`${content}: ${String(error)}`);
      return;
    }
    if (server.child.exitCode !== null || server.child.signalCode !== null) return;
  }
}

for (const [name, store] of stores) {
  describe(`kill -9 under load, on ${name}`, () => {
    it('loses no answered call: each is a stored step after the restart, and the server takes calls again', async () => {
      const { db, args } = store();
      const first = await startServerProcess(db, [...args, ...SERVE]);
      const agents: Agent[] = [];
      for (let i = 0; i < AGENTS; i++) {
        const res = await fetch(`${first.url}/init_trajectory`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ group_id: `g${i % 2}`, n_rollouts: AGENTS / 2 }),
        });
        const t = (await res.json()) as { trajectory_uid: string; base_url: string };
        agents.push({ trajectory: t.trajectory_uid, baseUrl: t.base_url, answered: [], early: [] });
      }
      let killed = false;
      const loops = agents.map((a, i) => loop(first, a, () => killed, i));
      await new Promise((r) => setTimeout(r, LOAD_MS));
      // On a loaded machine, load on until enough calls were answered (at most 10 s more).
      const enough = () => agents.reduce((n, a) => n + a.answered.length, 0) > AGENTS * 5;
      for (const deadline = Date.now() + 10_000; !enough() && Date.now() < deadline; )
        await new Promise((r) => setTimeout(r, 50));
      killed = true;
      first.child.kill('SIGKILL');
      await first.exited;
      await Promise.all(loops);
      expect(agents.flatMap((a) => a.early)).toEqual([]);
      const answered = agents.reduce((n, a) => n + a.answered.length, 0);
      expect(answered).toBeGreaterThan(AGENTS * 5);

      const second = await startServerProcess(db, [...args, ...SERVE]);
      for (const agent of agents) {
        const res = await fetch(`${second.url}/v1/trajectories/${agent.trajectory}`);
        const stored = (await res.json()) as { steps: { step_index: number; response_text: string }[] };
        // At most one more: a step committed whose answer the kill cut off.
        expect(stored.steps.length).toBeGreaterThanOrEqual(agent.answered.length);
        expect(stored.steps.length).toBeLessThanOrEqual(agent.answered.length + 1);
        expect(stored.steps.slice(0, agent.answered.length).map((s) => s.response_text)).toEqual(
          agent.answered,
        );
        // The trajectory goes on where it was, on the restarted server.
        const openai = new OpenAI({
          baseURL: agent.baseUrl.replace(first.url, second.url),
          apiKey: 'none',
          maxRetries: 0,
        });
        const again = await openai.chat.completions.create({
          model: 'sim',
          messages: [{ role: 'user', content: 'after the restart' }],
        });
        expect(again.choices[0]!.message.content).toBe('after the restart');
      }
      second.child.kill('SIGTERM');
      await second.exited;
    }, 60_000);
  });
}

// ---- shared helpers ----------------------------------------------------------------------------

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A JSON request and its answer (`json` as parsed: the tests read what they check). */
async function postJson(url: string, body: unknown) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

async function getJson(url: string) {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

interface Init {
  trajectory_uid: string;
  base_url: string;
}

async function initTrajectory(server: ServerProcess): Promise<Init> {
  const { status, json } = await postJson(`${server.url}/init_trajectory`, {});
  expect(status).toBe(200);
  return json as Init;
}

interface StoredStep {
  step_index: number;
  response_text: string | null;
  prompt_ids: number[];
  response_ids: number[];
}

/** A trajectory's stored steps in order; [] when it does not exist. */
async function storedSteps(server: ServerProcess, trajectory: string): Promise<StoredStep[]> {
  const { status, json } = await getJson(`${server.url}/v1/trajectories/${trajectory}`);
  if (status === 404) return [];
  expect(status, JSON.stringify(json)).toBe(200);
  return [...(json.steps as StoredStep[])].sort((a, b) => a.step_index - b.step_index);
}

interface Failure {
  /** The HTTP status; undefined for an error event inside a stream that had started. */
  status: number | undefined;
  code: string | null;
  message: string;
}

/** What an agent saw when a call failed: the OpenAI client's error, as the agent reads it. */
function failureOf(error: unknown): Failure {
  if (error instanceof OpenAI.APIError) {
    const body = error.error as { message?: string; code?: string } | undefined;
    return { status: error.status, code: body?.code ?? null, message: body?.message ?? error.message };
  }
  return { status: -1, code: (error as Error).name, message: String(error) };
}

/** One chat call through the OpenAI client, whole or streamed: the text the agent received. */
async function chat(openai: OpenAI, content: string, stream: boolean): Promise<string> {
  const messages = [{ role: 'user' as const, content }];
  if (!stream) {
    const answer = await openai.chat.completions.create({ model: 'm', messages });
    return answer.choices[0]!.message.content ?? '';
  }
  let text = '';
  const chunks = await openai.chat.completions.create({ model: 'm', messages, stream: true });
  for await (const chunk of chunks) text += chunk.choices[0]?.delta?.content ?? '';
  return text;
}

/** An agent looping chat calls (the sim echoes them) until stopped; a failed call is followed by the next. */
interface LoopingAgent {
  trajectory: string;
  /** Texts of the answers received in full, in order. */
  answered: string[];
  /** When each answer came (ms since the epoch). */
  answeredAt: number[];
  failures: Failure[];
}

async function agentLoop(init: Init, agent: LoopingAgent, stop: () => boolean, id: number) {
  const openai = new OpenAI({ baseURL: init.base_url, apiKey: 'none', maxRetries: 0, timeout: 10_000 });
  for (let turn = 0; !stop(); turn++) {
    try {
      const text = await chat(openai, `agent ${id} turn ${turn}`, turn % 2 === 1);
      agent.answered.push(text);
      agent.answeredAt.push(Date.now());
    } catch (error) {
      agent.failures.push(failureOf(error));
      await sleep(20);
    }
  }
}

/** A producer posting synthetic trajectories to /v1/steps one step a request, until stopped. */
interface Producer {
  /** Steps acknowledged (a 200), by trajectory. */
  acked: Map<string, StepWireInput[]>;
  ackedAt: number[];
  /** Acknowledgements that were not one inserted or one duplicate step. */
  odd: string[];
  /** Steps sent again after a failure that turned out stored already (its commit had applied). */
  duplicates: number;
  failures: Failure[];
}

function newProducer(): Producer {
  return { acked: new Map(), ackedAt: [], odd: [], duplicates: 0, failures: [] };
}

async function producerLoop(url: string, producer: Producer, stop: () => boolean, id: number) {
  const random = seededRandom(7_000 + id);
  for (let t = 0; !stop(); t++) {
    const uid = `fault-p${id}-t${t}`;
    const steps = syntheticTrajectory({
      trajectoryUid: uid,
      promptUid: `fault-p${id}-prompt${t}`,
      steps: 3,
      systemTokens: 64,
      observationTokens: 32,
      responseTokens: 64,
      withLogprobs: true,
      random,
    });
    const acked: StepWireInput[] = [];
    producer.acked.set(uid, acked);
    for (const step of steps) {
      // A step that was not acknowledged is sent again: one already stored is then a duplicate.
      for (;;) {
        if (stop()) return;
        try {
          const { status, json } = await postJson(`${url}/v1/steps`, { steps: [step] });
          if (status === 200) {
            if (json.inserted + json.duplicates !== 1) producer.odd.push(`${uid}: ${JSON.stringify(json)}`);
            producer.duplicates += json.duplicates;
            acked.push(step);
            producer.ackedAt.push(Date.now());
            break;
          }
          producer.failures.push({ status, code: json?.error?.code ?? null, message: json?.error?.message });
        } catch (error) {
          producer.failures.push({ status: -1, code: (error as Error).name, message: String(error) });
        }
        await sleep(20);
      }
    }
  }
}

/** Every acknowledged step is stored as sent; `exact`: and nothing else was. */
async function expectAckedStored(server: ServerProcess, producers: Producer[], exact: boolean) {
  for (const producer of producers) {
    for (const [uid, acked] of producer.acked) {
      const steps = await storedSteps(server, uid);
      if (exact) expect(steps.length, uid).toBe(acked.length);
      // At most the one step that was in flight when its producer stopped, besides.
      else expect(steps.length, uid).toBeLessThanOrEqual(acked.length + 1);
      expect(steps.length, uid).toBeGreaterThanOrEqual(acked.length);
      for (const [i, sent] of acked.entries()) {
        expect(steps[i]!.step_index, uid).toBe(sent.step_index);
        expect(steps[i]!.prompt_ids, uid).toEqual(sent.prompt_ids);
        expect(steps[i]!.response_ids, uid).toEqual(sent.response_ids);
      }
    }
  }
}

/** Every answered call of an agent is a stored step, in order; `exact`: and nothing else was. */
async function expectAnsweredStored(server: ServerProcess, agents: LoopingAgent[], exact: boolean) {
  for (const agent of agents) {
    const texts = (await storedSteps(server, agent.trajectory)).map((s) => s.response_text);
    if (exact) expect(texts).toEqual(agent.answered);
    else {
      // A commit whose answer was cut off (the connection died after COMMIT) is stored without
      // having been answered: the answered calls are an ordered subsequence of the stored steps.
      let i = 0;
      for (const text of texts) if (text === agent.answered[i]) i++;
      expect(i, `${agent.trajectory}: stored ${JSON.stringify(texts)}`).toBe(agent.answered.length);
    }
  }
}

/** Waits (up to 15 s) until every producer and agent had a write acknowledged after `since`. */
async function allWriteAgain(producers: Producer[], agents: LoopingAgent[], since: number) {
  const writing = () =>
    producers.every((p) => p.ackedAt.some((t) => t > since)) &&
    agents.every((a) => a.answeredAt.some((t) => t > since));
  for (const deadline = Date.now() + 15_000; !writing() && Date.now() < deadline; ) await sleep(50);
  await sleep(200); // and a little more load after the recovery
}

async function expectReady(server: ServerProcess) {
  expect((await getJson(`${server.url}/ready`)).status).toBe(200);
}

// ---- an engine that drops, garbles or stalls ---------------------------------------------------

type Fault =
  | 'none'
  | 'drop'
  | 'drop-mid'
  | 'not-json'
  | 'truncated-json'
  | 'sse-not-json'
  | 'stall-headers'
  | 'stall-body';

const UPSTREAM_TIMEOUT_MS = 300;

/** A completion as vLLM sends it with ids (the parts of a stream, or the whole answer). */
function answerOf(n: number, stream: boolean): string {
  const text = `answer ${n}`;
  if (!stream) {
    return JSON.stringify({
      id: `c${n}`,
      object: 'chat.completion',
      model: 'm',
      prompt_token_ids: [1, 2, 3],
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: text },
          token_ids: [10, 11],
          finish_reason: 'stop',
        },
      ],
    });
  }
  return [
    chunkOf(n, { role: 'assistant', content: 'answer ' }, null),
    chunkOf(n, { content: `${n}` }, 'stop'),
  ]
    .map((c) => `data: ${c}\n\n`)
    .join('');
}

function chunkOf(n: number, delta: object, finish: string | null): string {
  return JSON.stringify({
    id: `c${n}`,
    object: 'chat.completion.chunk',
    model: 'm',
    ...(finish === null ? { prompt_token_ids: [1, 2, 3] } : {}),
    choices: [{ index: 0, delta, token_ids: [finish === null ? 10 : 11], finish_reason: finish }],
  });
}

/** A stand-in vLLM whose next answers misbehave as `fault` says. */
async function faultyEngine() {
  const state = { fault: 'none' as Fault, calls: 0 };
  const held = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model' }] }));
      return;
    }
    let body = '';
    req.on('data', (chunk: Buffer) => {
      body += chunk.toString();
    });
    req.on('end', () => {
      const n = state.calls++;
      const stream = (JSON.parse(body) as { stream?: boolean }).stream === true;
      const head = () =>
        res.writeHead(200, { 'content-type': stream ? 'text/event-stream' : 'application/json' });
      const partial = stream
        ? `data: ${chunkOf(n, { role: 'assistant', content: 'answer ' }, null)}\n\n`
        : '{"id":"c","object":"chat.completion","choices":[{"index":0,';
      switch (state.fault) {
        case 'none':
          head();
          res.end(stream ? `${answerOf(n, true)}data: [DONE]\n\n` : answerOf(n, false));
          return;
        case 'drop': // the connection closes before any answer
          req.socket.destroy();
          return;
        case 'drop-mid': // the connection closes in the middle of the answer
          head();
          res.write(partial);
          setTimeout(() => res.socket?.destroy(), 20);
          return;
        case 'not-json': // a proxy's error page with a 200
          res.writeHead(200, { 'content-type': 'text/html' });
          res.end('<html><body>upstream overloaded</body></html>');
          return;
        case 'truncated-json': // the body ends in the middle of the JSON
          head();
          res.end(
            stream ? `${partial}data: {"id":"c","object":"chat.compl` : `${partial}"message":{"role":"assist`,
          );
          return;
        case 'sse-not-json': // a stream event that is not JSON, then the rest of the answer
          head();
          res.end(stream ? `${partial}data: {oops\n\n${answerOf(n, true)}data: [DONE]\n\n` : '{oops');
          return;
        case 'stall-headers': // nothing at all, beyond the upstream timeout
          held.add(res);
          return;
        case 'stall-body': // the answer starts, then nothing more
          head();
          res.write(partial);
          held.add(res);
          return;
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    state,
    spec: `vllm=http://127.0.0.1:${(server.address() as { port: number }).port}`,
    close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      server.close();
    },
  };
}

/** What the agent must see for each fault, whole and streamed (status undefined: an error event). */
const ENGINE_FAULTS: { fault: Fault; stream: boolean; status: number | undefined; message: RegExp }[] = [
  { fault: 'drop', stream: false, status: 502, message: /closed the connection before answering/ },
  { fault: 'drop', stream: true, status: 502, message: /closed the connection before answering/ },
  { fault: 'drop-mid', stream: false, status: 502, message: /broke off its answer/ },
  { fault: 'drop-mid', stream: true, status: undefined, message: /broke off the stream/ },
  { fault: 'not-json', stream: false, status: 502, message: /not a completion/ },
  { fault: 'not-json', stream: true, status: undefined, message: /ended the stream without \[DONE\]/ },
  { fault: 'truncated-json', stream: false, status: 502, message: /not a completion/ },
  { fault: 'truncated-json', stream: true, status: undefined, message: /ended the stream without \[DONE\]/ },
  { fault: 'sse-not-json', stream: false, status: 502, message: /not a completion/ },
  { fault: 'sse-not-json', stream: true, status: undefined, message: /streamed an event that is not JSON/ },
  {
    fault: 'stall-headers',
    stream: false,
    status: 504,
    message: new RegExp(`no response headers within ${UPSTREAM_TIMEOUT_MS} ms.*--upstream-timeout-ms`),
  },
  {
    fault: 'stall-headers',
    stream: true,
    status: 504,
    message: new RegExp(`no response headers within ${UPSTREAM_TIMEOUT_MS} ms.*--upstream-timeout-ms`),
  },
  {
    fault: 'stall-body',
    stream: false,
    status: 504,
    message: new RegExp(`sent nothing for ${UPSTREAM_TIMEOUT_MS} ms in the middle of an answer`),
  },
  {
    fault: 'stall-body',
    stream: true,
    status: undefined,
    message: new RegExp(`sent nothing for ${UPSTREAM_TIMEOUT_MS} ms in the middle of an answer`),
  },
];

/** A streamed call as raw SSE (for answers the OpenAI client cannot parse): its last event's error. */
async function rawStreamError(init: Init): Promise<Failure> {
  const res = await fetch(`${init.base_url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    signal: AbortSignal.timeout(10_000),
  });
  const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: '));
  const last = JSON.parse(events.at(-1)!.slice('data: '.length)) as {
    error?: { message: string; code: string };
  };
  expect(last.error, events.join('\n')).toBeDefined();
  return { status: undefined, code: last.error!.code, message: last.error!.message };
}

describe('an engine that drops, garbles or stalls', () => {
  it('each fault, whole and streamed: an OpenAI-style 502/504, a call_failed event, no step; the next call is stored', async () => {
    const engine = await faultyEngine();
    try {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-fault-engine-'));
      dirs.push(dir);
      const server = await startServerProcess(join(dir, 'pool.db'), [
        '--engine',
        engine.spec,
        '--upstream-timeout-ms',
        String(UPSTREAM_TIMEOUT_MS),
      ]);
      for (const c of ENGINE_FAULTS) {
        const name = `${c.fault}, ${c.stream ? 'streamed' : 'whole'}`;
        const t = await initTrajectory(server);
        const openai = new OpenAI({ baseURL: t.base_url, apiKey: 'none', maxRetries: 0, timeout: 10_000 });
        engine.state.fault = c.fault;
        let failure: Failure;
        if (c.fault === 'sse-not-json' && c.stream) {
          // The agent gets the engine's events as they come, the bad one too (which the OpenAI
          // client itself cannot parse), and then an OpenAI error event instead of [DONE].
          failure = await rawStreamError(t);
        } else {
          const answer = await chat(openai, 'hi', c.stream).then(
            (text) => ({ text }),
            (error: unknown) => failureOf(error),
          );
          expect(answer, name).not.toHaveProperty('text');
          failure = answer as Failure;
        }
        expect(failure.status, name).toBe(c.status);
        expect(failure.message, name).toMatch(c.message);
        // Recorded as a failed call of this trajectory, with no step; the server stays ready.
        await expect
          .poll(async () => {
            const { json } = await getJson(`${server.url}/v1/events?type=call_failed&limit=1000`);
            const kinds = (json.events as { data: Record<string, unknown> }[])
              .filter((e) => e.data.trajectory_uid === t.trajectory_uid)
              .map((e) => `${e.data.kind} ${e.data.status}`);
            return `${name}: ${kinds.join()}`;
          })
          .toBe(`${name}: upstream_error ${c.status ?? (c.fault === 'stall-body' ? 504 : 502)}`);
        expect(await storedSteps(server, t.trajectory_uid), name).toEqual([]);
        await expectReady(server);
        // The engine behaves again: the same trajectory's next call is its step 0.
        engine.state.fault = 'none';
        const text = await chat(openai, 'again', c.stream);
        expect(text, name).toMatch(/^answer \d+$/);
        expect(
          (await storedSteps(server, t.trajectory_uid)).map((s) => [s.step_index, s.response_text]),
          name,
        ).toEqual([[0, text]]);
      }
      expect(server.child.exitCode).toBeNull();
    } finally {
      engine.close();
    }
  }, 60_000);
});

// ---- a disk that fills -------------------------------------------------------------------------

/** Mounts a tmpfs of `size` at a new directory; or says why not, where mounting is not permitted. */
function mountTmpfs(size: string): { dir: string } | { skipped: string } {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-fault-disk-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' });
    return { dir };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    const why = (error as { stderr?: Buffer }).stderr?.toString().trim() || (error as Error).message;
    return { skipped: `mounting a tmpfs is not permitted here (${why}): the disk-full test needs root` };
  }
}

function unmount(dir: string): void {
  try {
    execFileSync('umount', [dir], { stdio: 'pipe' });
  } catch {
    execFileSync('umount', ['-l', dir], { stdio: 'pipe' }); // still busy: detach it now
  }
  rmSync(dir, { recursive: true, force: true });
}

/** Writes a file until the disk refuses (ENOSPC); returns its size in bytes. */
function fill(path: string): number {
  const fd = openSync(path, 'w');
  const block = Buffer.alloc(64 * 1024, 1);
  let written = 0;
  try {
    for (;;) written += writeSync(fd, block);
  } catch (error) {
    if ((error as { code?: string }).code !== 'ENOSPC') throw error;
  } finally {
    closeSync(fd);
  }
  return written;
}

describe('a disk that fills under SQLite', () => {
  let mounted: string | null = null;
  let server: ServerProcess | null = null;
  afterAll(async () => {
    if (server && server.child.exitCode === null && server.child.signalCode === null) {
      server.child.kill('SIGKILL');
      await server.exited;
    }
    if (mounted) unmount(mounted);
  });

  it('answers a named 503 while it is full, loses no acknowledged write, and takes writes again once space is freed, without a restart', async (ctx) => {
    const disk = mountTmpfs('32m');
    if ('skipped' in disk) {
      console.warn(`skipped: ${disk.skipped}`);
      ctx.skip(disk.skipped);
      return;
    }
    mounted = disk.dir;
    const db = join(disk.dir, 'pool.db');
    server = await startServerProcess(db, SERVE);
    const s = server;
    const agents: (LoopingAgent & { init: Init })[] = [];
    for (let i = 0; i < 3; i++) {
      const init = await initTrajectory(s);
      agents.push({ init, trajectory: init.trajectory_uid, answered: [], answeredAt: [], failures: [] });
    }
    const producers = Array.from({ length: 3 }, newProducer);
    let stopped = false;
    const stop = () => stopped;
    const loops = [
      ...agents.map((a, i) => agentLoop(a.init, a, stop, i)),
      ...producers.map((p, i) => producerLoop(s.url, p, stop, i)),
    ];
    await sleep(500);
    // The disk fills up while they write, and stays full for a while.
    const filler = join(disk.dir, 'filler');
    const filled = fill(filler);
    const fullAt = Date.now();
    await sleep(1_500);
    const failedWhileFull = {
      steps: producers.reduce((n, p) => n + p.failures.length, 0),
      calls: agents.reduce((n, a) => n + a.failures.length, 0),
    };
    unlinkSync(filler);
    const freedAt = Date.now();
    await allWriteAgain(producers, agents, freedAt);
    stopped = true;
    await Promise.all(loops);
    console.log(
      `disk full: filler ${filled} bytes; while full, ${failedWhileFull.steps} step posts and ${failedWhileFull.calls} LLM calls failed; ` +
        `${producers.reduce((n, p) => n + p.ackedAt.filter((t) => t > fullAt && t < freedAt).length, 0)} step posts and ` +
        `${agents.reduce((n, a) => n + a.answeredAt.filter((t) => t > fullAt && t < freedAt).length, 0)} calls succeeded`,
    );

    // The fill bit: writes failed, each with an error that says the disk is full, never a bare 500.
    expect(failedWhileFull.steps).toBeGreaterThan(0);
    expect(failedWhileFull.calls).toBeGreaterThan(0);
    for (const failure of producers.flatMap((p) => p.failures)) {
      expect(failure).toMatchObject({
        status: 503,
        code: 'disk_full',
        message: expect.stringMatching(/disk .* is full/),
      });
    }
    for (const failure of agents.flatMap((a) => a.failures)) {
      // Whole answers: a 503; streams: an error event in place of the answer's end.
      expect([503, undefined]).toContain(failure.status);
      expect(failure).toMatchObject({
        code: 'capture_failed',
        message: expect.stringMatching(/disk .* is full/),
      });
    }
    expect(producers.flatMap((p) => p.odd)).toEqual([]);
    // The same process took writes again once there was space.
    expect(s.child.exitCode).toBeNull();
    for (const p of producers) expect(p.ackedAt.filter((t) => t > freedAt).length).toBeGreaterThan(0);
    for (const a of agents) expect(a.answeredAt.filter((t) => t > freedAt).length).toBeGreaterThan(0);
    await expectReady(s);
    // Every acknowledged write is stored, and nothing that failed is.
    await expectAckedStored(s, producers, true);
    await expectAnsweredStored(s, agents, true);
    s.child.kill('SIGTERM');
    await s.exited;
  }, 60_000);
});

// ---- PostgreSQL connections killed mid-transaction ---------------------------------------------

describe.skipIf(!pgUrl)('PostgreSQL connections terminated mid-transaction', () => {
  it('every acknowledged write is stored, failures are named 503s, and the same server reconnects and takes writes', async () => {
    const schema = freshSchema('stepwise_fault_pg');
    schemas.push(schema);
    const server = await startServerProcess('', ['--pg', pgUrl!, '--pg-schema', schema, ...SERVE]);
    const admin = new pg.Client({ connectionString: pgUrl });
    await admin.connect();
    // This server's connections only (its pool and its LISTEN connection), by their application_name.
    const terminate = async (): Promise<number> =>
      (
        await admin.query(
          'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()',
          [applicationName(schema)],
        )
      ).rowCount ?? 0;
    try {
      const agents: (LoopingAgent & { init: Init })[] = [];
      for (let i = 0; i < 3; i++) {
        const init = await initTrajectory(server);
        agents.push({ init, trajectory: init.trajectory_uid, answered: [], answeredAt: [], failures: [] });
      }
      const producers = Array.from({ length: 6 }, newProducer);
      let stopped = false;
      const stop = () => stopped;
      const loops = [
        ...agents.map((a, i) => agentLoop(a.init, a, stop, i)),
        ...producers.map((p, i) => producerLoop(server.url, p, stop, i)),
      ];
      await sleep(500);
      // Kill every connection of the server, again and again, while its transactions run.
      let terminated = 0;
      for (let round = 0; round < 8; round++) {
        terminated += await terminate();
        await sleep(50 + round * 25);
      }
      const killedAt = Date.now();
      await expectReady(server);
      await allWriteAgain(producers, agents, killedAt);
      stopped = true;
      await Promise.all(loops);
      const failures = [...producers.flatMap((p) => p.failures), ...agents.flatMap((a) => a.failures)];
      console.log(
        `pg kill: ${terminated} backends terminated; ${producers.reduce((n, p) => n + p.ackedAt.length, 0)} step posts and ` +
          `${agents.reduce((n, a) => n + a.answered.length, 0)} calls acknowledged; ` +
          `${producers.reduce((n, p) => n + p.duplicates, 0)} steps sent again were stored already; ${failures.length} failed: ` +
          JSON.stringify([
            ...new Set(failures.map((f) => `${f.status} ${f.code}: ${f.message.slice(0, 90)}`)),
          ]),
      );
      expect(terminated).toBeGreaterThan(0);
      // Each failure is a 503 that names the lost database (streams: an error event), never a 500.
      for (const failure of failures) {
        expect([503, undefined], JSON.stringify(failure)).toContain(failure.status);
        expect(failure.message, JSON.stringify(failure)).toMatch(/database unavailable/);
      }
      expect(producers.flatMap((p) => p.odd)).toEqual([]);
      // The same process reconnected and took writes again.
      expect(server.child.exitCode).toBeNull();
      for (const p of producers) expect(p.ackedAt.filter((t) => t > killedAt).length).toBeGreaterThan(0);
      for (const a of agents) expect(a.answeredAt.filter((t) => t > killedAt).length).toBeGreaterThan(0);
      await expectReady(server);
      // Every acknowledged write is stored (a write whose COMMIT was cut off may be stored too).
      await expectAckedStored(server, producers, false);
      await expectAnsweredStored(server, agents, false);
    } finally {
      await admin.end();
    }
    server.child.kill('SIGTERM');
    await server.exited;
  }, 60_000);
});

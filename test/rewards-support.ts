/**
 * Helpers for the rewards tests: real HTTP servers on loopback standing in for an LLM judge or a
 * reward model, trajectories with text steps in a real SQLite (or PostgreSQL) store, and hand-built views for
 * calling plugin handlers directly.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  newStep,
  type Step,
  type Trajectory,
  unstoredTrajectory,
} from '../packages/core/src/domain/index.js';
import { DataPool } from '../packages/core/src/pool/data-pool.js';
import type { TrajectoryView } from '../packages/core/src/rewards/plugin.js';
import { openPostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';

export interface FakeServer {
  url: string;
  /** Parsed JSON bodies received, in order. */
  requests: { path: string; headers: http.IncomingHttpHeaders; body: unknown }[];
  close(): Promise<void>;
}

export type FakeAnswer = { status?: number; body: string; delayMs?: number };

/** An HTTP server on 127.0.0.1 answering each POST with `answer(body, n)` (n counts from 1). */
export async function fakeServer(answer: (body: unknown, n: number) => FakeAnswer): Promise<FakeServer> {
  const requests: FakeServer['requests'] = [];
  const timers = new Set<NodeJS.Timeout>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {
        body = text;
      }
      requests.push({ path: req.url ?? '', headers: req.headers, body });
      const a = answer(body, requests.length);
      const send = () => {
        if (res.destroyed) return;
        res.writeHead(a.status ?? 200, { 'content-type': 'application/json' });
        res.end(a.body);
      };
      if (a.delayMs) {
        const t = setTimeout(() => {
          timers.delete(t);
          send();
        }, a.delayMs);
        timers.add(t);
      } else send();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: async () => {
      for (const t of timers) clearTimeout(t);
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** An OpenAI chat completion whose message is `content`. */
export function completion(content: string): string {
  return JSON.stringify({
    id: 'chatcmpl-test',
    object: 'chat.completion',
    created: 0,
    model: 'judge',
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
  });
}

/** A fake OpenAI-compatible judge: `reply(n)` is the n-th answer's text (or a full FakeAnswer). */
export function fakeJudge(reply: (n: number, body: unknown) => string | FakeAnswer): Promise<FakeServer> {
  return fakeServer((body, n) => {
    const r = reply(n, body);
    return typeof r === 'string' ? { body: completion(r) } : { ...r, body: completion(r.body) };
  });
}

/** A loopback URL nothing listens on (connections are refused). */
export async function refusedUrl(): Promise<string> {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return `http://127.0.0.1:${port}`;
}

export async function openPool(path: string): Promise<DataPool> {
  const store = await openSqliteStore({ path, synchronous: 'NORMAL' });
  return new DataPool({ store, sweepIntervalMs: 60_000, pollIntervalMs: 20 });
}

/** A pool on a PostgreSQL store in `schema` (created when missing). */
export async function openPgPool(url: string, schema: string): Promise<DataPool> {
  const store = await openPostgresStore({ url, schema, poolSize: 4 });
  return new DataPool({ store, sweepIntervalMs: 60_000, pollIntervalMs: 20 });
}

let counter = 0;

/**
 * A trajectory with one text step per answer (the user's question, the assistant's answer), created
 * in the pool; completed unless `open`.
 */
export async function addTrajectory(
  pool: DataPool,
  options: {
    question?: string;
    answers?: string[];
    channel?: string;
    groupId?: string;
    nRollouts?: number;
    metadata?: Record<string, unknown>;
    open?: boolean;
    toolOutputs?: string[];
  } = {},
): Promise<Trajectory> {
  const id = `t${++counter}-${Date.now().toString(36)}`;
  const groupId = options.groupId ?? `g-${id}`;
  const channel = options.channel ?? 'train';
  await pool.createTrajectory({
    id,
    groupId,
    channel,
    nRollouts: options.nRollouts ?? 1,
    metadata: options.metadata ?? {},
  });
  const answers = options.answers ?? ['42'];
  const question = options.question ?? 'What is six times seven?';
  const steps = answers.map((text, index) =>
    newStep({
      trajectoryId: id,
      groupId,
      index,
      promptIds: [1, 2, 3, index],
      responseIds: [4, 5, index],
      isLast: !options.open && index === answers.length - 1,
      messages: [
        { role: 'system', content: 'You are helpful.' },
        { role: 'user', content: question },
      ],
      responseText: text,
      toolResults:
        options.toolOutputs?.[index] !== undefined
          ? [{ content: options.toolOutputs[index]!, error: false }]
          : null,
    }),
  );
  if (steps.length > 0) await pool.submitSteps(steps, { channel, nRollouts: options.nRollouts ?? 1 });
  if (options.open) return (await pool.getTrajectory(id))!;
  return pool.completeTrajectory(id, { reward: null, status: 'complete' });
}

/** A view for calling a handler directly (no store). */
export function viewOf(
  answers: (string | null)[],
  options: {
    metadata?: Record<string, unknown>;
    toolOutputs?: (string | null)[];
    question?: string;
    id?: string;
    taskId?: string | null;
  } = {},
): TrajectoryView {
  const id = options.id ?? `v${++counter}`;
  const steps: Step[] = answers.map((text, index) => ({
    ...newStep({
      trajectoryId: id,
      groupId: 'g',
      index,
      promptIds: [1],
      responseIds: [2],
      messages: text === null ? null : [{ role: 'user', content: options.question ?? 'Question?' }],
      responseText: text,
      toolResults:
        options.toolOutputs?.[index] != null
          ? [{ content: options.toolOutputs[index]!, error: false }]
          : null,
    }),
    channel: 'train',
    policyVersion: 0,
    createdAt: 0,
  }));
  const trajectory = unstoredTrajectory({
    id,
    groupId: 'g',
    channel: 'train',
    taskId: options.taskId ?? null,
    metadata: options.metadata ?? {},
    nSteps: steps.length,
  });
  return { trajectory, steps, signals: [] };
}

/** Polls until `check` returns a truthy value (real time; no sleeps asserted as timings). */
export async function eventually<T>(
  check: () => Promise<T | null | undefined | false>,
  timeoutMs = 15_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

export const signal = new AbortController().signal;

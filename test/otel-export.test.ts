import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import { startServer } from '../packages/core/src/server/server.js';
import { callJson, type Json } from './support/http.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { killAllServerProcesses, startServerProcess } from './support/server-process.js';

/*
 * OpenTelemetry export end to end: the gateway (sim engine) serves the official openai client, with
 * and without a W3C traceparent, and its spans reach an OTLP/HTTP receiver on loopback that decodes
 * them with the official protobuf definitions (test/support/otlp_receiver.py, `opentelemetry-proto`).
 * No OpenTelemetry Collector or Jaeger installs on this machine (neither is in Debian or on the
 * package indexes reached here); this receiver stands in for one.
 */

const RECEIVER = join(import.meta.dirname, 'support/otlp_receiver.py');
const python = process.env.STEPWISE_OTLP_PYTHON || 'python3';
const hasProto = (() => {
  try {
    execFileSync(python, ['-c', 'import opentelemetry.proto, google.protobuf'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
// CI sets STEPWISE_OTLP_PYTHON: there a missing package fails instead of skipping.
if (!hasProto && process.env.STEPWISE_OTLP_PYTHON)
  throw new Error(
    `STEPWISE_OTLP_PYTHON=${python} cannot import opentelemetry.proto (pip install opentelemetry-proto)`,
  );
if (!hasProto) console.warn('OpenTelemetry export test skipped: pip install opentelemetry-proto');

const SPAN_KIND_INTERNAL = 1;
const SPAN_KIND_CLIENT = 3;
const STATUS_ERROR = 2;
const AGENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const AGENT_SPAN = '00f067aa0ba902b7';
const SECRET = 'the launch code is 0000';

interface Receiver {
  url: string;
  child: ChildProcess;
  read(): Promise<{ requests: number; refused: number; spans: Json[]; headers: Record<string, string>[] }>;
  /** Polls until `done` holds of what arrived (bounded), and returns it. */
  until(done: (spans: Json[]) => boolean): Promise<Json[]>;
}

const receivers: ChildProcess[] = [];

function startReceiver(args: string[] = []): Promise<Receiver> {
  const child = spawn(python, [RECEIVER, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  receivers.push(child);
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the OTLP receiver exited (${code})`)));
    child.stdout!.setEncoding('utf8').once('data', (line: string) => {
      const url = `http://127.0.0.1:${Number.parseInt(line, 10)}`;
      const read = async () => (await callJson('GET', `${url}/spans`)).json;
      const until = async (done: (spans: Json[]) => boolean) => {
        for (let i = 0; i < 400; i++) {
          const { spans } = await read();
          if (done(spans)) return spans;
          await new Promise((r) => setTimeout(r, 25));
        }
        throw new Error(`the spans expected never arrived: ${JSON.stringify((await read()).spans)}`);
      };
      resolve({ url, child, read, until });
    });
  });
}

interface Init {
  trajectory_uid: string;
  group_id: string;
  base_url: string;
}

async function init(url: string, body: Record<string, unknown> = {}): Promise<Init> {
  const { status, json } = await callJson('POST', `${url}/init_trajectory`, body);
  expect(status).toBe(200);
  return json;
}

/** Completes as the episode's owner (the id route), as a runner does. */
async function complete(t: Init, body: Record<string, unknown>): Promise<void> {
  const origin = new URL(t.base_url).origin;
  const { status } = await callJson('POST', `${origin}/v1/trajectories/${t.trajectory_uid}/complete`, body);
  expect(status).toBe(200);
}

/** Two calls of an agent, one whole and one streamed; the ids of the answers it got. */
async function agentCalls(t: Init, headers: Record<string, string> = {}): Promise<string[]> {
  const client = new OpenAI({
    baseURL: t.base_url,
    apiKey: 'unused',
    maxRetries: 0,
    defaultHeaders: headers,
  });
  const whole = await client.chat.completions.create({
    model: 'sim-qwen3',
    messages: [{ role: 'user', content: SECRET }],
    max_tokens: 12,
    temperature: 0.7,
    top_p: 0.9,
  });
  const stream = await client.chat.completions.create({
    model: 'sim-qwen3',
    messages: [
      { role: 'user', content: SECRET },
      { role: 'assistant', content: 'noted' },
      { role: 'user', content: 'again' },
    ],
    max_tokens: 8,
    stream: true,
  });
  const chunkIds = new Set<string>();
  for await (const chunk of stream) chunkIds.add(chunk.id);
  expect(chunkIds.size).toBe(1);
  return [whole.id, ...chunkIds];
}

const stepSpans = (spans: Json[], trajectory: string) =>
  spans
    .filter((s) => s.attributes['stepwise.trajectory.id'] === trajectory && s.kind === SPAN_KIND_CLIENT)
    .sort((a, b) => a.attributes['stepwise.step.index'] - b.attributes['stepwise.step.index']);
const trajectorySpanOf = (spans: Json[], trajectory: string) =>
  spans.find(
    (s) => s.name === 'stepwise.trajectory' && s.attributes['gen_ai.conversation.id'] === trajectory,
  );

/** A step's span matches the stored step: names, GenAI attributes, token counts. */
function expectStepSpan(span: Json, step: Step, request: { max_tokens: number; stream: boolean }) {
  expect(span.name).toBe('chat sim-qwen3');
  expect(span.kind).toBe(SPAN_KIND_CLIENT);
  const a = span.attributes;
  expect(a['gen_ai.operation.name']).toBe('chat');
  expect(a['gen_ai.provider.name']).toBe('sim');
  expect(a['gen_ai.request.model']).toBe('sim-qwen3');
  expect(a['gen_ai.response.model']).toBe(step.metadata.served_model);
  expect(a['gen_ai.request.max_tokens']).toBe(request.max_tokens);
  expect(a['gen_ai.request.stream']).toBe(request.stream);
  expect(a['gen_ai.usage.input_tokens']).toBe(step.promptIds.length);
  expect(a['gen_ai.usage.output_tokens']).toBe(step.responseIds.length);
  expect(a['gen_ai.response.finish_reasons']).toEqual([step.finishReason]);
  expect(a['gen_ai.conversation.id']).toBe(step.trajectoryId);
  expect(a['stepwise.group.id']).toBe(step.groupId);
  expect(a['stepwise.channel']).toBe(step.channel);
  expect(a['stepwise.policy_version']).toBe(step.policyVersion);
  expect(a['stepwise.engine.id']).toBe(step.engineId);
  expect(BigInt(span.endTimeUnixNano)).toBeGreaterThanOrEqual(BigInt(span.startTimeUnixNano));
  expect(span.resource['service.name']).toBe('stepwise');
}

describe.skipIf(!hasProto)('OpenTelemetry export (OTLP/HTTP, GenAI spans)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-otel-'));
  });
  afterAll(async () => {
    for (const child of receivers) {
      child.stdin?.end();
      if (child.exitCode === null) child.kill();
    }
    await killAllServerProcesses();
    rmSync(dir, { recursive: true, force: true });
  });

  const schema = freshSchema('stepwise_otel');
  const stores: [string, () => { dbPath: string; pg?: { url: string; schema: string } }][] = [
    ['SQLite', () => ({ dbPath: join(dir, 'spans.db') })],
    ...(pgUrl
      ? [
          ['PostgreSQL', () => ({ dbPath: '', pg: { url: pgUrl!, schema } })] as [
            string,
            () => { dbPath: string },
          ],
        ]
      : []),
  ];
  afterAll(() => dropSchema(schema));

  it.each(stores)(
    'sends each step as a chat span, under the agent’s traceparent or its trajectory’s span (%s)',
    async (_, store) => {
      const receiver = await startReceiver();
      const server = await startServer({
        ...store(),
        port: 0,
        engines: ['sim'],
        telemetry: { endpoint: receiver.url, scheduledDelayMs: 20 },
      });
      try {
        const traced = await init(server.url, { channel: 'train' });
        const plain = await init(server.url, { channel: 'train' });
        const answered = new Map([
          [traced, await agentCalls(traced, { traceparent: `00-${AGENT_TRACE}-${AGENT_SPAN}-01` })],
          [plain, await agentCalls(plain)],
        ]);
        await complete(traced, { reward: 1 });
        await complete(plain, { reward: 0, status: 'infra_failed' });

        const spans = await receiver.until(
          (s) =>
            stepSpans(s, traced.trajectory_uid).length === 2 &&
            stepSpans(s, plain.trajectory_uid).length === 2 &&
            trajectorySpanOf(s, traced.trajectory_uid) !== undefined &&
            trajectorySpanOf(s, plain.trajectory_uid) !== undefined,
        );
        expect(spans).toHaveLength(6);

        for (const t of [traced, plain]) {
          const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
          const spansOfSteps = stepSpans(spans, t.trajectory_uid);
          expect(spansOfSteps.map((s) => s.attributes['stepwise.step.index'])).toEqual(
            steps.map((s) => s.index),
          );
          expectStepSpan(spansOfSteps[0], steps[0]!, { max_tokens: 12, stream: false });
          expect(spansOfSteps[0].attributes['gen_ai.request.temperature']).toBe(0.7);
          expect(spansOfSteps[0].attributes['gen_ai.request.top_p']).toBe(0.9);
          expectStepSpan(spansOfSteps[1], steps[1]!, { max_tokens: 8, stream: true });
          expect(spansOfSteps.map((s) => s.attributes['gen_ai.response.id'])).toEqual(answered.get(t));

          const stored = (await server.pool.getTrajectory(t.trajectory_uid))!;
          const trajectory = trajectorySpanOf(spans, t.trajectory_uid);
          expect(trajectory.kind).toBe(SPAN_KIND_INTERNAL);
          expect(trajectory.parentSpanId).toBe('');
          expect(trajectory.attributes['stepwise.trajectory.status']).toBe(stored.status);
          expect(trajectory.attributes['stepwise.reward']).toBe(stored.reward);
          expect(trajectory.attributes['stepwise.trajectory.n_steps']).toBe(steps.length);
          expect(trajectory.status.code).toBe(t === plain ? STATUS_ERROR : 0);

          for (const span of spansOfSteps) {
            if (t === traced) {
              // The agent's span is the parent; the trajectory's span is linked.
              expect(span.traceId).toBe(AGENT_TRACE);
              expect(span.parentSpanId).toBe(AGENT_SPAN);
              expect(span.links).toEqual([{ traceId: trajectory.traceId, spanId: trajectory.spanId }]);
            } else {
              expect(span.traceId).toBe(trajectory.traceId);
              expect(span.parentSpanId).toBe(trajectory.spanId);
              expect(span.links).toEqual([]);
            }
          }
        }
        // Step spans are distinct; the two trajectories are two traces.
        expect(new Set(spans.map((s) => s.spanId)).size).toBe(6);
        expect(trajectorySpanOf(spans, traced.trajectory_uid).traceId).not.toBe(
          trajectorySpanOf(spans, plain.trajectory_uid).traceId,
        );
        // No prompt or answer text by default.
        expect(JSON.stringify(spans)).not.toContain('launch code');
        expect(spans.some((s) => 'gen_ai.input.messages' in s.attributes)).toBe(false);
        expect(server.telemetry!.stats()).toMatchObject({ exported: 6, dropped: 0 });
      } finally {
        await server.close();
      }
    },
  );

  it('adds the messages as gen_ai.input/output.messages when asked', async () => {
    const receiver = await startReceiver();
    const server = await startServer({
      dbPath: join(dir, 'content.db'),
      port: 0,
      engines: ['sim'],
      telemetry: { endpoint: receiver.url, scheduledDelayMs: 20, content: true },
    });
    try {
      const t = await init(server.url);
      await agentCalls(t);
      const spans = await receiver.until((s) => stepSpans(s, t.trajectory_uid).length === 2);
      const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
      const [first, second] = stepSpans(spans, t.trajectory_uid);
      expect(JSON.parse(first.attributes['gen_ai.input.messages'])).toEqual([
        { role: 'user', parts: [{ type: 'text', content: SECRET }] },
      ]);
      expect(JSON.parse(second.attributes['gen_ai.input.messages'])).toHaveLength(3);
      expect(JSON.parse(first.attributes['gen_ai.output.messages'])).toEqual([
        {
          role: 'assistant',
          parts: [{ type: 'text', content: steps[0]!.responseText }],
          finish_reason: steps[0]!.finishReason,
        },
      ]);
    } finally {
      await server.close();
    }
  });

  it('reads the traceparent of a call at the fixed base_url (X-Stepwise-Trajectory, X-Stepwise-Session)', async () => {
    const receiver = await startReceiver();
    const server = await startServer({
      dbPath: join(dir, 'fixed.db'),
      port: 0,
      engines: ['sim'],
      telemetry: { endpoint: receiver.url, scheduledDelayMs: 20 },
    });
    try {
      const t = await init(server.url);
      const traceparent = (span: string) => `00-${AGENT_TRACE}-${span}-01`;
      const fixed = (headers: Record<string, string>) =>
        new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: headers });
      const ask = { model: 'sim-qwen3', messages: [{ role: 'user' as const, content: 'hi' }] };
      await fixed({
        'x-stepwise-trajectory': t.trajectory_uid,
        traceparent: traceparent('1111111111111111'),
      }).chat.completions.create(ask);
      await fixed({
        'x-stepwise-session': 'session-1',
        traceparent: traceparent('2222222222222222'),
      }).chat.completions.create(ask);
      const spans = await receiver.until((s) => s.filter((x) => x.kind === SPAN_KIND_CLIENT).length === 2);
      const named = stepSpans(spans, t.trajectory_uid);
      expect(named.map((s) => [s.traceId, s.parentSpanId])).toEqual([[AGENT_TRACE, '1111111111111111']]);
      const online = spans.find((s) => s.attributes['stepwise.trajectory.id'] !== t.trajectory_uid);
      expect([online.traceId, online.parentSpanId]).toEqual([AGENT_TRACE, '2222222222222222']);
      expect(online.attributes['stepwise.channel']).toBe('online');
    } finally {
      await server.close();
    }
  });

  it('retries a receiver that answers 503, and loses nothing', async () => {
    const receiver = await startReceiver(['--refuse', '1']);
    const server = await startServer({
      dbPath: join(dir, 'retry.db'),
      port: 0,
      engines: ['sim'],
      telemetry: { endpoint: receiver.url, scheduledDelayMs: 20 },
    });
    try {
      const t = await init(server.url);
      await agentCalls(t);
      await receiver.until((s) => stepSpans(s, t.trajectory_uid).length === 2);
      const state = await receiver.read();
      expect(state.refused).toBe(1);
      expect(state.requests).toBeGreaterThanOrEqual(2);
      expect(server.telemetry!.stats().dropped).toBe(0);
    } finally {
      await server.close();
    }
  });

  it('answers every call while the receiver is down, dropping and counting the spans', async () => {
    // A port nothing listens on.
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as { port: number };
        probe.close(() => resolve(port));
      });
    });
    const server = await startServer({
      dbPath: join(dir, 'dead.db'),
      port: 0,
      engines: ['sim'],
      telemetry: {
        endpoint: `http://127.0.0.1:${port}`,
        maxQueueSize: 2,
        maxBatchSize: 1,
        exportTimeoutMs: 200,
      },
    });
    const telemetry = server.telemetry!;
    let stepsStored = 0;
    try {
      for (let i = 0; i < 3; i++) {
        const t = await init(server.url);
        await agentCalls(t);
        await complete(t, { reward: 1 });
        stepsStored += (await server.pool.getTrajectorySteps(t.trajectory_uid)).length;
      }
      expect(stepsStored).toBe(6);
      // Dropped while the server runs, not only at its close.
      for (let i = 0; i < 400 && telemetry.stats().dropped === 0; i++)
        await new Promise((r) => setTimeout(r, 25));
      expect(telemetry.stats().dropped).toBeGreaterThan(0);
    } finally {
      await server.close();
    }
    // Every span (6 steps, 3 trajectories) was dropped and counted; none was sent.
    expect(telemetry.stats()).toEqual({ exported: 0, dropped: 9, queued: 0 });
  });

  it('`stepwise serve` takes the collector from the standard OTEL_EXPORTER_OTLP_* variables', async () => {
    const receiver = await startReceiver();
    const proc = await startServerProcess(join(dir, 'cli.db'), ['--engine', 'sim'], {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_HEADERS: 'x-collector-key=abc123',
      OTEL_SERVICE_NAME: 'stepwise-ci',
    });
    const t = await init(proc.url);
    await agentCalls(t);
    const spans = await receiver.until((s) => stepSpans(s, t.trajectory_uid).length === 2);
    expect(spans[0].resource['service.name']).toBe('stepwise-ci');
    const { headers } = await receiver.read();
    expect(headers[0]!['x-collector-key']).toBe('abc123');
    expect(headers[0]!['content-type']).toBe('application/x-protobuf');
  });
});

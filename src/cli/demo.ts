import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer } from '../gateway/server.js';
import { StepwiseClient } from '../sdk/client.js';

export interface DemoOptions {
  db?: string;
  port: number;
  groups: number;
  rollouts: number;
  batchSize: number;
  seed: number;
  /** Chance that the sim makes a wrong tool call first (then corrects it). */
  errorRate: number;
  print: (line: string) => void;
}

export interface DemoResult {
  consumedGroups: number;
  consumedSteps: number;
  producedSteps: number;
  /** Tool results flagged as failed in the stored steps. */
  toolErrors: number;
}

/*
 * The end-to-end loop on the embedded default (SQLite + the built-in sim engine). Black-box agents
 * that speak only the OpenAI chat API work a small file task through the gateway: each rollout gets
 * a base_url from POST /init_trajectory, calls chat/completions with tools, runs the tool calls
 * against an in-memory workspace, and completes the trajectory with a reward. Every LLM call becomes
 * a step (exact ids and logprobs from the engine, tool results attached). Meanwhile a trainer leases
 * complete groups, acks them and advances the policy version.
 */

const FILES: Record<string, string> = {
  'notes.txt': 'Ship the gateway on Friday.',
  'todo.txt': '1. write tests\n2. write docs',
};

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'list_files',
      description: 'List the files in a directory of the workspace',
      parameters: { type: 'object', properties: { dir: { type: 'string' } }, required: ['dir'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file of the workspace',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

/** What the sim plays (its scripted policy); injected wrong calls come on top. */
const SCRIPT = [
  { toolCall: { name: 'list_files', arguments: { dir: '.' } } },
  { toolCall: { name: 'read_file', arguments: { path: 'notes.txt' } } },
  { answer: `notes.txt says: ${FILES['notes.txt']}` },
];

interface ToolCall {
  id: string;
  function: { name: string; arguments: string };
}

/** The agent's tools, run against the in-memory workspace; failures come back as the model sees them. */
function runTool(call: ToolCall): string {
  let args: Record<string, unknown>;
  try {
    args = JSON.parse(call.function.arguments);
  } catch {
    return `Error: invalid arguments for ${call.function.name}: not JSON`;
  }
  if (call.function.name === 'list_files') return Object.keys(FILES).join('\n');
  if (call.function.name === 'read_file') {
    const path = String(args.path ?? '');
    return FILES[path] ?? `Error: ENOENT: no such file or directory, open '${path}'`;
  }
  return `Error: unknown tool '${call.function.name}'`;
}

async function postJson(url: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (!res.ok) throw new Error(`${url}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/** One rollout as any OpenAI-compatible agent would run it; returns its reward. */
async function runAgent(
  serverUrl: string,
  groupId: string,
  rollouts: number,
  seed: number,
): Promise<{ calls: number; errors: number; reward: number }> {
  const init = await postJson(`${serverUrl}/init_trajectory`, { group_id: groupId, n_rollouts: rollouts });
  const baseUrl = init.base_url as string;
  const messages: Record<string, unknown>[] = [
    { role: 'system', content: 'You are a careful assistant with a small file workspace.' },
    { role: 'user', content: 'What does my notes file say?' },
  ];
  let calls = 0;
  let errors = 0;
  let answer = '';
  while (calls < 8) {
    const completion = await postJson(`${baseUrl}/chat/completions`, {
      model: 'policy',
      messages,
      tools: TOOLS,
      seed, // one seed per rollout: the sim's plan of errors stays the same across its turns
    });
    calls++;
    const message = (completion.choices as { message: Record<string, unknown> }[])[0]!.message;
    messages.push(message);
    const toolCalls = (message.tool_calls as ToolCall[] | undefined) ?? [];
    if (toolCalls.length === 0) {
      answer = String(message.content ?? '');
      break;
    }
    for (const call of toolCalls) {
      const content = runTool(call);
      if (content.startsWith('Error')) errors++;
      messages.push({ role: 'tool', tool_call_id: call.id, content });
    }
  }
  const solved = answer.includes(FILES['notes.txt']!);
  const reward = solved ? Math.max(0, 1 - 0.25 * errors) : 0;
  await postJson(`${baseUrl}/complete_trajectory`, { reward });
  return { calls, errors, reward };
}

export async function runDemo(o: DemoOptions): Promise<DemoResult> {
  const tempDir = o.db ? null : mkdtempSync(join(tmpdir(), 'stepwise-demo-'));
  const dbPath = o.db ?? join(tempDir!, 'demo.db');
  const server = await startServer({
    dbPath,
    port: o.port,
    channelDefaults: { n_rollouts: o.rollouts },
    engines: ['sim'],
    sim: { policy: 'scripted', script: SCRIPT, errorRate: o.errorRate, seed: o.seed },
  });
  const client = new StepwiseClient({ baseUrl: server.url });
  const say = o.print;
  say(`stepwise serving on ${server.url} (store: SQLite at ${dbPath}; engine: built-in sim, scripted)`);

  const producer = (async () => {
    for (let g = 0; g < o.groups; g++) {
      const groupId = `prompt-${g}`;
      const results = await Promise.all(
        Array.from({ length: o.rollouts }, (_, r) =>
          runAgent(server.url, groupId, o.rollouts, o.seed * 1000 + g * 100 + r),
        ),
      );
      say(
        `agents    ${groupId}: ${o.rollouts} rollouts through the gateway, LLM calls [${results
          .map((x) => x.calls)
          .join(',')}], tool errors [${results.map((x) => x.errors).join(',')}], rewards [${results
          .map((x) => x.reward)
          .join(',')}]`,
      );
    }
  })();
  // An agent failure must not leave the trainer waiting for groups that never come.
  let producerFailed: unknown = null;
  producer.catch((error: unknown) => {
    producerFailed = error;
  });

  let consumedGroups = 0;
  let consumedSteps = 0;
  let nacked = false;
  let version = 0;
  const totalBatches = Math.ceil(o.groups / o.batchSize);
  for (let b = 0; b < totalBatches && producerFailed === null; b++) {
    const size = Math.min(o.batchSize, o.groups - consumedGroups);
    const batch = await client.lease({
      batchSize: size,
      nRollouts: o.rollouts,
      waitMs: 10_000,
      consumer: 'demo-trainer',
    });
    if (!batch) {
      say('trainer   no batch within 10 s; stopping');
      break;
    }
    const steps = batch.groups.reduce(
      (n, g) => n + g.trajectories.reduce((m, t) => m + t.steps.length, 0),
      0,
    );
    const tokens = batch.groups.reduce(
      (n, g) =>
        n + g.trajectories.reduce((m, t) => m + t.steps.reduce((k, s) => k + s.response_ids.length, 0), 0),
      0,
    );
    say(
      `trainer   leased ${batch.lease_id.slice(0, 14)}…: ${batch.groups.length} groups [${batch.groups
        .map((g) => g.group_id)
        .join(', ')}], ${steps} steps, ${tokens} response tokens with logprobs`,
    );
    if (!nacked) {
      nacked = true;
      await client.nack(batch.lease_id);
      say('trainer   nacked it (simulated failed step): the same groups are served again first');
      b--;
      continue;
    }
    await client.ack(batch.lease_id);
    consumedGroups += batch.groups.length;
    consumedSteps += steps;
    version++;
    await client.setPolicyVersion(version);
    say(`trainer   acked; weights synced, policy version -> ${version}`);
  }
  await producer;
  const stats = await client.stats('train');
  const stored = await server.pool.listSteps({ channel: 'train', limit: 500, offset: 0 });
  const toolErrors = stored.items.reduce(
    (n, s) => n + (s.toolResults ?? []).filter((r) => r.error).length,
    0,
  );
  say(
    `stats     produced ${stats.produced.steps} steps / ${stats.produced.trajectories} trajectories, consumed ${stats.consumed.groups} groups / ${stats.consumed.steps} steps, tool errors recorded ${toolErrors}, prefix breaks ${stats.prefixBreaks}, queue depth ${stats.queueDepth}`,
  );
  await client.close();
  await server.close();
  if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  return { consumedGroups, consumedSteps, producedSteps: stats.produced.steps, toolErrors };
}

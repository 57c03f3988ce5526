import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import type { ReferenceTask } from '../packages/core/src/engines/sim/policies.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';

/*
 * OpenClaw's traffic through the gateway, over real HTTP on loopback, with the official openai client
 * sending requests shaped as OpenClaw (2026.9.6) sends them, measured against a capture server:
 * always streamed with the usage chunk, no seed, `max_completion_tokens`, a `prompt_cache_key`; a
 * ~20 KB system prompt; assistant turns replayed with `content: null` and tool-call ids rewritten
 * (`call_x` → `callx`); and on every call a fresh trailing user message, a content-part array, that
 * the next call's history no longer holds. The sim's `reference` policy plays the task in OpenClaw's
 * tool schemas; this file plays OpenClaw's tools over an in-memory workspace.
 */

const tokenizer = loadQwen3Tokenizer();
const tools: OpenAI.Chat.ChatCompletionFunctionTool[] = JSON.parse(
  readFileSync(join(import.meta.dirname, 'fixtures/openclaw/tools.json'), 'utf8'),
);

const PROMPT = 'Create hello.txt greeting the team, then check what it says.';
const TASK: ReferenceTask = {
  prompt: PROMPT,
  actions: [
    { name: 'write', arguments: { path: 'hello.txt', content: 'hi\nteam\n' } },
    { name: 'read', arguments: { path: 'hello.txt', offset: 1, limit: 2 } },
    { name: 'edit', arguments: { path: 'hello.txt', oldText: 'hi', newText: 'hello' } },
    { name: 'ls', arguments: { path: '.' } },
    { name: 'exec', arguments: { command: 'cat hello.txt' } },
  ],
  answer: 'hello.txt now greets the team.',
};

/** Our own ~20 KB system prompt: a harness's operating manual, varied enough to tokenize like prose. */
function systemPrompt(): string {
  const topics = [
    'files',
    'shell commands',
    'long outputs',
    'background work',
    'sessions',
    'safety',
    'answers',
  ];
  const verbs = ['check', 'prefer', 'avoid', 'report', 'keep', 'confirm', 'explain', 'limit'];
  const objects = [
    'the workspace boundaries',
    'paths relative to the workspace',
    'commands that change many files',
    'the exact text you replace',
    'what a tool returned',
    'output longer than a screen',
    'the user’s stated constraints',
    'side effects outside the task',
  ];
  const parts = ['You are an agent that works inside a sandboxed workspace on behalf of one user.'];
  for (let section = 0; parts.join('\n').length < 20_000; section++) {
    parts.push(`\n## Section ${section + 1}: ${topics[section % topics.length]}`);
    for (let rule = 0; rule < 12; rule++) {
      const n = section * 12 + rule;
      parts.push(
        `${rule + 1}. ${verbs[n % verbs.length]!.replace(/^./, (c) => c.toUpperCase())} ` +
          `${objects[(n * 3) % objects.length]} before you ${verbs[(n + 5) % verbs.length]} ` +
          `${objects[(n * 5 + 1) % objects.length]}; rule ${n} applies when working on ${topics[n % topics.length]}.`,
      );
    }
  }
  return parts.join('\n');
}

/** OpenClaw's tools over an in-memory workspace, answering as OpenClaw's tools do. */
function runTool(files: Map<string, string>, call: { name: string; arguments: string }): string {
  const args = JSON.parse(call.arguments) as Record<string, unknown>;
  const path = String(args.path ?? '.');
  const abs = `/tmp/oc/ws/${path}`;
  const missing = `ENOENT: no such file or directory, access '${abs}'`;
  switch (call.name) {
    case 'write':
      files.set(path, String(args.content));
      return `Successfully wrote ${Buffer.byteLength(String(args.content))} bytes to ${abs}`;
    case 'read': {
      const text = files.get(path);
      if (text === undefined) return missing;
      const first = Number(args.offset ?? 1) - 1; // OpenClaw's offset is a 1-based line
      const lines = text.split('\n');
      return lines.slice(first, first + Number(args.limit ?? lines.length)).join('\n');
    }
    case 'edit': {
      let text = files.get(path);
      if (text === undefined) return missing;
      for (const e of args.edits as { oldText: string; newText: string }[]) {
        if (text.split(e.oldText).length !== 2) return `Could not find a unique match for the text in ${abs}`;
        text = text.replace(e.oldText, e.newText);
      }
      files.set(path, text);
      return `Successfully replaced text in ${abs}.`;
    }
    case 'ls':
      return path === '.' ? [...files.keys()].join('\n') : missing;
    case 'exec':
      return files.get('hello.txt') ?? '';
    default:
      return JSON.stringify({ status: 'error', tool: call.name, error: `Tool ${call.name} not found` });
  }
}

/** The trailing context OpenClaw appends to every call (our own words, its shape). */
const trailingContext = (call: number): OpenAI.Chat.ChatCompletionUserMessageParam => ({
  role: 'user',
  content: [
    {
      type: 'text',
      text:
        '<<<BEGIN_HARNESS_CONTEXT>>>\nState of the harness (data, not instructions):\n' +
        `"Background commands:\\nnone"\n"Turn: ${call}, clock 05:3${call} UTC"\n<<<END_HARNESS_CONTEXT>>>`,
    },
  ],
});

interface Init {
  trajectory_uid: string;
  base_url: string;
}

/** What one streamed call delivered, reassembled as the openai client's consumers do. */
interface Streamed {
  promptIds: number[];
  ids: number[];
  logprobs: number[];
  content: string;
  toolCalls: { id: string; name: string; arguments: string }[];
  usage: OpenAI.CompletionUsage | null;
  lastChoices: number;
}

type IdsChunk = {
  prompt_token_ids?: number[];
  choices: { token_ids?: number[]; logprobs?: { content?: { logprob: number }[] | null } | null }[];
};

async function streamCall(
  openai: OpenAI,
  sessionId: string,
  messages: OpenAI.Chat.ChatCompletionMessageParam[],
): Promise<Streamed> {
  const stream = await openai.chat.completions.create({
    model: 'sim',
    stream: true,
    stream_options: { include_usage: true },
    tool_choice: 'auto',
    max_completion_tokens: 1024,
    prompt_cache_key: `${sessionId}:0`,
    messages,
    tools,
  });
  const out: Streamed = {
    promptIds: [],
    ids: [],
    logprobs: [],
    content: '',
    toolCalls: [],
    usage: null,
    lastChoices: -1,
  };
  for await (const chunk of stream) {
    const raw = chunk as unknown as IdsChunk;
    if (raw.prompt_token_ids) out.promptIds = raw.prompt_token_ids;
    out.ids.push(...(raw.choices[0]?.token_ids ?? []));
    out.logprobs.push(...(raw.choices[0]?.logprobs?.content ?? []).map((l) => l.logprob));
    const delta = chunk.choices[0]?.delta;
    out.content += delta?.content ?? '';
    for (const d of delta?.tool_calls ?? []) {
      out.toolCalls[d.index] ??= { id: '', name: '', arguments: '' };
      const call = out.toolCalls[d.index]!;
      if (d.id) call.id = d.id;
      call.name += d.function?.name ?? '';
      call.arguments += d.function?.arguments ?? '';
    }
    if (chunk.usage) out.usage = chunk.usage;
    out.lastChoices = chunk.choices.length;
  }
  return out;
}

/** How OpenClaw replays an assistant turn: no content, ids without separators. */
function replay(call: Streamed): OpenAI.Chat.ChatCompletionAssistantMessageParam {
  return {
    role: 'assistant',
    content: call.content === '' ? null : call.content,
    tool_calls: call.toolCalls.map((c) => ({
      id: c.id.replace(/[^0-9a-z]/gi, ''),
      type: 'function',
      function: { name: c.name, arguments: c.arguments },
    })),
  };
}

let dir: string;
const servers: RunningServer[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-openclaw-'));
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let dbCount = 0;
async function serve(errorRate = 0): Promise<{ server: RunningServer; dbPath: string }> {
  const dbPath = join(dir, `oc${dbCount++}.db`);
  const server = await startServer({
    dbPath,
    port: 0,
    engines: ['sim'],
    sim: { policy: 'reference', tasks: [TASK], errorRate },
  });
  servers.push(server);
  return { server, dbPath };
}

async function init(server: RunningServer): Promise<Init> {
  const res = await fetch(`${server.url}/init_trajectory`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Init;
}

async function complete(t: Init): Promise<void> {
  const res = await fetch(`${new URL(t.base_url).origin}/v1/trajectories/${t.trajectory_uid}/complete`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"reward": 1}',
  });
  expect(res.status).toBe(200);
}

/** OpenClaw's client: a bearer key, the SDK's own user-agent, a W3C traceparent. */
const openclawClient = (t: Init) =>
  new OpenAI({
    baseURL: t.base_url,
    apiKey: 'oc-local-key',
    maxRetries: 0,
    defaultHeaders: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
  });

/** Plays one OpenClaw episode until the sim answers without a tool call. */
async function playEpisode(t: Init, system: string) {
  const sessionId = 'b0c5e2a4-5d1e-4f7a-9c3b-2f6d8e1a7c90';
  const opening: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: 'system', content: system },
    {
      role: 'user',
      content:
        `[Thu 2026-12-03 05:31 UTC] ${PROMPT}\n\nRuntime: agent=main | session=agent:main:explicit:${sessionId} | ` +
        `sessionId=${sessionId} | host=vm | os=Linux | model=stepwise/sim | shell=bash`,
    },
  ];
  const openai = openclawClient(t);
  const files = new Map<string, string>();
  const history: OpenAI.Chat.ChatCompletionMessageParam[] = [];
  const calls: {
    messages: OpenAI.Chat.ChatCompletionMessageParam[];
    streamed: Streamed;
    results: string[];
  }[] = [];
  for (let call = 0; call < 12; call++) {
    const messages = [...opening, ...history, trailingContext(call)];
    const streamed = await streamCall(openai, sessionId, messages);
    const results = streamed.toolCalls.map((c) => runTool(files, c));
    calls.push({ messages, streamed, results });
    if (streamed.toolCalls.length === 0) break;
    // The trailing context is not kept: the next call's history is the opening, the turns, the results.
    const assistant = replay(streamed);
    history.push(assistant);
    for (const [i, c] of assistant.tool_calls!.entries()) {
      history.push({ role: 'tool', content: results[i]!, tool_call_id: c.id });
    }
  }
  return { calls, files };
}

interface StoredRow {
  idx: number;
  base_idx: number | null;
  prefix_len: number;
  prompt_len: number;
  response_len: number;
  suffix_bytes: number;
  response_bytes: number;
  view_bytes: number;
}

function stored(dbPath: string, trajectoryId: string): { rows: StoredRow[]; toolDocs: number } {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    const toolDocs = (db.prepare('SELECT count(*) AS n FROM docs').get() as { n: number }).n;
    const rows = db
      .prepare(
        `SELECT idx, base_idx, prefix_len, prompt_len, response_len, length(prompt_suffix) AS suffix_bytes,
                length(response) AS response_bytes, coalesce(length(view), 0) AS view_bytes
         FROM steps WHERE trajectory_id = ? ORDER BY idx`,
      )
      .all(trajectoryId) as StoredRow[];
    return { rows, toolDocs };
  } finally {
    db.close();
  }
}

const commonPrefix = (a: readonly number[], b: readonly number[]) => {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
};

describe('gateway: OpenClaw traffic', () => {
  it('a six-call OpenClaw episode: exact ids, tool calls and results, prefix breaks, storage', async () => {
    const { server, dbPath } = await serve();
    const t = await init(server);
    const system = systemPrompt();
    expect(system.length).toBeGreaterThan(20_000);
    const { calls, files } = await playEpisode(t, system);
    await complete(t);

    // The sim solved the task through OpenClaw's schemas (the edit went in as an `edits` list).
    expect(calls).toHaveLength(6);
    expect(files.get('hello.txt')).toBe('hello\nteam\n');
    expect(JSON.parse(calls[2]!.streamed.toolCalls[0]!.arguments)).toEqual({
      path: 'hello.txt',
      edits: [{ oldText: 'hi', newText: 'hello' }],
    });
    expect(calls.at(-1)!.streamed.content).toBe(TASK.answer);

    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => s.index)).toEqual([0, 1, 2, 3, 4, 5]);
    steps.forEach((step: Step, i) => {
      const { streamed, results, messages } = calls[i]!;
      // Exactly what the sim streamed: ids, logprobs (float32 in the store), text, tool calls.
      expect(step.tokenSource).toBe('engine');
      expect(step.promptIds).toEqual(streamed.promptIds);
      expect(step.responseIds).toEqual(streamed.ids);
      expect(step.responseLogprobs).toEqual(streamed.logprobs.map(Math.fround));
      expect(streamed.usage?.completion_tokens).toBe(streamed.ids.length);
      expect(streamed.usage?.prompt_tokens).toBe(streamed.promptIds.length);
      expect(streamed.lastChoices).toBe(0); // the usage-only chunk ends the stream, as OpenClaw asked
      expect(step.messages).toEqual(messages);
      expect(step.metadata).toMatchObject({ model: 'sim', max_completion_tokens: 1024, tool_choice: 'auto' });
      if (i < 5) {
        const [call] = streamed.toolCalls;
        expect(call!.id).toMatch(/^call_/);
        expect(step.finishReason).toBe('tool_calls');
        expect(step.toolCalls).toEqual([
          expect.objectContaining({
            id: call!.id,
            type: 'function',
            function: { name: call!.name, arguments: call!.arguments },
          }),
        ]);
        // Attached to the step that made the call, although OpenClaw answered `callx`, not `call_x`.
        expect(step.toolResults).toEqual([
          { tool_call_id: call!.id, name: call!.name, content: results[0], error: false },
        ]);
      } else {
        expect(step.finishReason).toBe('stop');
        expect(step.toolCalls).toBeNull();
        expect(step.toolResults).toBeNull();
      }
    });

    // Prefix breaks from first principles: call k (k >= 1) repeats the opening and the k-1 earlier
    // (assistant, tool) pairs but not call k-1's trailing context, which sat between them and call
    // k-1's response. So every call after the first diverges from its predecessor's prompt + response
    // inside that sequence: calls - 1 breaks, and none more (nothing else is rewritten). A trailing
    // context costs its text's tokens plus its role markers and the generation prompt (a dozen more).
    const contextTokens =
      12 +
      Math.max(
        ...calls.map(({ messages }) => {
          const part = (messages.at(-1)!.content as { text: string }[])[0]!.text;
          return tokenizer.encode(part, { addSpecialTokens: false }).length;
        }),
      );
    for (let i = 1; i < steps.length; i++) {
      const previous = steps[i - 1]!;
      const before = previous.promptIds.concat(previous.responseIds);
      const shared = commonPrefix(steps[i]!.promptIds, before);
      expect(shared).toBeLessThan(before.length);
      // ...and they part only where the dropped context began: everything before it is shared.
      expect(shared).toBeGreaterThanOrEqual(previous.promptIds.length - contextTokens);
    }
    const trajectory = await server.pool.getTrajectory(t.trajectory_uid);
    expect(trajectory).toMatchObject({ status: 'complete', nSteps: 6, prefixBreaks: steps.length - 1 });

    // Storage stays O(distinct tokens). Each step stores its prompt as a prefix of the previous step's
    // sequence plus a suffix; after a break that suffix is the previous call's replayed turn and tool
    // result, the new trailing context and the generation prompt. The distinct tokens of the episode
    // are the longest prompt (the opening, every turn and result, one context) plus every response;
    // what is stored beyond them is the five dropped contexts and a replayed copy of each earlier
    // response: a few hundred tokens against the ~5,000 of the system prompt that a naive store
    // would keep six times.
    const { rows, toolDocs } = stored(dbPath, t.trajectory_uid);
    expect(rows).toHaveLength(6);
    expect(toolDocs).toBe(1); // the tools array, sent on every call, is kept once
    const storedTokens = rows.reduce((n, r) => n + (r.suffix_bytes + r.response_bytes) / 4, 0);
    const responses = steps.reduce((n, s) => n + s.responseIds.length, 0);
    const longestPrompt = Math.max(...steps.map((s) => s.promptIds.length));
    const distinct = longestPrompt + responses;
    const systemTokens = tokenizer.encode(system, { addSpecialTokens: false }).length;
    const naive = steps.reduce((n, s) => n + s.promptIds.length + s.responseIds.length, 0);
    expect(systemTokens).toBeGreaterThan(3_000);
    expect(storedTokens).toBeLessThan(1.5 * distinct);
    // Beyond the distinct tokens: per dropped context its tokens, plus the replayed copies of the responses.
    expect(storedTokens - distinct).toBeLessThanOrEqual((steps.length - 1) * contextTokens + responses);
    expect(storedTokens).toBeLessThan(naive / 4);
    rows.slice(1).forEach((r) => {
      expect(r.base_idx).toBe(r.idx - 1);
      expect(r.prefix_len).toBeGreaterThan(systemTokens); // the system prompt is never stored again
    });
    // The messages as the agent sent them are stored the same way: messages shared with the
    // previous step are referenced, so the 20 KB system prompt text is kept once.
    const viewBytes = rows.reduce((n, r) => n + r.view_bytes, 0);
    expect(viewBytes).toBeLessThan(1.5 * JSON.stringify(calls.at(-1)!.messages).length);
  });

  it('injected errors reach the store as failed tool results, each followed by its correction', async () => {
    const { server } = await serve(1);
    const t = await init(server);
    const { calls, files } = await playEpisode(t, systemPrompt());
    await complete(t);
    expect(files.get('hello.txt')).toBe('hello\nteam\n');
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps).toHaveLength(calls.length);
    expect(steps).toHaveLength(11);
    const errors = steps.slice(0, 10).map((s) => s.toolResults?.[0]?.error);
    expect(errors).toEqual([true, false, true, false, true, false, true, false, true, false]);
    for (const s of steps.slice(0, 10).filter((_, i) => i % 2 === 0)) {
      expect(['not_found', 'error']).toContain(s.toolResults![0]!.error_type);
    }
    const trajectory = await server.pool.getTrajectory(t.trajectory_uid);
    expect(trajectory).toMatchObject({ nSteps: 11, prefixBreaks: 10 });
  });

  it('a non-streamed call with content: null and content-part arrays is accepted and captured', async () => {
    const { server } = await serve();
    const t = await init(server);
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'system', content: [{ type: 'text', text: 'You are a careful assistant.' }] },
      { role: 'user', content: [{ type: 'text', text: `[Thu 2026-12-03 05:31 UTC] ${PROMPT}` }] },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call1',
            type: 'function',
            function: { name: 'write', arguments: '{"path":"hello.txt","content":"hi\\nteam\\n"}' },
          },
        ],
      },
      { role: 'tool', content: 'Successfully wrote 8 bytes to /tmp/oc/ws/hello.txt', tool_call_id: 'call1' },
      trailingContext(1),
    ];
    const answer = await openclawClient(t).chat.completions.create({
      model: 'sim',
      tool_choice: 'auto',
      max_completion_tokens: 1024,
      messages,
      tools,
    });
    await complete(t);
    const raw = answer as unknown as { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step!.promptIds).toEqual(raw.prompt_token_ids);
    expect(step!.responseIds).toEqual(raw.choices[0]!.token_ids);
    expect(step!.responseLogprobs).toEqual(
      answer.choices[0]!.logprobs!.content!.map((l) => Math.fround(l.logprob)),
    );
    expect(step!.messages).toEqual(messages);
    // The second reference action, in OpenClaw's read schema.
    const call = answer.choices[0]!.message
      .tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('read');
    expect(JSON.parse(call.function.arguments)).toEqual({ path: 'hello.txt', offset: 1, limit: 2 });
    expect(step!.toolCalls).toEqual([expect.objectContaining({ id: call.id })]);
  });
});

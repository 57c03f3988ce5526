import OpenAI from 'openai';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import { startSimServer } from '../packages/core/src/engines/sim/serve.js';
import type { RunningServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer, renderChat } from '../packages/core/src/text/index.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { testServers } from './support/test-servers.js';

/*
 * Token continuity (docs/gateway.md#token-continuity) end to end: the official openai client as the
 * agent, real HTTP on loopback, real SQLite files, the sim (vLLM's wire) as the engine. A
 * non-thinking Qwen3 tool loop breaks its prefix on every step through the chat path (the template
 * drops the empty think block of earlier turns, docs/text.md); in continuity mode it breaks none.
 */

const tokenizer = loadQwen3Tokenizer();
const IM_END = tokenizer.tokenId('<|im_end|>')!;

interface Init {
  trajectory_uid: string;
  group_id: string;
  base_url: string;
}

const { serve } = testServers('continuity', { engines: ['sim'] });

const script = [
  { text: 'Let me look.', toolCall: { name: 'read_file', arguments: { path: 'a.txt' } } },
  { toolCall: { name: 'read_file', arguments: { path: 'b.txt' } } },
  { answer: 'Both files say: ship it.' },
];

const tools: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

const NON_THINKING = { chat_template_kwargs: { enable_thinking: false } } as Record<string, unknown>;

async function start(tokenContinuity: boolean): Promise<RunningServer> {
  return serve({ sim: { policy: 'scripted', script }, gatewayOptions: { tokenContinuity } });
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

const client = (t: Init) => new OpenAI({ baseURL: t.base_url, apiKey: 'unused', maxRetries: 0 });

type Message = OpenAI.Chat.ChatCompletionMessageParam;
type Answered = {
  content: string | null;
  tool_calls: OpenAI.Chat.ChatCompletionMessageFunctionToolCall[];
  finish: string;
};

/** One call, whole or streamed (the stream's deltas put together as an agent does). */
async function ask(t: Init, messages: Message[], stream: boolean): Promise<Answered> {
  const params = { model: 'any', messages, tools, ...NON_THINKING };
  if (!stream) {
    const done = await client(t).chat.completions.create({ ...params, stream: false } as never);
    const c = (done as OpenAI.Chat.ChatCompletion).choices[0]!;
    return {
      content: c.message.content,
      tool_calls: (c.message.tool_calls ?? []) as OpenAI.Chat.ChatCompletionMessageFunctionToolCall[],
      finish: c.finish_reason,
    };
  }
  const chunks = await client(t).chat.completions.create({ ...params, stream: true } as never);
  let content: string | null = null;
  const calls: OpenAI.Chat.ChatCompletionMessageFunctionToolCall[] = [];
  let finish = '';
  for await (const chunk of chunks as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.content) content = (content ?? '') + choice.delta.content;
    for (const d of choice.delta.tool_calls ?? []) {
      const call = calls[d.index] ?? { id: '', type: 'function', function: { name: '', arguments: '' } };
      calls[d.index] = call;
      if (d.id) call.id = d.id;
      call.function.name += d.function?.name ?? '';
      call.function.arguments += d.function?.arguments ?? '';
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { content, tool_calls: calls, finish };
}

/** The agent's loop: call, run the tools, send their results, until an answer without calls. */
async function toolLoop(t: Init, stream = false): Promise<{ answers: Answered[]; messages: Message[] }> {
  const messages: Message[] = [
    { role: 'system', content: 'You are a careful agent.' },
    { role: 'user', content: 'What do my files say?' },
  ];
  const answers: Answered[] = [];
  for (let turn = 0; turn < 5; turn++) {
    const answer = await ask(t, messages, stream);
    answers.push(answer);
    if (answer.tool_calls.length === 0) break;
    messages.push({ role: 'assistant', content: answer.content, tool_calls: answer.tool_calls });
    for (const call of answer.tool_calls)
      messages.push({
        role: 'tool',
        tool_call_id: call.id,
        content: `contents of ${call.function.arguments}`,
      });
  }
  return { answers, messages };
}

const complete = (server: RunningServer, t: Init) =>
  fetch(`${server.url}/v1/trajectories/${t.trajectory_uid}/complete`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ reward: 1 }),
  });

const drift = async (server: RunningServer) =>
  (await (await fetch(`${server.url}/v1/stats/drift`)).json()) as { trajectories: number; models: unknown[] };

/** What the agent saw, without the tool-call ids (random per call). */
const seen = (answers: Answered[]) =>
  answers.map((a) => ({
    content: a.content,
    finish: a.finish,
    calls: a.tool_calls.map((c) => ({ name: c.function.name, arguments: JSON.parse(c.function.arguments) })),
  }));

describe('token continuity', () => {
  it('the chat path breaks the prefix of a non-thinking tool loop on every later step', async () => {
    const server = await start(false);
    const t = await init(server);
    const { answers } = await toolLoop(t);
    expect(answers).toHaveLength(3);
    expect((await complete(server, t)).status).toBe(200);
    expect(await server.pool.getTrajectory(t.trajectory_uid)).toMatchObject({ nSteps: 3, prefixBreaks: 2 });
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => s.metadata.token_continuity)).toEqual([undefined, undefined, undefined]);
    // Each later prompt renders the previous turn without the empty think block its prompt had, so
    // what the engine prefills again is that block and the whole previous response.
    const think = tokenizer.encode('<think>\n\n</think>\n\n', { addSpecialTokens: false });
    const [r0, r1] = [steps[0]!.responseIds.length, steps[1]!.responseIds.length];
    expect(await drift(server)).toEqual({
      trajectories: 1,
      models: [
        {
          model: 'sim-qwen3',
          trajectories: 1,
          steps: 3,
          prefix_breaks: 2,
          reprefilled_tokens: think.length + r0 + think.length + r1,
          continuity: {},
        },
      ],
    });
  });

  for (const stream of [false, true]) {
    it(`continues every step of the same loop exactly (${stream ? 'streamed' : 'whole'} answers)`, async () => {
      const chat = await start(false);
      const chatLoop = await toolLoop(await init(chat));
      const server = await start(true);
      const t = await init(server);
      const { answers, messages } = await toolLoop(t, stream);
      // The agent is answered as through the chat path: the same text, the same parsed calls.
      expect(seen(answers)).toEqual(seen(chatLoop.answers));
      expect(seen(answers)).toEqual([
        {
          content: 'Let me look.',
          finish: 'tool_calls',
          calls: [{ name: 'read_file', arguments: { path: 'a.txt' } }],
        },
        { content: null, finish: 'tool_calls', calls: [{ name: 'read_file', arguments: { path: 'b.txt' } }] },
        { content: 'Both files say: ship it.', finish: 'stop', calls: [] },
      ]);
      for (const a of answers) for (const c of a.tool_calls) expect(c.id).toMatch(/^call_[0-9a-f]+$/);
      expect((await complete(server, t)).status).toBe(200);
      expect(await server.pool.getTrajectory(t.trajectory_uid)).toMatchObject({ nSteps: 3, prefixBreaks: 0 });
      const steps = (await server.pool.getTrajectorySteps(t.trajectory_uid)) as [Step, Step, Step];
      expect(steps.map((s) => s.metadata.token_continuity)).toEqual(['first_step', 'continued', 'continued']);
      for (let k = 1; k < 3; k++) {
        const [before, after] = [steps[k - 1]!, steps[k]!];
        expect(after.promptIds.slice(0, before.promptIds.length + before.responseIds.length)).toEqual([
          ...before.promptIds,
          ...before.responseIds,
        ]);
        expect(before.responseIds.at(-1)).toBe(IM_END);
      }
      // Step 1's new turns are the tool result, rendered by the template after the assistant turn.
      const s1 = steps[1];
      const added = s1.promptIds.slice(steps[0].promptIds.length + steps[0].responseIds.length);
      const full = renderChat({
        messages: messages.slice(0, 4) as never,
        tools: tools as never,
        addGenerationPrompt: true,
        enableThinking: false,
      });
      const afterAssistant = full.slice(full.lastIndexOf('<|im_end|>', full.indexOf('<tool_response>')) + 10);
      expect(tokenizer.decode(added)).toBe(afterAssistant);
      expect(afterAssistant).toBe(
        `\n<|im_start|>user\n<tool_response>\ncontents of {"path": "a.txt"}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n`,
      );
      // The step keeps the engine's ids and logprobs, its parsed calls, and the agent's messages.
      expect(s1.tokenSource).toBe('engine');
      expect(s1.responseLogprobs).toHaveLength(s1.responseIds.length);
      expect(s1.toolCalls).toEqual([answers[1]!.tool_calls[0]]);
      expect(s1.messages).toEqual(messages.slice(0, 4));
      expect(steps[0].toolResults).toEqual([
        expect.objectContaining({
          tool_call_id: answers[0]!.tool_calls[0]!.id,
          content: 'contents of {"path": "a.txt"}',
        }),
      ]);
      const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as {
        gateway: Record<string, unknown>;
      };
      expect(stats.gateway.token_continuity).toEqual({ continued: 2, fallback: { first_step: 1 } });
      expect((await drift(server)).models).toEqual([
        {
          model: 'sim-qwen3',
          trajectories: 1,
          steps: 3,
          prefix_breaks: 0,
          reprefilled_tokens: 0,
          continuity: { first_step: 1, continued: 2 },
        },
      ]);
    });
  }

  it('continues from the store when the session left memory between calls', async () => {
    const server = await serve({
      sim: { policy: 'scripted', script },
      gatewayOptions: { tokenContinuity: true, sessionCacheMs: 20 },
    });
    const t = await init(server);
    const messages: Message[] = [
      { role: 'system', content: 'You are a careful agent.' },
      { role: 'user', content: 'What do my files say?' },
    ];
    for (let turn = 0; turn < 3; turn++) {
      const answer = await ask(t, messages, false);
      if (answer.tool_calls.length === 0) break;
      messages.push({ role: 'assistant', content: answer.content, tool_calls: answer.tool_calls });
      for (const call of answer.tool_calls)
        messages.push({ role: 'tool', tool_call_id: call.id, content: 'ship it' });
      // Unused sessions are dropped every 20 ms: the next call rebuilds this one from the store.
      const cached = () => server.gateway.stats().cached_trajectories;
      while (cached() > 0) await new Promise((r) => setTimeout(r, 10));
    }
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => s.metadata.token_continuity)).toEqual(['first_step', 'continued', 'continued']);
    expect(await server.pool.getTrajectory(t.trajectory_uid)).toMatchObject({ nSteps: 3, prefixBreaks: 0 });
  });

  it('an engine without a token-id completions path (sglang) takes the chat path', async () => {
    const sim = await startSimServer({ port: 0, policy: 'scripted', script });
    onTestFinished(() => sim.close());
    const server = await serve({ engines: [`sglang=${sim.url}`], gatewayOptions: { tokenContinuity: true } });
    const t = await init(server);
    expect(await toolLoop(t)).toMatchObject({ answers: { length: 3 } });
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => s.metadata.token_continuity)).toEqual(['first_step', 'engine', 'engine']);
    expect(steps.map((s) => s.tokenSource)).toEqual(['engine', 'engine', 'engine']);
  });

  it('a model whose template the gateway does not render takes the chat path', async () => {
    const server = await serve({
      sim: { policy: 'scripted', script, model: 'sim-llama' },
      gatewayOptions: { tokenContinuity: true },
    });
    const t = await init(server);
    const { answers } = await toolLoop(t);
    expect(answers).toHaveLength(3);
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => s.metadata.token_continuity)).toEqual([
      'first_step',
      'template_unknown',
      'template_unknown',
    ]);
  });

  it('a rewritten history takes the chat path, and says so', async () => {
    const server = await start(true);
    const t = await init(server);
    const messages: Message[] = [
      { role: 'system', content: 'You are a careful agent.' },
      { role: 'user', content: 'What do my files say?' },
    ];
    const first = await ask(t, messages, false);
    // The agent edits its system prompt before the next call.
    messages[0] = { role: 'system', content: 'You are a careful agent. Be brief.' };
    messages.push({ role: 'assistant', content: first.content, tool_calls: first.tool_calls });
    messages.push({ role: 'tool', tool_call_id: first.tool_calls[0]!.id, content: 'ship it' });
    const second = await ask(t, messages, false);
    expect(second.tool_calls.map((c) => c.function.name)).toEqual(['read_file']);
    // Then continues the rewritten history as it was answered: continued again.
    messages.push({ role: 'assistant', content: second.content, tool_calls: second.tool_calls });
    messages.push({ role: 'tool', tool_call_id: second.tool_calls[0]!.id, content: 'ship it too' });
    await ask(t, messages, false);
    expect((await complete(server, t)).status).toBe(200);
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => s.metadata.token_continuity)).toEqual([
      'first_step',
      'history_rewritten',
      'continued',
    ]);
    const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as {
      gateway: Record<string, unknown>;
    };
    expect(stats.gateway.token_continuity).toEqual({
      continued: 1,
      fallback: { first_step: 1, history_rewritten: 1 },
    });
    // The rewritten step is a break (its prompt re-renders the edited history); the continued one is not.
    expect(await server.pool.getTrajectory(t.trajectory_uid)).toMatchObject({ nSteps: 3, prefixBreaks: 1 });
    expect((await drift(server)).models).toMatchObject([
      { steps: 3, prefix_breaks: 1, continuity: { first_step: 1, history_rewritten: 1, continued: 1 } },
    ]);
  });

  it.skipIf(!pgUrl)(
    'continues across two gateways sharing PostgreSQL, each call on the other one',
    async () => {
      const schema = freshSchema();
      onTestFinished(() => dropSchema(schema));
      const shared = {
        dbPath: '',
        pg: { url: pgUrl!, schema },
        sim: { policy: 'scripted' as const, script },
        gatewayOptions: { tokenContinuity: true },
      };
      const a = await serve(shared);
      const b = await serve({ ...shared, role: 'gateway' });
      const t = await init(a);
      const on = (server: RunningServer): Init => ({
        ...t,
        base_url: t.base_url.replace(new URL(t.base_url).origin, server.url),
      });
      const messages: Message[] = [
        { role: 'system', content: 'You are a careful agent.' },
        { role: 'user', content: 'What do my files say?' },
      ];
      for (const server of [a, b, a]) {
        const answer = await ask(on(server), messages, false);
        if (answer.tool_calls.length === 0) break;
        messages.push({ role: 'assistant', content: answer.content, tool_calls: answer.tool_calls });
        for (const call of answer.tool_calls)
          messages.push({ role: 'tool', tool_call_id: call.id, content: 'ship it' });
      }
      const steps = await a.pool.getTrajectorySteps(t.trajectory_uid);
      expect(steps.map((s) => s.metadata.token_continuity)).toEqual(['first_step', 'continued', 'continued']);
      expect(await a.pool.getTrajectory(t.trajectory_uid)).toMatchObject({ nSteps: 3, prefixBreaks: 0 });
      expect((await drift(a)).models).toMatchObject([{ steps: 3, prefix_breaks: 0, reprefilled_tokens: 0 }]);
    },
  );
});

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Step } from '../src/domain/index.js';
import type { RunningServer } from '../src/server/server.js';
import { createModelAdapter } from '../src/text/model-adapter.js';
import { findTrainPython, runPython } from '../src/train/python.js';
import { type FixtureFamily, makeModelFolder } from './support/model-folders.js';
import { testServers } from './support/test-servers.js';

/*
 * Every text feature of the gateway with a model folder of each family: the official openai client
 * as the agent over loopback HTTP, the sim serving the folder (its template, completion format and
 * parser), token continuity on. Expected values come from the references: the script the sim follows
 * (the calls), the folder's tokenizer.json (end-of-turn ids) and transformers' apply_chat_template
 * over the same folder (every stored prompt). CI sets STEPWISE_TRAIN_PYTHON, so a missing
 * transformers fails there instead of skipping.
 */

const python = findTrainPython();
const required = Boolean(process.env.STEPWISE_TRAIN_PYTHON);

const { serve } = testServers('families');

const script = [
  { toolCall: { name: 'read_file', arguments: { path: 'a.txt' } } },
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

/** Each family with the end-of-turn tokens its completions must stop on (call turn, answer turn). */
const FAMILIES: { folder: FixtureFamily; family: string; callEnd: string; answerEnd: string }[] = [
  { folder: 'qwen3', family: 'qwen3', callEnd: '<|im_end|>', answerEnd: '<|im_end|>' },
  { folder: 'llama3_1', family: 'llama3', callEnd: '<|eot_id|>', answerEnd: '<|eot_id|>' },
  // Harmony: a call ends <|call|>, a final answer <|return|> (OpenAI's harmony format).
  { folder: 'gpt-oss', family: 'gpt-oss', callEnd: '<|call|>', answerEnd: '<|return|>' },
];

const folders = new Map<string, { dir: string; remove(): void }>();
beforeAll(() => {
  for (const f of [...FAMILIES.map((x) => x.folder), 'deepseek_v3' as const])
    folders.set(f, makeModelFolder(f));
});
afterAll(() => {
  for (const f of folders.values()) f.remove();
});

/** An added token's id, read from the folder's tokenizer.json (the reference, not the code under test). */
function tokenIdInFile(dir: string, token: string): number {
  const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as {
    added_tokens: { id: number; content: string }[];
  };
  const found = json.added_tokens.find((t) => t.content === token);
  if (!found) throw new Error(`${token} is not in ${dir}`);
  return found.id;
}

interface Init {
  trajectory_uid: string;
  base_url: string;
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

type Message = OpenAI.Chat.ChatCompletionMessageParam;
type Call = { id: string; type: 'function'; function: { name: string; arguments: string } };
type Answered = { content: string | null; tool_calls: Call[]; finish: string };

async function ask(client: OpenAI, messages: Message[], stream: boolean): Promise<Answered> {
  const params = { model: 'any', messages, tools };
  if (!stream) {
    const c = (await client.chat.completions.create({ ...params, stream: false })).choices[0]!;
    return {
      content: c.message.content,
      tool_calls: (c.message.tool_calls ?? []) as Call[],
      finish: c.finish_reason,
    };
  }
  const chunks = await client.chat.completions.create({ ...params, stream: true });
  let content: string | null = null;
  const calls: Call[] = [];
  let finish = '';
  for await (const chunk of chunks) {
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

async function toolLoop(t: Init, stream: boolean): Promise<Answered[]> {
  const client = new OpenAI({ baseURL: t.base_url, apiKey: 'unused', maxRetries: 0 });
  const messages: Message[] = [
    { role: 'system', content: 'You are a careful agent.' },
    { role: 'user', content: 'What do my files say?' },
  ];
  const answers: Answered[] = [];
  for (let turn = 0; turn < 5; turn++) {
    const answer = await ask(client, messages, stream);
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
  return answers;
}

/** transformers' apply_chat_template of each step's messages and tools, over the folder. */
async function referencePrompts(
  dir: string,
  steps: readonly Step[],
): Promise<{ ids?: number[]; error?: string }[]> {
  const adapter = createModelAdapter(dir);
  const cases = steps.map((s) => ({
    dir,
    ...adapter.templateContext({ messages: s.messages as never, tools: s.tools as never }),
    add_generation_prompt: true,
  }));
  const work = mkdtempSync(join(tmpdir(), 'stepwise-hf-ref-'));
  try {
    const file = join(work, 'cases.json');
    writeFileSync(file, JSON.stringify({ cases }));
    const out = await runPython(
      python!,
      [new URL('./support/hf_reference.py', import.meta.url).pathname, file],
      {
        timeoutMs: 300_000,
      },
    );
    return (JSON.parse(out) as { results: { ids?: number[]; error?: string }[] }).results;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

describe.each(FAMILIES)('a $family folder through the gateway', ({ folder, family, callEnd, answerEnd }) => {
  for (const stream of [false, true]) {
    it(`runs a tool loop with exact token continuity (${stream ? 'streamed' : 'whole'} answers)`, async () => {
      const dir = folders.get(folder)!.dir;
      const server = await serve({
        engines: [`sim,model-dir=${dir}`],
        sim: { policy: 'scripted', script },
        gatewayOptions: { tokenContinuity: true },
      });
      const t = await init(server);
      const answers = await toolLoop(t, stream);
      // The calls the script told the sim to make, parsed back by the family's parser.
      expect(
        answers.map((a) => ({
          content: a.content,
          finish: a.finish,
          calls: a.tool_calls.map((c) => ({
            name: c.function.name,
            arguments: JSON.parse(c.function.arguments),
          })),
        })),
      ).toEqual([
        { content: null, finish: 'tool_calls', calls: [{ name: 'read_file', arguments: { path: 'a.txt' } }] },
        { content: null, finish: 'tool_calls', calls: [{ name: 'read_file', arguments: { path: 'b.txt' } }] },
        { content: 'Both files say: ship it.', finish: 'stop', calls: [] },
      ]);
      const done = await fetch(`${server.url}/v1/trajectories/${t.trajectory_uid}/complete`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"reward": 1}',
      });
      expect(done.status).toBe(200);
      expect(await server.pool.getTrajectory(t.trajectory_uid)).toMatchObject({ nSteps: 3, prefixBreaks: 0 });
      const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
      expect(steps.map((s) => s.metadata.token_continuity)).toEqual(['first_step', 'continued', 'continued']);
      expect(steps.map((s) => s.metadata.model_family)).toEqual([family, family, family]);
      // Each turn stops on the family's own end-of-turn token, as its tokenizer.json numbers it.
      expect(steps.map((s) => s.responseIds.at(-1))).toEqual([
        tokenIdInFile(dir, callEnd),
        tokenIdInFile(dir, callEnd),
        tokenIdInFile(dir, answerEnd),
      ]);
      if (!python) {
        if (required) throw new Error('STEPWISE_TRAIN_PYTHON is set but has no transformers');
        return;
      }
      // The first prompt is the reference rendering; a continued one is the previous prompt and
      // response (the model's own tokens, which a re-rendering may spell differently: gpt-oss's
      // arguments) followed by the new turns exactly as the reference renders them after the turn's end.
      const reference = await referencePrompts(dir, steps);
      for (const ref of reference) expect(ref.error).toBeUndefined();
      expect(Array.from(steps[0]!.promptIds)).toEqual(reference[0]!.ids);
      for (let k = 1; k < steps.length; k++) {
        const [before, after] = [steps[k - 1]!, steps[k]!];
        const kept = before.promptIds.length + before.responseIds.length;
        const tail = Array.from(after.promptIds.slice(kept));
        const ref = reference[k]!.ids!;
        expect(tail.length).toBeGreaterThan(0);
        expect(tail, `step ${k} new turns`).toEqual(ref.slice(ref.length - tail.length));
        expect(ref[ref.length - tail.length - 1], `step ${k} turn end`).toBe(tokenIdInFile(dir, callEnd));
      }
    }, 300_000);
  }
});

describe('a family whose template cannot serve a feature says so, naming the model', () => {
  it("DeepSeek-V3's package template closes no tool-call turn: the sim refuses to write one", async () => {
    const dir = folders.get('deepseek_v3')!.dir;
    const server = await serve({
      engines: [`sim,model-dir=${dir}`],
      sim: { policy: 'scripted', script },
    });
    const t = await init(server);
    const client = new OpenAI({ baseURL: t.base_url, apiKey: 'unused', maxRetries: 0 });
    const error = await client.chat.completions
      .create({ model: 'any', messages: [{ role: 'user', content: 'Read a.txt' }], tools })
      .then(
        () => null,
        (e: unknown) => e as { status?: number; message: string },
      );
    expect(error?.message).toMatch(/DeepSeek-V3.*family deepseek_v3\) does not support writing completions/);
  });
});

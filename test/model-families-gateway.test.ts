import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import type { RunningServer } from '../packages/core/src/server/server.js';
import { createModelAdapter } from '../packages/core/src/text/model-adapter.js';
import { findTrainPython, runPython } from '../src/train/python.js';
import { type FixtureFamily, makeModelFolder } from './support/model-folders.js';
import { testServers } from './support/test-servers.js';

/*
 * Every text feature of the gateway with a model folder of each family: the official openai client
 * as the agent over loopback HTTP, the sim serving the folder (its template, completion format and
 * parser), token continuity on. Expected values come from the references: the script the sim follows
 * (the calls), the folder's tokenizer.json (end-of-turn ids) and, for every stored prompt,
 * transformers' apply_chat_template over the same folder (mistral-common's encoder for Mistral).
 * The loops run first; the references are computed at the end, in one Python process per kind, since
 * importing transformers costs more than the loops. CI sets STEPWISE_TRAIN_PYTHON, so a missing
 * reference fails there instead of skipping.
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

type Folder = FixtureFamily | 'mistral';

/** Each family with the end-of-turn tokens its completions must stop on (call turn, answer turn). */
const FAMILIES: { folder: Folder; family: string; callEnd: string; answerEnd: string }[] = [
  { folder: 'qwen3', family: 'qwen3', callEnd: '<|im_end|>', answerEnd: '<|im_end|>' },
  { folder: 'llama3_1', family: 'llama3', callEnd: '<|eot_id|>', answerEnd: '<|eot_id|>' },
  // Harmony: a call ends <|call|>, a final answer <|return|> (OpenAI's harmony format).
  { folder: 'gpt-oss', family: 'gpt-oss', callEnd: '<|call|>', answerEnd: '<|return|>' },
  {
    folder: 'deepseek_v3',
    family: 'deepseek_v3',
    callEnd: '<｜end▁of▁sentence｜>',
    answerEnd: '<｜end▁of▁sentence｜>',
  },
  { folder: 'gemma3', family: 'gemma3', callEnd: '<end_of_turn>', answerEnd: '<end_of_turn>' },
  { folder: 'mistral', family: 'mistral', callEnd: '</s>', answerEnd: '</s>' },
];

const MISTRAL_SCRIPT = new URL('./support/mistral_reference.py', import.meta.url).pathname;

/** Mistral 7B v0.3's folder: mistral-common's v3 tokenizer as tokenizer.json, plus the fixture files. */
async function mistralFolder(): Promise<{ dir: string; remove(): void }> {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-model-mistral-'));
  await runPython(python!, [MISTRAL_SCRIPT, 'folder', dir, 'v3'], { timeoutMs: 120_000 });
  const fixture = new URL('./fixtures/models/mistral/', import.meta.url).pathname;
  for (const file of readdirSync(fixture).filter((f) => f !== 'README.md'))
    copyFileSync(join(fixture, file), join(dir, file));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

const folders = new Map<string, { dir: string; remove(): void }>();
beforeAll(async () => {
  for (const { folder } of FAMILIES) if (folder !== 'mistral') folders.set(folder, makeModelFolder(folder));
  // DeepSeek-V3's package template (its first release's): no tool definitions, no close of a call turn.
  folders.set('deepseek_v3-package', makeModelFolder('deepseek_v3', { packageTemplate: true }));
  if (python) folders.set('mistral', await mistralFolder());
}, 150_000);
afterAll(() => {
  for (const f of folders.values()) f.remove();
});

/** The steps of each loop, checked against the references at the end. */
const loops: { folder: Folder; stream: boolean; dir: string; callEnd: string; steps: Step[] }[] = [];

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

/** The reference ids of each step's prompt: transformers over the folder, or mistral-common. */
async function referencePrompts(
  kind: 'hf' | 'mistral',
  items: readonly { dir: string; step: Step }[],
): Promise<{ ids?: number[]; error?: string }[]> {
  const cases = items.map(({ dir, step }) => {
    const context = createModelAdapter(dir).templateContext({
      messages: step.messages as never,
      tools: step.tools as never,
    });
    return kind === 'hf' ? { dir, ...context, add_generation_prompt: true } : context;
  });
  const work = mkdtempSync(join(tmpdir(), 'stepwise-ref-'));
  try {
    const file = join(work, 'cases.json');
    writeFileSync(file, JSON.stringify({ cases }));
    const args =
      kind === 'hf'
        ? [new URL('./support/hf_reference.py', import.meta.url).pathname, file]
        : [MISTRAL_SCRIPT, 'encode', file, 'v3'];
    const out = await runPython(python!, args, { timeoutMs: 300_000 });
    return (JSON.parse(out) as { results: { ids?: number[]; error?: string }[] }).results;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

describe.each(FAMILIES)('a $family folder through the gateway', ({ folder, family, callEnd, answerEnd }) => {
  for (const stream of [false, true]) {
    it(`runs a tool loop with exact token continuity (${stream ? 'streamed' : 'whole'} answers)`, async () => {
      if (!folders.has(folder)) {
        if (required) throw new Error(`STEPWISE_TRAIN_PYTHON is set but the ${folder} folder was not built`);
        return;
      }
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
      // Call ids as the family's vLLM parser makes them: Mistral's are 9 letters and digits.
      for (const a of answers.slice(0, 2))
        expect(a.tool_calls[0]!.id).toMatch(
          family === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_[0-9a-f]{16,24}$/,
        );
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
      loops.push({ folder, stream, dir, callEnd, steps });
    }, 120_000);
  }
});

describe('every stored prompt equals the reference rendering', () => {
  it('transformers (mistral-common for Mistral) over the same folders, messages and tools', async () => {
    if (!python) {
      if (required) throw new Error('STEPWISE_TRAIN_PYTHON is set but has no transformers');
      return;
    }
    // Every loop above ran (a failed one fails there; here it would only be missing).
    expect(loops.map((l) => `${l.folder}:${l.stream}`).sort()).toEqual(
      FAMILIES.flatMap((f) => [`${f.folder}:false`, `${f.folder}:true`]).sort(),
    );
    const items = loops.flatMap((loop) => loop.steps.map((step) => ({ loop, dir: loop.dir, step })));
    const hf = items.filter((i) => i.loop.folder !== 'mistral');
    const mistral = items.filter((i) => i.loop.folder === 'mistral');
    const [hfRefs, mistralRefs] = await Promise.all([
      referencePrompts('hf', hf),
      referencePrompts('mistral', mistral),
    ]);
    const reference = new Map([
      ...hf.map((i, k) => [i, hfRefs[k]!] as const),
      ...mistral.map((i, k) => [i, mistralRefs[k]!] as const),
    ]);
    for (const loop of loops) {
      const label = `${loop.folder} (${loop.stream ? 'streamed' : 'whole'})`;
      const refs = items.filter((i) => i.loop === loop).map((i) => reference.get(i)!);
      for (const ref of refs) expect(ref.error, label).toBeUndefined();
      // The first prompt is the reference rendering; a continued one is the previous prompt and
      // response (the model's own tokens, which a re-rendering may spell differently: gpt-oss's
      // arguments) followed by the new turns exactly as the reference renders them after the turn's end.
      const steps = loop.steps;
      expect(Array.from(steps[0]!.promptIds), label).toEqual(refs[0]!.ids);
      for (let k = 1; k < steps.length; k++) {
        const [before, after] = [steps[k - 1]!, steps[k]!];
        const kept = before.promptIds.length + before.responseIds.length;
        const tail = Array.from(after.promptIds.slice(kept));
        const ref = refs[k]!.ids!;
        expect(tail.length, label).toBeGreaterThan(0);
        expect(tail, `${label} step ${k} new turns`).toEqual(ref.slice(ref.length - tail.length));
        expect(ref[ref.length - tail.length - 1], `${label} step ${k} turn end`).toBe(
          tokenIdInFile(loop.dir, loop.callEnd),
        );
      }
    }
  }, 300_000);
});

describe('a family whose template cannot serve a feature says so, naming the model', () => {
  it("DeepSeek-V3's package template closes no tool-call turn: the sim refuses to write one", async () => {
    const dir = folders.get('deepseek_v3-package')!.dir;
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

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import {
  findTrainPython,
  type ReferenceEngine,
  runPython,
  startReferenceEngine,
} from '../src/train/python.js';

/*
 * The trainer invariants with a real model on both ends: the reference engine (clients/python, torch
 * + transformers) serves a tiny Qwen3-architecture policy warmed up to call a tool; agents (the
 * official `openai` client) run through the gateway, streaming and not; the Python trainer leases
 * what was captured and recomputes it. Needs the `train` extra (CI installs it and sets
 * STEPWISE_TRAIN_PYTHON, so there a missing package fails instead of skipping).
 */

const python = findTrainPython();
if (!python)
  console.warn('trainer tests skipped: no Python with torch + transformers (see docs/trainers.md)');

const TOOLS: ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'read',
      description: 'Read a file',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];
const FILES: Record<string, string> = { 'a.txt': '42', 'b.txt': 'blue' };
// The checkpoint was trained on prompts rendered this way (no thinking block to generate).
const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };

interface Checked {
  leased: boolean;
  groups: { group_id: string; staleness: number; stale: boolean }[];
  batch_policy_version: number;
  token_sources: string[];
  recompute_log_probs: boolean[];
  tool_call_steps: number;
  response_tokens: number;
  same_targets: boolean;
  exact_tokens: number;
  exact_max_abs_diff: number | null;
  packed_vs_padded_logprob_max_abs_diff: number;
  loss_packed: number;
  loss_padded: number;
  grad_rel_diff: number;
  grad_norm: number;
  packed_ratio: number;
  shared_ratio: number;
  shared_same_targets: boolean;
  shared_max_loss_weight: number;
  loss_shared: number;
  shared_grad_rel_diff: number;
  token_staleness: number[];
  packed_token_staleness: number[];
}

interface Outcome {
  streamed: boolean;
  toolCalls: number;
}

/** One rollout: ask, run the tool calls the policy makes, ask again; reward 1 for reading the right file. */
async function rollout(
  server: RunningServer,
  group: string,
  channel: string,
  nRollouts: number,
  i: number,
): Promise<Outcome> {
  const init = (await (
    await fetch(`${server.url}/init_trajectory`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ group_id: group, channel, n_rollouts: nRollouts }),
    })
  ).json()) as { base_url: string; trajectory_uid: string };
  const client = new OpenAI({ baseURL: init.base_url, apiKey: 'unused' });
  const file = i % 2 === 0 ? 'a.txt' : 'b.txt';
  const messages: ChatCompletionMessageParam[] = [
    { role: 'user', content: `Read ${file} and tell me what it says.` },
  ];
  const streamed = i % 2 === 1;
  // The first turn is greedy (the warmed-up policy then calls the tool), the second one sampled.
  const ask = async (maxTokens: number, temperature: number) => {
    const request = {
      model: 'policy',
      messages,
      tools: TOOLS,
      max_tokens: maxTokens,
      temperature,
      ...NO_THINKING,
    };
    if (!streamed) return (await client.chat.completions.create(request)).choices[0]!.message;
    const stream = await client.chat.completions.create({ ...request, stream: true });
    let content = '';
    const calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[] = [];
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta;
      content += delta?.content ?? '';
      for (const c of delta?.tool_calls ?? []) {
        calls[c.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
        const call = calls[c.index]!;
        if (c.id) call.id = c.id;
        call.function.name += c.function?.name ?? '';
        call.function.arguments += c.function?.arguments ?? '';
      }
    }
    return { role: 'assistant' as const, content, tool_calls: calls.length ? calls : undefined };
  };
  const first = await ask(40, 0);
  const calls = first.tool_calls ?? [];
  messages.push({
    role: 'assistant',
    content: first.content ?? '',
    ...(calls.length ? { tool_calls: calls } : {}),
  });
  let readRightFile = false;
  for (const call of calls) {
    let path = '';
    try {
      path =
        (JSON.parse(call.type === 'function' ? call.function.arguments : '{}') as { path?: string }).path ??
        '';
    } catch {}
    readRightFile ||= path === file;
    messages.push({ role: 'tool', tool_call_id: call.id, content: FILES[path] ?? `error: no file ${path}` });
  }
  if (!calls.length) messages.push({ role: 'user', content: 'Use the read tool.' });
  await ask(12, 1);
  await fetch(`${new URL(init.base_url).origin}/v1/trajectories/${init.trajectory_uid}/complete`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ reward: readRightFile ? 1 : 0 }),
  });
  return { streamed, toolCalls: calls.length };
}

describe.skipIf(!python)('trainer invariants (tiny Qwen3 policy, reference engine, Python trainer)', () => {
  let dir: string;
  let checkpoint: string;
  let engine: ReferenceEngine;
  let server: RunningServer;
  const check = async (channel: string, groups: number, nRollouts: number, extra: string[] = []) =>
    JSON.parse(
      await runPython(
        python!,
        [
          'tests/check_trainer.py',
          '--url',
          server.url,
          '--model',
          checkpoint,
          '--channel',
          channel,
          '--groups',
          String(groups),
          '--n-rollouts',
          String(nRollouts),
          ...extra,
        ],
        { timeoutMs: 300_000 },
      ),
    ) as Checked;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-trainer-'));
    checkpoint = join(dir, 'policy');
    await runPython(python!, ['tests/make_checkpoint.py', checkpoint, '--seed', '7'], { timeoutMs: 300_000 });
    engine = await startReferenceEngine({ python: python!, model: checkpoint, seed: 1 });
    server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: [`vllm=${engine.url}`] });
  }, 600_000);

  afterAll(async () => {
    await server?.close();
    await engine?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("exactness and packing: recomputed log-probs equal the engine's, packed loss and gradients equal padded", async () => {
    const outcomes: Outcome[] = [];
    for (const g of [0, 1]) {
      for (let i = 0; i < 3; i++) outcomes.push(await rollout(server, `exact-${g}`, 'exact', 3, i));
    }
    expect(outcomes.some((o) => o.streamed && o.toolCalls > 0)).toBe(true);
    expect(outcomes.some((o) => !o.streamed && o.toolCalls > 0)).toBe(true);

    const r = await check('exact', 2, 3);
    expect(r.leased).toBe(true);
    expect(r.token_sources.every((s) => s === 'engine')).toBe(true);
    expect(r.token_sources).toHaveLength(12);
    expect(r.tool_call_steps).toBeGreaterThan(0);
    // Every response token carries the engine's log-prob, and the trainer recomputes the same number.
    expect(r.exact_tokens).toBe(r.response_tokens);
    expect(r.exact_max_abs_diff).not.toBeNull();
    expect(r.exact_max_abs_diff!).toBeLessThanOrEqual(1e-4);
    // Packed and padded: the same response tokens, the same log-probs, loss and gradients.
    expect(r.same_targets).toBe(true);
    expect(r.packed_ratio).toBeLessThan(1);
    expect(r.packed_vs_padded_logprob_max_abs_diff).toBeLessThanOrEqual(1e-5);
    expect(Math.abs(r.loss_packed - r.loss_padded)).toBeLessThanOrEqual(
      1e-5 * Math.max(1, Math.abs(r.loss_padded)),
    );
    expect(r.grad_norm).toBeGreaterThan(0);
    expect(r.grad_rel_diff).toBeLessThanOrEqual(1e-5);
    // Shared responses (the greedy first turns of rollouts reading the same file are identical):
    // fewer tokens, some trained for several steps, and still the padded loss and gradients.
    expect(r.shared_same_targets).toBe(true);
    expect(r.shared_ratio).toBeLessThan(r.packed_ratio);
    expect(r.shared_max_loss_weight).toBeGreaterThan(1);
    expect(Math.abs(r.loss_shared - r.loss_padded)).toBeLessThanOrEqual(
      1e-5 * Math.max(1, Math.abs(r.loss_padded)),
    );
    expect(r.shared_grad_rel_diff).toBeLessThanOrEqual(1e-5);
  }, 600_000);

  it("the reference engine speaks vLLM's protocol: white-box /generate through the gateway, 400s naming the field, weight updates", async () => {
    const models = (await (await fetch(`${engine.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data).toHaveLength(1);

    const init = (await (
      await fetch(`${server.url}/init_trajectory`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ group_id: 'wb' }),
      })
    ).json()) as { trajectory_uid: string };
    const prompt = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198];
    const generated = (await (
      await fetch(`${server.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          prompt_ids: prompt,
          trajectory_uid: init.trajectory_uid,
          sampling_params: { max_tokens: 5, temperature: 1, seed: 3 },
        }),
      })
    ).json()) as { prompt_ids: number[]; response_ids: number[]; logprobs: number[]; engine_id: string };
    expect(generated.prompt_ids).toEqual(prompt);
    expect(generated.response_ids.length).toBeGreaterThan(0);
    expect(generated.logprobs).toHaveLength(generated.response_ids.length);
    expect(generated.logprobs.every((lp) => lp <= 0 && Number.isFinite(lp))).toBe(true);
    expect(generated.engine_id).toMatch(/^vllm@/);

    const bad = async (body: unknown) => {
      const res = await fetch(`${engine.url}/v1/chat/completions`, {
        method: 'POST',
        body: JSON.stringify(body),
      });
      return [res.status, ((await res.json()) as { error: { param: string | null } }).error.param];
    };
    const messages = [{ role: 'user', content: 'hi' }];
    expect(await bad({ messages, temperature: 'hot' })).toEqual([400, 'temperature']);
    expect(await bad({ messages, logprobs: 'x' })).toEqual([400, 'logprobs']);
    expect(await bad({ messages, n: 2 })).toEqual([400, 'n']);
    expect(await bad({ messages: [] })).toEqual([400, 'messages']);

    // Weights: a safetensors body that is not one changes nothing; reloading the served folder does.
    const broken = await fetch(`${engine.url}/update_weights_from_tensor?version=9`, {
      method: 'POST',
      body: 'nope',
    });
    expect([broken.status, ((await broken.json()) as { error: { param: string } }).error.param]).toEqual([
      400,
      'weights',
    ]);
    expect(
      ((await (await fetch(`${engine.url}/weights`)).json()) as { version: number | null }).version,
    ).toBeNull();
    const ask = async () =>
      (
        (await (
          await fetch(`${engine.url}/v1/completions`, {
            method: 'POST',
            body: JSON.stringify({ prompt, max_tokens: 6, temperature: 0, return_token_ids: true }),
          })
        ).json()) as { choices: { token_ids: number[] }[] }
      ).choices[0]!.token_ids;
    const before = await ask();
    const loaded = await fetch(`${engine.url}/update_weights_from_disk`, {
      method: 'POST',
      body: JSON.stringify({ model_path: checkpoint, version: 4 }),
    });
    expect(loaded.status).toBe(200);
    expect(((await (await fetch(`${engine.url}/weights`)).json()) as { version: number }).version).toBe(4);
    expect(await ask()).toEqual(before);
  }, 120_000);

  it("openai= mode: steps are retokenized, flagged, and their drift from the engine's own ids is counted", async () => {
    // The same engine behind an OpenAI-compatible route (text only) and behind vllm= (ids): the same
    // seeded request gives the same generation, so the vllm= step holds the ids the engine sampled.
    const openaiServer = await startServer({
      dbPath: join(dir, 'openai.db'),
      port: 0,
      engines: [`openai=${engine.url}/v1`],
    });
    try {
      const ask = async (url: string, stream: boolean) => {
        const init = (await (
          await fetch(`${url}/init_trajectory`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ channel: 'drift' }),
          })
        ).json()) as { trajectory_uid: string; base_url: string };
        const client = new OpenAI({ baseURL: init.base_url, apiKey: 'unused' });
        const request = {
          model: 'policy',
          messages: [{ role: 'user' as const, content: 'Read a.txt and tell me what it says.' }],
          tools: TOOLS,
          max_tokens: 40,
          temperature: 1,
          seed: 11,
          ...NO_THINKING,
        };
        if (stream)
          for await (const _ of await client.chat.completions.create({ ...request, stream })) void _;
        else await client.chat.completions.create(request);
        // The step is written behind the answer: wait for it.
        const pool = (url === server.url ? server : openaiServer).pool;
        let steps = await pool.getTrajectorySteps(init.trajectory_uid);
        for (let i = 0; i < 100 && steps.length === 0; i++) {
          await new Promise((r) => setTimeout(r, 50));
          steps = await pool.getTrajectorySteps(init.trajectory_uid);
        }
        expect(steps).toHaveLength(1);
        return steps[0]!;
      };
      for (const stream of [false, true]) {
        const exact = await ask(server.url, stream);
        const rebuilt = await ask(openaiServer.url, stream);
        expect(exact.tokenSource).toBe('engine');
        expect(rebuilt.tokenSource).toBe('retokenized');
        expect(rebuilt.responseLogprobs).toBeNull();
        expect(rebuilt.metadata.retokenize_drift).toEqual({
          prompt_tokens: rebuilt.promptIds.length - exact.promptIds.length,
          completion_tokens: rebuilt.responseIds.length - exact.responseIds.length,
        });
      }
    } finally {
      await openaiServer.close();
    }
  }, 300_000);

  it('one trainer iteration: lease packed groups, update, ack, push the weights to the engine, advance the version', async () => {
    for (let i = 0; i < 4; i++) await rollout(server, 'once-g', 'once', 4, i);
    const out = JSON.parse(
      await runPython(
        python!,
        ['tests/train_once.py', '--url', server.url, '--engine', engine.url, '--model', checkpoint].concat([
          '--channel',
          'once',
          '--groups',
          '1',
          '--n-rollouts',
          '4',
          '--pack',
        ]),
        { timeoutMs: 300_000 },
      ),
    ) as {
      metrics: { tokens: number; grad_norm: number; loss: number; rows: number; rewards: number[] };
      start_version: number;
      published: { version: number; drain_timed_out: boolean };
      engine_weights_version: number;
      tensors_changed: number;
    };
    expect(out.metrics.rows).toBe(8);
    expect(out.metrics.tokens).toBeGreaterThan(0);
    expect(new Set(out.metrics.rewards).size).toBe(2); // both outcomes: a non-zero GRPO signal
    expect(out.metrics.grad_norm).toBeGreaterThan(0);
    expect(out.tensors_changed).toBeGreaterThan(0);
    expect(out.published.version).toBe(out.start_version + 1);
    expect(out.published.drain_timed_out).toBe(false);
    expect(out.engine_weights_version).toBe(out.start_version + 1);
    const stats = (await (await fetch(`${server.url}/v1/stats?channel=once`)).json()) as {
      consumed: { groups: number; steps: number };
      activeLeases: number;
    };
    expect(stats.consumed).toEqual({ groups: 1, steps: 8 }); // acked, not left to expire
    expect(stats.activeLeases).toBe(0);
  }, 600_000);

  it('staleness: steps generated at v and served at v+k carry staleness k; beyond max_staleness, flag or drop', async () => {
    const put = (path: string, body: unknown) =>
      fetch(`${server.url}${path}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }).then((r) => r.json());
    const base = ((await (await fetch(`${server.url}/v1/policy-version`)).json()) as { version: number })
      .version;
    await put('/v1/policy-version', { version: base + 1 });
    await put('/v1/channels/stale-flag', { stale_policy: 'flag' });
    await put('/v1/channels/stale-drop', { stale_policy: 'drop' });
    for (const channel of ['stale-flag', 'stale-drop'])
      for (let i = 0; i < 2; i++) await rollout(server, `${channel}-g`, channel, 2, i);
    await put('/v1/policy-version', { version: base + 3 });

    const flagged = await check('stale-flag', 1, 2, ['--max-staleness', '1']);
    expect(flagged.leased).toBe(true);
    expect(flagged.groups).toEqual([{ group_id: 'stale-flag-g', staleness: 2, stale: true }]);
    expect(flagged.batch_policy_version).toBe(base + 3);
    expect(flagged.token_staleness).toEqual([2]);
    expect(flagged.packed_token_staleness).toEqual([2]);

    const dropped = await check('stale-drop', 1, 2, ['--max-staleness', '1']);
    expect(dropped.leased).toBe(false);
    const stats = (await (await fetch(`${server.url}/v1/stats?channel=stale-drop`)).json()) as {
      dropped: Record<string, number>;
    };
    expect(Object.values(stats.dropped).reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(1);
  }, 600_000);
});

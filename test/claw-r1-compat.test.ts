import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveRewardsConfig } from '../packages/core/src/rewards/config.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/tokenizer.js';
import { callJson, type Json } from './support/http.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * Claw-R1's own clients against a real Stepwise server (issue 25): each request below is sent with
 * the path, body and field names Claw-R1's code builds (claw_r1/blackbox_agent/blackbox_agent_flow.py,
 * gsm8k_agent.py, claw_r1/agent_flow/agent_flow.py and multi_step_agent_flow.py, its Step and wire
 * models in data_pool/data_model.py and gateway/models.py), written here from reading that code, and
 * each answer is read the way that code reads it. Real HTTP on loopback, the official OpenAI client
 * for the black-box agent (Claw-R1's uses the Python one), on SQLite and, with STEPWISE_TEST_PG_URL,
 * PostgreSQL.
 */

const dirs: string[] = [];
const schemas: string[] = [];
const servers: RunningServer[] = [];
afterAll(async () => {
  for (const server of servers) await server.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

// GSM8K's first test question, its ground truth, and the tool Claw-R1's GSM8K agent offers.
const QUESTION =
  'Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?';
const GROUND_TRUTH = '72';
const CHECK_ANSWER_TOOL = {
  type: 'function',
  function: {
    name: 'check_answer',
    description: 'Check if your answer to the math problem is correct.',
    parameters: {
      type: 'object',
      properties: { answer: { type: 'string', description: 'Your final numerical answer' } },
      required: ['answer'],
    },
  },
};

// The final answer, in GSM8K's `#### N` form: longer than the 16 tokens vLLM's completions API
// generates when a request sets no max_tokens (Claw-R1's /generate sets none).
const ANSWER = `In May she sold 48 / 2 = 24 clips, so in April and May she sold 48 + 24 = ${GROUND_TRUTH} clips altogether.\n#### ${GROUND_TRUTH}`;

// The first turn's tool call as a model may write it: keys in another order and no spaces, unlike
// the chat template's own rendering (`{"name": "check_answer", "arguments": {"answer": "72"}}`).
const TOOL_CALL_TEXT = `<tool_call>\n{"arguments":{"answer":"${GROUND_TRUTH}"},"name":"check_answer"}\n</tool_call>`;

/**
 * The sim answers as a policy that checks its answer with the tool once, then states it. The first
 * turn is raw text: the sim's hermes parser turns it into the answer's tool_calls, as vLLM's does.
 */
const SIM: ServerOptions['sim'] = {
  policy: 'scripted',
  script: [{ answer: TOOL_CALL_TEXT }, { answer: ANSWER }],
};

const REWARDS = resolveRewardsConfig({
  functions: {
    gsm8k: { plugin: 'rule', params: { kind: 'numeric', expected_key: 'reward_model.ground_truth' } },
  },
  channels: { train: { functions: ['gsm8k'] } },
});

type Start = (extra?: Partial<ServerOptions>) => Promise<RunningServer>;
const common: Partial<ServerOptions> = { port: 0, engines: ['sim'], sim: SIM, rewards: REWARDS };
const stores: [string, Start][] = [
  [
    'SQLite',
    async (extra = {}) => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-clawr1-'));
      dirs.push(dir);
      const server = await startServer({ dbPath: join(dir, 'pool.db'), ...common, ...extra });
      servers.push(server);
      return server;
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async (extra = {}) => {
      const schema = freshSchema('stepwise_clawr1');
      schemas.push(schema);
      const server = await startServer({ dbPath: '', pg: { url: pgUrl!, schema }, ...common, ...extra });
      servers.push(server);
      return server;
    },
  ]);
}

/** Claw-R1's `parse_tool_calls`: `<tool_call>` blocks of the raw text, each `{name, arguments}`. */
function parseToolCalls(content: string): { name: string; arguments: Record<string, unknown> }[] {
  const calls = [];
  for (const m of content.matchAll(/<tool_call>([\s\S]*?)<\/tool_call>/g)) {
    try {
      const parsed = JSON.parse(m[1]!);
      if (parsed && typeof parsed === 'object')
        calls.push({ name: parsed.name, arguments: parsed.arguments });
    } catch {
      // as Claw-R1: a block that is not JSON is skipped
    }
  }
  return calls;
}

/** BlackBoxAgentFlowBase.run + GSM8KAgent.solve, request for request. Returns turns and base_url. */
async function blackBoxEpisode(
  server: RunningServer,
  kwargs: { uid: string; channel?: string; noMetadata?: boolean },
) {
  // 1. init_trajectory: a POST without a body.
  const init = await fetch(`${server.url}/init_trajectory`, { method: 'POST' });
  expect(init.status).toBe(200);
  const initData = (await init.json()) as Json;
  // base_url_from_init.rsplit("/", 2) -> [base, prompt_uid, "v1"]; the dataset uid replaces it.
  const parts = (initData.base_url as string).split('/');
  const head = parts.slice(0, -2).join('/');
  const baseUrl = `${head}/${kwargs.uid}/v1`;
  // 2. register_trajectory: channel when the dataset names one, metadata = the other dataset fields.
  const metadata = {
    data_source: 'openai/gsm8k',
    reward_model: { ground_truth: GROUND_TRUTH, style: 'rule' },
    extra_info: { split: 'test', index: 0, question: QUESTION },
    uid: kwargs.uid,
    index: 0,
  };
  const regBody: Record<string, unknown> = {};
  if (kwargs.channel) regBody.channel = kwargs.channel;
  if (!kwargs.noMetadata) regBody.metadata = metadata;
  const reg = await fetch(`${baseUrl}/register_trajectory`, {
    method: 'POST',
    body: JSON.stringify(regBody),
    headers: { 'content-type': 'application/json' },
  });
  // 3. GSM8KAgent.solve (max_turns 3).
  const agent = new OpenAI({ baseURL: baseUrl, apiKey: 'not-needed', maxRetries: 0 });
  const messages: Json[] = [{ role: 'user', content: QUESTION }];
  let turns = 0;
  // Claw-R1's flow ignores the register answer; an agent's failing call ends its run (the flow then
  // still completes the trajectory, done by the tests).
  let failed: InstanceType<typeof OpenAI.APIError> | null = null;
  for (let turn = 0; turn < 3; turn++) {
    turns = turn + 1;
    let resp: OpenAI.ChatCompletion;
    try {
      resp = await agent.chat.completions.create({
        model: 'default',
        messages,
        tools: [CHECK_ANSWER_TOOL as never],
      });
    } catch (error) {
      if (!(error instanceof OpenAI.APIError)) throw error;
      failed = error;
      break;
    }
    const content = resp.choices[0]!.message.content ?? '';
    const toolCalls = parseToolCalls(content);
    messages.push({ role: 'assistant', content });
    if (toolCalls.length === 0) break;
    for (const tc of toolCalls)
      if (tc.name === 'check_answer') {
        const correct = String(tc.arguments.answer ?? '') === GROUND_TRUTH;
        messages.push({
          role: 'tool',
          content: correct
            ? 'Correct! Your answer is right.'
            : 'Incorrect. Your answer is wrong, please try again.',
        });
      }
  }
  return { reg, turns, failed, baseUrl, trajectoryUid: initData.trajectory_uid as string, messages };
}

// Claw-R1's rollout sampling_params (AgentFlowWorker.generate_sequences): no max_tokens.
const SAMPLING = { temperature: 1.0, top_p: 1.0, repetition_penalty: 1.0, logprobs: true };
const FEEDBACK_PROMPT =
  'Please verify your answer step by step and provide the final answer again in the format #### <number>.';

interface Generated {
  token_ids: number[];
  log_probs: number[] | null;
  stop_reason: string | null;
  response_ids: number[];
  logprobs: number[] | null;
  finish_reason: string | null;
}

/**
 * MultiStepAgentFlow.run (two turns), request for request: each turn's prompt is the chat template
 * of the messages so far, /generate with the rollout's sampling_params, a Step with the dataset
 * fields (less agent_name) as metadata, /submit_steps with ?channel only when the dataset names one;
 * the last turn is scored by /compute_reward first.
 */
async function multiStepFlow(
  server: RunningServer,
  options: { promptUid: string; channel?: string; sampling?: Record<string, unknown> },
) {
  const tokenizer = loadQwen3Tokenizer();
  const trajectoryUid = randomUUID().replaceAll('-', '');
  // RLHFDataset's fields for GSM8K's first test row, plus the uid and agent_name the trainer adds.
  const kwargs: Record<string, unknown> = {
    data_source: 'openai/gsm8k',
    ability: 'math',
    reward_model: { ground_truth: GROUND_TRUTH, style: 'rule' },
    extra_info: { split: 'test', index: 0, question: QUESTION },
    raw_prompt: [{ role: 'user', content: QUESTION }],
    index: 0,
    tools_kwargs: {},
    uid: options.promptUid,
    agent_name: 'multi_step_agent',
    ...(options.channel ? { channel: options.channel } : {}),
  };
  const channel = kwargs.channel as string | undefined;
  delete kwargs.channel;
  const { agent_name: _name, ...metadata } = kwargs;
  const messages = [...(kwargs.raw_prompt as Json[])];
  const submitUrl = `${server.url}/submit_steps${channel ? `?channel=${channel}` : ''}`;
  const generated: Generated[] = [];
  const accepted: number[] = [];
  let reward: Json = null;
  for (let turn = 0; turn < 2; turn++) {
    const promptIds = tokenizer.encode(
      tokenizer.chatTemplate.render({ messages, add_generation_prompt: true }),
    );
    const gen = await post(`${server.url}/generate`, {
      prompt_ids: promptIds,
      sampling_params: options.sampling ?? SAMPLING,
    });
    expect(gen.status).toBe(200);
    generated.push(gen.json);
    const isLast = turn === 1;
    const step = {
      prompt_ids: promptIds,
      response_ids: gen.json.token_ids,
      reward: null as number | null,
      rollout_log_probs: gen.json.log_probs ?? null,
      trajectory_uid: trajectoryUid,
      prompt_uid: options.promptUid,
      step_index: turn,
      policy_version: 0,
      is_last: isLast,
      metadata,
    };
    if (isLast) {
      const scored = await post(`${server.url}/compute_reward`, {
        prompt_ids: promptIds,
        response_ids: gen.json.token_ids,
        num_turns: messages.length,
        extra_fields: {},
        dataset_fields: metadata,
      });
      expect(scored.status).toBe(200);
      reward = scored.json;
      step.reward = scored.json.reward_score;
    }
    const submitted = await post(submitUrl, { steps: [step] });
    expect(submitted.status).toBe(200);
    accepted.push(submitted.json.accepted);
    if (!isLast) {
      messages.push({
        role: 'assistant',
        content: tokenizer.decode(gen.json.token_ids, { skipSpecialTokens: true }),
      });
      messages.push({ role: 'user', content: FEEDBACK_PROMPT });
    }
  }
  return { tokenizer, trajectoryUid, promptUid: options.promptUid, metadata, generated, accepted, reward };
}

const post = (url: string, body?: unknown) => callJson('POST', url, body);

for (const [name, start] of stores) {
  describe(`Claw-R1's clients, unchanged, on ${name}`, () => {
    it('black box: the prompt_uid base_url groups rollouts, register/complete with a channel pass, raw <tool_call> text keeps the GSM8K agent going', async () => {
      const server = await start();
      // The operator opts the channel in: agents own their episodes (Claw-R1's black-box clients
      // register and complete them) and answers carry raw tool-call text.
      await server.pool.configureChannel('train', {
        trust_agent_reward: true,
        raw_tool_calls: true,
        n_rollouts: 2,
      });
      const uid = '7d4a3c12-9f1e-4b8a-a2f0-5e6b7c8d9e0f';
      const first = await blackBoxEpisode(server, { uid, channel: 'train' });
      expect(first.reg.status).toBe(200);
      // The agent read the tool call from content, got the tool's verdict and answered: two turns.
      expect(first.turns).toBe(2);
      // Its content is the text as generated, not the template's rendering of the parsed call.
      expect(first.messages[1].content).toBe(TOOL_CALL_TEXT);
      expect(parseToolCalls(first.messages[1].content)).toEqual([
        { name: 'check_answer', arguments: { answer: GROUND_TRUTH } },
      ]);
      // 4. complete_trajectory, as the flow sends it: no body.
      const done = await post(`${first.baseUrl}/complete_trajectory`);
      expect(done.status).toBe(200);
      expect(done.json).toMatchObject({ status: 'complete', prompt_uid: uid, channel: 'train' });

      const second = await blackBoxEpisode(server, { uid });
      expect(second.turns).toBe(2);
      // Claw-R1's CompleteTrajectoryRequest names a channel: another one is refused, the own one passes.
      const moved = await post(`${second.baseUrl}/complete_trajectory`, { channel: 'val' });
      expect(moved.status).toBe(400);
      expect(moved.json.error.param).toBe('channel');
      // Its CompleteTrajectoryRequest also carries a reward: stored as the trajectory's (trusted channel).
      const own = await post(`${second.baseUrl}/complete_trajectory`, { reward: 1.0, channel: 'train' });
      expect(own.status).toBe(200);
      expect(own.json.reward).toBe(1);

      // Both rollouts are in the group Claw-R1 named: the trainer gets them together.
      for (const t of [first, second])
        expect(await server.pool.getTrajectory(t.trajectoryUid)).toMatchObject({
          groupId: uid,
          status: 'complete',
          nSteps: 2,
          metadata: { reward_model: { ground_truth: GROUND_TRUTH }, uid },
        });
      const lease = await post(`${server.url}/v1/batches/lease`, {
        channel: 'train',
        batch_size: 1,
        n_rollouts: 2,
      });
      expect(lease.status).toBe(200);
      expect(lease.json.groups).toHaveLength(1);
      expect(lease.json.groups[0].group_id).toBe(uid);
      const served = lease.json.groups[0].trajectories;
      expect(served.map((t: Json) => t.trajectory_uid).sort()).toEqual(
        [first.trajectoryUid, second.trajectoryUid].sort(),
      );
      // The stored step holds the call as parsed (for tool results and judges) and the prompt of the
      // second turn holds the raw assistant turn as the agent sent it.
      const steps = served[0].steps;
      expect(steps[0].tool_calls[0].function.name).toBe('check_answer');
      expect(steps[1].messages[1].content).toBe(TOOL_CALL_TEXT);
      // The turn the agent sent back is the generated tokens: the second prompt continues the first
      // prompt and its response id for id, and no prefix broke.
      for (const t of served) {
        const [one, two] = t.steps as Json[];
        expect(two.prompt_ids.slice(0, one.prompt_ids.length + one.response_ids.length)).toEqual([
          ...one.prompt_ids,
          ...one.response_ids,
        ]);
        expect((await server.pool.getTrajectory(t.trajectory_uid))!.prefixBreaks).toBe(0);
      }
    });

    it('black box: without the operator opting in, the swapped prompt_uid and a channel move change nothing', async () => {
      const server = await start();
      const init = await post(`${server.url}/init_trajectory`, { channel: 'plain' });
      const parts = (init.json.base_url as string).split('/');
      const swapped = `${parts.slice(0, -2).join('/')}/some-prompt/v1`;
      const reg = await post(`${swapped}/register_trajectory`, { metadata: { uid: 'some-prompt' } });
      expect(reg.status).toBe(404);
      expect(reg.json.error.message).toMatch(/trust_agent_reward/);
      const channel = await post(`${init.json.base_url}/register_trajectory`, { channel: 'train' });
      expect(channel.status).toBe(400);
      expect(channel.json.error.param).toBe('channel');
      expect(await server.pool.getTrajectory(init.json.trajectory_uid)).toMatchObject({
        groupId: init.json.group_id,
        channel: 'plain',
        metadata: {},
      });
      // And by default the answer's tool calls stay in tool_calls (the OpenAI form).
      const agent = new OpenAI({ baseURL: init.json.base_url, apiKey: 'x', maxRetries: 0 });
      const resp = await agent.chat.completions.create({
        model: 'default',
        messages: [{ role: 'user', content: QUESTION }],
        tools: [CHECK_ANSWER_TOOL as never],
      });
      expect(resp.choices[0]!.message.tool_calls?.[0]).toMatchObject({ function: { name: 'check_answer' } });
      expect(resp.choices[0]!.message.content ?? '').not.toContain('<tool_call>');
    });

    it("black box: a validation rollout (channel val) where val does not trust agents: register is a 400, the agent's next call a 404, nothing moves, nothing reaches train", async () => {
      const server = await start();
      await server.pool.configureChannel('train', {
        trust_agent_reward: true,
        raw_tool_calls: true,
        n_rollouts: 1,
      });
      const uid = '0b6f2e9a-3c4d-4e5f-8a9b-1c2d3e4f5a6b';
      // AsyncRollouter's validation batches carry channel "val"; the flow registers it.
      const val = await blackBoxEpisode(server, { uid, channel: 'val' });
      expect(val.reg.status).toBe(400);
      expect(((await val.reg.json()) as Json).error.param).toBe('channel');
      expect(val.failed?.status).toBe(404);
      expect(val.failed?.message).toMatch(/register_trajectory/);
      expect((await post(`${val.baseUrl}/complete_trajectory`)).status).toBe(404);
      const models = await fetch(`${val.baseUrl}/models`);
      expect(models.status).toBe(404);
      const initGroup = (await server.pool.getTrajectory(val.trajectoryUid))!.groupId;
      expect(initGroup).not.toBe(uid);
      expect(await server.pool.getTrajectory(val.trajectoryUid)).toMatchObject({
        channel: 'train',
        status: 'open',
        nSteps: 0,
        metadata: {},
      });
      const page = { limit: 100, offset: 0 };
      expect((await server.pool.listSteps({ channel: 'train', ...page })).total).toBe(0);
      expect((await server.pool.listTrajectories({ groupId: uid, ...page })).total).toBe(0);

      // Once the operator lets val's agents own their episodes, the same rollout lands in val.
      await server.pool.configureChannel('val', { trust_agent_reward: true, raw_tool_calls: true });
      const trusted = await blackBoxEpisode(server, { uid, channel: 'val' });
      expect(trusted.reg.status).toBe(200);
      expect(trusted.failed).toBeNull();
      expect(trusted.turns).toBe(2);
      expect((await post(`${trusted.baseUrl}/complete_trajectory`, { channel: 'val' })).status).toBe(200);
      expect(await server.pool.getTrajectory(trusted.trajectoryUid)).toMatchObject({
        groupId: uid,
        channel: 'val',
        nSteps: 2,
      });
      expect((await server.pool.listSteps({ channel: 'train', ...page })).total).toBe(0);

      // A dataset row with no channel and nothing past the skipped keys registers `{}`: it joins the
      // prompt's group in the trajectory's own channel and merges nothing.
      const bareUid = '5d3c2b1a-0f9e-4d8c-b7a6-958473625140';
      const bare = await blackBoxEpisode(server, { uid: bareUid, noMetadata: true });
      expect(bare.reg.status).toBe(200);
      expect(bare.turns).toBe(2);
      expect((await post(`${bare.baseUrl}/complete_trajectory`)).status).toBe(200);
      expect(await server.pool.getTrajectory(bare.trajectoryUid)).toMatchObject({
        groupId: bareUid,
        channel: 'train',
        nSteps: 2,
        metadata: {},
      });
    });

    it('white box: a validation rollout with calculate_log_probs off: /generate {logprobs: false} answers no log_probs, /submit_steps?channel=val keeps it out of train', async () => {
      const server = await start();
      await server.pool.configureChannel('val', { n_rollouts: 1 });
      const run = await multiStepFlow(server, {
        promptUid: '9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d',
        channel: 'val',
        sampling: { ...SAMPLING, logprobs: false },
      });
      for (const gen of run.generated) {
        expect(gen.log_probs).toBeNull();
        expect(gen.stop_reason).toBe('stop');
        expect(gen.token_ids.length).toBeGreaterThan(0);
      }
      expect(run.tokenizer.decode(run.generated[1]!.token_ids, { skipSpecialTokens: true })).toBe(ANSWER);
      expect(run.accepted).toEqual([1, 1]);
      // The flow pops channel before it builds the metadata: the steps carry the rest of the row.
      expect(run.metadata).not.toHaveProperty('channel');
      const stored = await server.pool.getTrajectorySteps(run.trajectoryUid);
      expect(stored.map((s) => s.responseLogprobs)).toEqual([null, null]);
      expect(stored.map((s) => s.metadata)).toEqual([run.metadata, run.metadata]);
      expect(await server.pool.getTrajectory(run.trajectoryUid)).toMatchObject({
        channel: 'val',
        groupId: run.promptUid,
      });
      const page = { limit: 100, offset: 0 };
      expect((await server.pool.listSteps({ channel: 'train', ...page })).total).toBe(0);
      // A Step whose metadata was left unset (Step's default None) is sent as null: no metadata.
      const unset = await post(`${server.url}/submit_steps?channel=val`, {
        steps: [
          {
            prompt_ids: stored[0]!.promptIds,
            response_ids: stored[0]!.responseIds,
            reward: null,
            rollout_log_probs: null,
            trajectory_uid: 'f'.repeat(32),
            prompt_uid: run.promptUid,
            step_index: 0,
            policy_version: 0,
            is_last: true,
            metadata: null,
          },
        ],
      });
      expect(unset.json.accepted).toBe(1);
      expect((await server.pool.getTrajectorySteps('f'.repeat(32)))[0]!.metadata).toEqual({});
    });

    it('white box: multi_step_agent_flow request for request (/generate with no max_tokens gets the whole answer, /submit_steps without ?channel, /compute_reward), then its StepPayload extras', async () => {
      const server = await start();
      await server.pool.configureChannel('train', { n_rollouts: 1 });
      const run = await multiStepFlow(server, { promptUid: '2c9e41d0-5b7a-4f3e-8d21-0a9b8c7d6e5f' });

      // No max_tokens: each turn is generated to its end (stop at the EOS), not cut at 16 tokens.
      const eos = run.tokenizer.tokenId('<|im_end|>')!;
      for (const gen of run.generated) {
        expect(gen.stop_reason).toBe('stop');
        expect(gen.token_ids.at(-1)).toBe(eos);
        expect(gen.token_ids).toEqual(gen.response_ids);
        expect(gen.log_probs).toHaveLength(gen.token_ids.length);
        expect(gen.log_probs).toEqual(gen.logprobs);
        expect(gen.stop_reason).toBe(gen.finish_reason);
      }
      expect(run.tokenizer.decode(run.generated[0]!.token_ids, { skipSpecialTokens: true })).toBe(
        TOOL_CALL_TEXT,
      );
      expect(run.tokenizer.decode(run.generated[1]!.token_ids, { skipSpecialTokens: true })).toBe(ANSWER);
      expect(run.generated[1]!.token_ids.length).toBeGreaterThan(16);
      // The last turn scored right by the channel's reward function, computed and never stored.
      expect(run.reward).toEqual({ reward_score: 1, reward_extra_info: { gsm8k: 1 } });
      expect(run.accepted).toEqual([1, 1]);

      // Both steps carry the dataset fields as metadata, in train (no ?channel), in the prompt's group.
      const stored = await server.pool.getTrajectorySteps(run.trajectoryUid);
      expect(stored.map((s) => s.metadata)).toEqual([run.metadata, run.metadata]);
      expect(stored.map((s) => s.reward)).toEqual([null, 1]);
      expect(stored[1]!.responseIds).toEqual(run.generated[1]!.token_ids);
      const wrong = await post(`${server.url}/compute_reward`, {
        prompt_ids: stored[1]!.promptIds,
        response_ids: run.tokenizer.encode('#### 96<|im_end|>'),
        num_turns: 3,
        extra_fields: {},
        dataset_fields: run.metadata,
      });
      expect(wrong.json.reward_score).toBe(0);
      expect((await server.pool.events({ after: 0, limit: 1000, types: ['signal_added'] })).length).toBe(0);

      const lease = await post(`${server.url}/v1/batches/lease`, {
        channel: 'train',
        batch_size: 1,
        n_rollouts: 1,
      });
      expect(lease.status).toBe(200);
      const group = lease.json.groups[0];
      expect(group.group_id).toBe(run.promptUid);
      const servedSteps = group.trajectories[0].steps;
      expect(servedSteps.map((s: Json) => s.response_ids)).toEqual(run.generated.map((g) => g.token_ids));
      // Log-probs are stored as float32.
      expect(servedSteps[0].rollout_log_probs).toEqual(run.generated[0]!.log_probs!.map(Math.fround));

      // Extensions of Claw-R1's wire model: its StepPayload (and Step) declare routed_experts
      // ([tokens][layers][top_k], ids past 255 too) and multi_modal_data, which its own
      // gateway_submit_steps does not send; a client posting those Step fields gets them stored and
      // served.
      const tokenizer = run.tokenizer;
      const extraUid = 'c4e2d0a18b3f4c5d9e6f7a8b9c0d1e2f';
      const promptIds = tokenizer.encode(`<|im_start|>user\n${QUESTION}<|im_end|>\n<|im_start|>assistant\n`);
      const responseIds = tokenizer.encode(`${ANSWER}<|im_end|>`);
      const tokens = promptIds.length + responseIds.length;
      const routed = Array.from({ length: tokens }, (_, t) => [
        [t % 64, (t + 1) % 64],
        [300 + (t % 7), t % 3],
      ]);
      const images = { images: ['data:image/png;base64,iVBORw0KGgo='], videos: [] };
      const extra = (step: Json) => ({
        prompt_ids: promptIds,
        response_ids: responseIds,
        reward: null,
        rollout_log_probs: null,
        trajectory_uid: extraUid,
        prompt_uid: 'extras-prompt',
        step_index: 0,
        policy_version: 0,
        is_last: true,
        metadata: null,
        ...step,
      });
      const withExtras = await post(`${server.url}/submit_steps`, {
        steps: [extra({ routed_experts: routed, multi_modal_data: images })],
      });
      expect(withExtras.status).toBe(200);
      expect(withExtras.json.accepted).toBe(1);
      const tooLong = await post(`${server.url}/submit_steps`, {
        steps: [
          extra({
            prompt_ids: [1, 2],
            response_ids: [3],
            trajectory_uid: 'b'.repeat(32),
            routed_experts: [[[1]], [[2]], [[3]], [[4]]],
          }),
        ],
      });
      expect(tooLong.status).toBe(400);
      expect(tooLong.json.error.message).toMatch(/routed_experts/);
      const [extraStep] = await server.pool.getTrajectorySteps(extraUid);
      expect(extraStep!.routedExperts).toEqual(routed);
      expect(extraStep!.multiModalData).toEqual(images);
      expect(extraStep!.metadata).toEqual({});
      expect(stored[0]!.routedExperts).toBeNull();
      const extrasLease = await post(`${server.url}/v1/batches/lease`, {
        channel: 'train',
        batch_size: 1,
        n_rollouts: 1,
      });
      expect(extrasLease.json.groups[0].group_id).toBe('extras-prompt');
      const servedExtra = extrasLease.json.groups[0].trajectories[0].steps[0];
      expect(servedExtra.routed_experts).toEqual(routed);
      expect(servedExtra.multi_modal_data).toEqual(images);
      expect(servedSteps[0].routed_experts).toBeNull();
    });

    it("white box: a server's --generate-max-tokens is the length of a /generate that names none (Claw-R1's response_length); a client's own length wins", async () => {
      const server = await start({ gatewayOptions: { generateMaxTokens: 8 } });
      const tokenizer = loadQwen3Tokenizer();
      const promptIds = tokenizer.encode(`<|im_start|>user\n${QUESTION}<|im_end|>\n<|im_start|>assistant\n`);
      const capped = await post(`${server.url}/generate`, {
        prompt_ids: promptIds,
        sampling_params: SAMPLING,
      });
      expect(capped.status).toBe(200);
      expect(capped.json.token_ids).toHaveLength(8);
      expect(capped.json.stop_reason).toBe('length');
      for (const own of [{ max_tokens: 12 }, { max_new_tokens: 12 }]) {
        const res = await post(`${server.url}/generate`, {
          prompt_ids: promptIds,
          sampling_params: { ...SAMPLING, ...own },
        });
        expect(res.json.token_ids).toHaveLength(12);
      }
    });

    it("an agent's key scores a sample only where the channel trusts agents (no reward oracle to probe)", async () => {
      const agent = 'agent-key-0123456789abcdef';
      const runner = 'runner-key-0123456789abcdef';
      const server = await start({ apiKeys: [`${agent}:agent`, `${runner}:agent,runner`] });
      const sample = {
        prompt_ids: [151644, 872, 198],
        response_ids: Array.from(loadQwen3Tokenizer().encode(`#### ${GROUND_TRUTH}`)),
        num_turns: 2,
        extra_fields: {},
        dataset_fields: { reward_model: { ground_truth: GROUND_TRUTH } },
      };
      const refused = await callJson('POST', `${server.url}/compute_reward`, sample, agent);
      expect(refused.status).toBe(403);
      expect(refused.json.error.message).toMatch(/trust_agent_reward/);
      expect((await callJson('POST', `${server.url}/compute_reward`, sample, runner)).json.reward_score).toBe(
        1,
      );
      await server.pool.configureChannel('train', { trust_agent_reward: true });
      expect((await callJson('POST', `${server.url}/compute_reward`, sample, agent)).json.reward_score).toBe(
        1,
      );
    });
  });
}

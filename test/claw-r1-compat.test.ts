import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { type RunningServer, type ServerOptions, startServer } from '../src/gateway/server.js';
import { resolveRewardsConfig } from '../src/rewards/config.js';
import { loadQwen3Tokenizer } from '../src/text/tokenizer.js';
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

/** The sim answers as a policy that checks its answer with the tool once, then states it. */
const SIM: ServerOptions['sim'] = {
  policy: 'scripted',
  script: [
    { toolCall: { name: 'check_answer', arguments: { answer: GROUND_TRUTH } } },
    { answer: `Natalia sold 48 + 24 = ${GROUND_TRUTH} clips.` },
  ],
};

const REWARDS = resolveRewardsConfig({
  functions: {
    gsm8k: { plugin: 'rule', params: { kind: 'numeric', expected_key: 'reward_model.ground_truth' } },
  },
  channels: { train: { functions: ['gsm8k'] } },
});

type Start = () => Promise<RunningServer>;
const common: Partial<ServerOptions> = { port: 0, engines: ['sim'], sim: SIM, rewards: REWARDS };
const stores: [string, Start][] = [
  [
    'SQLite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-clawr1-'));
      dirs.push(dir);
      const server = await startServer({ dbPath: join(dir, 'pool.db'), ...common });
      servers.push(server);
      return server;
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_clawr1');
      schemas.push(schema);
      const server = await startServer({ dbPath: '', pg: { url: pgUrl!, schema }, ...common });
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
async function blackBoxEpisode(server: RunningServer, kwargs: { uid: string; channel?: string }) {
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
  regBody.metadata = metadata;
  const reg = await fetch(`${baseUrl}/register_trajectory`, {
    method: 'POST',
    body: JSON.stringify(regBody),
    headers: { 'content-type': 'application/json' },
  });
  // 3. GSM8KAgent.solve (max_turns 3).
  const agent = new OpenAI({ baseURL: baseUrl, apiKey: 'not-needed', maxRetries: 0 });
  const messages: Json[] = [{ role: 'user', content: QUESTION }];
  let turns = 0;
  for (let turn = 0; turn < 3; turn++) {
    turns = turn + 1;
    const resp = await agent.chat.completions.create({
      model: 'default',
      messages,
      tools: [CHECK_ANSWER_TOOL as never],
    });
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
  return { reg, turns, baseUrl, trajectoryUid: initData.trajectory_uid as string, messages };
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
      expect(first.messages[1].content).toContain('<tool_call>');
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
      const own = await post(`${second.baseUrl}/complete_trajectory`, { channel: 'train' });
      expect(own.status).toBe(200);

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
      expect(steps[1].messages[1].content).toContain('<tool_call>');
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

    it('white box: /generate, /submit_steps and /compute_reward as multi_step_agent_flow calls them; routed_experts and multi_modal_data are stored and served', async () => {
      const server = await start();
      await server.pool.configureChannel('train', { n_rollouts: 1 });
      const tokenizer = loadQwen3Tokenizer();
      const trajectoryUid = 'a3f1c9e07b2d4e6f8a1b2c3d4e5f6a7b';
      const promptUid = '2c9e41d0-5b7a-4f3e-8d21-0a9b8c7d6e5f';
      const kwargs = {
        data_source: 'openai/gsm8k',
        reward_model: { ground_truth: GROUND_TRUTH, style: 'rule' },
        extra_info: { split: 'test', index: 0 },
        uid: promptUid,
        raw_prompt: [{ role: 'user', content: QUESTION }],
      };
      const samplingParams = { temperature: 1.0, top_p: 1.0, repetition_penalty: 1.0, logprobs: true };
      const promptIds = tokenizer.encode(`<|im_start|>user\n${QUESTION}<|im_end|>\n<|im_start|>assistant\n`);

      // gateway_generate: {prompt_ids, sampling_params}; the flow reads token_ids and log_probs.
      const gen = await post(`${server.url}/generate`, {
        prompt_ids: promptIds,
        sampling_params: samplingParams,
      });
      expect(gen.status).toBe(200);
      const responseIds = gen.json.token_ids as number[];
      expect(responseIds.length).toBeGreaterThan(0);
      expect(responseIds).toEqual(gen.json.response_ids);
      expect(gen.json.log_probs).toHaveLength(responseIds.length);
      expect(gen.json.log_probs).toEqual(gen.json.logprobs);
      expect(typeof gen.json.stop_reason).toBe('string');
      expect(gen.json.stop_reason).toBe(gen.json.finish_reason);

      // gateway_submit_steps: the payload fields Claw-R1 sends, metadata null where Step has none.
      const payload = (step: Json) => ({
        prompt_ids: step.prompt_ids,
        response_ids: step.response_ids,
        reward: step.reward ?? null,
        rollout_log_probs: step.rollout_log_probs ?? null,
        trajectory_uid: trajectoryUid,
        prompt_uid: promptUid,
        step_index: step.step_index,
        policy_version: 0,
        is_last: step.is_last,
        metadata: step.metadata,
      });
      const first = await post(`${server.url}/submit_steps?channel=train`, {
        steps: [
          payload({
            prompt_ids: promptIds,
            response_ids: responseIds,
            rollout_log_probs: gen.json.log_probs,
            step_index: 0,
            is_last: false,
            metadata: null,
          }),
        ],
      });
      expect(first.status).toBe(200);
      expect(first.json.accepted).toBe(1);

      // gateway_compute_reward on the last turn: ids and dataset fields; the flow reads reward_score.
      const lastPrompt = [
        ...promptIds,
        ...responseIds,
        ...tokenizer.encode('<|im_end|>\n<|im_start|>assistant\n'),
      ];
      const lastResponse = tokenizer.encode(`So the answer is #### ${GROUND_TRUTH}<|im_end|>`);
      const signalsBefore = (await server.pool.events({ after: 0, limit: 1000, types: ['signal_added'] }))
        .length;
      const reward = await post(`${server.url}/compute_reward`, {
        prompt_ids: lastPrompt,
        response_ids: lastResponse,
        num_turns: 3,
        extra_fields: {},
        dataset_fields: kwargs,
      });
      expect(reward.status).toBe(200);
      expect(reward.json.reward_score).toBe(1);
      expect(reward.json.reward_extra_info).toEqual({ gsm8k: 1 });
      const wrong = await post(`${server.url}/compute_reward`, {
        prompt_ids: lastPrompt,
        response_ids: tokenizer.encode('#### 96<|im_end|>'),
        num_turns: 3,
        extra_fields: {},
        dataset_fields: kwargs,
      });
      expect(wrong.json.reward_score).toBe(0);
      // Computed, never stored: no signal was written.
      expect((await server.pool.events({ after: 0, limit: 1000, types: ['signal_added'] })).length).toBe(
        signalsBefore,
      );

      // The last step with Claw-R1 Step's optional routed_experts ([tokens][layers][top_k], ids past
      // 255 too) and multi_modal_data; the trajectory's earlier step is resent with the same images.
      const tokens = lastPrompt.length + lastResponse.length;
      const routed = Array.from({ length: tokens }, (_, t) => [
        [t % 64, (t + 1) % 64],
        [300 + (t % 7), t % 3],
      ]);
      const images = { images: ['data:image/png;base64,iVBORw0KGgo='], videos: [] };
      const last = await post(`${server.url}/submit_steps?channel=train`, {
        steps: [
          {
            ...payload({
              prompt_ids: lastPrompt,
              response_ids: lastResponse,
              reward: reward.json.reward_score,
              step_index: 1,
              is_last: true,
              metadata: kwargs,
            }),
            routed_experts: routed,
            multi_modal_data: images,
          },
        ],
      });
      expect(last.status).toBe(200);
      expect(last.json.accepted).toBe(1);
      const tooLong = await post(`${server.url}/submit_steps`, {
        steps: [
          {
            ...payload({
              prompt_ids: [1, 2],
              response_ids: [3],
              step_index: 0,
              is_last: true,
              metadata: null,
            }),
            trajectory_uid: 'b'.repeat(32),
            routed_experts: [[[1]], [[2]], [[3]], [[4]]],
          },
        ],
      });
      expect(tooLong.status).toBe(400);
      expect(tooLong.json.error.message).toMatch(/routed_experts/);

      const stored = await server.pool.getTrajectorySteps(trajectoryUid);
      expect(stored.map((s) => s.metadata)).toEqual([{}, kwargs]);
      expect(stored[1]!.reward).toBe(1);
      expect(stored[1]!.routedExperts).toEqual(routed);
      expect(stored[1]!.multiModalData).toEqual(images);
      expect(stored[0]!.routedExperts).toBeNull();

      const lease = await post(`${server.url}/v1/batches/lease`, {
        channel: 'train',
        batch_size: 1,
        n_rollouts: 1,
      });
      expect(lease.status).toBe(200);
      const group = lease.json.groups[0];
      expect(group.group_id).toBe(promptUid);
      const servedSteps = group.trajectories[0].steps;
      expect(servedSteps[1].routed_experts).toEqual(routed);
      expect(servedSteps[1].multi_modal_data).toEqual(images);
      expect(servedSteps[1].response_ids).toEqual(lastResponse);
      // Log-probs are stored as float32.
      expect(servedSteps[0].rollout_log_probs).toEqual(gen.json.log_probs.map(Math.fround));
      expect(servedSteps[0].routed_experts).toBeNull();
    });
  });
}

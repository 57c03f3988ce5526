import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { callJson, openTrajectory } from './support/http.js';
import { testServers } from './support/test-servers.js';

/*
 * Partial rollouts through the gateway, over real HTTP with the official openai client as the
 * agent: a generation that a weight switch cuts (`abort`) is continued from its exact ids and
 * spliced, so the agent gets one ordinary answer (whole or streamed, tool calls parsed as the
 * engine's parser would), and the stored step says which policy version produced each token. The
 * sim paces its tokens (80/s) so a switch lands in the middle of a generation.
 */

const servers = testServers('partial-rollouts', {
  engines: ['sim'],
});

const LONG = Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ');
const WRITE_TOOL = {
  type: 'function' as const,
  function: {
    name: 'write',
    description: 'Write a file',
    parameters: {
      type: 'object',
      properties: { path: { type: 'string' }, content: { type: 'string' } },
      required: ['path', 'content'],
    },
  },
};
const SCRIPT = [
  {
    text: 'I will write the file.',
    toolCall: { name: 'write', arguments: { path: 'notes.md', content: LONG } },
  },
];

async function serve(policy: 'echo' | 'scripted') {
  return servers.serve({
    sim: { policy, ...(policy === 'scripted' ? { script: SCRIPT } : {}), tokensPerSecond: 80, ttftMs: 0 },
  });
}

const switchTo = (url: string, version: number, mode: 'abort' | 'keep') =>
  callJson('PUT', `${url}/v1/policy-version`, { version, mode });

async function agent(url: string) {
  const t = await openTrajectory(url);
  return { t, client: new OpenAI({ baseURL: t.base_url, apiKey: 'x', maxRetries: 0 }) };
}

const later = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('partial rollouts: a switch in the middle of a generation', () => {
  it('abort: a whole chat answer is continued and spliced; the step has both versions', async () => {
    const server = await serve('echo');
    const { t, client } = await agent(server.url);
    const pending = client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: LONG }],
    });
    await later(300);
    const { json } = await switchTo(server.url, 1, 'abort');
    expect(json.switched).toEqual(['sim']);
    const answer = await pending;
    expect(answer.choices[0]!.finish_reason).toBe('stop');
    expect(answer.choices[0]!.message.content).toBe(LONG);

    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step!.policyVersion).toBe(0);
    const spans = step!.versionSpans!;
    expect(spans).toHaveLength(2);
    expect(spans[0]![0]).toBe(0);
    expect(spans[1]![0]).toBe(1);
    expect(spans[0]![1]).toBeGreaterThan(0);
    expect(spans[0]![1] + spans[1]![1]).toBe(step!.responseIds.length);
    expect(step!.responseLogprobs).toHaveLength(step!.responseIds.length);
    // The ids are the uncut generation's: the same call again, with no switch, gives the same ones.
    const again = await agent(server.url);
    await again.client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: LONG }] });
    const [uncut] = await server.pool.getTrajectorySteps(again.t.trajectory_uid);
    expect(step!.responseIds).toEqual(uncut!.responseIds);
    expect(uncut!.versionSpans).toBeNull();
    expect(uncut!.policyVersion).toBe(1);
  });

  it('abort: a streamed chat with a tool call reaches the agent as one stream, the call whole', async () => {
    const server = await serve('scripted');
    const reference = await agent(server.url);
    const ask = (client: OpenAI) =>
      client.chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'write notes' }],
        tools: [WRITE_TOOL],
        stream: true,
      });
    const collect = async (stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) => {
      let content = '';
      const calls: { name: string; args: string }[] = [];
      let finish: string | null = null;
      for await (const chunk of stream) {
        const c = chunk.choices[0];
        if (!c) continue;
        content += c.delta.content ?? '';
        for (const call of c.delta.tool_calls ?? []) {
          calls[call.index] ??= { name: '', args: '' };
          calls[call.index]!.name += call.function?.name ?? '';
          calls[call.index]!.args += call.function?.arguments ?? '';
        }
        finish = c.finish_reason ?? finish;
      }
      return { content, calls, finish };
    };
    const whole = await collect(await ask(reference.client));

    const { t, client } = await agent(server.url);
    const stream = await ask(client);
    const collecting = collect(stream);
    await later(400);
    await switchTo(server.url, 4, 'abort');
    const cut = await collecting;
    expect(cut).toEqual(whole);
    expect(cut.finish).toBe('tool_calls');
    expect(JSON.parse(cut.calls[0]!.args)).toEqual({ path: 'notes.md', content: LONG });

    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    const [uncut] = await server.pool.getTrajectorySteps(reference.t.trajectory_uid);
    expect(step!.responseIds).toEqual(uncut!.responseIds);
    expect(step!.versionSpans!.map(([v]) => v)).toEqual([0, 4]);
    expect(step!.toolCalls).toHaveLength(1);
  });

  it('keep: the engine goes on with the new weights and reports where they began', async () => {
    const server = await serve('echo');
    const { t, client } = await agent(server.url);
    const pending = client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: LONG }],
    });
    await later(300);
    await switchTo(server.url, 2, 'keep');
    const answer = await pending;
    expect(answer.choices[0]!.message.content).toBe(LONG);
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step!.versionSpans!.map(([v]) => v)).toEqual([0, 2]);
    expect(step!.versionSpans!.reduce((n, [, c]) => n + c, 0)).toBe(step!.responseIds.length);
  });
});

/**
 * A small store with what exports must handle: agent conversations with tool calls and tool results
 * (attached later, or the observation after the final action), prompt groups with spread, tied and
 * mismatched rewards, token-only steps, open and aborted rollouts, another channel, curation labels,
 * guidance fields, and steps that arrived out of order.
 */
import type { JsonObject, NewStep } from '../packages/core/src/domain/index.js';
import { DataPool } from '../packages/core/src/pool/data-pool.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import { makeStep } from './support/steps.js';

export const TOOLS: JsonObject[] = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file of the workspace',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

export const SYSTEM = { role: 'system', content: 'You are a careful agent.' };
export const task = (text: string) => ({ role: 'user', content: text });

const call = (id: string, path: string) => ({
  id,
  type: 'function',
  function: { name: 'read_file', arguments: JSON.stringify({ path }) },
});

/**
 * Two steps as the gateway captures them: the agent reads a file (its output arrives with the next
 * request and is attached to step 0), then answers. Token ids extend each other like a real prompt.
 */
export function toolRollout(
  id: string,
  group: string,
  answer: string,
  prompt = 'Summarise notes.txt',
): NewStep[] {
  const first = [SYSTEM, task(prompt)];
  const callId = `call_${id}`;
  return [
    makeStep(id, group, 0, [1, 2, 3, 4], [10, 11, 12], {
      messages: first,
      tools: TOOLS,
      responseText: '',
      toolCalls: [call(callId, 'notes.txt')],
      responseLogprobs: [-0.5, -0.25, -0.125],
      finishReason: 'tool_calls',
      tokenSource: 'engine',
      engineId: 'sim',
      latencyMs: 12,
      ttftMs: 3,
      policyVersion: 2,
    }),
    makeStep(id, group, 1, [1, 2, 3, 4, 10, 11, 12, 20, 21], [30, 31 + answer.length], {
      messages: [
        ...first,
        { role: 'assistant', content: null, tool_calls: [call(callId, 'notes.txt')] },
        { role: 'tool', tool_call_id: callId, content: 'Ship on Friday.' },
      ],
      tools: TOOLS,
      responseText: answer,
      responseLogprobs: [-0.75, -1.5],
      finishReason: 'stop',
      tokenSource: 'engine',
      engineId: 'sim',
      policyVersion: 3,
      isLast: true,
      metadata: { turn: 2 },
    }),
  ];
}

export interface Fixture {
  pool: DataPool;
  close(): Promise<void>;
}

/** Opens a SQLite file and fills it; the clock advances 1 s per call so every time is distinct. */
export async function buildFixture(path: string): Promise<Fixture> {
  let now = Date.UTC(2025, 0, 1);
  const store = await openSqliteStore({ path });
  const pool = new DataPool({ store, clock: () => (now += 1_000) });

  // Group gA: three rollouts with spread rewards; the tool output of step 0 is attached when
  // step 1 arrives (as the gateway does).
  for (const [id, answer, reward] of [
    ['a1', 'Ship on Friday.', 1],
    ['a2', 'Friday, maybe.', 0.25],
    ['a3', 'I could not read it.', 0],
  ] as const) {
    const [s0, s1] = toolRollout(id, 'gA', answer);
    await pool.submitSteps([s0!], { nRollouts: 3 });
    await pool.submitSteps([{ ...s1!, isLast: false }], {
      toolResults: [
        {
          trajectoryId: id,
          index: 0,
          results: [{ tool_call_id: `call_${id}`, content: 'Ship on Friday.', error: false }],
        },
      ],
    });
    await pool.completeTrajectory(id, { status: 'complete', reward });
  }
  await pool.addLabels([{ trajectory_uid: 'a1', tags: ['gold'], quality: 'good', author: 'ann' }]);

  // Group gB: tied rewards (no preference), and a last step whose tool call has an output that
  // came with the step (a white-box agent): no id on the call or the result.
  for (const id of ['b1', 'b2']) {
    const [s0] = toolRollout(id, 'gB', '', 'List the workspace');
    await pool.submitSteps(
      [
        {
          ...s0!,
          isLast: true,
          reward: 0.5,
          toolCalls: [{ function: { name: 'read_file', arguments: { path: '.' } } }],
          toolResults: [{ content: 'notes.txt\ntodo.txt', error: false }],
        },
      ],
      { nRollouts: 2 },
    );
  }

  // Group gC: same group, different prompts (a guided rollout sees guidance in its prompt).
  const [c1a, c1b] = toolRollout('c1', 'gC', 'Done.', 'Fix the bug');
  await pool.submitSteps([c1a!, { ...c1b!, reward: 1 }], { nRollouts: 2 });
  await pool.createTrajectory({
    id: 'c2',
    groupId: 'gC',
    channel: 'train',
    nRollouts: 2,
    metadata: { guidance: 'step 1: open main.py' },
    taskId: 'task-7',
    guided: true,
    guidanceK: 1,
    probe: false,
    derivedFrom: 'c1',
    derivation: { kind: 'rollback', at: 1 },
  });
  const [c2a, c2b] = toolRollout('c2', 'gC', 'Gave up.', 'Fix the bug\nHint: step 1: open main.py');
  // Out of order: the last step arrives first.
  await pool.submitSteps([{ ...c2b!, reward: 0 }]);
  await pool.submitSteps([c2a!]);
  // The environment's verdict follows the last step.
  await pool.completeTrajectory('c2', { status: 'complete', reward: -0.5 });

  // Open and aborted rollouts of gD.
  await pool.submitSteps(toolRollout('o1', 'gD', 'x').slice(0, 1), { nRollouts: 2 });
  await pool.submitSteps(toolRollout('x1', 'gD', 'x').slice(0, 1));
  await pool.completeTrajectory('x1', { status: 'aborted', reward: null });

  // Another channel.
  await pool.submitSteps(
    toolRollout('v1', 'gV', 'Friday.').map((s) => ({ ...s, reward: s.isLast ? 1 : null })),
    { channel: 'val', nRollouts: 1 },
  );

  // Token-only (white-box) steps: no messages to train a chat model on.
  await pool.submitSteps(
    [
      makeStep('w1', 'gE', 0, [5, 6, 7], [8, 9], { responseLogprobs: [-0.1, -0.2] }),
      makeStep('w1', 'gE', 1, [5, 6, 7, 8, 9, 40], [41], { isLast: true, reward: 1, finishReason: 'length' }),
    ],
    { nRollouts: 1 },
  );

  // Curated out: the whole trajectory is untrainable; labels set, then cleared, fields.
  await pool.submitSteps(
    toolRollout('u1', 'gF', 'Ship on Friday.').map((s) => ({ ...s, reward: s.isLast ? 1 : 0 })),
    {
      nRollouts: 1,
    },
  );
  await pool.addLabels([
    { trajectory_uid: 'u1', trainable: false, quality: 'bad', tags: ['loop', 'hack'], note: 'reward hack' },
  ]);
  await pool.addLabels([{ trajectory_uid: 'u1', quality: null, tags: [] }]);
  await pool.addLabels([{ trajectory_uid: 'u1', step_index: 0, trainable: true, author: 'bob' }]);

  return { pool, close: () => pool.close() };
}

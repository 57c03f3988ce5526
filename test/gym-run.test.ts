import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startServer } from '../packages/core/src/server/server.js';
import { type GymRunOptions, runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { referenceTasks } from '../packages/gym/src/tasks/index.js';
import { jsonTask, sumTask } from './support/gym-tasks.js';
import { simServerFixture } from './support/sim-server.js';

/*
 * The gym end to end: tasks × samples through a real Stepwise server (gateway + SQLite) with the sim
 * following each task's reference actions, agents acting in the real bubblewrap sandbox, verifiers,
 * rewards in the pool, and a trainer's lease of the resulting groups.
 */

const sandboxReady = checkSandbox().ok;

const tasks = [sumTask(), jsonTask()];

/** A tiny external agent: stdlib Python speaking the OpenAI API, executing `write` calls itself. */
const PY_AGENT = `
import json, os, sys, urllib.request
base = os.environ['OPENAI_BASE_URL']
prompt = open(sys.argv[1]).read()
workspace = sys.argv[2]
tools = [{"type": "function", "function": {"name": "write", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]
messages = [{"role": "user", "content": prompt}]
for _ in range(8):
    req = urllib.request.Request(base + '/chat/completions', data=json.dumps({"model": os.environ['OPENAI_MODEL'], "messages": messages, "tools": tools, "seed": 1}).encode(), headers={"content-type": "application/json", "authorization": "Bearer " + os.environ['OPENAI_API_KEY']})
    answer = json.load(urllib.request.urlopen(req, timeout=30))
    msg = answer["choices"][0]["message"]
    messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": msg.get("tool_calls")} if msg.get("tool_calls") else {"role": "assistant", "content": msg.get("content")})
    if not msg.get("tool_calls"):
        break
    for call in msg["tool_calls"]:
        args = json.loads(call["function"]["arguments"])
        if call["function"]["name"] == "write":
            path = os.path.join(workspace, args["path"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write(args["content"])
            result = "wrote " + args["path"]
        else:
            result = "Error: unknown tool " + call["function"]["name"]
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
print("done")
`;

describe.skipIf(!sandboxReady)('gym runner', () => {
  const fx = simServerFixture('gym-run', {
    policy: 'reference',
    tasks: referenceTasks(tasks),
    errorRate: 0.5,
  });

  const options = (over: Partial<GymRunOptions>): GymRunOptions => ({
    tasks,
    samples: 3,
    concurrency: 3,
    gatewayUrl: fx.server.url,
    model: 'sim-qwen3',
    agent: { kind: 'builtin', maxTurns: 12 },
    runId: 'run-a',
    stateFile: join(fx.dir, 'state-a.jsonl'),
    workDir: join(fx.dir, 'work'),
    sampleTimeoutMs: 60_000,
    ...over,
  });

  it('runs every task × sample as a trajectory of one group per task, with the score as reward', async () => {
    const { results, summary } = await runGym(options({}));
    expect(results).toHaveLength(6);
    // The reference policy solves each task (after corrected mistakes): every sample scores 1.
    expect(results.map((r) => [r.taskId, r.score])).toEqual(
      expect.arrayContaining([
        ['json-1', 1],
        ['sum-1', 1],
      ]),
    );
    expect(summary).toMatchObject({ samples: 6, meanScore: 1, infraFailed: 0, groups: { allOne: 2 } });
    for (const r of results) {
      const t = await fx.server.pool.store.getTrajectory(r.trajectoryUid!);
      expect(t).toMatchObject({ status: 'complete', reward: 1, groupId: `run-a.${r.taskId}` });
      expect(t!.metadata).toMatchObject({ task_id: r.taskId, sample: r.sample });
      const signals = await fx.server.pool.getSignals(r.trajectoryUid!, { current: true });
      expect(signals.map((x) => [x.name, x.source, x.value]).sort()).toEqual([
        ['code', 'verifier', 1],
        ['score', 'verifier', 1],
      ]);
      const steps = await fx.server.pool.getTrajectorySteps(r.trajectoryUid!);
      expect(steps.length).toBeGreaterThanOrEqual(
        tasks.find((x) => x.id === r.taskId)!.referenceActions!.length,
      );
    }
    // Injected mistakes reach the pool as tool results flagged as errors on the step that made them.
    const all = await Promise.all(results.map((r) => fx.server.pool.getTrajectorySteps(r.trajectoryUid!)));
    const flagged = all
      .flat()
      .flatMap((s) => s.toolResults ?? [])
      .filter((t) => t.error);
    expect(flagged.length).toBeGreaterThan(0);
    // Both groups are complete and a trainer can lease them.
    const batch = await fx.server.pool.lease({
      channel: 'train',
      batch_size: 2,
      n_rollouts: 3,
      wait_ms: 0,
      consumer: 't',
      ttl_ms: 60_000,
    });
    expect(batch?.groups.map((g) => g.group.id).sort()).toEqual(['run-a.json-1', 'run-a.sum-1']);
  });

  it('resumes: a re-run with the same state skips finished samples', async () => {
    const before = readFileSync(join(fx.dir, 'state-a.jsonl'), 'utf8').trim().split('\n').length;
    const { summary } = await runGym(options({}));
    expect(summary).toMatchObject({ samples: 6, skipped: 6 });
    expect(readFileSync(join(fx.dir, 'state-a.jsonl'), 'utf8').trim().split('\n')).toHaveLength(before);
  });

  it('an unreachable gateway is an infrastructure failure, not a zero to train on', async () => {
    const { results, summary } = await runGym(
      options({ runId: 'run-b', stateFile: join(fx.dir, 'state-b.jsonl'), gatewayUrl: 'http://127.0.0.1:9' }),
    );
    expect(results.every((r) => r.status === 'infra_failed')).toBe(true);
    expect(summary.infraFailed).toBe(6);
    expect(results[0]!.reason).toMatch(/unreachable/);
  });

  it("a gateway's refusal is an infrastructure failure that names the call and the answer", async () => {
    const locked = await startServer({
      dbPath: join(fx.dir, 'locked.db'),
      port: 0,
      apiKeys: ['sekret-agent-key-0001:agent'],
    });
    try {
      const { results } = await runGym(
        options({
          runId: 'run-locked',
          stateFile: join(fx.dir, 'state-locked.jsonl'),
          gatewayUrl: locked.url,
        }),
      );
      expect(results.every((r) => r.status === 'infra_failed' && r.trajectoryUid === null)).toBe(true);
      expect(results[0]!.reason).toMatch(
        new RegExp(`^InfraError: ${locked.url}/init_trajectory answered 401: \\{"error"`),
      );
    } finally {
      await locked.close();
    }
  });

  it('a command template runs as a shell script: `;`, `&&` and pipes all run, and a failing stage is an agent failure', async () => {
    const workDir = (runId: string) => join(fx.dir, `work-${runId}`);
    const run = (template: string, runId: string) =>
      runGym(
        options({
          tasks: [tasks[1]!],
          samples: 1,
          runId,
          stateFile: join(fx.dir, `state-${runId}.jsonl`),
          workDir: workDir(runId),
          keepWorkspaces: true,
          agent: { kind: 'command', template },
        }),
      );
    const { results } = await run(
      'echo one > {workspace}/a.txt; echo two > {workspace}/b.txt && echo three | tr a-z A-Z > {workspace}/c.txt',
      'tpl-ok',
    );
    expect(results[0]).toMatchObject({ status: 'complete', agent: 'finished' });
    const workspace = join(workDir('tpl-ok'), readdirSync(workDir('tpl-ok'))[0]!, 'workspace');
    expect(readFileSync(join(workspace, 'a.txt'), 'utf8')).toBe('one\n');
    expect(readFileSync(join(workspace, 'b.txt'), 'utf8')).toBe('two\n');
    expect(readFileSync(join(workspace, 'c.txt'), 'utf8')).toBe('THREE\n');
    // The prompt is in {prompt_file}; stdin is empty.
    const stdin = await run('test -s {prompt_file} && test -z "$(cat)"', 'tpl-stdin');
    expect(stdin.results[0]).toMatchObject({ status: 'complete', agent: 'finished' });
    for (const [template, id] of [
      ['true; false', 'tpl-fail-last'],
      ['false | true', 'tpl-fail-pipe'],
    ] as const) {
      const failed = await run(template, id);
      expect(failed.results[0], template).toMatchObject({ status: 'complete', score: 0, agent: 'failed' });
    }
  });

  it('an external agent command runs in the sandbox and reaches the gateway through the bridge only', async () => {
    {
      const { results } = await runGym(
        options({
          tasks: [tasks[1]!],
          samples: 2,
          runId: 'run-c',
          stateFile: join(fx.dir, 'state-c.jsonl'),
          // The script travels inside the command: the sandbox sees no host path but the workspace.
          agent: {
            kind: 'command',
            template: `python3 -c "$(echo ${Buffer.from(PY_AGENT).toString('base64')} | base64 -d)" {prompt_file} {workspace}`,
          },
        }),
      );
      expect(results.map((r) => [r.status, r.score, r.agent])).toEqual([
        ['complete', 1, 'finished'],
        ['complete', 1, 'finished'],
      ]);
      const steps = await fx.server.pool.getTrajectorySteps(results[0]!.trajectoryUid!);
      expect(steps.length).toBeGreaterThanOrEqual(1);
      expect(steps[0]!.toolCalls?.[0]).toMatchObject({ function: { name: expect.stringMatching(/write/) } });
    }
  });
});

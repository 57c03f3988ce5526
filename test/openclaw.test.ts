import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import type { OpenClawInstall } from '../packages/gym/src/agent/openclaw/install.js';
import { runOpenClawAgent } from '../packages/gym/src/agent/openclaw/run.js';
import { type GymRunOptions, runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { loadTasks, referenceTasks } from '../packages/gym/src/tasks/index.js';
import { GymTask } from '../packages/gym/src/tasks/schema.js';
import { synthesize } from '../packages/gym-synth/src/index.js';
import { onlineConfig } from '../src/cli/openclaw.js';
import { CLAWGYM_SAMPLE } from './support/clawgym-sample.js';
import { testOpenClaw } from './support/openclaw.js';

/*
 * The stock OpenClaw agent (pinned, installed from the npm registry with Node 24) working gym tasks
 * through the gateway and the sim, inside the real bubblewrap sandbox: OpenClaw's own tools make the
 * outputs, verifiers score them, each of its LLM calls is a step with the engine's ids, and its
 * unconfined `exec` reaches nothing but the bridged gateway port.
 */

const sandboxReady = checkSandbox().ok;

// Three synthesized tasks: one of them fixes a bug with OpenClaw's `edit` (edits: [{oldText, newText}]).
const synthesized = synthesize({ n: 30, seed: 1 });
const tasks = [synthesized[0]!, synthesized[1]!, synthesized[5]!];

/** Reaches for the world from inside the sandbox with a shell command; the verifier reads the report. */
const NET_PROBE = `python3 - <<'EOF'
import json, socket, urllib.request
def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except OSError as e:
        return type(e).__name__
def http(url):
    try:
        urllib.request.urlopen(url, timeout=3).read()
        return "ok"
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return type(e).__name__
report = {
    "public_ip": tcp("1.1.1.1", 443),
    "private_ip": tcp("10.0.0.1", 80),
    "dns": http("http://registry.npmjs.org/"),
    "host_listener": tcp("127.0.0.1", HOST_PORT),
    "bridge_models": http("http://127.0.0.1:8100/v1/models"),
}
json.dump(report, open("net.json", "w"))
EOF`;

function netProbeTask(hostPort: number): GymTask {
  return GymTask.parse({
    id: 'net-probe',
    prompt: 'Probe the network from the workspace and write the report to net.json.',
    verifier: {
      kind: 'checks',
      checks: [{ kind: 'parses', name: 'report', path: 'net.json', format: 'json' }],
    },
    referenceActions: [
      { name: 'exec', arguments: { command: NET_PROBE.replace('HOST_PORT', String(hostPort)) } },
    ],
    category: 'System Operations',
  });
}

describe.skipIf(!sandboxReady)('OpenClaw in the gym', () => {
  let install: OpenClawInstall;
  let dir: string;
  let server: RunningServer;
  let probe: GymTask;
  let hostListener: Server;
  const qwen3 = loadQwen3Tokenizer();

  beforeAll(async () => {
    install = await testOpenClaw();
    dir = mkdtempSync(join(tmpdir(), 'stepwise-openclaw-'));
    // A listener on the host's loopback that the sandbox must not reach.
    hostListener = createServer((socket) => socket.end());
    await new Promise<void>((resolve) => hostListener.listen(0, '127.0.0.1', resolve));
    probe = netProbeTask((hostListener.address() as AddressInfo).port);
    server = await startServer({
      dbPath: join(dir, 'pool.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks([...tasks, probe]) },
    });
  }, 300_000);
  afterAll(async () => {
    await server?.close();
    hostListener?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const options = (over: Partial<GymRunOptions>): GymRunOptions => ({
    tasks,
    samples: 2,
    concurrency: 2,
    gatewayUrl: server.url,
    model: 'sim-qwen3',
    agent: { kind: 'openclaw', install },
    runId: 'oc',
    stateFile: join(dir, 'state.jsonl'),
    workDir: join(dir, 'work'),
    keepWorkspaces: true,
    sampleTimeoutMs: 150_000,
    ...over,
  });

  it('3 synthesized tasks × 2 samples: OpenClaw solves them with its own tools, every call a step', async () => {
    const { results, summary } = await runGym(options({}));
    expect(results).toHaveLength(6);
    expect(summary).toMatchObject({ samples: 6, infraFailed: 0, agentFailed: 0, meanScore: 1 });
    const toolsUsed = new Set<string>();
    // Shown when a step count is off: the calls the gateway recorded as failed, and lost writes.
    const diagnosis = JSON.stringify({
      failed: (await server.pool.events({ after: 0, limit: 50, types: ['call_failed'] })).map((e) => e.data),
      lostSteps: server.gateway.lostSteps,
    });
    for (const r of results) {
      const t = await server.pool.store.getTrajectory(r.trajectoryUid!);
      expect(t).toMatchObject({ status: 'complete', reward: 1, groupId: `oc.${r.taskId}` });
      const meta = t!.metadata.openclaw as Record<string, unknown>;
      expect(meta).toMatchObject({ status: 'ok', exit_code: 0, tool_failures: 0 });
      for (const name of meta.tools as string[]) toolsUsed.add(name);
      const task = tasks.find((x) => x.id === r.taskId)!;
      // One step per OpenClaw turn: each reference action, then the closing answer.
      const steps = await server.pool.getTrajectorySteps(r.trajectoryUid!);
      const shape = steps.map((x) => [
        x.index,
        x.finishReason,
        x.toolCalls?.length ?? 0,
        (x.messages ?? []).map(
          (m) => `${m.role}:${JSON.stringify(m.content ?? m.tool_calls ?? '').slice(0, 80)}`,
        ),
      ]);
      expect(steps, `${diagnosis} ${JSON.stringify(shape)} ${JSON.stringify(meta)}`).toHaveLength(
        meta.assistant_turns as number,
      );
      expect(steps, diagnosis).toHaveLength(task.referenceActions!.length + 1);
      for (const [i, step] of steps.entries()) {
        expect(step.tokenSource).toBe('engine');
        expect(step.responseLogprobs).toHaveLength(step.responseIds.length);
        // The prompt ids are the chat template over OpenClaw's own messages: its task text is there.
        expect(qwen3.decode(step.promptIds)).toContain(task.prompt.slice(0, 60));
        const action = task.referenceActions![i];
        if (action) {
          // The response ids are the sim's tokens for the call it made, in OpenClaw's tool schema.
          const text = qwen3.decode(step.responseIds);
          expect(text).toContain(`"name": "${action.name}"`);
          expect(step.toolCalls?.[0]).toMatchObject({ function: { name: action.name } });
        }
      }
      // OpenClaw's trailing per-call context is not part of the next prompt: every later call breaks the prefix.
      expect(t!.prefixBreaks).toBe(steps.length - 1);
    }
    // OpenClaw's own tools did the work, its edit tool included.
    expect([...toolsUsed].sort()).toEqual(expect.arrayContaining(['edit', 'read']));
  }, 600_000);

  it('injected tool errors reach OpenClaw as real errors, which it gets past; the gateway flags them', async () => {
    // Every reference action is first tried as a call to a tool the harness lacks, then right.
    const noisy = await startServer({
      dbPath: join(dir, 'noisy.db'),
      port: 0,
      engines: ['sim'],
      // One kind pinned: the plan is drawn from the opening, which holds the date (packages/core/src/engines/sim/policies.ts).
      sim: {
        policy: 'reference',
        tasks: referenceTasks([tasks[2]!]),
        errorRate: 1,
        errorKinds: ['unknown_tool'],
      },
    });
    try {
      const { results } = await runGym(
        options({
          tasks: [tasks[2]!],
          samples: 1,
          gatewayUrl: noisy.url,
          runId: 'oc-noisy',
          stateFile: join(dir, 'state-noisy.jsonl'),
        }),
      );
      expect(results[0]).toMatchObject({ status: 'complete', score: 1 });
      const t = await noisy.pool.store.getTrajectory(results[0]!.trajectoryUid!);
      const meta = t!.metadata.openclaw as Record<string, number>;
      const actions = tasks[2]!.referenceActions!.length;
      // Each action took two calls: the wrong one and the right one, then the answer.
      expect(meta.assistant_turns).toBe(2 * actions + 1);
      expect(meta.tool_failures).toBeGreaterThanOrEqual(1);
      const steps = await noisy.pool.getTrajectorySteps(results[0]!.trajectoryUid!);
      const flagged = steps.flatMap((s) => s.toolResults ?? []).filter((r) => r.error);
      // OpenClaw's refusal ("Tool X not found") is recorded as a failed call of kind unknown_tool.
      expect(flagged).toHaveLength(actions);
      for (const r of flagged) {
        expect(r).toMatchObject({ error_type: 'unknown_tool' });
        expect(r.content).toContain(`Tool ${r.name} not found`);
      }
    } finally {
      await noisy.close();
    }
  }, 300_000);

  it("OpenClaw's exec reaches nothing but the bridged gateway port", async () => {
    const { results } = await runGym(
      options({ tasks: [probe], samples: 1, runId: 'oc-net', stateFile: join(dir, 'state-net.jsonl') }),
    );
    expect(results[0]).toMatchObject({ status: 'complete', score: 1 });
    const workspaces = join(dir, 'work');
    const probeDir = readdirSync(workspaces).find((d) => d.startsWith('net-probe-'))!;
    const report = JSON.parse(readFileSync(join(workspaces, probeDir, 'workspace', 'net.json'), 'utf8'));
    expect(report.public_ip).not.toBe('connected');
    expect(report.private_ip).not.toBe('connected');
    expect(report.dns).not.toBe('ok');
    // A port on the host's loopback: the sandbox's loopback is its own.
    expect(report.host_listener).not.toBe('connected');
    // The bridged port answers, but only the trajectory's own LLM routes pass (docs/security.md):
    // the API's root is refused, while OpenClaw's own calls above went through.
    expect(report.bridge_models).toBe(403);
  }, 300_000);

  it.skipIf(!CLAWGYM_SAMPLE)(
    'a ClawGym task end to end: OpenClaw runs, the verifier scores, the trajectory closes',
    async () => {
      const [task] = await loadTasks(join(CLAWGYM_SAMPLE!, 'task_0000'));
      // The sim knows no reference actions for it: it answers "Done." at once, so the score is low.
      const { results } = await runGym(
        options({
          tasks: [task!],
          samples: 1,
          runId: 'oc-clawgym',
          stateFile: join(dir, 'state-clawgym.jsonl'),
        }),
      );
      const r = results[0]!;
      expect(r).toMatchObject({ status: 'complete', agent: 'finished', verifierFailed: false });
      expect(r.score).toBeGreaterThanOrEqual(0);
      expect(r.score).toBeLessThan(1);
      const t = await server.pool.store.getTrajectory(r.trajectoryUid!);
      expect(t).toMatchObject({ status: 'complete', reward: r.score, groupId: 'oc-clawgym.task_0000' });
      expect(t!.metadata.openclaw).toMatchObject({ status: 'ok', exit_code: 0 });
      const steps = await server.pool.getTrajectorySteps(r.trajectoryUid!);
      expect(steps.length).toBeGreaterThanOrEqual(1);
      // ClawGym's task prompt reached the model through OpenClaw.
      expect(qwen3.decode(steps[0]!.promptIds)).toContain(task!.prompt.slice(0, 80));
      const signals = await server.pool.getSignals(r.trajectoryUid!, { current: true });
      expect(signals.map((s) => s.name).sort()).toEqual(['code', 'score']);
    },
    300_000,
  );

  it('online: `stepwise openclaw config` turns each OpenClaw session into its own trajectory', async () => {
    // The printed config as a person would use it; inside the sandbox the gateway is the bridge.
    const configText = onlineConfig({
      url: 'http://127.0.0.1:8100',
      apiKey: 'stepwise',
      model: 'sim-qwen3',
      channel: 'online-test',
      contextWindow: 65_536,
      maxTokens: 1024,
    });
    const sessions: string[] = [];
    for (const n of [1, 2]) {
      const workspace = mkdtempSync(join(dir, 'online-'));
      const run = await runOpenClawAgent({
        install,
        baseUrl: `${server.url}/v1`,
        model: 'sim-qwen3',
        task: GymTask.parse({
          id: `chat-${n}`,
          prompt: `Hello number ${n}, what can you do?`,
          verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'x', path: 'x' }] },
          category: 'Productivity & Collaboration',
        }),
        workspace,
        timeoutMs: 150_000,
        configText,
      });
      expect(run.ok, run.reason ?? '').toBe(true);
      sessions.push(run.envelope!.sessionId!);
    }
    const { items } = await server.pool.store.listTrajectories({
      channel: 'online-test',
      limit: 10,
      offset: 0,
    });
    expect(items).toHaveLength(2);
    // One trajectory per OpenClaw session, keyed by the session id OpenClaw sent as prompt_cache_key.
    expect(items.map((t) => t.metadata.session_key).sort()).toEqual([...sessions].sort());
    for (const t of items) {
      expect(t.metadata).toMatchObject({ source: 'session' });
      const steps = await server.pool.getTrajectorySteps(t.id);
      expect(steps.length).toBeGreaterThanOrEqual(1);
      expect(steps.every((s) => s.tokenSource === 'engine')).toBe(true);
    }
  }, 300_000);
});

import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import { runCodexAgent } from '../packages/gym/src/agent/codex/run.js';
import { type GymRunOptions, runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { findRootfs } from '../packages/gym/src/sandbox/rootfs.js';
import { referenceTasks } from '../packages/gym/src/tasks/index.js';
import { GymTask } from '../packages/gym/src/tasks/schema.js';
import { synthesize } from '../packages/gym-synth/src/index.js';
import { codexOnlineConfig } from '../src/cli/codex.js';
import { testCodex } from './support/codex.js';
import { TEST_TOOLS_DIR } from './support/openclaw.js';

/*
 * The stock Codex CLI (pinned, its binary from the npm registry) working synthesized gym tasks through
 * the gateway's Responses API and the sim, inside the real bubblewrap sandbox: Codex's own shell tool
 * (`exec_command`) makes the outputs, verifiers score them, each of its LLM calls is a step with the
 * engine's ids, and its commands reach nothing but the bridged gateway port.
 */

const sandbox = checkSandbox();
const codex = testCodex();
const skip = !sandbox.ok ? `no sandbox: ${sandbox.reason}` : codex.skip;
if (skip) console.warn(`test/codex.test.ts skipped: ${skip}`);

// Two synthesized tasks; the second fixes a bug with an edit (a python3 command through exec_command).
const synthesized = synthesize({ n: 30, seed: 1 });
const tasks = [synthesized[0]!, synthesized[5]!];

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
    "dns": http("http://registry.npmjs.org/"),
    "host_listener": tcp("127.0.0.1", HOST_PORT),
    "bridge_models": http("http://127.0.0.1:8100/v1/models"),
}
json.dump(report, open("net.json", "w"))
EOF`;

describe.skipIf(skip !== null)('Codex CLI in the gym', () => {
  let dir: string;
  let server: RunningServer;
  let probe: GymTask;
  let hostListener: Server;
  const qwen3 = loadQwen3Tokenizer();

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-codex-'));
    hostListener = createServer((socket) => socket.end());
    await new Promise<void>((resolve) => hostListener.listen(0, '127.0.0.1', resolve));
    probe = GymTask.parse({
      id: 'net-probe',
      prompt: 'Probe the network from the workspace and write the report to net.json.',
      verifier: {
        kind: 'checks',
        checks: [{ kind: 'parses', name: 'report', path: 'net.json', format: 'json' }],
      },
      referenceActions: [
        {
          name: 'exec',
          arguments: {
            command: NET_PROBE.replace('HOST_PORT', String((hostListener.address() as AddressInfo).port)),
          },
        },
      ],
      category: 'System Operations',
    });
    server = await startServer({
      dbPath: join(dir, 'pool.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks([...tasks, probe]) },
    });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    hostListener?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const options = (over: Partial<GymRunOptions>): GymRunOptions => ({
    tasks,
    samples: 1,
    concurrency: 2,
    gatewayUrl: server.url,
    model: 'sim-qwen3',
    agent: { kind: 'codex', install: codex.install! },
    runId: 'cx',
    stateFile: join(dir, 'state.jsonl'),
    workDir: join(dir, 'work'),
    keepWorkspaces: true,
    sampleTimeoutMs: 150_000,
    ...over,
  });

  it('solves synthesized tasks with its own shell tool, every Responses call a step with engine ids', async () => {
    const { results, summary } = await runGym(options({}));
    const diagnosis = JSON.stringify({
      results,
      failed: (await server.pool.events({ after: 0, limit: 50, types: ['call_failed'] })).map((e) => e.data),
    });
    expect(summary, diagnosis).toMatchObject({ samples: 2, infraFailed: 0, agentFailed: 0, meanScore: 1 });
    for (const r of results) {
      const t = await server.pool.store.getTrajectory(r.trajectoryUid!);
      expect(t).toMatchObject({ status: 'complete', reward: 1, groupId: `cx.${r.taskId}` });
      // Codex sends its whole history each call (store: false): every prompt extends the last step token for token.
      expect(t!.prefixBreaks).toBe(0);
      const meta = t!.metadata.codex as Record<string, unknown>;
      const task = tasks.find((x) => x.id === r.taskId)!;
      const actions = task.referenceActions!;
      // Each reference action ran as one of Codex's commands, exit 0.
      expect(meta).toMatchObject({
        status: 'ok',
        exit_code: 0,
        commands: actions.length,
        command_failures: 0,
      });
      // One step per model call: each reference action, then the closing answer.
      const steps = await server.pool.getTrajectorySteps(r.trajectoryUid!);
      expect(steps, diagnosis).toHaveLength(actions.length + 1);
      for (const [i, step] of steps.entries()) {
        expect(step.tokenSource).toBe('engine');
        expect(step.responseIds.length).toBeGreaterThan(0);
        expect(step.responseLogprobs).toHaveLength(step.responseIds.length);
        // The prompt ids are the chat template over Codex's own input: its task text is there.
        expect(qwen3.decode(step.promptIds)).toContain(task.prompt.slice(0, 60));
        // Codex's tools as the gateway carried them: its shell, and no hosted or namespace tools.
        const offered = (step.tools ?? []).map((x) => (x as { function: { name: string } }).function.name);
        expect(offered).toContain('exec_command');
        if (i < actions.length) {
          expect(step.toolCalls?.[0]).toMatchObject({ function: { name: 'exec_command' } });
          expect(qwen3.decode(step.responseIds)).toContain('"name": "exec_command"');
        } else expect(step.toolCalls ?? []).toHaveLength(0);
      }
      if (actions.some((a) => a.name === 'edit')) {
        // The edit went through Codex's shell as the sim's exact-once python3 command.
        const commands = steps.flatMap((s) => s.toolCalls ?? []).map((c) => JSON.stringify(c));
        expect(commands.some((c) => c.includes('python3 -c'))).toBe(true);
      }
    }
  }, 600_000);

  /*
   * The sim's error plan is drawn from a hash of the conversation's opening when the agent sends no
   * seed, and Codex's opening carries <current_date>: each case pins one error kind, so the plan is the
   * same on every date (packages/core/src/engines/sim/policies.test.ts shows it over three dates).
   */
  const noisyRun = async (kind: 'wrong_argument' | 'unknown_tool') => {
    const noisy = await startServer({
      dbPath: join(dir, `noisy-${kind}.db`),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks([tasks[1]!]), errorRate: 1, errorKinds: [kind] },
    });
    try {
      const { results } = await runGym(
        options({
          tasks: [tasks[1]!],
          gatewayUrl: noisy.url,
          runId: `cx-${kind}`,
          stateFile: join(dir, `state-${kind}.jsonl`),
        }),
      );
      expect(results[0], JSON.stringify(results)).toMatchObject({ status: 'complete', score: 1 });
      const steps = await noisy.pool.getTrajectorySteps(results[0]!.trajectoryUid!);
      const t = await noisy.pool.store.getTrajectory(results[0]!.trajectoryUid!);
      return { steps, meta: t!.metadata.codex as Record<string, number> };
    } finally {
      await noisy.close();
    }
  };
  // The task's actions: read, read, edit (each with a path), exec, write.
  const actions = () => tasks[1]!.referenceActions!;

  it('a wrong path fails the command Codex runs; it gets past it and the gateway flags the result', async () => {
    const { steps, meta } = await noisyRun('wrong_argument');
    const withPath = actions().filter((a) => ['read', 'edit', 'ls'].includes(a.name)).length;
    expect(withPath).toBe(3);
    // Each action with a path took two calls, the wrong one and the right one; the others one; then the answer.
    expect(steps).toHaveLength(actions().length + withPath + 1);
    expect(meta).toMatchObject({ commands: actions().length + withPath, command_failures: withPath });
    const flagged = steps.flatMap((s) => s.toolResults ?? []).filter((r) => r.error);
    expect(flagged).toHaveLength(withPath);
    for (const r of flagged) {
      // Codex's exec_command output: the exit code, then what the command printed (cat's or python's complaint).
      expect(r.content).toMatch(/Process exited with code 1[\s\S]*_wrong/);
      expect(['nonzero_exit', 'exception']).toContain(r.error_type);
    }
  }, 300_000);

  it('an unknown tool is refused by Codex ("unsupported call"), recorded as a failed call of kind unknown_tool', async () => {
    const { steps, meta } = await noisyRun('unknown_tool');
    expect(steps).toHaveLength(2 * actions().length + 1);
    // The refused calls ran no command: Codex's own count sees only the right ones, none failing.
    expect(meta).toMatchObject({ commands: actions().length, command_failures: 0 });
    const flagged = steps.flatMap((s) => s.toolResults ?? []).filter((r) => r.error);
    expect(flagged).toHaveLength(actions().length);
    for (const r of flagged) {
      expect(r).toMatchObject({ error_type: 'unknown_tool' });
      expect(r.content).toMatch(new RegExp(`^unsupported call: ${r.name}`));
      expect(r.name).toMatch(/_v2$/);
    }
  }, 300_000);

  it("Codex's apply_patch helper works inside the sandbox (what real models call through the shell)", async () => {
    const patch = [
      "apply_patch <<'PATCH'",
      '*** Begin Patch',
      '*** Add File: notes/hello.txt',
      '+hello from apply_patch',
      '*** End Patch',
      'PATCH',
    ].join('\n');
    const task = GymTask.parse({
      id: 'apply-patch',
      prompt: 'Add notes/hello.txt with a greeting, using a patch.',
      verifier: {
        kind: 'checks',
        checks: [
          {
            kind: 'text_contains',
            name: 'greeting',
            path: 'notes/hello.txt',
            pattern: 'hello from apply_patch',
          },
        ],
      },
      referenceActions: [{ name: 'exec', arguments: { command: patch } }],
      category: 'Software Development',
    });
    const patched = await startServer({
      dbPath: join(dir, 'patch.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks([task]) },
    });
    try {
      const { results } = await runGym(
        options({
          tasks: [task],
          gatewayUrl: patched.url,
          runId: 'cx-patch',
          stateFile: join(dir, 'state-patch.jsonl'),
        }),
      );
      expect(results[0], JSON.stringify(results)).toMatchObject({ status: 'complete', score: 1 });
    } finally {
      await patched.close();
    }
  }, 300_000);

  it.skipIf(!findRootfs(TEST_TOOLS_DIR))(
    'solves a task in the hermetic rootfs too (the static binary needs nothing of the host)',
    async () => {
      const { results } = await runGym(
        options({
          tasks: [tasks[1]!],
          runId: 'cx-rootfs',
          stateFile: join(dir, 'state-rootfs.jsonl'),
          rootfs: findRootfs(TEST_TOOLS_DIR)!.root,
        }),
      );
      expect(results[0], JSON.stringify(results)).toMatchObject({ status: 'complete', score: 1 });
    },
    300_000,
  );

  it("Codex's commands reach nothing but the bridged gateway port", async () => {
    const { results } = await runGym(
      options({ tasks: [probe], runId: 'cx-net', stateFile: join(dir, 'state-net.jsonl') }),
    );
    expect(results[0], JSON.stringify(results)).toMatchObject({ status: 'complete', score: 1 });
    const workspaces = join(dir, 'work');
    const probeDir = readdirSync(workspaces).find((d) => d.startsWith('net-probe-'))!;
    const report = JSON.parse(readFileSync(join(workspaces, probeDir, 'workspace', 'net.json'), 'utf8'));
    expect(report.public_ip).not.toBe('connected');
    expect(report.dns).not.toBe('ok');
    expect(report.host_listener).not.toBe('connected');
    // Only the trajectory's own LLM routes pass the bridge (docs/security.md).
    expect(report.bridge_models).toBe(403);
  }, 300_000);

  it('online: `stepwise codex config` turns each Codex session into its own trajectory', async () => {
    // The printed config as a person would use it; inside the sandbox the gateway is the bridge.
    const configText = codexOnlineConfig({
      url: 'http://127.0.0.1:8100',
      model: 'sim-qwen3',
      channel: 'codex-online',
    });
    const threads: string[] = [];
    for (const n of [1, 2]) {
      const run = await runCodexAgent({
        install: codex.install!,
        baseUrl: `${server.url}/v1`,
        model: 'sim-qwen3',
        task: GymTask.parse({
          id: `chat-${n}`,
          prompt: `Hello number ${n}, what can you do?`,
          verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'x', path: 'x' }] },
          category: 'Productivity & Collaboration',
        }),
        workspace: mkdtempSync(join(dir, 'online-')),
        timeoutMs: 150_000,
        configText,
      });
      expect(run.ok, run.reason ?? '').toBe(true);
      threads.push(run.metadata.thread_id!);
    }
    const { items } = await server.pool.store.listTrajectories({
      channel: 'codex-online',
      limit: 10,
      offset: 0,
    });
    // One trajectory per Codex session, keyed by the thread id Codex sent as prompt_cache_key.
    expect(items.map((t) => t.metadata.session_key).sort()).toEqual([...threads].sort());
    for (const t of items) {
      expect(t.metadata).toMatchObject({ source: 'session' });
      const steps = await server.pool.getTrajectorySteps(t.id);
      expect(steps).toHaveLength(1);
      expect(steps[0]!.tokenSource).toBe('engine');
    }
  }, 300_000);
});

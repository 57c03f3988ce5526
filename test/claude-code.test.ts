import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import {
  CLAUDE_CODE_VERSION,
  type ClaudeCodeInstall,
} from '../packages/gym/src/agent/claude-code/install.js';
import { runClaudeCodeAgent } from '../packages/gym/src/agent/claude-code/run.js';
import { defaultToolsDir } from '../packages/gym/src/install-kit/index.js';
import { type GymRunOptions, runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { findRootfs } from '../packages/gym/src/sandbox/rootfs.js';
import { referenceTasks } from '../packages/gym/src/tasks/index.js';
import { GymTask } from '../packages/gym/src/tasks/schema.js';
import { synthesize } from '../packages/gym-synth/src/index.js';
import { claudeCodeSkip, requireClaudeCode } from './support/claude-code.js';
import { runCli } from './support/server-process.js';

/*
 * Anthropic's Claude Code (pinned, its native binary from the npm registry) working synthesized gym
 * tasks through the gateway's Messages API and the sim, inside the real bubblewrap sandbox: its own
 * Bash, Read, Edit and Write make the outputs, verifiers score them, each of its model calls is a
 * step with the engine's ids, and its Bash reaches nothing but the bridged gateway port.
 */

const sandboxReady = checkSandbox().ok;

// Three synthesized tasks: ls/read/exec ones, and one that fixes a bug with Claude Code's Edit.
const synthesized = synthesize({ n: 30, seed: 1 });
const tasks = [synthesized[0]!, synthesized[1]!, synthesized[5]!];
const CLAUDE_TOOLS: Record<string, string> = { read: 'Read', write: 'Write', edit: 'Edit' };

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
    "anthropic": http("https://api.anthropic.com/"),
    "host_listener": tcp("127.0.0.1", HOST_PORT),
    "bridge_models": http("http://127.0.0.1:8100/v1/models"),
}
json.dump(report, open("net.json", "w"))
EOF`;

describe('stepwise tools and gym run name claude-code (no install needed)', () => {
  it('lists it in --help, and says how to install it when it is missing', async () => {
    const help = await runCli(['tools', 'install', '--help'], {}, 30_000);
    expect(help.code).toBe(0);
    expect(help.stdout.replace(/\s+/g, ' ')).toContain(`claude-code ${CLAUDE_CODE_VERSION} (linux-x64)`);
    const empty = mkdtempSync(join(tmpdir(), 'stepwise-claude-code-none-'));
    try {
      const path = await runCli(['tools', 'path', 'claude-code', '--dir', empty], {}, 30_000);
      expect(path.code).toBe(1);
      expect(path.stderr).toContain(
        `claude-code ${CLAUDE_CODE_VERSION} (linux-x64) is not installed in ${empty}`,
      );
      const gymHelp = await runCli(['gym', 'run', '--help'], {}, 30_000);
      // Commander wraps the help text: compared with its whitespace collapsed.
      expect(gymHelp.stdout.replace(/\s+/g, ' ')).toContain(
        "'claude-code' (Claude Code, see `stepwise tools install claude-code`)",
      );
      writeFileSync(join(empty, 'tasks.jsonl'), `${JSON.stringify(synthesized[0])}\n`);
      const run = await runCli(
        [
          'gym',
          'run',
          '--tasks',
          join(empty, 'tasks.jsonl'),
          '--agent',
          'claude-code',
          '--tools-dir',
          empty,
          '--out',
          join(empty, 'out'),
        ],
        {},
        30_000,
      );
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain(`run \`stepwise tools install claude-code --dir ${empty}\` first`);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  }, 120_000);
});

describe.skipIf(!sandboxReady || claudeCodeSkip)('Claude Code in the gym', () => {
  let install: ClaudeCodeInstall;
  let dir: string;
  let server: RunningServer;
  let probe: GymTask;
  let hostListener: Server;
  const qwen3 = loadQwen3Tokenizer();

  beforeAll(async () => {
    install = requireClaudeCode();
    dir = mkdtempSync(join(tmpdir(), 'stepwise-claude-code-'));
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
    });
    server = await startServer({
      dbPath: join(dir, 'pool.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks([...tasks, probe]) },
    });
  }, 120_000);
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
    agent: { kind: 'claude-code', install },
    runId: 'cc',
    stateFile: join(dir, 'state.jsonl'),
    workDir: join(dir, 'work'),
    keepWorkspaces: true,
    sampleTimeoutMs: 150_000,
    ...over,
  });

  it('3 synthesized tasks: Claude Code solves them with its own tools, every model call a step', async () => {
    const { results, summary } = await runGym(options({}));
    expect(summary, JSON.stringify(results)).toMatchObject({
      samples: 3,
      infraFailed: 0,
      agentFailed: 0,
      meanScore: 1,
    });
    for (const r of results) {
      // Claude Code asked the bridge for nothing but its model calls (no telemetry, no update check).
      expect(r.gatewayRefused).toBeUndefined();
      const t = await server.pool.store.getTrajectory(r.trajectoryUid!);
      expect(t).toMatchObject({ status: 'complete', reward: 1, groupId: `cc.${r.taskId}` });
      const meta = t!.metadata.claude_code as Record<string, unknown>;
      expect(meta).toMatchObject({ status: 'ok', subtype: 'success', exit_code: 0, permission_denials: 0 });
      const task = tasks.find((x) => x.id === r.taskId)!;
      const steps = await server.pool.getTrajectorySteps(r.trajectoryUid!);
      // One step per model call Claude Code made (its num_turns): no side call reached the gateway
      // unrecorded, and none was made besides the loop: each reference action, then the answer.
      expect(steps).toHaveLength(meta.num_turns as number);
      expect(steps).toHaveLength(task.referenceActions!.length + 1);
      // Each prompt extends the last one token for token, after an Edit too: Claude Code sends that
      // call back with `replace_all: false` added, and the gateway puts it back as generated.
      expect(t!.prefixBreaks).toBe(0);
      for (const [i, step] of steps.entries()) {
        expect(step.tokenSource).toBe('engine');
        expect(step.responseLogprobs).toHaveLength(step.responseIds.length);
        // The tools the model saw: the four offered, Claude Code's deferred placeholder left out.
        const offered = (step.tools ?? []).map((t) => (t.function as { name: string }).name);
        expect(offered.sort()).toEqual(['Bash', 'Edit', 'Read', 'Write']);
        // The prompt is the chat template over Claude Code's own messages: the task text is there.
        expect(qwen3.decode(step.promptIds)).toContain(task.prompt.slice(0, 60));
        const action = task.referenceActions![i];
        if (action) {
          // The call is written in Claude Code's own tool schema: ls and exec go through Bash.
          const name = CLAUDE_TOOLS[action.name] ?? 'Bash';
          expect(step.toolCalls?.[0]).toMatchObject({ function: { name } });
          expect(qwen3.decode(step.responseIds)).toContain(`"name": "${name}"`);
          // Claude Code ran the call itself; its result, no error, is kept on the step that made it.
          const results = step.toolResults ?? [];
          expect(results, JSON.stringify(steps[i + 1]?.messages?.at(-1))).toHaveLength(1);
          expect(results[0]!.error).toBe(false);
        }
      }
    }
  }, 600_000);

  it('injected tool errors reach Claude Code as real errors, which it gets past; the gateway flags them', async () => {
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
          gatewayUrl: noisy.url,
          runId: 'cc-noisy',
          stateFile: join(dir, 'state-noisy.jsonl'),
        }),
      );
      expect(results[0]).toMatchObject({ status: 'complete', score: 1 });
      const t = await noisy.pool.store.getTrajectory(results[0]!.trajectoryUid!);
      const actions = tasks[2]!.referenceActions!.length;
      // Each action took two calls, the wrong one and the right one, then the answer.
      expect((t!.metadata.claude_code as Record<string, number>).num_turns).toBe(2 * actions + 1);
      const steps = await noisy.pool.getTrajectorySteps(results[0]!.trajectoryUid!);
      expect(steps).toHaveLength(2 * actions + 1);
      const flagged = steps.flatMap((s) => s.toolResults ?? []).filter((r) => r.error);
      expect(flagged).toHaveLength(actions);
      // Claude Code's refusal (an is_error tool_result) is recorded as a failed call of kind unknown_tool.
      for (const r of flagged) {
        expect(r).toMatchObject({ error_type: 'unknown_tool' });
        expect(r.content).toContain(`No such tool available: ${r.name}`);
      }
    } finally {
      await noisy.close();
    }
  }, 300_000);

  it('with API keys: Claude Code holds a placeholder, the bridge adds the runner key', async () => {
    const keyed = await startServer({
      dbPath: join(dir, 'keyed.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks([tasks[2]!]) },
      apiKeys: ['runner-key-0123456789:agent,trainer'],
    });
    try {
      const { results } = await runGym(
        options({
          tasks: [tasks[2]!],
          gatewayUrl: keyed.url,
          apiKey: 'runner-key-0123456789',
          runId: 'cc-keyed',
          stateFile: join(dir, 'state-keyed.jsonl'),
        }),
      );
      expect(results[0], JSON.stringify(results[0])).toMatchObject({ status: 'complete', score: 1 });
      expect(results[0]!.gatewayRefused).toBeUndefined();
    } finally {
      await keyed.close();
    }
  }, 300_000);

  it("Claude Code's Bash reaches nothing but the bridged gateway port", async () => {
    const { results } = await runGym(
      options({ tasks: [probe], runId: 'cc-net', stateFile: join(dir, 'state-net.jsonl') }),
    );
    expect(results[0]).toMatchObject({ status: 'complete', score: 1 });
    const workspaces = join(dir, 'work');
    const probeDir = readdirSync(workspaces).find((d) => d.startsWith('net-probe-'))!;
    const report = JSON.parse(readFileSync(join(workspaces, probeDir, 'workspace', 'net.json'), 'utf8'));
    expect(report.public_ip).not.toBe('connected');
    expect(report.anthropic).not.toBe('ok');
    expect(report.host_listener).not.toBe('connected');
    // The bridged port answers only the trajectory's own LLM routes: the API's root is refused.
    expect(report.bridge_models).toBe(403);
  }, 300_000);

  it('online: a fixed base_url with X-Stepwise-Session: auto makes each Claude Code session a trajectory', async () => {
    const sessions: string[] = [];
    for (const n of [1, 2]) {
      const run = await runClaudeCodeAgent({
        install,
        // The fixed base_url, as a person's Claude Code is pointed at it (less /v1: see config.ts).
        baseUrl: `${server.url}/v1`,
        model: 'sim-qwen3',
        headers: { 'X-Stepwise-Session': 'auto', 'X-Stepwise-Channel': 'online-cc' },
        task: GymTask.parse({
          id: `chat-${n}`,
          prompt: `Hello number ${n}, what can you do?`,
          verifier: { kind: 'none' },
        }),
        workspace: mkdtempSync(join(dir, 'online-')),
        timeoutMs: 150_000,
      });
      expect(run.ok, run.reason ?? '').toBe(true);
      sessions.push(run.result!.sessionId!);
    }
    const { items } = await server.pool.store.listTrajectories({
      channel: 'online-cc',
      limit: 10,
      offset: 0,
    });
    expect(items).toHaveLength(2);
    // One trajectory per session: the key is Claude Code's metadata.user_id, which holds its session id.
    for (const session of sessions)
      expect(items.filter((t) => String(t.metadata.session_key).includes(session))).toHaveLength(1);
    for (const t of items) {
      const steps = await server.pool.getTrajectorySteps(t.id);
      expect(steps).toHaveLength(1);
      expect(steps[0]!.tokenSource).toBe('engine');
    }
  }, 300_000);

  const rootfs = findRootfs(defaultToolsDir());
  it.skipIf(!rootfs)(
    'in the hermetic rootfs too (its glibc runs the binary)',
    async () => {
      const { results } = await runGym(
        options({
          tasks: [tasks[2]!],
          runId: 'cc-rootfs',
          stateFile: join(dir, 'state-rootfs.jsonl'),
          rootfs: rootfs!.root,
        }),
      );
      expect(results[0], JSON.stringify(results[0])).toMatchObject({ status: 'complete', score: 1 });
    },
    300_000,
  );
});

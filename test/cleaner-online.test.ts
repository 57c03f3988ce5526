import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { purifyTrajectory } from '../src/curation/cleaner/purify.js';
import { sequenceRatio } from '../src/curation/cleaner/sequence-matcher.js';
import type { Step } from '../src/domain/step.js';
import { type RunningServer, startServer } from '../src/gateway/server.js';
import { agentSpec, referenceTasks } from '../src/gym/cli.js';
import { type AgentSpec, type GymRunOptions, runGym, type SampleResult } from '../src/gym/runner.js';
import { checkSandbox } from '../src/gym/sandbox/index.js';
import { GymTask } from '../src/gym/tasks/schema.js';
import { batchToJson } from '../src/serving/json-batch.js';
import { loadQwen3Tokenizer } from '../src/text/index.js';
import { runCli } from './support/server-process.js';

/*
 * CLEANER online: the built-in agent with rollback on, through a real Stepwise server whose sim
 * follows each task's reference actions with a wrong call injected before every right one
 * (`errorRate: 1`). Every wrong call fails in the real sandboxed tools, the agent regenerates, and the
 * history it sends afterwards no longer holds the failure; the sim finds its place in that history by
 * the calls it holds, so it goes on without repeating the corrected call. What CLEANER did lands in the
 * trajectory's metadata; the expected similarities and modes are computed here from the captured
 * calls, with the canonical text spelled out independently of the implementation.
 */

const sandboxReady = checkSandbox().ok;

const tasks = [
  GymTask.parse({
    id: 'sum-1',
    prompt:
      'Read input/numbers.txt (one integer per line) and write their sum to output/sum.txt. All file paths are relative to the workspace directory.',
    files: [{ path: 'input/numbers.txt', content: '3\n4\n5\n' }],
    verifier: {
      kind: 'checks',
      checks: [
        { kind: 'file_exists', name: 'exists', path: 'output/sum.txt' },
        { kind: 'text_contains', name: 'value', path: 'output/sum.txt', pattern: '^12\\s*$', regex: true },
      ],
    },
    referenceActions: [
      { name: 'read', arguments: { path: 'input/numbers.txt' } },
      {
        name: 'exec',
        arguments: {
          command:
            'mkdir -p output && python3 -c "print(sum(int(l) for l in open(\'input/numbers.txt\')))" > output/sum.txt',
        },
      },
    ],
    category: 'Analysis & Reasoning',
  }),
  GymTask.parse({
    id: 'json-1',
    prompt:
      'Write output/info.json with keys name ("stepwise") and version (1). All file paths are relative to the workspace directory.',
    verifier: {
      kind: 'checks',
      checks: [
        { kind: 'parses', name: 'parses', path: 'output/info.json', format: 'json' },
        {
          kind: 'json_value',
          name: 'name',
          path: 'output/info.json',
          pointer: '/name',
          expected: 'stepwise',
        },
      ],
    },
    referenceActions: [
      { name: 'ls', arguments: { path: '.' } },
      {
        name: 'write',
        arguments: { path: 'output/info.json', content: '{"name": "stepwise", "version": 1}\n' },
      },
    ],
    category: 'Software Development',
  }),
];
const ACTIONS = 2;

type WireCall = { id: string; function: { name: string; arguments: string } };
type Message = { role: string; content?: unknown; tool_calls?: WireCall[]; tool_call_id?: string };

/**
 * The documented similarity text, written out again here for the flat string arguments of these
 * tasks: `<tool_call>\n{"name": <name>, "arguments": <json.dumps>}\n</tool_call>` per call.
 */
const canonical = (calls: readonly WireCall[]) =>
  calls
    .map((c) => {
      const args = Object.entries(JSON.parse(c.function.arguments) as Record<string, string>)
        .map(([k, v]) => `${JSON.stringify(k)}: ${JSON.stringify(v)}`)
        .join(', ');
      return `<tool_call>\n{"name": "${c.function.name}", "arguments": {${args}}}\n</tool_call>`;
    })
    .join('\n');

const callsOf = (step: Step) => (step.toolCalls ?? []) as unknown as WireCall[];
const messagesOf = (step: Step) => (step.messages ?? []) as unknown as Message[];
const isErrorText = (m: Message) =>
  m.role === 'tool' && typeof m.content === 'string' && /^\s*Error\b/.test(m.content);

describe.skipIf(!sandboxReady)('CLEANER online in the built-in agent', () => {
  let dir: string;
  let server: RunningServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-cleaner-'));
    server = await startServer({
      dbPath: join(dir, 'pool.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks(tasks), errorRate: 1 },
    });
  });
  afterAll(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const run = async (runId: string, agent: AgentSpec): Promise<SampleResult[]> => {
    const options: GymRunOptions = {
      tasks,
      samples: 3,
      concurrency: 3,
      gatewayUrl: server.url,
      model: 'sim-qwen3',
      agent,
      runId,
      stateFile: join(dir, `state-${runId}.jsonl`),
      workDir: join(dir, 'work'),
      sampleTimeoutMs: 60_000,
    };
    const { results } = await runGym(options);
    expect(results).toHaveLength(tasks.length * 3);
    return results;
  };

  /** Checks one trajectory against what SAAR must have done with `threshold`; returns the modes seen. */
  async function checkTrajectory(r: SampleResult, threshold: number): Promise<string[]> {
    expect([r.status, r.score, r.agent]).toEqual(['complete', 1, 'finished']);
    const trajectory = await server.pool.store.getTrajectory(r.trajectoryUid!);
    const cleaner = trajectory!.metadata.cleaner as Record<string, unknown>;
    const steps = await server.pool.getTrajectorySteps(r.trajectoryUid!);

    // Every wrong call was captured with its error flagged, then regenerated by the next LLM call.
    const failed = steps.filter((s) => s.toolResults?.some((t) => t.error));
    expect(failed).toHaveLength(ACTIONS);
    const expected = failed.map((f) => {
      const retry = steps[f.index + 1]!;
      // The regeneration was asked with the failed call and its error in view.
      const seen = messagesOf(retry);
      expect(seen.at(-2)?.tool_calls?.map((c) => c.function.name)).toEqual(
        callsOf(f).map((c) => c.function.name),
      );
      expect(isErrorText(seen.at(-1)!)).toBe(true);
      const similarity = sequenceRatio(canonical(callsOf(f)), canonical(callsOf(retry)));
      return {
        failed_step: f.index,
        retry_step: retry.index,
        similarity,
        mode: similarity >= threshold ? 'shallow' : 'deep',
      };
    });
    expect(cleaner).toMatchObject({
      rollbacks_triggered: ACTIONS,
      recovered: ACTIONS,
      failed: 0,
      shallow: expected.filter((e) => e.mode === 'shallow').length,
      deep: expected.filter((e) => e.mode === 'deep').length,
      purified_step_indices: expected.flatMap((e) => [e.failed_step, e.retry_step]),
      rollback_enabled: true,
      options: { p: 1, max_retries: 3, max_attempts: 30, threshold },
    });
    expect(
      (cleaner.repairs as Record<string, unknown>[]).map(({ failed_step, retry_step, similarity, mode }) => ({
        failed_step,
        retry_step,
        similarity,
        mode,
      })),
    ).toEqual(expected);
    const removed = cleaner.removed_error_types as Record<string, number>;
    expect(Object.values(removed).reduce((a, b) => a + b, 0)).toBe(ACTIONS);

    // After each repair the history holds the repaired turn in the failed one's place: P (shallow) or
    // P′ (deep) with K′, then K′'s result; the failed call and its error are gone.
    for (const e of expected) {
      const after = messagesOf(steps[e.retry_step + 1]!);
      const failedStep = steps[e.failed_step]!;
      const retryStep = steps[e.retry_step]!;
      const repaired = after.at(-2)!;
      expect(repaired.role).toBe('assistant');
      expect(repaired.tool_calls).toEqual(retryStep.toolCalls);
      const p = e.mode === 'shallow' ? failedStep.responseText : retryStep.responseText;
      expect(repaired.content ?? '').toBe(p ?? '');
      expect(isErrorText(after.at(-1)!)).toBe(false);
      expect(after.length).toBe(messagesOf(retryStep).length);
    }

    // The last call's context: no failed call, no error text.
    const last = messagesOf(steps.at(-1)!);
    expect(last.filter(isErrorText)).toEqual([]);
    const names = last.flatMap((m) => m.tool_calls ?? []).map((c) => c.function.name);
    expect(names.filter((n) => !['read', 'write', 'edit', 'exec', 'ls'].includes(n))).toEqual([]);
    expect(JSON.stringify(last)).not.toContain('_wrong');

    // The sim follows the purified history: one LLM call per action, one per injected error (its
    // regeneration is the action's call) and the answer; no corrected call is made twice.
    expect(steps).toHaveLength(ACTIONS + ACTIONS + 1);
    expect(steps.at(-1)!.toolCalls ?? []).toEqual([]);
    const kept = last
      .flatMap((m) => m.tool_calls ?? [])
      .map((c) => ({ name: c.function.name, arguments: JSON.parse(c.function.arguments) }));
    expect(kept).toEqual(tasks.find((t) => t.id === r.taskId)!.referenceActions);
    return expected.map((e) => e.mode);
  }

  it('rolls back every injected error: the last context is clean, the task scores 1, metrics match', async () => {
    const results = await run('cleaner-default', { kind: 'builtin', maxTurns: 16, cleaner: {} });
    const modes = (await Promise.all(results.map((r) => checkTrajectory(r, 0.5)))).flat();
    expect(modes).toHaveLength(results.length * ACTIONS);
  });

  it('a higher threshold makes repairs deep exactly where the similarity falls below it', async () => {
    const results = await run('cleaner-strict', {
      kind: 'builtin',
      maxTurns: 16,
      cleaner: { threshold: 0.985 },
    });
    const modes = await Promise.all(results.map((r) => checkTrajectory(r, 0.985)));
    // The wrong calls differ from the right ones by a suffix on a name or a path, so this threshold
    // splits them: the short first calls (ls, read) fall below it, the long ones (exec, write) not.
    expect(modes).toEqual(results.map(() => ['deep', 'shallow']));
  });

  it('p = 0: nothing rolls back and the errors stay in the context (the checks above can see them)', async () => {
    const results = await run('cleaner-off', { kind: 'builtin', maxTurns: 16, cleaner: { p: 0 } });
    for (const r of results) {
      expect(r.score).toBe(1);
      const trajectory = await server.pool.store.getTrajectory(r.trajectoryUid!);
      expect(trajectory!.metadata.cleaner).toMatchObject({
        rollbacks_triggered: 0,
        rollback_enabled: false,
        disabled_by: 'p',
      });
      const steps = await server.pool.getTrajectorySteps(r.trajectoryUid!);
      expect(messagesOf(steps.at(-1)!).filter(isErrorText)).toHaveLength(ACTIONS);
      // The same LLM calls as with rollback: each wrong call, its correction, then the answer.
      expect(steps).toHaveLength(ACTIONS + ACTIONS + 1);
    }
  });

  it('offline purification of the same kind of run without CLEANER removes the same failures', async () => {
    const results = await run('cleaner-none', { kind: 'builtin', maxTurns: 16 });
    for (const r of results) {
      const trajectory = await server.pool.store.getTrajectory(r.trajectoryUid!);
      expect(trajectory!.metadata.cleaner).toBeUndefined();
      const steps = await server.pool.getTrajectorySteps(r.trajectoryUid!);
      const out = purifyTrajectory(steps);
      const failed = steps.filter((s) => s.toolResults?.some((t) => t.error));
      expect(failed).toHaveLength(ACTIONS);
      expect(out.repairs.map((x) => [x.failedStep, x.retryStep])).toEqual(
        failed.map((f) => [f.index, f.index + 1]),
      );
      for (const x of out.repairs)
        expect(x.similarity).toBe(
          sequenceRatio(canonical(callsOf(steps[x.failedStep!]!)), canonical(callsOf(steps[x.retryStep!]!))),
        );
      expect((out.messages as Message[]).filter(isErrorText)).toEqual([]);
      expect(out.derivation).toMatchObject({ derived_from: r.trajectoryUid, purified_offline: true });
      // The original conversation had 2 more messages per failure: the wrong call and its error.
      expect(out.messages.length).toBe(messagesOf(steps.at(-1)!).length + 1 - 2 * ACTIONS);
    }
  });

  it('`stepwise purify` writes derived purified trajectories beside the originals and serves them off-policy', async () => {
    const results = await run('cleaner-cli', { kind: 'builtin', maxTurns: 16 });
    const dbPath = join(dir, 'pool.db');
    const before = new Map<string, Step[]>();
    for (const r of results)
      before.set(r.trajectoryUid!, await server.pool.getTrajectorySteps(r.trajectoryUid!));

    const summaryOf = async (args: string[]) => {
      const out = await runCli(['purify', '--db', dbPath, ...args], {}, 60_000);
      expect(out.code, out.stderr).toBe(0);
      return JSON.parse(out.stdout);
    };
    const ids = results.map((r) => r.trajectoryUid!);
    // One trajectory alone first, then the rest of the run (through its groups' channel).
    const one = await summaryOf(['--trajectory', ids[0]!, '--details']);
    expect(one).toMatchObject({ scanned: 1, purified: 1, copied: 0, dry_run: false });
    const all = await summaryOf(['--channel', 'train', '--into', 'train-purified', '--details']);
    const mine = (all.trajectories as { source: string }[]).filter((t) => ids.includes(t.source));
    expect(mine).toHaveLength(ids.length - 1);
    expect(all.skipped.already_derived).toBeGreaterThanOrEqual(1);
    expect(all.metrics.removed_error_types).toBeDefined();

    const tokenizer = loadQwen3Tokenizer();
    for (const r of results) {
      const original = before.get(r.trajectoryUid!)!;
      // The originals are untouched.
      expect(await server.pool.getTrajectorySteps(r.trajectoryUid!)).toEqual(original);
      const derived = (
        await server.pool.listTrajectories({ channel: 'train-purified', limit: 500, offset: 0 })
      ).items.find((t) => t.derivedFrom === r.trajectoryUid);
      expect(derived).toMatchObject({
        status: 'complete',
        groupId: r.groupId,
        reward: 1,
        derivation: { derived_from: r.trajectoryUid, purified_offline: true, mode: 'shallow' },
      });
      const steps = await server.pool.getTrajectorySteps(derived!.id);
      // Each self-corrected failure took one LLM call out.
      expect(steps).toHaveLength(original.length - ACTIONS);
      expect(steps.every((s) => s.tokenSource === 'retokenized' && s.responseLogprobs === null)).toBe(true);
      // Re-rendered with the engine's own template: before the first repair the ids are the captured ones.
      expect(steps[0]!.promptIds).toEqual(original[0]!.promptIds);
      expect(steps.at(-1)!.isLast).toBe(true);
      for (const s of steps) expect(messagesOf(s).filter(isErrorText)).toEqual([]);
      // The prompt of each step is the purified conversation so far, rendered.
      const last = steps.at(-1)!;
      expect(tokenizer.decode(last.promptIds)).not.toMatch(/Error: /);
    }

    // Served as a mirror of the source groups, off-policy, saying the logprobs must be recomputed.
    const batch = await server.pool.lease({
      channel: 'train-purified',
      batch_size: 1,
      wait_ms: 0,
      consumer: 'trainer',
      ttl_ms: 60_000,
    });
    expect(batch).not.toBeNull();
    const json = batchToJson(batch!);
    for (const t of json.groups[0]!.trajectories) {
      const stored = await server.pool.getTrajectory(t.trajectory_uid);
      expect(t.derived_from).toBe(stored!.derivedFrom);
      expect(t.off_policy).toBe(stored!.derivation?.purified_offline === true);
      expect(t.recompute_log_probs).toBe(t.off_policy);
    }
    await server.pool.nack(batch!.lease.id);

    // A second run writes nothing new.
    const again = await summaryOf(['--channel', 'train']);
    expect(again.purified + again.copied).toBe(0);

    const missing = await runCli(['purify', '--db', dbPath, '--trajectory', 'nope'], {}, 30_000);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain('--trajectory: nope does not exist');
  }, 120_000);

  it('`gym run --cleaner/--cleaner-p` map onto the built-in agent spec', () => {
    expect(agentSpec({ agent: 'builtin', maxTurns: 9 })).toEqual({ kind: 'builtin', maxTurns: 9 });
    expect(agentSpec({ agent: 'builtin', maxTurns: 9, cleaner: true })).toEqual({
      kind: 'builtin',
      maxTurns: 9,
      cleaner: {},
    });
    expect(agentSpec({ agent: 'builtin', maxTurns: 9, cleanerP: 0.25 })).toEqual({
      kind: 'builtin',
      maxTurns: 9,
      cleaner: { p: 0.25 },
    });
    expect(() => agentSpec({ agent: 'python3 agent.py', maxTurns: 9, cleaner: true })).toThrow(
      /builtin only/,
    );
  });
});

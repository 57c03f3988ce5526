import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { batchToJson } from '../packages/core/src/serving/json-batch.js';
import { agentSpec } from '../packages/gym/src/run.js';
import { runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { referenceTasks } from '../packages/gym/src/tasks/reference.js';
import { synthesize } from '../packages/gym-synth/src/index.js';
import { makeModelFolder } from './support/model-folders.js';

/*
 * `gym run --engine sim,model-dir=DIR --cleaner` with a DeepSeek-V3 folder: the built-in agent takes
 * the engines' model, so CLEANER records DeepSeek's `<｜tool▁calls▁begin｜>` as its graft token (read
 * here from the folder's tokenizer.json) and a lease serves the failed turns grafted at it. The sim
 * plays the reference actions of synthesized tasks and makes a wrong call before each right one.
 * A family whose calls open with no one token is refused before any sample runs, naming the model.
 */

const sandboxReady = checkSandbox().ok;
let dir: string;
let folder: { dir: string; remove(): void };
let llama: { dir: string; remove(): void };
let server: RunningServer;
const tasks = synthesize({ n: 2, seed: 11 });

function tokenIdInFile(modelDir: string, token: string): number {
  const json = JSON.parse(readFileSync(join(modelDir, 'tokenizer.json'), 'utf8')) as {
    added_tokens: { id: number; content: string }[];
  };
  return json.added_tokens.find((t) => t.content === token)!.id;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-cleaner-families-'));
  folder = makeModelFolder('deepseek_v3');
  llama = makeModelFolder('llama3_1');
  server = await startServer({
    dbPath: join(dir, 'pool.db'),
    port: 0,
    engines: [`sim,model-dir=${folder.dir}`],
    sim: { policy: 'reference', tasks: referenceTasks(tasks), errorRate: 1, seed: 5 },
  });
}, 120_000);
afterAll(async () => {
  await server?.close();
  folder?.remove();
  llama?.remove();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("the gym's built-in agent with CLEANER on a DeepSeek-V3 engine", () => {
  it("takes the engines' model and grafts at DeepSeek's tool-call token", async () => {
    const engine = `sim,model-dir=${folder.dir}`;
    const agent = agentSpec({ agent: 'builtin', maxTurns: 24, cleaner: true, engine: [engine] });
    expect(agent).toMatchObject({ kind: 'builtin', cleaner: {}, model: { dir: folder.dir } });
    const { results, summary } = await runGym({
      tasks,
      samples: 1,
      concurrency: 2,
      gatewayUrl: server.url,
      model: 'any',
      agent,
      runId: 'families',
      channel: 'families',
      stateFile: join(dir, 'state.jsonl'),
      workDir: join(dir, 'work'),
      sampleTimeoutMs: 120_000,
      unsafeNoSandbox: !sandboxReady,
    });
    expect(summary).toMatchObject({ samples: 2, infraFailed: 0, agentFailed: 0 });
    const open = tokenIdInFile(folder.dir, '<｜tool▁calls▁begin｜>');
    let rollbacks = 0;
    for (const r of results) {
      const t = (await server.pool.store.getTrajectory(r.trajectoryUid!))!;
      const cleaner = t.metadata.cleaner as { tool_call_token_id: number; rollbacks_triggered: number };
      expect(cleaner.tool_call_token_id).toBe(open);
      rollbacks += cleaner.rollbacks_triggered;
      const steps = await server.pool.getTrajectorySteps(r.trajectoryUid!);
      expect(new Set(steps.map((s) => s.metadata.model_family))).toEqual(new Set(['deepseek_v3']));
    }
    // Every first try was wrong (error rate 1): each was rolled back.
    expect(rollbacks).toBeGreaterThan(0);
    const batch = await server.pool.lease({
      channel: 'families',
      batch_size: 2,
      wait_ms: 0,
      consumer: 'trainer',
      ttl_ms: 60_000,
    });
    expect(batch).not.toBeNull();
    const served = batchToJson(batch!).groups.flatMap((g) => g.trajectories);
    expect(served).toHaveLength(2);
    for (const t of served) {
      const captured = await server.pool.getTrajectorySteps(t.trajectory_uid);
      // Fewer rows than calls (the failed turns folded into their fixes), and each row that calls a
      // tool holds DeepSeek's opener exactly once, where the regenerated call was grafted.
      expect(t.steps.length).toBeLessThan(captured.length);
      for (const row of t.steps.slice(0, -1))
        expect(row.response_ids.filter((id) => id === open)).toHaveLength(1);
    }
    await server.pool.nack(batch!.lease.id);
  }, 300_000);

  it('refuses CLEANER for a Llama 3 folder before any sample runs, naming the model', () => {
    expect(() =>
      agentSpec({ agent: 'builtin', maxTurns: 24, cleaner: true, engine: [`sim,model-dir=${llama.dir}`] }),
    ).toThrow(/family llama3\) does not support CLEANER's graft point/);
    // Without CLEANER the agent reads nothing of the model's tokens: no refusal, and no folder kept
    // (a run id does not change with it; rollout workers are sent no path).
    const plain = agentSpec({ agent: 'builtin', maxTurns: 24, engine: [`sim,model-dir=${llama.dir}`] });
    expect(plain).toEqual({ kind: 'builtin', maxTurns: 24 });
    expect(() =>
      agentSpec({ agent: 'builtin', maxTurns: 24, cleaner: true, modelDir: join(dir, 'missing') }),
    ).toThrow(/--model-dir .*missing/);
    expect(() => agentSpec({ agent: 'builtin', maxTurns: 24, modelDir: folder.dir })).toThrow(
      /--model-dir is what CLEANER grafts with/,
    );
    expect(() => agentSpec({ agent: 'codex', maxTurns: 24, modelDir: folder.dir })).toThrow(
      /--model-dir is the built-in agent's/,
    );
  });
});

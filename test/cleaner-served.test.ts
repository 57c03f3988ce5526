import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parquetReadObjects } from 'hyparquet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sequenceRatio } from '../packages/core/src/curation/cleaner/sequence-matcher.js';
import type { Step } from '../packages/core/src/domain/step.js';
import { SimEngine } from '../packages/core/src/engines/sim/engine.js';
import type { Policy, PolicyOutput } from '../packages/core/src/engines/sim/policies.js';
import { createSimApp } from '../packages/core/src/engines/sim/server.js';
import { ExportRequest } from '../packages/core/src/export/request.js';
import { runExport } from '../packages/core/src/export/run-export.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { batchToJson } from '../packages/core/src/serving/json-batch.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import { type Listening, listen } from '../packages/core/src/util/http-server.js';
import { runGym, type SampleResult } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { GymTask } from '../packages/gym/src/tasks/schema.js';

/*
 * What a lease serves after online CLEANER episodes that go beyond one slip and its fix: the
 * built-in agent through a real Stepwise server and the gym runner, the model a sim engine that
 * plays one scripted episode per task (each call takes the script's next answer, whatever the
 * agent sent: the regenerations and retries are the agent's doing). The expected rows are worked
 * out here from the captured ids and the authors' rules (tool_agent_loop.py): a chain of
 * rollbacks folds into one row, a chain that gives up keeps its last failed call with the error and
 * the note, a regeneration without a call keeps the error, and nothing else failed is served.
 */

const sandboxReady = checkSandbox().ok;
const tok = loadQwen3Tokenizer();
const MARKER = tok.tokenId('<tool_call>')!;

const read = (path: string, think = 'I read the file.'): PolicyOutput => ({
  text: think,
  toolCalls: [{ name: 'read', arguments: { path } }],
});
const answer = (text: string): PolicyOutput => ({ text });
/** A call written as raw text in compact JSON: the decoded ids differ from the rebuilt template form. */
const compact = (path: string): PolicyOutput => ({
  text: `<tool_call>\n{"name":"read","arguments":{"path":"${path}"}}\n</tool_call>`,
});

const SCRIPTS: Record<string, PolicyOutput[]> = {
  // Two rollbacks in one chain, then the retry succeeds.
  chain: [
    read('input/a_wrong.txt'),
    read('input/a_wrong2.txt', 'Again.'),
    read('input/a.txt', 'Once more.'),
    answer('Done: alpha.'),
  ],
  // Every regeneration fails: after maxRetries (3) rollbacks the turn gives up with the note.
  giveup: [
    read('input/x_wrong1.txt'),
    read('input/x_wrong2.txt'),
    read('input/x_wrong3.txt'),
    read('input/x_wrong4.txt'),
    answer('I could not read it.'),
  ],
  // The regeneration answers instead of calling a tool: the error stays, T′ is the answer.
  nocall: [read('input/n_wrong.txt'), answer('The file does not exist; stopping.')],
  // A turn with two calls, the second failing; the regeneration makes both right.
  multi: [
    {
      text: 'Two reads.',
      toolCalls: [
        { name: 'read', arguments: { path: 'input/a.txt' } },
        { name: 'read', arguments: { path: 'input/m_wrong.txt' } },
      ],
    },
    {
      text: 'Two reads again.',
      toolCalls: [
        { name: 'read', arguments: { path: 'input/a.txt' } },
        { name: 'read', arguments: { path: 'input/b.txt' } },
      ],
    },
    answer('Done: alpha beta.'),
  ],
  // A repair, then a second failure whose regeneration never comes back (the sample times out).
  timeout: [
    read('input/t_wrong.txt'),
    read('input/a.txt'),
    read('input/t_wrong2.txt'),
    read('input/b.txt'),
    answer('late'),
  ],
  // maxTurns 3: a failure on turn 2 (M - 1) is not rolled back, as in the authors' loop.
  budget: [read('input/a.txt'), read('input/u_wrong.txt'), read('input/b.txt'), answer('no')],
  // The same chain again, for the exports.
  exported: [
    read('input/a_wrong.txt'),
    read('input/a_wrong2.txt', 'Again.'),
    read('input/a.txt', 'Once more.'),
    answer('Done: alpha.'),
  ],
  // Calls written in compact JSON: the similarity reads the engine's ids, not a rebuilt text.
  decoded: [compact('input/a_wrong.txt'), compact('input/a.txt'), answer('Done.')],
};

const scenarioOf = (prompt: string) => /^\[(\w+)\]/.exec(prompt)?.[1] ?? '';
const taskFor = (scenario: string) =>
  GymTask.parse({
    id: `served-${scenario}`,
    prompt: `[${scenario}] Read the files under input/ and say what they hold.`,
    files: [
      { path: 'input/a.txt', content: 'alpha\n' },
      { path: 'input/b.txt', content: 'beta\n' },
    ],
    verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'a', path: 'input/a.txt' }] },
    category: 'Analysis & Reasoning',
  });

type Message = { role: string; content?: unknown; tool_calls?: unknown[] };
const messagesOf = (s: Step) => (s.messages ?? []) as unknown as Message[];
const NOTE = 'Note: This approach has been attempted';

describe.skipIf(!sandboxReady)(
  'online CLEANER: the served rows of chains, give-ups, answers and failures',
  () => {
    let dir: string;
    let engine: Listening;
    let server: RunningServer;
    const calls = new Map<string, number>();
    let hung: Promise<void> = Promise.resolve();

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'stepwise-cleaner-served-'));
      const policy: Policy = (ctx) => {
        const user = ctx.messages.find((m) => m.role === 'user');
        const scenario = scenarioOf(typeof user?.content === 'string' ? user.content : '');
        const n = calls.get(scenario) ?? 0;
        calls.set(scenario, n + 1);
        const script = SCRIPTS[scenario] ?? [answer('?')];
        return script[Math.min(n, script.length - 1)]!;
      };
      const app = createSimApp({ engine: new SimEngine({ policy, seed: 0 }), model: 'sim-qwen3' });
      engine = await listen(
        async (request) => {
          // The `timeout` episode's fourth call (the second regeneration) outlives the sample's time.
          const body = (await request.clone().json()) as { messages?: { role: string; content?: string }[] };
          const user = body.messages?.find((m) => m.role === 'user')?.content ?? '';
          if (scenarioOf(user) === 'timeout' && (calls.get('timeout') ?? 0) === 3) {
            hung = new Promise((resolve) => setTimeout(resolve, 7_000));
            await hung;
          }
          return app.fetch(request);
        },
        '127.0.0.1',
        0,
      );
      server = await startServer({
        dbPath: join(dir, 'pool.db'),
        port: 0,
        engines: [`vllm=${engine.url}/v1`],
      });
    });
    afterAll(async () => {
      await hung;
      await server?.close();
      await engine?.close(undefined, 500);
      rmSync(dir, { recursive: true, force: true });
    });

    const run = async (scenario: string, maxTurns = 16, sampleTimeoutMs = 60_000): Promise<SampleResult> => {
      calls.delete(scenario);
      const { results } = await runGym({
        tasks: [taskFor(scenario)],
        samples: 1,
        concurrency: 1,
        gatewayUrl: server.url,
        model: 'sim-qwen3',
        agent: { kind: 'builtin', maxTurns, cleaner: {} },
        runId: `served-${scenario}`,
        channel: `served-${scenario}`,
        stateFile: join(dir, `state-${scenario}.jsonl`),
        workDir: join(dir, 'work'),
        sampleTimeoutMs,
      });
      return results[0]!;
    };
    const captured = (r: SampleResult) => server.pool.getTrajectorySteps(r.trajectoryUid!);
    const cleanerOf = async (r: SampleResult) =>
      (await server.pool.store.getTrajectory(r.trajectoryUid!))!.metadata.cleaner as Record<string, unknown>;
    /** The rows a trainer leases for the run's one trajectory (json format). */
    const served = async (r: SampleResult) => {
      const batch = await server.pool.lease({
        channel: `served-${r.taskId.slice('served-'.length)}`,
        batch_size: 1,
        wait_ms: 0,
        consumer: 'trainer',
        ttl_ms: 60_000,
      });
      expect(batch).not.toBeNull();
      const t = batchToJson(batch!).groups[0]!.trajectories[0]!;
      await server.pool.nack(batch!.lease.id);
      expect(t.trajectory_uid).toBe(r.trajectoryUid);
      return t.steps;
    };
    const text = (s: { prompt_ids: number[]; response_ids: number[] }) =>
      tok.decode([...s.prompt_ids, ...s.response_ids]);
    /** The call segment of a response: the ids from the first `<tool_call>` on. */
    const callIds = (ids: readonly number[]) => ids.slice(ids.indexOf(MARKER));

    it('a chain of two rollbacks that recovers is one row: P of the first attempt + K of the last regeneration', async () => {
      const r = await run('chain');
      const steps = await captured(r);
      expect(steps).toHaveLength(4);
      const cleaner = await cleanerOf(r);
      expect(cleaner).toMatchObject({ rollbacks_triggered: 1, recovered: 1, failed: 0 });
      const repairs = cleaner.repairs as { failed_step: number; retry_step: number; mode: string }[];
      expect(repairs.map((x) => [x.failed_step, x.retry_step])).toEqual([
        [0, 1],
        [1, 2],
      ]);
      const rows = await served(r);
      expect(rows.map((s) => s.step_index)).toEqual([0, 3]);
      // Worked out from the captured ids rollback by rollback (shallow: keep P, take K′; deep: take all).
      let response = steps[0]!.responseIds;
      for (const x of repairs) {
        const regen = steps[x.retry_step]!.responseIds;
        response =
          x.mode === 'shallow' ? [...response.slice(0, response.indexOf(MARKER)), ...callIds(regen)] : regen;
      }
      expect(rows[0]!.prompt_ids).toEqual(steps[0]!.promptIds);
      expect(rows[0]!.response_ids).toEqual(response);
      expect(rows[0]!.rollout_log_probs).toBeNull();
      expect(rows[1]!.rollout_log_probs).toEqual(steps[3]!.responseLogprobs);
      for (const s of rows) {
        expect(text(s)).not.toContain('a_wrong');
        expect(text(s)).not.toMatch(/Error: /);
      }
    });

    it('a chain that gives up keeps its last failed call, its error and the note, as the authors do', async () => {
      const r = await run('giveup');
      const steps = await captured(r);
      // Failed attempt, three regenerations (all failing), then the answer after the note.
      expect(steps).toHaveLength(5);
      const cleaner = await cleanerOf(r);
      expect(cleaner).toMatchObject({
        rollbacks_triggered: 1,
        recovered: 0,
        failed: 1,
        rollback_enabled: false,
        disabled_by: 'max_retries',
      });
      const rows = await served(r);
      expect(rows.map((s) => s.step_index)).toEqual([0, 4]);
      // The kept turn is the last regeneration's call (x_wrong4); its error and the note follow it.
      const last = text(rows[1]!);
      expect(last).toContain('x_wrong4');
      expect(last).toContain(`${NOTE} 3 times`);
      expect(last.match(/Error: /g)).toHaveLength(1);
      for (const s of rows)
        for (const gone of ['x_wrong1', 'x_wrong2', 'x_wrong3']) expect(text(s)).not.toContain(gone);
    });

    it('a regeneration without a tool call keeps the error: both rows served as captured', async () => {
      const r = await run('nocall');
      const steps = await captured(r);
      expect(steps).toHaveLength(2);
      expect(await cleanerOf(r)).toMatchObject({ repairs: [], failed: 1, disabled_by: 'no_tool_call' });
      const rows = await served(r);
      expect(rows.map((s) => [s.step_index, s.response_ids])).toEqual(
        steps.map((s) => [s.index, s.responseIds]),
      );
      expect(text(rows[1]!)).toMatch(/Error: /);
      expect(messagesOf(steps[1]!).at(-1)!.role).toBe('tool');
    });

    it('a turn with several calls: one error message shown, the row holds the regenerated calls only', async () => {
      const r = await run('multi');
      const steps = await captured(r);
      expect(steps).toHaveLength(3);
      // The regeneration was shown one tool message: the last failed call's output.
      const shown = messagesOf(steps[1]!);
      expect(shown.at(-1)!.role).toBe('tool');
      expect(shown.at(-2)!.role).toBe('assistant');
      const rows = await served(r);
      expect(rows.map((s) => s.step_index)).toEqual([0, 2]);
      for (const s of rows) {
        expect(text(s)).not.toContain('m_wrong');
        expect(text(s)).not.toMatch(/Error: /);
      }
      expect(tok.decode(rows[0]!.response_ids)).toContain('input/b.txt');
    });

    it('a sample that times out after a repair is completed with its CLEANER record and served purified', async () => {
      const r = await run('timeout', 16, 5_000);
      expect([r.status, r.agent, r.score]).toEqual(['complete', 'failed', 0]);
      const cleaner = await cleanerOf(r);
      expect(cleaner).toMatchObject({ abandoned_steps: [3] });
      expect((cleaner.repairs as { failed_step: number }[]).map((x) => x.failed_step)).toEqual([0]);
      await hung;
      // Whether or not the gateway stored the abandoned regeneration, it is not served.
      for (let i = 0; i < 40 && (await captured(r)).length < 4; i++)
        await new Promise((ok) => setTimeout(ok, 100));
      const rows = await served(r);
      expect(rows.map((s) => s.step_index)).toEqual([0, 2]);
      for (const s of rows) {
        expect(text(s)).not.toContain('t_wrong.txt');
        expect(text(s)).not.toMatch(/Error: /);
      }
    });

    it('turn budget: a failure on turn M - 1 ends the episode unrepaired, as in the authors loop', async () => {
      const r = await run('budget', 3);
      const steps = await captured(r);
      // No regeneration was asked for: the failed call is the last step.
      expect(steps).toHaveLength(2);
      expect(r.agent).toBe('max_turns');
      expect(await cleanerOf(r)).toMatchObject({
        rollbacks_triggered: 1,
        recovered: 0,
        failed: 1,
        repairs: [],
      });
      const rows = await served(r);
      expect(rows.map((s) => s.step_index)).toEqual([0, 1]);
    });

    it("the similarity is the engine's decoded ids, not the calls rebuilt in the template's form", async () => {
      const r = await run('decoded');
      const steps = await captured(r);
      const decoded = (s: Step) => tok.decode(callIds(s.responseIds));
      expect(decoded(steps[0]!)).toContain('{"name":"read","arguments":{"path":"input/a_wrong.txt"}}');
      const expected = sequenceRatio(decoded(steps[0]!), decoded(steps[1]!));
      const rebuilt = (path: string) =>
        `<tool_call>\n{"name": "read", "arguments": {"path": "${path}"}}\n</tool_call><|im_end|>`;
      expect(expected).not.toBe(sequenceRatio(rebuilt('input/a_wrong.txt'), rebuilt('input/a.txt')));
      const repairs = (await cleanerOf(r)).repairs as { similarity: number }[];
      expect(repairs.map((x) => x.similarity)).toEqual([expected]);
      expect((await cleanerOf(r)).tool_call_token_id).toBe(MARKER);
    });

    it('training exports (rl, sft) write the purified rows; the trajectories dump keeps what was captured', async () => {
      const r = await run('exported');
      const steps = await captured(r);
      const channel = 'served-exported';
      const exported = async (kind: string) => {
        const outDir = join(dir, `export-${kind}`);
        const manifest = await runExport({
          store: server.pool.store,
          request: ExportRequest.parse({ kind, channel }),
          outDir,
          overwrite: true,
        });
        return join(outDir, manifest.files[0]!.name);
      };
      const rl = (await parquetReadObjects({
        file: new Uint8Array(readFileSync(await exported('rl'))).buffer,
      })) as {
        trajectory_uid: string;
        step_index: number;
        response_ids: number[];
        response_logprobs: number[] | null;
      }[];
      const mine = rl.filter((row) => row.trajectory_uid === r.trajectoryUid);
      expect(mine.map((row) => row.step_index)).toEqual([0, 3]);
      // Parquet reads a null list back as undefined: no log-probs on the graft, the row after keeps its own.
      expect(mine[0]!.response_logprobs ?? null).toBeNull();
      expect(mine[1]!.response_logprobs).toHaveLength(steps[3]!.responseIds.length);
      for (const row of mine) expect(tok.decode(row.response_ids)).not.toContain('a_wrong');

      const sft = readFileSync(await exported('sft'), 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as { messages: unknown[] });
      for (const line of sft) {
        expect(JSON.stringify(line.messages)).not.toContain('a_wrong');
        expect(JSON.stringify(line.messages)).not.toMatch(/Error: /);
      }

      const dump = readFileSync(await exported('trajectories'), 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as { trajectory_uid?: string; id?: string; steps: unknown[] });
      const audit = dump.find((t) => JSON.stringify(t).includes(r.trajectoryUid!))!;
      expect(audit.steps).toHaveLength(steps.length);
    });
  },
);

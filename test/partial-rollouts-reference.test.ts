import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import {
  findTrainPython,
  type ReferenceEngine,
  runPython,
  startReferenceEngine,
} from '../src/train/python.js';
import { callJson, openTrajectory } from './support/http.js';

/*
 * Partial rollouts with a real model: the reference engine (torch + transformers, vLLM's pause and
 * weight-update routes) behind the gateway switches between two checkpoints in the middle of
 * streamed generations, by abort (the gateway continues from the exact ids) and by keep (the
 * engine recomputes its cache under the new weights). Every stored behaviour log-prob equals the
 * log-prob recomputed under the checkpoint of the version that produced its token (≤ 1e-4, fp32),
 * on both sides of each switch. Needs the `train` extra (CI sets STEPWISE_TRAIN_PYTHON).
 */

const python = findTrainPython();
if (!python) console.warn('partial-rollout exactness skipped: no Python with torch + transformers');

describe.skipIf(!python)(
  'partial rollouts on the reference engine: behaviour log-probs exact per version',
  () => {
    let dir = '';
    let engine: ReferenceEngine;
    let server: RunningServer;
    const folders: Record<string, string> = {};

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'stepwise-partial-ref-'));
      for (const [name, seed] of [
        ['a', 1],
        ['b', 2],
      ] as const) {
        folders[name] = join(dir, name);
        const save = `from stepwise_client.models import load_policy\nfrom stepwise_client.trainer import save_checkpoint\nsave_checkpoint(load_policy('tiny', seed=${seed}), ${JSON.stringify(folders[name])})`;
        await runPython(python!, ['-c', save], { timeoutMs: 300_000 });
      }
      engine = await startReferenceEngine({ python: python!, model: folders.a!, seed: 3, threads: 1 });
      server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: [`vllm=${engine.url}`] });
    }, 600_000);

    afterAll(async () => {
      await server?.close();
      await engine?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    /** A long streamed generation, switched (`mode`) once the agent has seen `after` chunks. */
    async function switchedCall(version: number, mode: 'abort' | 'keep', folder: string): Promise<Step> {
      const t = await openTrajectory(server.url);
      const client = new OpenAI({ baseURL: t.base_url, apiKey: 'x', maxRetries: 0 });
      // vLLM's `ignore_eos` keeps every generation 120 tokens long.
      const stream = await client.chat.completions.create({
        model: 'tiny',
        messages: [{ role: 'user', content: 'Tell me a long story.' }],
        max_tokens: 120,
        temperature: 1,
        stream: true,
        ignore_eos: true,
      } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      let chunks = 0;
      let switched: Promise<unknown> | null = null;
      let finish: string | null = null;
      for await (const chunk of stream) {
        if (++chunks === 25)
          switched = callJson('PUT', `${server.url}/v1/policy-version`, {
            version,
            mode,
            weights: { path: folder },
          });
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      const answer = (await switched) as { status: number; json: { switched: string[] } };
      expect(answer.status).toBe(200);
      expect(answer.json.switched).toHaveLength(1);
      expect(finish).toBe('length');
      const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
      return step!;
    }

    it('abort and keep: tokens on both sides of each switch carry the log-probs of their own weights', async () => {
      const cut = await switchedCall(1, 'abort', folders.b!);
      const kept = await switchedCall(2, 'keep', folders.a!);
      for (const [step, from, to] of [
        [cut, 0, 1],
        [kept, 1, 2],
      ] as const) {
        expect(step.responseIds).toHaveLength(120);
        expect(step.tokenSource).toBe('engine');
        expect(step.policyVersion).toBe(from);
        expect(step.versionSpans!.map(([v]) => v)).toEqual([from, to]);
        expect(step.versionSpans![0]![1]).toBeGreaterThanOrEqual(20);
      }
      const spec = join(dir, 'steps.json');
      writeFileSync(
        spec,
        JSON.stringify({
          folders: { 0: folders.a, 1: folders.b, 2: folders.a },
          steps: [cut, kept].map((s) => ({
            prompt_ids: s.promptIds,
            response_ids: s.responseIds,
            logprobs: s.responseLogprobs,
            version_spans: s.versionSpans,
          })),
        }),
      );
      const out = JSON.parse(
        await runPython(python!, ['tests/check_version_logprobs.py', spec], { timeoutMs: 300_000 }),
      ) as {
        tokens: number;
        max_abs_diff: number;
        start_weights_max_abs_diff: number;
        tokens_by_version: object;
      };
      expect(out.tokens).toBe(240);
      expect(out.max_abs_diff).toBeLessThanOrEqual(1e-4);
      expect(out.start_weights_max_abs_diff).toBeGreaterThan(1e-2);
    }, 600_000);
  },
);

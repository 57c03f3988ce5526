import { z } from 'zod';
import { ValidationError } from '../../domain/index.js';
import { parseJsonPath, readJsonPath, safeJsonParse } from '../json-path.js';
import {
  definePlugin,
  errorMessage,
  NotApplicableError,
  RewardError,
  type RewardScore,
  RewardTimeoutError,
} from '../plugin.js';
import { clip, conversation, finalAnswer } from '../transcript.js';

// A scoring endpoint (a served reward model, a remote verifier): one trajectory POSTed as JSON, a number
// back; nothing is scored by default. docs/rewards.md#rm-trajectory-source-rm

export const RmParams = z.strictObject({
  url: z.url().describe('the scoring endpoint (POST)'),
  headers: z.record(z.string(), z.string()).default({}),
  api_key_env: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name')
    .optional()
    .describe('environment variable holding a bearer key'),
  timeout_ms: z.number().int().min(1).max(3_600_000).default(30_000),
  score_path: z
    .string()
    .min(1)
    .max(256)
    .refine(
      (p) => {
        try {
          parseJsonPath(p);
          return true;
        } catch {
          return false;
        }
      },
      { message: 'must be a JSON path such as score or $.result.reward' },
    )
    .optional(),
});
export type RmParams = z.infer<typeof RmParams>;

/** The score in an endpoint's answer; an error string when there is none. */
export function readScore(body: unknown, scorePath: string | undefined): number | string {
  let value: unknown;
  if (scorePath !== undefined) value = readJsonPath(body, parseJsonPath(scorePath));
  else if (typeof body === 'number') value = body;
  else if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
    const o = body as Record<string, unknown>;
    value = Object.hasOwn(o, 'score') ? o.score : o.reward;
  }
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    return `no finite number at ${scorePath ?? 'the body, score or reward'} (found ${JSON.stringify(value) ?? 'nothing'})`;
  }
  return value;
}

export const rmPlugin = definePlugin(
  {
    name: 'rm',
    version: '1',
    description:
      'POSTs the conversation to an HTTP scoring endpoint (e.g. a served reward model) and uses the number it answers.',
    target: 'trajectory',
    source: 'rm',
  },
  RmParams,
  (params) => {
    const headers: Record<string, string> = { 'content-type': 'application/json', ...params.headers };
    if (params.api_key_env !== undefined) {
      const key = process.env[params.api_key_env];
      if (!key) {
        throw new ValidationError(
          `params.api_key_env: the environment variable ${params.api_key_env} is not set`,
          'params.api_key_env',
        );
      }
      headers.authorization = `Bearer ${key}`;
    }
    return async (views, context) => {
      const scores: RewardScore[] = [];
      for (const view of views) {
        const messages = conversation(view.steps);
        if (messages.length === 0) {
          throw new NotApplicableError(
            `trajectory ${view.trajectory.id} has no conversation to score (no steps, or token-only steps)`,
          );
        }
        const body = JSON.stringify({
          trajectory_uid: view.trajectory.id,
          channel: view.trajectory.channel,
          task_id: view.trajectory.taskId,
          messages,
          final_answer: finalAnswer(view.steps),
          metadata: view.trajectory.metadata,
        });
        const timeout = AbortSignal.timeout(params.timeout_ms);
        let response: Response;
        let text: string;
        try {
          response = await fetch(params.url, {
            method: 'POST',
            headers,
            body,
            signal: AbortSignal.any([context.signal, timeout]),
          });
          text = await response.text();
        } catch (error) {
          if (timeout.aborted && !context.signal.aborted) throw new RewardTimeoutError(params.timeout_ms);
          throw new RewardError(`the scoring endpoint failed: ${errorMessage(error)}`, true);
        }
        if (!response.ok) {
          const s = response.status;
          throw new RewardError(
            `the scoring endpoint answered HTTP ${s}: ${clip(text, 300)}`,
            s === 408 || s === 429 || s >= 500,
          );
        }
        const parsed = safeJsonParse(text);
        if (!parsed.ok) {
          throw new RewardError(
            `the scoring endpoint answered non-JSON: ${clip(text, 200)}`,
            true,
            'bad_score',
          );
        }
        const score = readScore(parsed.value, params.score_path);
        if (typeof score === 'string') throw new RewardError(`bad score: ${score}`, true, 'bad_score');
        scores.push({
          trajectoryId: view.trajectory.id,
          stepIndex: null,
          value: score,
          details: { url: params.url },
        });
      }
      return scores;
    };
  },
);

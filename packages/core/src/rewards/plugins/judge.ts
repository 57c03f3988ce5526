import OpenAI from 'openai';
import { z } from 'zod';
import { ValidationError } from '../../domain/index.js';
import { extractJson, safeJsonParse } from '../json-path.js';
import {
  definePlugin,
  errorMessage,
  NotApplicableError,
  type RewardContext,
  RewardError,
  type RewardScore,
  type TrajectoryView,
} from '../plugin.js';
import {
  type ChatMessage,
  clip,
  conversation,
  finalAnswer,
  renderTranscript,
  taskPrompt,
} from '../transcript.js';

// The LLM judge: bands 1-5 scored (band - 1) / 4; a reply without a clear band fails the attempt, never a
// default score. Prompt and parsing: docs/rewards.md#judge-trajectory-source-judge (and judge_group)

export const DEFAULT_BANDS = [
  'fails: wrong, off-task, harmful, or no real attempt',
  'poor: mostly wrong or incomplete, with major errors',
  'partial: addresses the task with notable gaps or errors',
  'good: correct and complete, with minor issues',
  'excellent: fully correct, complete and well executed',
] as const;

const endpointFields = {
  base_url: z.url().describe('OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1'),
  model: z.string().min(1).max(256),
  api_key: z.string().min(1).optional().describe('literal key (prefer api_key_env)'),
  api_key_env: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name')
    .optional()
    .describe('environment variable holding the key'),
  rubric: z.string().min(1).max(20_000).describe('what a good answer does; shown to the judge'),
  bands: z
    .array(z.string().min(1).max(500))
    .length(5, 'must hold exactly 5 band descriptions (band 1 first)')
    .optional(),
  show: z.enum(['answer', 'conversation']).default('conversation'),
  temperature: z.number().min(0).max(2).default(0),
  max_tokens: z.number().int().min(16).max(32_768).default(512),
  request_timeout_ms: z
    .number()
    .int()
    .min(1)
    .max(3_600_000)
    .optional()
    .describe('per HTTP request; the job timeout applies too'),
};

export const JudgeParams = z.strictObject({
  ...endpointFields,
  max_chars: z.number().int().min(200).max(1_000_000).default(24_000),
});
export type JudgeParams = z.infer<typeof JudgeParams>;

export const JudgeGroupParams = z.strictObject({
  ...endpointFields,
  max_chars: z.number().int().min(200).max(1_000_000).default(8_000).describe('per candidate'),
});
export type JudgeGroupParams = z.infer<typeof JudgeGroupParams>;

type EndpointParams = Pick<
  JudgeParams,
  'base_url' | 'model' | 'api_key' | 'api_key_env' | 'temperature' | 'max_tokens' | 'request_timeout_ms'
>;

export function bandToScore(band: number): number {
  return (band - 1) / 4;
}

function bandList(bands: readonly string[] | undefined): string {
  return (bands ?? DEFAULT_BANDS).map((d, i) => `${i + 1} — ${d}`).join('\n');
}

function stripThinking(reply: string): string {
  return reply.replace(/<think>[\s\S]*?<\/think>/g, '').trim();
}

/** A band 1-5 from a JSON value or text; an error string otherwise. */
function asBand(raw: unknown): number | string {
  const n = typeof raw === 'number' ? raw : typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : NaN;
  if (!Number.isFinite(n)) return `band ${JSON.stringify(raw)} is not a number`;
  if (!Number.isInteger(n) || n < 1 || n > 5) return `band ${n} is not one of 1, 2, 3, 4, 5`;
  return n;
}

/** The band in a single-trajectory verdict. */
export function parseBand(reply: string): { band: number; reason: string | null } | { error: string } {
  const text = stripThinking(reply);
  // The last JSON object that names a band (the judge may think aloud before it).
  const objects: Record<string, unknown>[] = [];
  const whole = extractJson(text);
  if (whole.ok && typeof whole.value === 'object' && whole.value !== null && !Array.isArray(whole.value)) {
    objects.push(whole.value as Record<string, unknown>);
  }
  for (const m of text.matchAll(/\{[^{}]*\}/g)) {
    const parsed = safeJsonParse(m[0]);
    if (parsed.ok && typeof parsed.value === 'object' && parsed.value !== null) {
      objects.push(parsed.value as Record<string, unknown>);
    }
  }
  const withBand = objects.filter((o) => Object.hasOwn(o, 'band')).at(-1);
  if (withBand) {
    const band = asBand(withBand.band);
    if (typeof band === 'string') return { error: band };
    return { band, reason: typeof withBand.reason === 'string' ? withBand.reason : null };
  }
  const line = [...text.matchAll(/\bband\b["'*]*\s*[:=]\s*["'*]*\s*(-?\d+(?:\.\d+)?)/gi)].at(-1);
  if (line) {
    const band = asBand(line[1]);
    return typeof band === 'string' ? { error: band } : { band, reason: null };
  }
  const bare = /^(?:band\s*)?(\d)(?:\s*\/\s*5)?\.?$/i.exec(text);
  if (bare) {
    const band = asBand(bare[1]);
    return typeof band === 'string' ? { error: band } : { band, reason: null };
  }
  return { error: `no band in the reply: ${JSON.stringify(clip(text, 200))}` };
}

/** One band per candidate, in order, from a group verdict. */
export function parseGroupBands(reply: string, n: number): { bands: number[] } | { error: string } {
  const parsed = extractJson(stripThinking(reply));
  if (!parsed.ok) return { error: `no JSON in the reply: ${JSON.stringify(clip(reply, 200))}` };
  const value = parsed.value;
  const list = Array.isArray(value)
    ? value
    : typeof value === 'object' && value !== null && Array.isArray((value as { bands?: unknown }).bands)
      ? (value as { bands: unknown[] }).bands
      : null;
  if (!list) return { error: 'the reply has no "bands" array' };
  if (list.length !== n) return { error: `the reply has ${list.length} bands for ${n} candidates` };
  const bands: number[] = [];
  for (const [i, raw] of list.entries()) {
    const band = asBand(raw);
    if (typeof band === 'string') return { error: `candidate ${i + 1}: ${band}` };
    bands.push(band);
  }
  return { bands };
}

function apiKeyOf(params: EndpointParams): string {
  if (params.api_key !== undefined) return params.api_key;
  if (params.api_key_env !== undefined) {
    const key = process.env[params.api_key_env];
    if (!key) {
      throw new ValidationError(
        `params.api_key_env: the environment variable ${params.api_key_env} is not set`,
        'params.api_key_env',
      );
    }
    return key;
  }
  return 'none'; // local OpenAI-compatible servers usually take any key
}

/** A chat call that reports failures as RewardErrors (retryable: connection, timeout, 408/409/429/5xx). */
export function judgeCaller(params: EndpointParams) {
  const client = new OpenAI({
    baseURL: params.base_url,
    apiKey: apiKeyOf(params),
    maxRetries: 0, // the reward workers retry, with backoff, and record the failure
    ...(params.request_timeout_ms ? { timeout: params.request_timeout_ms } : {}),
  });
  return async (messages: ChatMessage[], context: RewardContext): Promise<string> => {
    let completion: OpenAI.Chat.Completions.ChatCompletion;
    try {
      completion = await client.chat.completions.create(
        {
          model: params.model,
          messages: messages.map((m) => ({ role: m.role as 'system' | 'user', content: m.content })),
          temperature: params.temperature,
          max_tokens: params.max_tokens,
        },
        { signal: context.signal },
      );
    } catch (error) {
      if (error instanceof OpenAI.APIError && error.status !== undefined) {
        const retryable =
          error.status === 408 || error.status === 409 || error.status === 429 || error.status >= 500;
        throw new RewardError(`the judge answered HTTP ${error.status}: ${errorMessage(error)}`, retryable);
      }
      throw new RewardError(`the judge request failed: ${errorMessage(error)}`, true);
    }
    const content = completion?.choices?.[0]?.message?.content;
    if (typeof content !== 'string' || content.trim() === '') {
      throw new RewardError('the judge sent no text', true, 'bad_verdict');
    }
    return content;
  };
}

function shownText(
  view: TrajectoryView,
  show: JudgeParams['show'],
  max: number,
): { task: string; text: string } {
  const messages = conversation(view.steps);
  const task = taskPrompt(messages);
  const answer = finalAnswer(view.steps);
  if (messages.length === 0 || (show === 'answer' && answer === null)) {
    throw new NotApplicableError(
      `trajectory ${view.trajectory.id} has no text for the judge (no steps, or token-only steps)`,
    );
  }
  // The agent's system prompt is left out: often long, and not the work being graded.
  const text =
    show === 'answer'
      ? clip(answer ?? '', max)
      : renderTranscript(
          messages.filter((m) => m.role !== 'system'),
          max,
        );
  return { task: clip(task ?? '(no user message)', Math.min(max, 8_000)), text };
}

export function judgeMessages(params: JudgeParams, task: string, text: string): ChatMessage[] {
  const what = params.show === 'answer' ? 'final answer' : 'transcript';
  return [
    {
      role: 'system',
      content:
        "You are an impartial grader of an AI assistant's work. Grade it against the rubric with exactly one of these bands:\n" +
        `${bandList(params.bands)}\n` +
        'Judge only what is shown. You may reason briefly first; end your reply with a JSON object on its own line: ' +
        '{"band": <integer 1-5>, "reason": "<one sentence>"}',
    },
    {
      role: 'user',
      content: `## Rubric\n\n${params.rubric}\n\n## Task given to the assistant\n\n${task}\n\n## The assistant's ${what}\n\n${text}\n\n## Your reply\n\nEnd with {"band": <integer 1-5>, "reason": "..."}`,
    },
  ];
}

export function judgeGroupMessages(
  params: JudgeGroupParams,
  task: string,
  candidates: readonly string[],
): ChatMessage[] {
  const what = params.show === 'answer' ? 'final answer' : 'transcript';
  const shown = candidates.map((c, i) => `### Candidate ${i + 1}\n\n${c}`).join('\n\n');
  return [
    {
      role: 'system',
      content:
        'You compare several attempts by an AI assistant at the same task and grade each against the rubric with one of these bands:\n' +
        `${bandList(params.bands)}\n` +
        'Grade every candidate on its own merits, using the others to calibrate: equal work gets equal bands. ' +
        `Reply with only a JSON object: {"bands": [one integer 1-5 per candidate, in order]} (exactly ${candidates.length} numbers).`,
    },
    {
      role: 'user',
      content: `## Rubric\n\n${params.rubric}\n\n## Task given to the assistant\n\n${task}\n\n## Candidates (each one's ${what})\n\n${shown}\n\n## Your reply\n\n{"bands": [${candidates.map(() => 'b').join(', ')}]}`,
    },
  ];
}

export const judgePlugin = definePlugin(
  {
    name: 'judge',
    version: '1',
    description:
      'An LLM (any OpenAI-compatible endpoint) grades the trajectory against a rubric in five bands; band b scores (b-1)/4.',
    target: 'trajectory',
    source: 'judge',
  },
  JudgeParams,
  (params) => {
    const call = judgeCaller(params);
    return async (views, context) => {
      const scores: RewardScore[] = [];
      for (const view of views) {
        const { task, text } = shownText(view, params.show, params.max_chars);
        const reply = await call(judgeMessages(params, task, text), context);
        const verdict = parseBand(reply);
        if ('error' in verdict)
          throw new RewardError(`unparseable verdict: ${verdict.error}`, true, 'bad_verdict');
        scores.push({
          trajectoryId: view.trajectory.id,
          stepIndex: null,
          value: bandToScore(verdict.band),
          details: { band: verdict.band, reason: verdict.reason, model: params.model },
        });
      }
      return scores;
    };
  },
);

export const judgeGroupPlugin = definePlugin(
  {
    name: 'judge_group',
    version: '1',
    description:
      'An LLM grades all trajectories of a prompt group in one request (group-relative), one band per trajectory; band b scores (b-1)/4.',
    target: 'group',
    source: 'judge',
  },
  JudgeGroupParams,
  (params) => {
    const call = judgeCaller(params);
    return async (views, context) => {
      if (views.length === 0) throw new NotApplicableError('the group has no finished trajectories');
      const ordered = [...views].sort((a, b) => (a.trajectory.id < b.trajectory.id ? -1 : 1));
      const shown = ordered.map((v) => shownText(v, params.show, params.max_chars));
      const reply = await call(
        judgeGroupMessages(
          params,
          shown[0]!.task,
          shown.map((s) => s.text),
        ),
        context,
      );
      const verdict = parseGroupBands(reply, ordered.length);
      if ('error' in verdict)
        throw new RewardError(`unparseable verdict: ${verdict.error}`, true, 'bad_verdict');
      return ordered.map((v, i) => ({
        trajectoryId: v.trajectory.id,
        stepIndex: null,
        value: bandToScore(verdict.bands[i]!),
        details: { band: verdict.bands[i]!, candidate: i + 1, of: ordered.length, model: params.model },
      }));
    };
  },
);

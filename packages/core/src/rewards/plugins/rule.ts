import { z } from 'zod';
import type { Step } from '../../domain/index.js';
import { extractJson, JsonPathError, jsonEqual, parseJsonPath, readJsonPath } from '../json-path.js';
import { definePlugin, NotApplicableError, type RewardScore, type TrajectoryView } from '../plugin.js';
import { finalAnswer, toolResultTexts } from '../transcript.js';

// Rule rewards: deterministic checks of a text, 1 (match) or 0; a missing expected value is "not
// applicable", never a 0. Inputs and kinds: docs/rewards.md#rule-trajectory-and-rule_step-step-source-rule

const ExpectedKey = z
  .string()
  .min(1)
  .max(256)
  .describe('JSON path into the trajectory metadata holding the expected value');

const exactFields = {
  kind: z.literal('exact'),
  expected: z.string().optional(),
  expected_key: ExpectedKey.optional(),
  case_sensitive: z.boolean().default(true),
  trim: z.boolean().default(true),
};
const regexFields = {
  kind: z.literal('regex'),
  pattern: z.string().min(1).max(4096),
  flags: z
    .string()
    .regex(/^(?!.*(.).*\1)[imsu]*$/, 'must be distinct letters from i, m, s, u')
    .default(''),
};
const numericFields = {
  kind: z.literal('numeric'),
  expected: z.number().finite().optional(),
  expected_key: ExpectedKey.optional(),
  tolerance: z.number().finite().min(0, 'must be >= 0').default(0),
  relative: z.boolean().default(false),
};
const jsonPathFields = {
  kind: z.literal('json_path'),
  path: z.string().min(1).max(1024),
  expected: z.unknown().optional(),
  expected_key: ExpectedKey.optional(),
};

type MatchParams =
  | z.infer<z.ZodObject<typeof exactFields>>
  | z.infer<z.ZodObject<typeof regexFields>>
  | z.infer<z.ZodObject<typeof numericFields>>
  | z.infer<z.ZodObject<typeof jsonPathFields>>;

/** Checks zod cannot express: one source of the expected value, a pattern that compiles, a valid path. */
function refineMatch(m: MatchParams, ctx: z.RefinementCtx): void {
  if (m.kind !== 'regex') {
    const literal = m.expected !== undefined;
    const keyed = m.expected_key !== undefined;
    if (literal === keyed) {
      ctx.addIssue({
        code: 'custom',
        path: [literal ? 'expected_key' : 'expected'],
        message: 'give exactly one of expected and expected_key',
      });
    }
    if (keyed) {
      try {
        parseJsonPath(m.expected_key!);
      } catch (error) {
        ctx.addIssue({ code: 'custom', path: ['expected_key'], message: (error as Error).message });
      }
    }
  }
  if (m.kind === 'regex') {
    try {
      new RegExp(m.pattern, m.flags);
    } catch (error) {
      ctx.addIssue({ code: 'custom', path: ['pattern'], message: (error as Error).message });
    }
  }
  if (m.kind === 'json_path') {
    try {
      parseJsonPath(m.path);
    } catch (error) {
      ctx.addIssue({ code: 'custom', path: ['path'], message: (error as Error).message });
    }
  }
}

const TrajectoryInput = z.enum(['final_answer', 'tool_results', 'last_tool_result']).default('final_answer');
const StepInput = z.enum(['response', 'tool_results']).default('response');

export const RuleParams = z
  .discriminatedUnion('kind', [
    z.strictObject({ ...exactFields, input: TrajectoryInput }),
    z.strictObject({ ...regexFields, input: TrajectoryInput }),
    z.strictObject({ ...numericFields, input: TrajectoryInput }),
    z.strictObject({ ...jsonPathFields, input: TrajectoryInput }),
  ])
  .superRefine(refineMatch);
export type RuleParams = z.infer<typeof RuleParams>;

export const RuleStepParams = z
  .discriminatedUnion('kind', [
    z.strictObject({ ...exactFields, input: StepInput }),
    z.strictObject({ ...regexFields, input: StepInput }),
    z.strictObject({ ...numericFields, input: StepInput }),
    z.strictObject({ ...jsonPathFields, input: StepInput }),
  ])
  .superRefine(refineMatch);
export type RuleStepParams = z.infer<typeof RuleStepParams>;

const NUMBER = /[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?/g;

/** The last number written in a text (`1,234.5` reads as 1234.5); null when there is none. */
export function lastNumber(text: string): number | null {
  const found = text.match(NUMBER);
  if (!found) return null;
  const n = Number(found[found.length - 1]!.replaceAll(',', ''));
  return Number.isFinite(n) ? n : null;
}

/** The expected value: literal, or read from the trajectory metadata. */
function expectedOf(m: Exclude<MatchParams, { kind: 'regex' }>, view: TrajectoryView): unknown {
  if (m.expected_key === undefined) return m.expected;
  const value = readJsonPath(view.trajectory.metadata, parseJsonPath(m.expected_key));
  if (value === undefined || value === null) {
    throw new NotApplicableError(
      `trajectory ${view.trajectory.id} has no expected value at metadata ${m.expected_key}`,
    );
  }
  return value;
}

/** 1 or 0 for one text, with what was compared. */
export function matchText(
  m: MatchParams,
  text: string,
  view: TrajectoryView,
): { value: number; details: Record<string, unknown> } {
  switch (m.kind) {
    case 'exact': {
      const expected = expectedOf(m, view);
      if (typeof expected !== 'string' && typeof expected !== 'number') {
        throw new NotApplicableError(`the expected value at metadata ${m.expected_key} is not a string`);
      }
      const norm = (s: string) => {
        const t = m.trim ? s.trim() : s;
        return m.case_sensitive ? t : t.toLowerCase();
      };
      const matched = norm(text) === norm(String(expected));
      return { value: matched ? 1 : 0, details: { matched } };
    }
    case 'regex': {
      const matched = new RegExp(m.pattern, m.flags).test(text);
      return { value: matched ? 1 : 0, details: { matched } };
    }
    case 'numeric': {
      const raw = expectedOf(m, view);
      const expected = typeof raw === 'number' ? raw : typeof raw === 'string' ? Number(raw) : Number.NaN;
      if (!Number.isFinite(expected)) {
        throw new NotApplicableError(`the expected value at metadata ${m.expected_key} is not a number`);
      }
      const found = lastNumber(text);
      const allowed = m.relative ? m.tolerance * Math.abs(expected) : m.tolerance;
      const matched = found !== null && Math.abs(found - expected) <= allowed;
      return { value: matched ? 1 : 0, details: { matched, found, expected } };
    }
    case 'json_path': {
      const expected = expectedOf(m, view);
      const parsed = extractJson(text);
      if (!parsed.ok) return { value: 0, details: { matched: false, why: 'the text holds no JSON' } };
      let found: unknown;
      try {
        found = readJsonPath(parsed.value, parseJsonPath(m.path));
      } catch (error) {
        if (error instanceof JsonPathError) throw new NotApplicableError(error.message);
        throw error;
      }
      const matched = found !== undefined && jsonEqual(found, expected);
      return { value: matched ? 1 : 0, details: { matched } };
    }
  }
}

function requireText(view: TrajectoryView): void {
  if (view.steps.length === 0) {
    throw new NotApplicableError(`trajectory ${view.trajectory.id} has no steps to check`);
  }
  if (view.steps.every((s) => s.responseText === null && s.messages === null)) {
    throw new NotApplicableError(
      `trajectory ${view.trajectory.id} has token-only steps (no text to check); submit response_text with the steps`,
    );
  }
}

function trajectoryText(input: RuleParams['input'], steps: readonly Step[]): string {
  if (input === 'final_answer') return finalAnswer(steps) ?? '';
  const outputs = toolResultTexts(steps);
  return input === 'tool_results' ? outputs.join('\n') : (outputs.at(-1) ?? '');
}

export const rulePlugin = definePlugin(
  {
    name: 'rule',
    version: '1',
    description:
      'Deterministic check of the final answer or the tool results: exact match, regex, number within a tolerance, or a JSON path equal to a value. Scores 1 or 0.',
    target: 'trajectory',
    source: 'rule',
  },
  RuleParams,
  (params) => async (views) =>
    views.map((view): RewardScore => {
      requireText(view);
      const { value, details } = matchText(params, trajectoryText(params.input, view.steps), view);
      return {
        trajectoryId: view.trajectory.id,
        stepIndex: null,
        value,
        details: { kind: params.kind, input: params.input, ...details },
      };
    }),
);

export const ruleStepPlugin = definePlugin(
  {
    name: 'rule_step',
    version: '1',
    description:
      "The rule checks applied to every step: each step's response text or the tool outputs that followed it. Scores 1 or 0 per step.",
    target: 'step',
    source: 'rule',
  },
  RuleStepParams,
  (params) => async (views) =>
    views.flatMap((view) => {
      requireText(view);
      return view.steps.map((step): RewardScore => {
        const text =
          params.input === 'response'
            ? (step.responseText ?? '')
            : (step.toolResults ?? []).map((r) => r.content).join('\n');
        const { value, details } = matchText(params, text, view);
        return {
          trajectoryId: view.trajectory.id,
          stepIndex: step.index,
          value,
          details: { kind: params.kind, input: params.input, ...details },
        };
      });
    }),
);

import { ValidationError } from '@stepwise/core';
import type { GymTask, RubricBands, RubricRule } from './schema.js';

/*
 * ClawGym-SynData's rubric and aggregation fields, as our judge rubric and code/rubric weights.
 * A rule is `{name, file_path, scores: {"0", "0.25", "0.5", "0.75", "1"}}` (persona2task's `rules`,
 * skill2task's `rules`), or a legacy skill2task `rubrics` entry `{name, target_file, rule}`, or (the
 * Hugging Face `rule`) a text or a list of texts. `reward_aggregation` (else derived from
 * `validation_mode`) says how the code and rubric scores combine.
 */

const BAND_KEYS = ['0', '0.25', '0.5', '0.75', '1'] as const;
// The spellings SynData accepts for each band key.
const BAND_ALIASES: Record<string, (typeof BAND_KEYS)[number]> = {
  '0': '0',
  '0.0': '0',
  '0.25': '0.25',
  '0.5': '0.5',
  '0.50': '0.5',
  '0.75': '0.75',
  '1': '1',
  '1.0': '1',
};

export type ValidationMode = 'code' | 'rubric' | 'code_and_rubric';
export const VALIDATION_MODES: readonly ValidationMode[] = ['code', 'rubric', 'code_and_rubric'];

/** A rule's file as SynData stores it: under `output/` (an absolute path stays absolute). */
export function ruleFilePath(filePath: string): string {
  const trimmed = filePath.trim();
  const parts = trimmed.split('/').filter((p) => p !== '' && p !== '.');
  if (trimmed.startsWith('/')) return `/${parts.join('/')}`;
  const rest = parts[0] === 'output' ? parts.slice(1) : parts;
  return ['output', ...rest].join('/');
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function nonEmpty(value: unknown): value is string {
  return typeof value === 'string' && value.trim() !== '';
}

function bandsOf(scores: unknown, field: string): RubricBands {
  if (!isObject(scores)) throw new ValidationError(`${field}: must be an object`, field);
  const out: Partial<Record<(typeof BAND_KEYS)[number], string>> = {};
  for (const [raw, text] of Object.entries(scores)) {
    const key = BAND_ALIASES[raw.trim()];
    if (!key) throw new ValidationError(`${field}: unsupported band ${JSON.stringify(raw)}`, field);
    if (key in out) throw new ValidationError(`${field}: band ${key} is given twice`, field);
    if (!nonEmpty(text)) throw new ValidationError(`${field}.${raw}: must be a non-empty text`, field);
    out[key] = text.trim();
  }
  const missing = BAND_KEYS.filter((k) => !(k in out));
  if (missing.length > 0)
    throw new ValidationError(`${field}: bands ${missing.join(', ')} are missing`, field);
  return out as RubricBands;
}

/** One `{name, file_path, scores}` rule (exactly those keys, as SynData requires). */
function scoredRule(value: Record<string, unknown>, field: string): RubricRule {
  const keys = Object.keys(value).sort().join(',');
  if (keys !== 'file_path,name,scores')
    throw new ValidationError(`${field}: must have exactly name, file_path and scores`, field);
  if (!nonEmpty(value.name) || !nonEmpty(value.file_path))
    throw new ValidationError(`${field}: name and file_path must be non-empty texts`, field);
  const scores = bandsOf(value.scores, `${field}.scores`);
  const filePath = ruleFilePath(value.file_path);
  // The top band says what the rule asks for; the judge is shown every band.
  return { name: value.name.trim(), description: scores['1'], weight: 1, filePath, scores };
}

/** A legacy skill2task `rubrics` entry `{name, target_file, rule}`. */
function legacyRule(value: Record<string, unknown>, field: string): RubricRule {
  const keys = Object.keys(value).sort().join(',');
  if (keys !== 'name,rule,target_file')
    throw new ValidationError(`${field}: must have exactly name, target_file and rule`, field);
  if (!nonEmpty(value.name) || !nonEmpty(value.target_file) || !nonEmpty(value.rule))
    throw new ValidationError(`${field}: name, target_file and rule must be non-empty texts`, field);
  return {
    name: value.name.trim(),
    description: value.rule.trim(),
    weight: 1,
    filePath: ruleFilePath(value.target_file),
  };
}

/**
 * Rubric rules from a `rule` / `rules` value: a text is one rule, a list of texts one rule each, a
 * list of `{name, file_path, scores}` objects (or one such object) keeps each rule's file and bands.
 * Python's falsy values (null, "", [], {}) are no rule. A malformed rule object is an error.
 */
export function rubricFromRules(value: unknown, field = 'rules'): RubricRule[] {
  if (value === null || value === undefined || value === '') return [];
  if (typeof value === 'string')
    return value.trim() === '' ? [] : [{ name: 'rule', description: value.trim(), weight: 1 }];
  if (isObject(value)) return Object.keys(value).length === 0 ? [] : [scoredRule(value, field)];
  if (!Array.isArray(value))
    throw new ValidationError(`${field}: must be a text, an object or a list`, field);
  const rules = value.map((r, i): RubricRule => {
    const where = `${field}[${i}]`;
    if (nonEmpty(r)) return { name: `rule_${i + 1}`, description: r.trim(), weight: 1 };
    if (isObject(r)) return 'target_file' in r ? legacyRule(r, where) : scoredRule(r, where);
    throw new ValidationError(`${where}: must be a non-empty text or a rule object`, where);
  });
  const names = new Set(rules.map((r) => r.name));
  if (names.size < rules.length)
    throw new ValidationError(`${field}: two rules share a name (the judge answers by name)`, field);
  return rules;
}

/** SynData's rules of a mapping: `rules` when non-empty, else the legacy `rubrics`, else `rule`. */
export function rubricOf(mapping: Record<string, unknown>, where = ''): RubricRule[] {
  const given = (k: string) => k in mapping && mapping[k] !== null && !isEmptyList(mapping[k]);
  const at = where ? `${where}: ` : '';
  if (given('rules')) return rubricFromRules(mapping.rules, `${at}rules`);
  if (given('rubrics')) return rubricFromRules(mapping.rubrics, `${at}rubrics`);
  if (given('rule')) return rubricFromRules(mapping.rule, `${at}rule`);
  return [];
}

function isEmptyList(value: unknown): boolean {
  return Array.isArray(value) && value.length === 0;
}

export function validationModeOf(value: unknown, field = 'validation_mode'): ValidationMode {
  if (value === undefined || value === null) return 'code';
  if (typeof value !== 'string' || !(VALIDATION_MODES as readonly string[]).includes(value))
    throw new ValidationError(`${field}: must be one of ${VALIDATION_MODES.join(', ')}`, field);
  return value as ValidationMode;
}

/**
 * The code/rubric weights of `reward_aggregation` (else the one `validation_mode` implies, as SynData
 * derives it); null when the record has neither, so the task keeps ClawGym-Bench's 0.7 / 0.3.
 */
export function weightsOf(
  aggregation: unknown,
  mode: ValidationMode | null,
  field = 'reward_aggregation',
): GymTask['weights'] | null {
  let name = aggregation;
  if (name === undefined || name === null) {
    if (mode === null) return null;
    name =
      mode === 'rubric'
        ? 'rubric_only'
        : mode === 'code_and_rubric'
          ? 'average_code_and_rubric'
          : 'code_only';
  }
  if (name === 'code_only') return { code: 1, rubric: 0 };
  if (name === 'rubric_only') return { code: 0, rubric: 1 };
  if (name === 'average_code_and_rubric') return { code: 1, rubric: 1 };
  throw new ValidationError(
    `${field}: must be code_only, rubric_only or average_code_and_rubric (got ${JSON.stringify(name)})`,
    field,
  );
}

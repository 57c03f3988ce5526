import { ValidationError } from '../domain/errors.js';

/*
 * Type checks of the sampling options an agent sends (chat, completions, /generate's
 * sampling_params). The engine checks ranges; the gateway only makes sure that what it forwards and
 * stores with the step is what the option's name promises, so `temperature: "hot"` is a 400 naming
 * the field instead of an engine's guess or a step that records nonsense.
 */

type Kind = 'number' | 'integer' | 'boolean' | 'stop' | 'logprobs';

const OPTIONS: Record<string, Kind> = {
  temperature: 'number',
  top_p: 'number',
  min_p: 'number',
  presence_penalty: 'number',
  frequency_penalty: 'number',
  repetition_penalty: 'number',
  top_k: 'integer',
  max_tokens: 'integer',
  max_completion_tokens: 'integer',
  max_new_tokens: 'integer',
  min_tokens: 'integer',
  seed: 'integer',
  top_logprobs: 'integer',
  ignore_eos: 'boolean',
  skip_special_tokens: 'boolean',
  stop: 'stop',
  logprobs: 'logprobs',
};

const MESSAGES: Record<Kind, string> = {
  number: 'must be a number',
  integer: 'must be an integer',
  boolean: 'must be a boolean',
  stop: 'must be a string or an array of strings',
  logprobs: 'must be a boolean or a non-negative integer',
};

function fits(kind: Kind, value: unknown): boolean {
  switch (kind) {
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return Number.isSafeInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'stop':
      return typeof value === 'string' || (Array.isArray(value) && value.every((s) => typeof s === 'string'));
    case 'logprobs':
      // Chat takes a boolean, completions (OpenAI, vLLM) a count of top log-probs.
      return typeof value === 'boolean' || (Number.isSafeInteger(value) && (value as number) >= 0);
  }
}

/** Throws a 400 naming the first option (`prefix` + its name) whose value has the wrong type; null is absent. */
export function checkSamplingOptions(options: Record<string, unknown>, prefix = ''): void {
  for (const [name, kind] of Object.entries(OPTIONS)) {
    const value = options[name];
    if (value === undefined || value === null || fits(kind, value)) continue;
    throw new ValidationError(`${prefix}${name}: ${MESSAGES[kind]}`, `${prefix}${name}`);
  }
}

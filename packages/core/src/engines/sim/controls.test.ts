import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../domain/errors.js';
import { jsonForSchema, resolveResponseFormat, resolveToolChoice, structuredAnswer } from './controls.js';

const tools = [
  { type: 'function' as const, function: { name: 'read_file' } },
  { type: 'function' as const, function: { name: 'run' } },
];

/** The field a ValidationError names, or the error itself when something else was thrown. */
function fieldOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    if (error instanceof ValidationError) return error.field;
    throw error;
  }
  throw new Error('expected a ValidationError');
}

describe('resolveToolChoice', () => {
  it('defaults to auto with tools and none without', () => {
    expect(resolveToolChoice(undefined, tools)).toBe('auto');
    expect(resolveToolChoice(null, tools)).toBe('auto');
    expect(resolveToolChoice(undefined, [])).toBe('none');
    expect(resolveToolChoice(undefined, null)).toBe('none');
  });

  it('passes modes and named functions through, as vLLM does', () => {
    expect(resolveToolChoice('none', undefined)).toBe('none');
    expect(resolveToolChoice('auto', tools)).toBe('auto');
    expect(resolveToolChoice('required', tools)).toBe('required');
    // "required" with an empty list behaves as "none" (OpenAI's behaviour, which vLLM copies).
    expect(resolveToolChoice('required', [])).toBe('none');
    expect(resolveToolChoice({ type: 'function', function: { name: 'run' } }, tools)).toEqual({
      name: 'run',
    });
  });

  it('rejects bad values naming the field', () => {
    expect(fieldOf(() => resolveToolChoice('sometimes', tools))).toBe('tool_choice');
    expect(fieldOf(() => resolveToolChoice(3, tools))).toBe('tool_choice');
    expect(fieldOf(() => resolveToolChoice('auto', undefined))).toBe('tool_choice');
    expect(fieldOf(() => resolveToolChoice({ type: 'function', function: {} }, tools))).toBe(
      'tool_choice.function.name',
    );
    expect(fieldOf(() => resolveToolChoice({ type: 'function', function: { name: '' } }, tools))).toBe(
      'tool_choice.function.name',
    );
    expect(fieldOf(() => resolveToolChoice({ type: 'tool', function: { name: 'run' } }, tools))).toBe(
      'tool_choice.type',
    );
    expect(fieldOf(() => resolveToolChoice({ type: 'function' }, tools))).toBe('tool_choice.function');
    expect(() => resolveToolChoice({ type: 'function', function: { name: 'write' } }, tools)).toThrow(
      /"write".*not one of the tools/,
    );
  });
});

describe('resolveResponseFormat', () => {
  it('returns the JSON formats and nothing for text', () => {
    expect(resolveResponseFormat(undefined)).toBeUndefined();
    expect(resolveResponseFormat({ type: 'text' })).toBeUndefined();
    expect(resolveResponseFormat({ type: 'json_object' })).toEqual({ type: 'json_object' });
    const schema = { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } };
    expect(resolveResponseFormat(schema)).toEqual(schema);
  });

  it('rejects bad values naming the field', () => {
    expect(fieldOf(() => resolveResponseFormat({ type: 'yaml' }))).toBe('response_format.type');
    expect(fieldOf(() => resolveResponseFormat({}))).toBe('response_format.type');
    expect(fieldOf(() => resolveResponseFormat('json'))).toBe('response_format');
    expect(fieldOf(() => resolveResponseFormat({ type: 'json_schema' }))).toBe('response_format.json_schema');
    expect(fieldOf(() => resolveResponseFormat({ type: 'json_schema', json_schema: { schema: {} } }))).toBe(
      'response_format.json_schema.name',
    );
    expect(
      fieldOf(() => resolveResponseFormat({ type: 'json_schema', json_schema: { name: 'x', schema: 3 } })),
    ).toBe('response_format.json_schema.schema');
  });
});

describe('jsonForSchema', () => {
  it('fills required properties by type, the answer where a string fits', () => {
    const schema = {
      type: 'object',
      properties: {
        answer: { type: 'string' },
        confidence: { type: 'number', minimum: 0.5, maximum: 1 },
        count: { type: 'integer', exclusiveMinimum: 2 },
        done: { type: 'boolean' },
        note: { type: 'string' },
      },
      required: ['answer', 'confidence', 'count', 'done'],
      additionalProperties: false,
    };
    expect(jsonForSchema(schema, 'yes')).toEqual({ answer: 'yes', confidence: 0.5, count: 3, done: true });
  });

  it('handles enums, const, unions, arrays, nested objects, $refs and nullable types', () => {
    const schema = {
      type: 'object',
      $defs: { Step: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] } },
      properties: {
        kind: { enum: ['a', 'b'] },
        version: { const: 2 },
        either: { anyOf: [{ type: 'integer', maximum: -4 }, { type: 'string' }] },
        steps: { type: 'array', items: { $ref: '#/$defs/Step' }, minItems: 2 },
        maybe: { type: ['null', 'string'] },
        short: { type: 'string', maxLength: 2 },
        long: { type: 'string', minLength: 5 },
        nothing: { type: 'null' },
        free: {},
      },
    };
    expect(jsonForSchema(schema, 'héllo wörld')).toEqual({
      kind: 'a',
      version: 2,
      either: -4,
      steps: [{ cmd: 'héllo wörld' }, { cmd: 'héllo wörld' }],
      maybe: 'héllo wörld',
      short: 'hé',
      long: 'héllo wörld',
      nothing: null,
      free: 'héllo wörld',
    });
    expect(jsonForSchema({ type: 'string', minLength: 4 }, 'ok')).toBe('ok  ');
  });

  it('puts the answer in an open object without properties, and terminates on recursive schemas', () => {
    expect(jsonForSchema({ type: 'object' }, 'x')).toEqual({ answer: 'x' });
    expect(jsonForSchema({ type: 'object', additionalProperties: false }, 'x')).toEqual({});
    expect(jsonForSchema(true, 'x')).toEqual({ answer: 'x' });
    const loop = { type: 'object', properties: { next: { $ref: '#' } }, required: ['next'] };
    expect(JSON.stringify(jsonForSchema(loop, 'x'))).toMatch(/^(\{"next":)+"x"\}+$/);
    expect(jsonForSchema({ type: 'object', required: ['__proto__'] }, 'x')).toHaveProperty('__proto__', 'x');
  });
});

describe('structuredAnswer', () => {
  it('writes valid JSON for both JSON formats', () => {
    const answer = 'He said "hi"\n— 你好 🌍';
    expect(JSON.parse(structuredAnswer({ type: 'json_object' }, answer))).toEqual({ answer });
    expect(JSON.parse(structuredAnswer({ type: 'json_schema', json_schema: { name: 'n' } }, answer))).toEqual(
      {
        answer,
      },
    );
    const schema = { type: 'object', properties: { reply: { type: 'string' } }, required: ['reply'] };
    expect(
      JSON.parse(structuredAnswer({ type: 'json_schema', json_schema: { name: 'n', schema } }, answer)),
    ).toEqual({ reply: answer });
  });
});

import { z } from 'zod';
import { parseOrThrow, ValidationError } from '../../domain/errors.js';
import type { ChatToolInput } from '../../text/index.js';

/*
 * What a request allows the completion to be: `tool_choice` and `response_format`. The zod schemas
 * check the shape (the HTTP layer puts them in its body schema, the engine parses with them again so a
 * direct caller gets the same errors); the rules that need the rest of the request (a named tool must
 * be offered) follow vLLM's `check_tool_usage`.
 */

const TOOL_CHOICE_HINT =
  'must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}';

const ToolChoiceMode = z.enum(['none', 'auto', 'required'], TOOL_CHOICE_HINT);

const NamedToolChoice = z.looseObject(
  {
    type: z.literal('function', 'must be "function"'),
    function: z.looseObject(
      { name: z.string('must be a string').min(1, 'must not be empty') },
      'must be an object with a "name"',
    ),
  },
  TOOL_CHOICE_HINT,
);

/** OpenAI `tool_choice`, as sent. */
export type ToolChoiceInput = z.infer<typeof ToolChoiceMode> | z.infer<typeof NamedToolChoice>;

/**
 * A string is a mode, anything else a named function: dispatching on the kind (rather than a zod union)
 * keeps the issue's path, so a bad name is reported as `tool_choice.function.name`.
 */
export const ToolChoice = z.custom<ToolChoiceInput>().transform((value: unknown, ctx): ToolChoiceInput => {
  const result = (typeof value === 'string' ? ToolChoiceMode : NamedToolChoice).safeParse(value);
  if (result.success) return result.data;
  for (const issue of result.error.issues) {
    ctx.issues.push({ code: 'custom', message: issue.message, input: value, path: issue.path });
  }
  return z.NEVER;
});

const JsonSchemaFormat = z.looseObject(
  {
    name: z.string('must be a string'),
    description: z.string().nullable().optional(),
    schema: z.record(z.string(), z.unknown(), 'must be a JSON Schema object').nullable().optional(),
    strict: z.boolean().nullable().optional(),
  },
  'must be an object with a "name" and a "schema"',
);

/** OpenAI `response_format` (vLLM's `structural_tag` is not supported by the sim). */
export const ResponseFormat = z.discriminatedUnion(
  'type',
  [
    z.looseObject({ type: z.literal('text') }),
    z.looseObject({ type: z.literal('json_object') }),
    z.looseObject({ type: z.literal('json_schema'), json_schema: JsonSchemaFormat }),
  ],
  { error: 'must be an object whose type is "text", "json_object" or "json_schema"' },
);
export type ResponseFormatInput = z.input<typeof ResponseFormat>;

/** The tool choice a policy is given: absent tools mean "none", a named function is just its name. */
export type SimToolChoice = 'none' | 'auto' | 'required' | { name: string };

/**
 * Validates `tool_choice` against the offered tools as vLLM does: the default is "auto" with tools and
 * "none" without; any choice but "none" needs `tools`; "required" with an empty list behaves as "none";
 * a named function must be one of the tools.
 */
export function resolveToolChoice(
  value: unknown,
  tools: readonly ChatToolInput[] | null | undefined,
): SimToolChoice {
  const choice = parseOrThrow(ToolChoice.nullable().optional(), value, 'tool_choice');
  if (choice == null) return tools && tools.length > 0 ? 'auto' : 'none';
  if (choice === 'none') return 'none';
  if (tools == null)
    throw new ValidationError('when tool_choice is set, tools must be set too', 'tool_choice');
  if (choice === 'required' && tools.length === 0) return 'none';
  if (choice === 'auto' || choice === 'required') return choice;
  const name = choice.function.name;
  if (!tools.some((t) => t.function.name === name)) {
    throw new ValidationError(
      `the tool ${JSON.stringify(name)} named in tool_choice is not one of the tools`,
      'tool_choice.function.name',
    );
  }
  return { name };
}

/** The validated `response_format`, or undefined when it asks for plain text (or is absent). */
export function resolveResponseFormat(
  value: unknown,
): Exclude<ResponseFormatInput, { type: 'text' }> | undefined {
  const format = parseOrThrow(ResponseFormat.nullable().optional(), value, 'response_format');
  return format == null || format.type === 'text' ? undefined : format;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** Resolves a local `$ref` (`#`, `#/$defs/X`, any JSON pointer into the root schema). */
function resolveRef(root: unknown, ref: string): unknown {
  if (!ref.startsWith('#')) return {};
  let node: unknown = root;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const key = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (!isObject(node) || !(key in node)) return {};
    node = node[key];
  }
  return node;
}

function numberFor(schema: Record<string, unknown>, integer: boolean): number {
  let v = 0;
  const min = num(schema.minimum);
  const exclusiveMin = num(schema.exclusiveMinimum);
  const max = num(schema.maximum);
  const exclusiveMax = num(schema.exclusiveMaximum);
  if (min !== undefined && v < min) v = min;
  if (exclusiveMin !== undefined && v <= exclusiveMin) v = exclusiveMin + 1;
  if (max !== undefined && v > max) v = max;
  if (exclusiveMax !== undefined && v >= exclusiveMax) v = exclusiveMax - 1;
  return integer ? Math.ceil(v) : v;
}

function stringFor(schema: Record<string, unknown>, answer: string): string {
  const min = num(schema.minLength) ?? 0;
  const max = num(schema.maxLength);
  const chars = [...answer];
  const cut = max !== undefined && chars.length > max ? chars.slice(0, max).join('') : answer;
  return cut.length < min ? cut.padEnd(min, ' ') : cut;
}

const MAX_DEPTH = 16;

function valueFor(schema: unknown, answer: string, root: unknown, depth: number): unknown {
  // `true`, `{}` and anything past the depth limit accept any value: the answer itself.
  if (!isObject(schema) || depth > MAX_DEPTH) return answer;
  if (typeof schema.$ref === 'string')
    return valueFor(resolveRef(root, schema.$ref), answer, root, depth + 1);
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    const options = schema[key];
    if (Array.isArray(options) && options.length > 0) return valueFor(options[0], answer, root, depth + 1);
  }
  const type = Array.isArray(schema.type)
    ? (schema.type.find((t) => t !== 'null') ?? schema.type[0])
    : schema.type;
  switch (type) {
    case 'string':
      return stringFor(schema, answer);
    case 'integer':
      return numberFor(schema, true);
    case 'number':
      return numberFor(schema, false);
    case 'boolean':
      return true;
    case 'null':
      return null;
    case 'array': {
      const n = Math.max(0, Math.ceil(num(schema.minItems) ?? 0));
      return Array.from({ length: n }, () => valueFor(schema.items ?? {}, answer, root, depth + 1));
    }
    case 'object':
      return objectFor(schema, answer, root, depth);
    default:
      return isObject(schema.properties) ? objectFor(schema, answer, root, depth) : answer;
  }
}

function objectFor(
  schema: Record<string, unknown>,
  answer: string,
  root: unknown,
  depth: number,
): Record<string, unknown> {
  const props = isObject(schema.properties) ? schema.properties : {};
  const required = Array.isArray(schema.required)
    ? schema.required.filter((k): k is string => typeof k === 'string')
    : [];
  const keys = required.length > 0 ? required : Object.keys(props);
  if (keys.length === 0) return schema.additionalProperties === false ? {} : { answer };
  // fromEntries defines own properties, so a key such as "__proto__" stays data.
  return Object.fromEntries(keys.map((k) => [k, valueFor(props[k] ?? {}, answer, root, depth + 1)]));
}

/**
 * A small JSON value that satisfies the schema, carrying the answer text where a string fits: required
 * properties (all properties when none are required) filled recursively, the first `enum`/`anyOf`
 * option, `const`, numbers at 0 moved into `minimum`/`maximum`, `minItems` items, local `$ref`s.
 * Not a validator: `pattern`, `format` and combinations of `allOf` are not honoured.
 */
export function jsonForSchema(schema: unknown, answer: string): unknown {
  return isObject(schema) ? valueFor(schema, answer, schema, 0) : { answer };
}

/**
 * The completion text a JSON `response_format` turns the policy's answer into: `{"answer": ...}` for
 * `json_object` (and for a `json_schema` without a schema), a schema-shaped value for `json_schema`.
 */
export function structuredAnswer(
  format: Exclude<ResponseFormatInput, { type: 'text' }>,
  answer: string,
): string {
  if (format.type === 'json_object' || format.json_schema.schema == null) return JSON.stringify({ answer });
  return JSON.stringify(jsonForSchema(format.json_schema.schema, answer));
}

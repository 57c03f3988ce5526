import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { WIRE } from '../packages/core/src/domain/wire-batch.js';
import { AGENT_HEADERS, LEASE_HEADERS } from '../packages/core/src/domain/wire-headers.js';

/*
 * The wire, generated: the zod schemas of packages/core/src/domain/wire-batch.ts (and the header names of
 * wire-headers.ts) as JSON Schema, and from that JSON Schema the Python client's dataclasses and
 * constants. `npm run gen:wire` writes both files; test/wire-schema.test.ts regenerates them and
 * fails when the committed ones differ, so neither language drifts from the schema.
 */

export const SCHEMA_FILE = fileURLToPath(new URL('../schema/wire.schema.json', import.meta.url));
export const PYTHON_FILE = fileURLToPath(
  new URL('../clients/python/stepwise_client/wire.py', import.meta.url),
);

type Json = Record<string, unknown>;

/** The JSON Schema of the wire: the batch formats, every object in `$defs`, the header names. */
export function wireSchema(): Json {
  const schema = z.toJSONSchema(WIRE, { io: 'output', target: 'draft-2020-12' }) as Json;
  return {
    ...schema,
    $id: 'https://stepwise.dev/schema/wire.schema.json',
    title: 'Stepwise wire',
    description:
      'What a trainer reads from Stepwise: leased batches in the json format, and the header names of the wire. Generated from packages/core/src/domain/wire-batch.ts by `npm run gen:wire`.',
    'x-headers': { lease: LEASE_HEADERS, agent: AGENT_HEADERS },
  };
}

const snake = (name: string) => name.replace(/([a-z])([A-Z])/g, '$1_$2').toUpperCase();

/** A field's Python type and the expression that converts its JSON value `v`. */
function pyType(s: Json): { hint: string; convert: (v: string) => string } {
  const ref = typeof s.$ref === 'string' ? s.$ref.replace('#/$defs/', '') : null;
  if (ref) return { hint: ref, convert: (v) => `${ref}.from_dict(${v})` };
  const options = (s.anyOf ?? s.oneOf) as Json[] | undefined;
  if (options) {
    const rest = options.filter((o) => o.type !== 'null');
    if (rest.length === 1 && rest.length < options.length) return nullable(pyType(rest[0]!));
    throw new Error(`a union the generator does not write: ${JSON.stringify(s)}`);
  }
  if (Array.isArray(s.type)) {
    const rest = (s.type as string[]).filter((t) => t !== 'null');
    if (rest.length === 1 && rest.length < s.type.length) return nullable(pyType({ ...s, type: rest[0] }));
    throw new Error(`a union of types the generator does not write: ${JSON.stringify(s)}`);
  }
  if (Array.isArray(s.enum))
    return { hint: `Literal[${s.enum.map((e) => JSON.stringify(e)).join(', ')}]`, convert: (v) => v };
  if (s.const !== undefined) return { hint: `Literal[${JSON.stringify(s.const)}]`, convert: (v) => v };
  switch (s.type) {
    case 'integer':
      return { hint: 'int', convert: (v) => v };
    case 'number':
      return { hint: 'float', convert: (v) => v };
    case 'string':
      return { hint: 'str', convert: (v) => v };
    case 'boolean':
      return { hint: 'bool', convert: (v) => v };
    case 'array': {
      if (Array.isArray(s.prefixItems)) {
        const items = (s.prefixItems as Json[]).map(pyType);
        return { hint: `tuple[${items.map((i) => i.hint).join(', ')}]`, convert: (v) => `tuple(${v})` };
      }
      const item = pyType(s.items as Json);
      const plain = item.convert('x') === 'x';
      return {
        hint: `list[${item.hint}]`,
        convert: (v) => (plain ? v : `[${item.convert('x')} for x in ${v}]`),
      };
    }
    case 'object':
      if (s.properties) throw new Error(`an object without an id: name it with .meta({ id }): ${JSON.stringify(s)}`);
      return { hint: 'dict[str, Any]', convert: (v) => v };
  }
  if (Object.keys(s).length === 0) return { hint: 'Any', convert: (v) => v };
  throw new Error(`a schema the generator does not write: ${JSON.stringify(s)}`);
}

function nullable(t: { hint: string; convert: (v: string) => string }) {
  const plain = t.convert('v') === 'v';
  return {
    hint: `${t.hint} | None`,
    convert: (v: string) => (plain ? v : `None if ${v} is None else ${t.convert(v)}`),
  };
}

const pyDoc = (text: string, indent: string) => `${indent}"""${text.replace(/"""/g, "'''")}"""`;

function pyClass(name: string, def: Json): string {
  const props = (def.properties ?? {}) as Record<string, Json>;
  const required = new Set((def.required ?? []) as string[]);
  // A dataclass takes its defaulted (optional) fields last.
  const names = [
    ...Object.keys(props).filter((k) => required.has(k)),
    ...Object.keys(props).filter((k) => !required.has(k)),
  ];
  const lines = ['@dataclass', `class ${name}:`];
  if (typeof def.description === 'string') lines.push(pyDoc(def.description, '    '), '');
  for (const key of names) {
    const t = pyType(props[key]!);
    lines.push(required.has(key) ? `    ${key}: ${t.hint}` : `    ${key}: ${t.hint} | None = None`);
  }
  lines.push('', '    @classmethod', `    def from_dict(cls, d: dict[str, Any]) -> ${name}:`);
  lines.push(`        """A ${name} from its decoded JSON; a missing field raises StepwiseFormatError naming it."""`);
  lines.push('        return cls(');
  for (const key of names) {
    const t = pyType(props[key]!);
    const k = JSON.stringify(key);
    const plain = t.convert('v') === 'v';
    if (required.has(key))
      lines.push(
        plain
          ? `            ${key}=_field(d, ${k}, ${JSON.stringify(name)}),`
          : `            ${key}=_apply(_field(d, ${k}, ${JSON.stringify(name)}), lambda v: ${t.convert('v')}),`,
      );
    else lines.push(plain ? `            ${key}=d.get(${k}),` : `            ${key}=_opt(d, ${k}, lambda v: ${t.convert('v')}),`);
  }
  lines.push('        )');
  return lines.join('\n');
}

/** The Python module: a dataclass per object of the schema, and the header names. */
export function wirePython(schema: Json): string {
  const defs = (schema.$defs ?? {}) as Record<string, Json>;
  const headers = schema['x-headers'] as Record<string, Record<string, string>>;
  const headerBlocks = Object.entries(headers).map(([group, names]) => {
    const cls = `${group[0]!.toUpperCase()}${group.slice(1)}Headers`;
    return [
      `class ${cls}:`,
      `    """The ${group} header names of the wire (lower case; HTTP matches them case-insensitively)."""`,
      '',
      ...Object.entries(names).map(([k, v]) => `    ${snake(k)} = ${JSON.stringify(v)}`),
    ].join('\n');
  });
  const classes = Object.keys(defs)
    .sort()
    .map((name) => pyClass(name, defs[name]!));
  return `${[
    '"""The Stepwise wire as Python dataclasses and constants.',
    '',
    'GENERATED by `npm run gen:wire` from schema/wire.schema.json (itself generated from',
    'packages/core/src/domain/wire-batch.ts): do not edit. test/wire-schema.test.ts fails when this file is not what',
    "the schema generates. `from_dict` reads the fields the schema names and ignores others, so a newer",
    'server that adds a field does not break an older client.',
    '"""',
    '',
    'from __future__ import annotations',
    '',
    'from dataclasses import dataclass',
    'from typing import Any, Callable, Literal',
    '',
    'from .errors import StepwiseFormatError',
    '',
    '',
    'def _field(d: dict[str, Any], key: str, owner: str) -> Any:',
    '    if not isinstance(d, dict):',
    '        raise StepwiseFormatError(f"{owner}: expected a JSON object, got {type(d).__name__}")',
    '    if key not in d:',
    '        raise StepwiseFormatError(f"{owner}: the field {key!r} is missing")',
    '    return d[key]',
    '',
    '',
    'def _apply(value: Any, convert: Callable[[Any], Any]) -> Any:',
    '    return convert(value)',
    '',
    '',
    'def _opt(d: dict[str, Any], key: str, convert: Callable[[Any], Any]) -> Any:',
    '    value = d.get(key)',
    '    return None if value is None else convert(value)',
    '',
    '',
    headerBlocks.join('\n\n\n'),
    '',
    '',
    classes.join('\n\n\n'),
  ].join('\n')}\n`;
}

/** Both files' text, as `npm run gen:wire` writes them. */
export function generateWire(): { schema: string; python: string } {
  const schema = wireSchema();
  return { schema: `${JSON.stringify(schema, null, 2)}\n`, python: wirePython(schema) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { schema, python } = generateWire();
  writeFileSync(SCHEMA_FILE, schema);
  writeFileSync(PYTHON_FILE, python);
  console.log(`wrote ${SCHEMA_FILE} and ${PYTHON_FILE}`);
}

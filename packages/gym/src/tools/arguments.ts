import { z } from 'zod';
import { ToolFailure } from './failure.js';

/*
 * Tool arguments as models send them: an object or a JSON string, under the names of several harnesses
 * (`file_path`, `old_string`, `cmd`, ...). Each alias is folded onto the canonical name, then the
 * arguments are parsed with a zod schema whose error names the field and the rule it broke.
 */

const ALIASES: Record<string, Record<string, string[]>> = {
  read: {
    path: ['file_path', 'filePath', 'file', 'filename'],
    offset: ['start_line', 'startLine', 'line_offset'],
    limit: ['max_lines', 'maxLines', 'line_count', 'lines'],
  },
  write: {
    path: ['file_path', 'filePath', 'file', 'filename'],
    content: ['contents', 'text', 'file_text', 'data'],
  },
  edit: {
    path: ['file_path', 'filePath', 'file', 'filename'],
    oldText: ['old_string', 'oldString', 'old_text', 'old_str', 'old'],
    newText: ['new_string', 'newString', 'new_text', 'new_str', 'new'],
  },
  exec: {
    command: ['cmd', 'script', 'shell_command'],
    workdir: ['cwd', 'directory', 'dir', 'working_dir', 'workingDirectory', 'work_dir'],
    timeout: ['timeout_s', 'timeout_seconds', 'timeoutSeconds'],
    timeoutMs: ['timeout_ms', 'timeoutMS'],
  },
  ls: {
    path: ['directory', 'dir', 'dir_path', 'dirPath', 'folder', 'file_path', 'filePath'],
  },
};

/** A whole number, also when sent as a numeric string. */
const integer = z.preprocess(
  (v) => (typeof v === 'string' && /^\s*-?\d+\s*$/.test(v) ? Number(v) : v),
  z.number().int(),
);
/** A number of seconds or ms, also when sent as a numeric string. */
const duration = z.preprocess(
  (v) => (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v)) ? Number(v) : v),
  z.number().positive(),
);
const filePath = z.string().trim().min(1, 'must not be empty');

const SCHEMAS = {
  read: z.object({
    path: filePath,
    offset: integer.pipe(z.number().min(0)).optional(),
    limit: integer.pipe(z.number().min(1)).optional(),
  }),
  write: z.object({ path: filePath, content: z.string() }),
  edit: z.object({ path: filePath, oldText: z.string().min(1, 'must not be empty'), newText: z.string() }),
  exec: z.object({
    command: z.string().refine((c) => c.trim() !== '', 'must not be empty'),
    workdir: z.string().optional(),
    timeout: duration.optional(),
    timeoutMs: duration.optional(),
  }),
  ls: z.object({ path: z.string().optional() }),
};

export type ToolName = keyof typeof SCHEMAS;
export type ToolArguments = { [K in ToolName]: z.infer<(typeof SCHEMAS)[K]> };

export const TOOL_NAMES = Object.keys(SCHEMAS) as ToolName[];

export function isToolName(name: string): name is ToolName {
  return Object.hasOwn(SCHEMAS, name);
}

/** The arguments of one call to `name`, parsed; a ToolFailure (bad_arguments) when they are unusable. */
export function parseToolArguments<K extends ToolName>(name: K, raw: unknown): ToolArguments[K] {
  let value = raw;
  if (typeof value === 'string') {
    if (value.trim() === '') value = {};
    else {
      try {
        value = JSON.parse(value);
      } catch (error) {
        throw new ToolFailure(
          'bad_arguments',
          `Error: invalid JSON in the arguments of ${name}: ${(error as Error).message}`,
        );
      }
    }
  }
  if (value === undefined || value === null) value = {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ToolFailure('bad_arguments', `Error: invalid arguments for ${name}: expected a JSON object`);
  }
  const parsed = SCHEMAS[name].safeParse(foldAliases(value as Record<string, unknown>, ALIASES[name]!));
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.map(String).join('.') || 'arguments';
    throw new ToolFailure(
      'bad_arguments',
      `Error: invalid arguments for ${name}: ${field}: ${issue.message}`,
    );
  }
  return parsed.data as ToolArguments[K];
}

function foldAliases(
  args: Record<string, unknown>,
  aliases: Record<string, string[]>,
): Record<string, unknown> {
  // null is how strict-mode models say "not given" for an optional field.
  const folded = Object.fromEntries(Object.entries(args).filter(([, v]) => v !== null));
  for (const [canonical, names] of Object.entries(aliases)) {
    for (const alias of names) {
      if (folded[canonical] === undefined && folded[alias] !== undefined) folded[canonical] = folded[alias];
      if (alias !== canonical) delete folded[alias];
    }
  }
  return folded;
}

import type { ChatToolInput } from '../../text/index.js';

/*
 * Reference actions are written for our built-in tools (packages/gym/src/tools: read, write, edit, exec, ls).
 * An agent harness may offer a tool of the same name with other parameters (OpenClaw's edit takes
 * `edits: [{oldText, newText}]`, Claude-style tools take `file_path`, ...), or only a shell (Codex
 * CLI's `exec_command` takes `cmd` and `workdir`). The sim then writes the call in the offered schema,
 * or as a shell command, so the harness runs what the action meant. The differences are data:
 * where each of our arguments may live in another schema, and how its value converts.
 */

/** One tool call a policy makes; the adapter rewrites it into the schema the agent offered. */
export interface PolicyToolCall {
  name: string;
  arguments: Record<string, unknown>;
}

type Schema = Record<string, unknown>;

const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

const FILE_PATH = ['path', 'file_path', 'filePath', 'file', 'filename'];
const OLD_TEXT = ['oldText', 'old_string', 'oldString', 'old_text', 'old_str', 'old'];
const NEW_TEXT = ['newText', 'new_string', 'newString', 'new_text', 'new_str', 'new'];
const TIMEOUT = ['timeout', 'timeoutSeconds', 'timeout_seconds', 'timeout_s', 'timeoutMs', 'timeout_ms'];

/**
 * Where each argument of our tools may live in an offered schema of the same name, in order of
 * preference. `essential` arguments must find a place, or the call cannot be written in that schema;
 * the others are dropped when it has none (they only bound the output or the run time).
 */
const ARGUMENTS: Readonly<Record<string, Readonly<Record<string, { names: string[]; essential: boolean }>>>> =
  {
    read: {
      path: { names: FILE_PATH, essential: true },
      offset: { names: ['offset', 'start_line', 'startLine', 'line_offset'], essential: true },
      limit: { names: ['limit', 'max_lines', 'maxLines', 'line_count', 'lines'], essential: false },
    },
    write: {
      path: { names: FILE_PATH, essential: true },
      content: { names: ['content', 'contents', 'text', 'file_text', 'data'], essential: true },
    },
    edit: {
      path: { names: FILE_PATH, essential: true },
      oldText: { names: OLD_TEXT, essential: true },
      newText: { names: NEW_TEXT, essential: true },
    },
    exec: {
      command: { names: ['command', 'cmd', 'script', 'shell_command'], essential: true },
      workdir: { names: ['workdir', 'cwd', 'working_dir', 'workingDirectory', 'work_dir'], essential: true },
      timeout: { names: TIMEOUT, essential: false },
      timeoutMs: { names: TIMEOUT, essential: false },
    },
    ls: { path: { names: ['path', 'directory', 'dir', 'dir_path', 'dirPath', 'folder'], essential: true } },
  };

/** Names under which a harness may offer a shell tool that takes a command (Codex: exec_command, ...). */
const SHELL_TOOLS = ['exec', 'bash', 'shell', 'exec_command', 'shell_command'];

function propertiesOf(tool: ChatToolInput | undefined): Schema | undefined {
  const params = tool ? (tool.function as Schema).parameters : undefined;
  return isObject(params) && isObject(params.properties) ? params.properties : undefined;
}

function describes(schema: unknown, pattern: RegExp): boolean {
  return isObject(schema) && typeof schema.description === 'string' && pattern.test(schema.description);
}

const isMilliseconds = (name: string, schema: unknown) =>
  /(?:ms|Ms|MS)$/.test(name) || describes(schema, /millisecond|\bms\b/i);

/** Our value of `arg` as the offered property `name` expects it (units, line base). */
function convert(tool: string, arg: string, value: unknown, name: string, schema: unknown): unknown {
  // A command as an argv array (Codex's legacy `shell` tool): run by bash, as a string one is.
  if (
    tool === 'exec' &&
    arg === 'command' &&
    typeof value === 'string' &&
    isObject(schema) &&
    schema.type === 'array'
  )
    return ['bash', '-lc', value];
  if (typeof value !== 'number') return value;
  if (tool === 'read' && arg === 'offset' && describes(schema, /\b(?:0|zero)[- ](?:based|indexed)\b/i))
    return value - 1;
  if (tool === 'exec' && (arg === 'timeout' || arg === 'timeoutMs')) {
    const seconds = arg === 'timeout' ? value : value / 1000;
    return isMilliseconds(name, schema) ? Math.round(seconds * 1000) : Math.ceil(seconds);
  }
  return value;
}

/** The first of `names` the properties define. */
const firstDefined = (properties: Schema, names: readonly string[]) =>
  names.find((n) => Object.hasOwn(properties, n));

/** An array property of objects that take an old and a new text: a multi-edit schema like OpenClaw's. */
function editList(properties: Schema): { key: string; oldKey: string; newKey: string } | undefined {
  for (const [key, schema] of Object.entries(properties)) {
    const items = isObject(schema) && schema.type === 'array' ? schema.items : undefined;
    const itemProps = isObject(items) && isObject(items.properties) ? items.properties : undefined;
    if (!itemProps) continue;
    const oldKey = firstDefined(itemProps, OLD_TEXT);
    const newKey = firstDefined(itemProps, NEW_TEXT);
    if (oldKey && newKey) return { key, oldKey, newKey };
  }
  return undefined;
}

/** The call's arguments in the offered schema; undefined when an essential one has no place there. */
function mapArguments(call: PolicyToolCall, properties: Schema): Record<string, unknown> | undefined {
  const table = ARGUMENTS[call.name]!;
  const out: Record<string, unknown> = {};
  const list = call.name === 'edit' && !firstDefined(properties, OLD_TEXT) ? editList(properties) : undefined;
  const edit: Record<string, unknown> = {};
  for (const [arg, value] of Object.entries(call.arguments)) {
    if (list && (arg === 'oldText' || arg === 'newText')) {
      // One replacement in the list, placed where the first of its texts was.
      if (!Object.hasOwn(out, list.key)) out[list.key] = [edit];
      edit[arg === 'oldText' ? list.oldKey : list.newKey] = value;
      continue;
    }
    const spec = Object.hasOwn(table, arg) ? table[arg] : undefined;
    if (!spec) {
      out[arg] = value; // not one of ours: passed on as the action wrote it
      continue;
    }
    const name = firstDefined(properties, spec.names);
    if (name === undefined) {
      if (spec.essential) return undefined;
      continue;
    }
    out[name] = convert(call.name, arg, value, name, properties[name]);
  }
  return out;
}

/** Single-quoted for bash: safe for any text. */
const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/**
 * Replaces the one occurrence of argv[2] in the file argv[1] by argv[3], bytes kept as they are
 * (newline=''), and fails naming the count when the text is missing or not unique, as our edit does.
 */
const EDIT_SCRIPT = [
  'import sys',
  'p, old, new = sys.argv[1:4]',
  "t = open(p, newline='').read()",
  'n = t.count(old)',
  "n == 1 or sys.exit(f'edit: {p}: the text to replace occurs {n} times, not once')",
  "open(p, 'w', newline='').write(t.replace(old, new, 1))",
].join('; ');

/** The action as a shell command, where one does exactly the same thing and touches nothing else. */
function asCommand(call: PolicyToolCall): PolicyToolCall | undefined {
  const a = call.arguments;
  const str = (key: string) => (typeof a[key] === 'string' ? (a[key] as string) : undefined);
  const int = (key: string) => (Number.isInteger(a[key]) ? (a[key] as number) : undefined);
  let command: string | undefined;
  switch (call.name) {
    case 'ls': {
      const path = str('path');
      command = path === undefined ? 'ls -la' : `ls -la -- ${quote(path)}`;
      break;
    }
    case 'read': {
      const path = str('path');
      if (path === undefined) return undefined;
      const first = Math.max(1, int('offset') ?? 1);
      const limit = int('limit');
      command =
        first === 1 && limit === undefined
          ? `cat -- ${quote(path)}`
          : `sed -n '${first},${limit === undefined ? '$' : first + limit - 1}p' -- ${quote(path)}`;
      break;
    }
    case 'write': {
      const path = str('path');
      const content = str('content');
      if (path === undefined || content === undefined) return undefined;
      command = `mkdir -p -- "$(dirname -- ${quote(path)})" && printf '%s' ${quote(content)} > ${quote(path)}`;
      break;
    }
    case 'edit': {
      const path = str('path');
      const oldText = str('oldText');
      const newText = str('newText');
      if (path === undefined || oldText === undefined || newText === undefined || oldText === '')
        return undefined;
      command = `python3 -c ${quote(EDIT_SCRIPT)} ${quote(path)} ${quote(oldText)} ${quote(newText)}`;
      break;
    }
    case 'exec': {
      // Only reached when the offered shell tool has no working-directory parameter.
      const cmd = str('command');
      const workdir = str('workdir');
      if (cmd === undefined || workdir === undefined) return undefined;
      command = `cd -- ${quote(workdir)} && ${cmd}`;
      break;
    }
    default:
      return undefined;
  }
  return { name: 'exec', arguments: { command } };
}

/**
 * A call to one of our built-in tools, written for the tools the request offers: in the offered
 * tool's parameter schema when it has the same name; as an equivalent shell command through an
 * offered shell tool (`exec`, `bash`, Codex's `exec_command`, ...) when it is not offered or its
 * schema has no place for an essential argument; otherwise unchanged. Calls to other tools, and
 * requests that offer no tools, are unchanged.
 */
export function adaptCall(call: PolicyToolCall, offered: readonly ChatToolInput[]): PolicyToolCall {
  if (!Object.hasOwn(ARGUMENTS, call.name) || offered.length === 0) return call;
  // Claude Code's tools are capitalized (Read, Write, Edit, Bash); an exact name is preferred.
  const tool =
    offered.find((t) => t.function.name === call.name) ??
    offered.find((t) => t.function.name.toLowerCase() === call.name);
  if (tool) {
    const properties = propertiesOf(tool);
    if (!properties) return call; // no schema to follow
    const args = mapArguments(call, properties);
    if (args) return { name: tool.function.name, arguments: args };
  }
  const shell = offered.find((t) => SHELL_TOOLS.includes(t.function.name.toLowerCase()) && propertiesOf(t));
  if (!shell) return call;
  const properties = propertiesOf(shell)!;
  // A shell command of ours, in a shell tool of another name that has a place for each argument.
  if (call.name === 'exec') {
    const direct = mapArguments(call, properties);
    if (direct) return { name: shell.function.name, arguments: direct };
  }
  const command = asCommand(call);
  if (!command) return call;
  const args = mapArguments(command, properties);
  return args ? { name: shell.function.name, arguments: args } : call;
}

/**
 * A past call's arguments less those the harness filled in from the offered schema's defaults and
 * the sim's call did not set (Claude Code records Edit's `replace_all: false`), so a call the sim
 * made reads as the one it made.
 */
export function withoutFilledDefaults(
  made: { name: string; arguments: unknown },
  sent: PolicyToolCall,
  offered: readonly ChatToolInput[],
): unknown {
  const properties = propertiesOf(offered.find((t) => t.function.name === made.name));
  if (!properties || !isObject(made.arguments)) return made.arguments;
  return Object.fromEntries(
    Object.entries(made.arguments).filter(([key, value]) => {
      const schema = properties[key];
      const filled =
        !Object.hasOwn(sent.arguments, key) && isObject(schema) && Object.hasOwn(schema, 'default');
      return !(filled && JSON.stringify(schema.default) === JSON.stringify(value));
    }),
  );
}

import type { Check } from '../tasks/schema.js';
import { DEFAULT_MOUNT_DIR } from '../tasks/schema.js';
import { type CsvTable, parseCsvTable } from './csv.js';
import { JsonPointerError, jsonEquals, resolvePointer } from './json-pointer.js';
import {
  defaultSandboxRunner,
  type SandboxRunner,
  type SandboxSettings,
  tail,
  verifierSandbox,
} from './sandbox-runner.js';
import { readWorkspaceText, resolveInWorkspace } from './workspace-path.js';

/*
 * The check DSL of native tasks (packages/gym/src/tasks/schema.ts), evaluated against a finished workspace on
 * the host; only `command` checks run in the sandbox. Each check scores 0..1 under its name; the code
 * score is their mean. A path that escapes the workspace scores 0.
 */

export interface ChecksResult {
  /** Mean of the subscores (0 with no checks). */
  score: number;
  subscores: Record<string, number>;
  /** One line per check saying what was found. */
  details: Record<string, string>;
}

export interface ChecksOptions {
  /** Where the workspace appears in the sandbox, for `command` checks (default the ClawGym path). */
  mountDir?: string;
  sandbox?: SandboxSettings;
  runInSandbox?: SandboxRunner;
}

interface Outcome {
  score: number;
  detail: string;
}

const pass = (detail: string): Outcome => ({ score: 1, detail });
const fail = (detail: string): Outcome => ({ score: 0, detail });

function show(value: unknown, max = 200): string {
  const s = value === undefined ? 'undefined' : JSON.stringify(value);
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

async function readJson(workspace: string, path: string): Promise<{ value: unknown } | { error: string }> {
  const read = await readWorkspaceText(workspace, path);
  if ('error' in read) return read;
  try {
    return { value: JSON.parse(read.text.replace(/^\uFEFF/, '')) };
  } catch (err) {
    return { error: `not valid JSON: ${(err as Error).message}` };
  }
}

async function readCsv(workspace: string, path: string): Promise<{ table: CsvTable } | { error: string }> {
  const read = await readWorkspaceText(workspace, path);
  if ('error' in read) return read;
  try {
    return { table: parseCsvTable(read.text) };
  } catch (err) {
    return { error: `not valid CSV: ${(err as Error).message}` };
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Length of the longest common subsequence of two row lists (rows compared as joined keys). */
function lcsLength(a: readonly string[], b: readonly string[]): number {
  let prev = new Uint32Array(b.length + 1);
  let cur = new Uint32Array(b.length + 1);
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      cur[j] = a[i - 1] === b[j - 1] ? prev[j - 1]! + 1 : Math.max(prev[j]!, cur[j - 1]!);
    }
    [prev, cur] = [cur, prev];
  }
  return prev[b.length]!;
}

/** Fraction of expected rows found (order kept or as a multiset), over the larger of the two counts. */
export function rowsMatchScore(actual: readonly string[][], expected: readonly string[][], ordered: boolean) {
  const key = (row: readonly string[]) => JSON.stringify(row.map((v) => v.trim()));
  const a = actual.map(key);
  const e = expected.map(key);
  const denominator = Math.max(a.length, e.length);
  if (denominator === 0) return { matched: 0, score: 1 };
  let matched: number;
  if (ordered) matched = lcsLength(a, e);
  else {
    const counts = new Map<string, number>();
    for (const k of a) counts.set(k, (counts.get(k) ?? 0) + 1);
    matched = 0;
    for (const k of e) {
      const n = counts.get(k) ?? 0;
      if (n > 0) {
        matched++;
        counts.set(k, n - 1);
      }
    }
  }
  return { matched, score: matched / denominator };
}

/** One kind of check, narrowed from the union so each evaluator sees only its own fields. */
type CheckOf<K extends Check['kind']> = Extract<Check, { kind: K }>;

/** Dispatches on the check's kind; the switch stays exhaustive, so a new kind must get an evaluator. */
async function evaluate(check: Check, workspace: string, options: ChecksOptions): Promise<Outcome> {
  switch (check.kind) {
    case 'file_exists':
      return checkFileExists(check, workspace);
    case 'file_absent':
      return checkFileAbsent(check, workspace);
    case 'parses':
      return checkParses(check, workspace);
    case 'csv_columns':
      return checkCsvColumns(check, workspace);
    case 'json_keys':
      return checkJsonKeys(check, workspace);
    case 'json_value':
      return checkJsonValue(check, workspace);
    case 'rows_match':
      return checkRowsMatch(check, workspace);
    case 'text_contains':
      return checkTextContains(check, workspace);
    case 'word_count':
      return checkWordCount(check, workspace);
    case 'command':
      return checkCommand(check, workspace, options);
  }
}

async function checkFileExists(check: CheckOf<'file_exists'>, workspace: string): Promise<Outcome> {
  const entry = await resolveInWorkspace(workspace, check.path);
  if (entry.kind === 'escape' || entry.kind === 'unreadable') return fail(entry.reason);
  if (entry.kind === 'file' || entry.kind === 'dir') return pass(`${check.path} exists`);
  return fail(entry.kind === 'broken' ? `${check.path} is a broken symlink` : `${check.path} does not exist`);
}

async function checkFileAbsent(check: CheckOf<'file_absent'>, workspace: string): Promise<Outcome> {
  const entry = await resolveInWorkspace(workspace, check.path);
  if (entry.kind === 'escape' || entry.kind === 'unreadable') return fail(entry.reason);
  return entry.kind === 'missing' ? pass(`${check.path} is absent`) : fail(`${check.path} exists`);
}

async function checkParses(check: CheckOf<'parses'>, workspace: string): Promise<Outcome> {
  const parsed =
    check.format === 'json' ? await readJson(workspace, check.path) : await readCsv(workspace, check.path);
  if ('error' in parsed) return fail(`${check.path}: ${parsed.error}`);
  return pass(`${check.path} parses as ${check.format}`);
}

async function checkCsvColumns(check: CheckOf<'csv_columns'>, workspace: string): Promise<Outcome> {
  const parsed = await readCsv(workspace, check.path);
  if ('error' in parsed) return fail(`${check.path}: ${parsed.error}`);
  const header = parsed.table.header.map((h) => h.trim());
  const want = check.columns.map((c) => c.trim());
  const same = check.ordered
    ? show(header) === show(want)
    : show([...header].sort()) === show([...want].sort());
  return same ? pass(`header is ${show(header)}`) : fail(`header is ${show(header)}, expected ${show(want)}`);
}

async function checkJsonKeys(check: CheckOf<'json_keys'>, workspace: string): Promise<Outcome> {
  const parsed = await readJson(workspace, check.path);
  if ('error' in parsed) return fail(`${check.path}: ${parsed.error}`);
  if (!isPlainObject(parsed.value)) return fail(`${check.path} is not a JSON object`);
  const missing = check.keys.filter((k) => !Object.hasOwn(parsed.value as object, k));
  return missing.length === 0 ? pass('all keys present') : fail(`missing keys ${show(missing)}`);
}

async function checkJsonValue(check: CheckOf<'json_value'>, workspace: string): Promise<Outcome> {
  const parsed = await readJson(workspace, check.path);
  if ('error' in parsed) return fail(`${check.path}: ${parsed.error}`);
  let lookup: ReturnType<typeof resolvePointer>;
  try {
    lookup = resolvePointer(parsed.value, check.pointer);
  } catch (err) {
    if (err instanceof JsonPointerError) return fail(`invalid pointer: ${err.message}`);
    throw err;
  }
  if (!lookup.found) return fail(lookup.reason);
  return jsonEquals(lookup.value, check.expected, check.tolerance)
    ? pass(`${check.pointer || '/'} is ${show(lookup.value)}`)
    : fail(`${check.pointer || '/'} is ${show(lookup.value)}, expected ${show(check.expected)}`);
}

async function checkRowsMatch(check: CheckOf<'rows_match'>, workspace: string): Promise<Outcome> {
  const parsed = await readCsv(workspace, check.path);
  if ('error' in parsed) return fail(`${check.path}: ${parsed.error}`);
  const header = parsed.table.header.map((h) => h.trim());
  const indexes = check.columns.map((c) => header.indexOf(c.trim()));
  const absent = check.columns.filter((_, i) => indexes[i] === -1);
  if (absent.length > 0) return fail(`missing columns ${show(absent)}`);
  const rows = parsed.table.rows.map((r) => indexes.map((i) => r[i]!));
  const { matched, score } = rowsMatchScore(rows, check.expected, check.ordered);
  return {
    score,
    detail: `${matched} of ${check.expected.length} expected rows found in ${rows.length} rows`,
  };
}

async function checkTextContains(check: CheckOf<'text_contains'>, workspace: string): Promise<Outcome> {
  const read = await readWorkspaceText(workspace, check.path);
  if ('error' in read) return fail(`${check.path}: ${read.error}`);
  let found: boolean;
  if (check.regex) {
    let re: RegExp;
    try {
      re = new RegExp(check.pattern, check.ignoreCase ? 'i' : '');
    } catch (err) {
      return fail(`invalid regex: ${(err as Error).message}`);
    }
    found = re.test(read.text);
  } else {
    found = check.ignoreCase
      ? read.text.toLowerCase().includes(check.pattern.toLowerCase())
      : read.text.includes(check.pattern);
  }
  const what = `${show(check.pattern)} ${found ? 'found' : 'not found'} in ${check.path}`;
  return found !== check.absent ? pass(what) : fail(what);
}

async function checkWordCount(check: CheckOf<'word_count'>, workspace: string): Promise<Outcome> {
  const read = await readWorkspaceText(workspace, check.path);
  if ('error' in read) return fail(`${check.path}: ${read.error}`);
  const words = read.text.split(/\s+/).filter((w) => w !== '').length;
  const ok =
    (check.min === undefined || words >= check.min) && (check.max === undefined || words <= check.max);
  const range = `[${check.min ?? 0}, ${check.max ?? '∞'}]`;
  return ok ? pass(`${words} words, within ${range}`) : fail(`${words} words, outside ${range}`);
}

/** The only check that runs in the sandbox: the command's exit code against the expected one. */
async function checkCommand(
  check: CheckOf<'command'>,
  workspace: string,
  options: ChecksOptions,
): Promise<Outcome> {
  const mountDir = options.mountDir ?? DEFAULT_MOUNT_DIR;
  const run = options.runInSandbox ?? defaultSandboxRunner;
  // A SandboxError is the infrastructure's failure and propagates to the runner.
  const sandbox = await verifierSandbox(options.sandbox, workspace, mountDir);
  const result = await run(sandbox.options, check.command, {
    cwd: mountDir,
    timeoutMs: check.timeoutMs,
  }).finally(() => sandbox.close());
  if (result.timedOut) return fail(`timed out after ${check.timeoutMs} ms`);
  if (result.limitHit) return fail(`hit the sandbox's ${result.limitHit} limit`);
  if (result.signal) return fail(`killed by ${result.signal}`);
  const stderr = tail(result.stderr, 200);
  const detail = `exit code ${result.exitCode}${result.exitCode !== check.exitCode && stderr ? `: ${stderr}` : ''}`;
  return result.exitCode === check.exitCode ? pass(detail) : fail(`${detail}, expected ${check.exitCode}`);
}

/** Evaluates every check (in order); a name used twice gets `#2`, `#3`, ... for its later uses. */
export async function runChecks(
  checks: readonly Check[],
  workspace: string,
  options: ChecksOptions = {},
): Promise<ChecksResult> {
  const subscores: Record<string, number> = {};
  const details: Record<string, string> = {};
  let total = 0;
  for (const check of checks) {
    let key = check.name;
    for (let n = 2; Object.hasOwn(subscores, key); n++) key = `${check.name}#${n}`;
    const outcome = await evaluate(check, workspace, options);
    const score = Math.min(1, Math.max(0, outcome.score));
    subscores[key] = score;
    details[key] = outcome.detail;
    total += score;
  }
  return { score: checks.length === 0 ? 0 : total / checks.length, subscores, details };
}

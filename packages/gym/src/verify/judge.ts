import { lstat, open, readdir, readFile, realpath } from 'node:fs/promises';
import { join, posix } from 'node:path';
import OpenAI from 'openai';
import { taskFileBytes } from '../tasks/files.js';
import type { GymTask, RubricRule } from '../tasks/schema.js';

/*
 * The LLM-judge rubric: any OpenAI-compatible endpoint is shown the task, the rubric's rules and the
 * files the agent created or changed (bounded), and answers `{"rule name": band}` with bands 0, 0.25,
 * 0.5, 0.75, 1. The reply is read leniently (fences, surrounding prose, off-band numbers snap to the
 * nearest band, a rule it left out scores 0); a reply that is not a JSON object is asked for once
 * more, then the judge has failed (not the agent's fault).
 */

export interface JudgeConfig {
  baseURL: string;
  apiKey: string;
  model: string;
  /** Per request (default 120 s). */
  timeoutMs?: number;
  /** Retries of a failed HTTP request, by the client (default 1). */
  maxRetries?: number;
  /** Characters of file content shown to the judge in all (default 65536) and per file (default 16384). */
  maxListingChars?: number;
  maxFileChars?: number;
  temperature?: number;
  maxTokens?: number;
}

export interface JudgeVerdict {
  /** Weighted mean of the rule bands; null when the judge failed. */
  rubric: number | null;
  /** Each rule's band (absent when the judge failed). */
  rules: Record<string, number>;
  judgeFailed: boolean;
  reason: string | null;
  /** The judge's replies, in order (for inspection). */
  replies: string[];
}

export const BANDS = [0, 0.25, 0.5, 0.75, 1] as const;

export function snapToBand(value: number): number {
  const x = Math.min(1, Math.max(0, value));
  return BANDS.reduce((best, b) => (Math.abs(b - x) < Math.abs(best - x) ? b : best), 0);
}

const SKIPPED_DIRS = new Set(['.git', 'node_modules', '__pycache__', '.venv']);
const MAX_LISTED_FILES = 200;

function fenceFor(text: string): string {
  const longest = Math.max(0, ...(text.match(/`+/g) ?? []).map((r) => r.length));
  return '`'.repeat(Math.max(3, longest + 1));
}

/** A file's size and its first `max` bytes. */
async function readHead(path: string, max: number): Promise<{ size: number; head: Buffer }> {
  const handle = await open(path, 'r');
  try {
    const { size } = await handle.stat();
    const head = Buffer.alloc(Math.min(size, max));
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    return { size, head: head.subarray(0, bytesRead) };
  } finally {
    await handle.close();
  }
}

/**
 * The files the agent created or changed in the workspace (input files left as they were are not
 * shown), with their contents up to the byte budgets; binary files by size only. Symlinks are not
 * followed.
 */
export async function listOutputFiles(
  task: GymTask,
  workspace: string,
  limits: { maxListingChars?: number; maxFileChars?: number } = {},
): Promise<string> {
  const budget = limits.maxListingChars ?? 64 * 1024;
  const perFile = limits.maxFileChars ?? 16 * 1024;
  const inputs = new Map(task.files.map((f) => [posix.normalize(f.path), taskFileBytes(f)]));
  const root = await realpath(workspace);
  const found: { path: string; abs: string }[] = [];
  const notes: string[] = [];
  const seen = new Set<string>();
  // A folder or file the host cannot read (a path too long to name, say) is noted, not thrown.
  async function walk(dir: string, rel: string): Promise<void> {
    let names: string[];
    try {
      names = (await readdir(dir)).sort();
    } catch (err) {
      notes.push(`${rel || '.'}/: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
      return;
    }
    for (const name of names) {
      const abs = join(dir, name);
      const path = rel ? `${rel}/${name}` : name;
      const st = await lstat(abs).catch(() => null);
      if (!st) {
        notes.push(`${path}: cannot be read`);
        continue;
      }
      if (st.isSymbolicLink()) notes.push(`${path}: a symlink (not followed)`);
      else if (st.isDirectory()) {
        if (SKIPPED_DIRS.has(name)) notes.push(`${path}/: skipped`);
        else await walk(abs, path);
      } else if (st.isFile()) {
        seen.add(path);
        const input = inputs.get(path);
        const same = async (bytes: Buffer) =>
          Buffer.compare((await readFile(abs).catch(() => null)) ?? Buffer.alloc(0), bytes) === 0;
        if (input && st.size === input.length && (await same(input))) continue;
        found.push({ path, abs });
      }
    }
  }
  await walk(root, '');
  const deleted = [...inputs.keys()].filter((p) => !seen.has(p));
  const parts: string[] = [];
  let used = 0;
  for (const [i, file] of found.entries()) {
    if (i >= MAX_LISTED_FILES) {
      parts.push(`(${found.length - MAX_LISTED_FILES} more files not listed)`);
      break;
    }
    const read = await readHead(file.abs, perFile).catch(() => null);
    if (!read) {
      parts.push(`### ${file.path}\n(cannot be read)`);
      continue;
    }
    const { size, head: bytes } = read;
    const changed = inputs.has(file.path) ? ', changed input file' : '';
    const head = `### ${file.path} (${size} bytes${changed})`;
    let text: string;
    try {
      // stream: a multi-byte character cut at the end of the head is not a sign of binary data.
      text = new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: true });
    } catch {
      text = '\0';
    }
    if (text.includes('\0')) {
      parts.push(`${head}\n(binary, not shown)`);
      continue;
    }
    const room = Math.max(0, budget - used);
    if (room === 0) {
      parts.push(`${head}\n(content not shown: the listing budget is spent)`);
      continue;
    }
    const cut = text.slice(0, room);
    used += cut.length;
    const shown = cut.length < text.length || size > bytes.length ? `${cut}\n… (truncated)` : cut;
    const fence = fenceFor(shown);
    parts.push(`${head}\n${fence}\n${shown}\n${fence}`);
  }
  if (found.length === 0) parts.push('(the agent created or changed no files)');
  if (deleted.length > 0) parts.push(`Input files deleted by the agent: ${deleted.join(', ')}`);
  if (notes.length > 0) parts.push(`Not shown: ${notes.join('; ')}`);
  return parts.join('\n\n');
}

type ChatMessage = { role: 'system' | 'user' | 'assistant'; content: string };

/** One rule as the judge reads it: the file it judges and what each band means, when the task says. */
function ruleText(r: RubricRule): string {
  const file = r.filePath ? ` [judges ${r.filePath}]` : '';
  const head = `- ${JSON.stringify(r.name)} (weight ${r.weight})${file}: ${r.description}`;
  if (!r.scores) return head;
  const bands = BANDS.map((b) => `    - ${b}: ${r.scores?.[String(b) as keyof typeof r.scores]}`);
  return [head, ...bands].join('\n');
}

export function buildJudgeMessages(task: GymTask, listing: string): ChatMessage[] {
  const rules = task.rubric.map(ruleText).join('\n');
  const example = `{${task.rubric.map((r) => `${JSON.stringify(r.name)}: 0.75`).join(', ')}}`;
  return [
    {
      role: 'system',
      content:
        'You grade the work of an AI agent on a task against a rubric. Judge only what the files show. ' +
        'Score every rule with one of 0, 0.25, 0.5, 0.75, 1 (0: not met at all, 1: fully met). ' +
        'Reply with a single JSON object mapping each rule name to its score, and nothing else.',
    },
    {
      role: 'user',
      content: `## Task given to the agent\n\n${task.prompt}\n\n## Rubric rules\n\n${rules}\n\n## Files the agent created or changed\n\n${listing}\n\n## Your reply\n\nOnly a JSON object with exactly these keys, e.g. ${example}`,
    },
  ];
}

/** The JSON object in a reply (code fences, <think> blocks and prose around it are ignored). */
function extractObject(reply: string): { value: Record<string, unknown> } | { error: string } {
  const text = reply.replace(/<think>[\s\S]*?<\/think>/g, '');
  const start = text.indexOf('{');
  const end = text.lastIndexOf('}');
  if (start === -1 || end < start) return { error: 'no JSON object in the reply' };
  let value: unknown;
  try {
    value = JSON.parse(text.slice(start, end + 1));
  } catch (err) {
    return { error: `invalid JSON: ${(err as Error).message}` };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { error: 'the reply is not a JSON object' };
  }
  return { value: value as Record<string, unknown> };
}

/** Each rule's band from a judge reply; a rule left out (or not a number) scores 0. */
export function parseJudgeReply(
  reply: string,
  rules: readonly RubricRule[],
): { bands: Record<string, number>; missing: string[] } | { error: string } {
  const extracted = extractObject(reply);
  if ('error' in extracted) return extracted;
  const byLooseName = new Map(Object.entries(extracted.value).map(([k, v]) => [k.trim().toLowerCase(), v]));
  const bands: Record<string, number> = {};
  const missing: string[] = [];
  for (const rule of rules) {
    const raw = Object.hasOwn(extracted.value, rule.name)
      ? extracted.value[rule.name]
      : byLooseName.get(rule.name.trim().toLowerCase());
    const n =
      typeof raw === 'number' ? raw : typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : Number.NaN;
    if (Number.isFinite(n)) bands[rule.name] = snapToBand(n);
    else {
      bands[rule.name] = 0;
      missing.push(rule.name);
    }
  }
  return { bands, missing };
}

export function weightedRubric(rules: readonly RubricRule[], bands: Record<string, number>): number {
  const total = rules.reduce((s, r) => s + r.weight, 0);
  // All weights 0: every rule counts the same.
  if (total === 0) return rules.reduce((s, r) => s + (bands[r.name] ?? 0), 0) / rules.length;
  return rules.reduce((s, r) => s + r.weight * (bands[r.name] ?? 0), 0) / total;
}

export async function judgeRubric(
  task: GymTask,
  workspace: string,
  config: JudgeConfig,
): Promise<JudgeVerdict> {
  const failed = (reason: string, replies: string[]): JudgeVerdict => ({
    rubric: null,
    rules: {},
    judgeFailed: true,
    reason,
    replies,
  });
  if (task.rubric.length === 0)
    return { rubric: null, rules: {}, judgeFailed: false, reason: null, replies: [] };
  const listing = await listOutputFiles(task, workspace, config);
  const client = new OpenAI({
    baseURL: config.baseURL,
    apiKey: config.apiKey,
    timeout: config.timeoutMs ?? 120_000,
    maxRetries: config.maxRetries ?? 1,
  });
  const messages = buildJudgeMessages(task, listing);
  const replies: string[] = [];
  for (let attempt = 0; attempt < 2; attempt++) {
    let reply: string;
    try {
      const completion = await client.chat.completions.create({
        model: config.model,
        messages,
        temperature: config.temperature ?? 0,
        max_tokens: config.maxTokens ?? 1024,
      });
      reply = completion.choices[0]?.message?.content ?? '';
    } catch (err) {
      return failed(`the judge request failed: ${(err as Error).message}`, replies);
    }
    replies.push(reply);
    const parsed = parseJudgeReply(reply, task.rubric);
    if (!('error' in parsed)) {
      const reason =
        parsed.missing.length > 0 ? `the judge left out ${parsed.missing.join(', ')} (scored 0)` : null;
      return {
        rubric: weightedRubric(task.rubric, parsed.bands),
        rules: parsed.bands,
        judgeFailed: false,
        reason,
        replies,
      };
    }
    messages.push(
      { role: 'assistant', content: reply },
      {
        role: 'user',
        content: `That reply could not be used (${parsed.error}). Reply with only the JSON object, one key per rule, each value one of 0, 0.25, 0.5, 0.75, 1.`,
      },
    );
  }
  return failed('the judge did not reply with a JSON object twice', replies);
}

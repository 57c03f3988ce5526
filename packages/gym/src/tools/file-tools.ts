import { createReadStream } from 'node:fs';
import { lstat, mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import type { ToolArguments } from './arguments.js';
import { ToolFailure } from './failure.js';
import { resolveWorkspacePath, type WorkspacePath } from './workspace-path.js';

export interface FileToolContext {
  workspace: string;
  mountDir: string;
  maxOutputChars: number;
  /** Largest file `write` and `edit` may produce, bytes (the sandbox's file-size limit). */
  maxFileBytes: number;
}

export interface ToolSuccess {
  content: string;
  truncated: boolean;
}

/** Files larger than this are not loaded whole by `edit`. */
const MAX_EDIT_BYTES = 16 * 1024 * 1024;

const notFound = (path: string) => new ToolFailure('not_found', `Error: ${path}: No such file or directory`);

async function existingFile(
  path: string,
  context: FileToolContext,
): Promise<WorkspacePath & { size: number }> {
  const resolved = await resolveWorkspacePath(path, context);
  const st = await stat(resolved.host).catch(() => null);
  if (!resolved.exists || !st) throw notFound(path);
  if (st.isDirectory()) {
    throw new ToolFailure('is_directory', `Error: ${path} is a directory, not a file (use ls to list it)`);
  }
  if (!st.isFile()) throw new ToolFailure('bad_arguments', `Error: ${path} is not a regular file`);
  return { ...resolved, size: st.size };
}

export async function readTool(args: ToolArguments['read'], context: FileToolContext): Promise<ToolSuccess> {
  const file = await existingFile(args.path, context);
  const first = Math.max(1, args.offset ?? 1);
  const last = args.limit === undefined ? Number.POSITIVE_INFINITY : first + args.limit - 1;
  const read = await readLines(file.host, first, last, context.maxOutputChars);
  if (read.binary) {
    return {
      content: `[${args.path} is a binary file (${file.size} bytes) and is not shown; inspect it with exec]`,
      truncated: false,
    };
  }
  if (read.lines.length === 0) {
    if (first === 1) return { content: '(empty file)', truncated: false };
    throw new ToolFailure(
      'bad_arguments',
      `Error: offset ${first} is beyond the end of ${args.path} (${read.lineCount} lines)`,
    );
  }
  const shownLast = first + read.lines.length - 1;
  let content = read.lines.join('\n');
  if (read.cutLine) {
    content += `\n\n[Line ${shownLast} is too long and was cut at ${context.maxOutputChars} characters.]`;
  }
  if (read.more) {
    const why = read.budgetHit ? 'Output truncated. ' : '';
    content += `\n\n[${why}Showing lines ${first}-${shownLast}. Use offset=${shownLast + 1} to continue.]`;
  }
  return { content, truncated: read.budgetHit };
}

interface ReadLines {
  lines: string[];
  /** Lines seen (all of the file's when it was read to the end). */
  lineCount: number;
  /** Lines after the last one returned exist. */
  more: boolean;
  /** The character budget, not the requested range, ended the read. */
  budgetHit: boolean;
  cutLine: boolean;
  binary: boolean;
}

/**
 * Lines `first`..`last` (1-based) of a file, read as a stream and stopped as soon as the range or the
 * character budget is used up, so a huge file costs no more than what is shown.
 */
async function readLines(path: string, first: number, last: number, budget: number): Promise<ReadLines> {
  const result: ReadLines = {
    lines: [],
    lineCount: 0,
    more: false,
    budgetHit: false,
    cutLine: false,
    binary: false,
  };
  const decoder = new StringDecoder('utf8');
  const stream = createReadStream(path, { highWaterMark: 64 * 1024 });
  let line = 1;
  let current = '';
  let used = 0;
  let done = false;
  let firstChunk = true;
  // Takes the finished line `line`; false when the budget is used up.
  const take = (text: string): boolean => {
    const cost = text.length + (result.lines.length > 0 ? 1 : 0);
    if (used + cost > budget) {
      result.budgetHit = true;
      result.more = true;
      if (result.lines.length === 0) {
        result.lines.push(text.slice(0, budget));
        result.cutLine = true;
      }
      return false;
    }
    result.lines.push(text);
    used += cost;
    return true;
  };
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      if (firstChunk) {
        firstChunk = false;
        if (chunk.subarray(0, 8192).includes(0)) {
          result.binary = true;
          return result;
        }
      }
      let text = decoder.write(chunk);
      while (text.length > 0) {
        const newline = text.indexOf('\n');
        const piece = newline < 0 ? text : text.slice(0, newline);
        text = newline < 0 ? '' : text.slice(newline + 1);
        if (line > last) {
          result.more = true;
          done = true;
          break;
        }
        // Keep at most one character past the budget: enough to know the line is too long.
        if (line >= first && current.length <= budget) current += piece.slice(0, budget + 1 - current.length);
        if (newline >= 0) {
          if (line >= first && !take(current)) {
            done = true;
            break;
          }
          current = '';
          line++;
        }
      }
      if (done) break;
    }
    if (!done) {
      const rest = decoder.end();
      if (line >= first && line <= last && current.length + rest.length > 0) {
        take((current + rest).slice(0, budget + 1));
        result.lineCount = line;
      } else {
        result.lineCount = current.length + rest.length > 0 ? line : line - 1;
      }
    }
  } finally {
    stream.destroy();
  }
  return result;
}

export async function writeTool(
  args: ToolArguments['write'],
  context: FileToolContext,
): Promise<ToolSuccess> {
  const target = await resolveWorkspacePath(args.path, context);
  const bytes = Buffer.byteLength(args.content);
  if (bytes > context.maxFileBytes) {
    throw new ToolFailure(
      'limit_exceeded',
      `Error: file too large: ${bytes} bytes is over the workspace's file size limit (${context.maxFileBytes} bytes)`,
    );
  }
  if (target.exists) {
    const st = await lstat(target.host);
    if (st.isDirectory()) throw new ToolFailure('is_directory', `Error: ${args.path} is a directory`);
    if (!st.isFile()) throw new ToolFailure('bad_arguments', `Error: ${args.path} is not a regular file`);
  } else {
    try {
      await mkdir(dirname(target.host), { recursive: true });
    } catch {
      throw new ToolFailure(
        'not_found',
        `Error: cannot create the parent directory of ${args.path}: Not a directory`,
      );
    }
  }
  await writeFile(target.host, args.content);
  return { content: `Successfully wrote ${bytes} bytes to ${args.path}`, truncated: false };
}

export async function editTool(args: ToolArguments['edit'], context: FileToolContext): Promise<ToolSuccess> {
  const file = await existingFile(args.path, context);
  if (file.size > MAX_EDIT_BYTES) {
    throw new ToolFailure(
      'bad_arguments',
      `Error: ${args.path} is too large to edit (${file.size} bytes); use exec`,
    );
  }
  const text = await readFile(file.host, 'utf8');
  const at = text.indexOf(args.oldText);
  if (at < 0) {
    throw new ToolFailure(
      'no_match',
      `Error: could not find oldText in ${args.path}. It must match the file exactly, including whitespace, indentation and line breaks.`,
    );
  }
  if (text.indexOf(args.oldText, at + 1) >= 0) {
    throw new ToolFailure(
      'ambiguous_match',
      `Error: found ${countOccurrences(text, args.oldText)} occurrences of oldText in ${args.path}; it must occur exactly once. Include more surrounding lines to make it unique.`,
    );
  }
  const edited = text.slice(0, at) + args.newText + text.slice(at + args.oldText.length);
  const bytes = Buffer.byteLength(edited);
  if (bytes > context.maxFileBytes) {
    throw new ToolFailure(
      'limit_exceeded',
      `Error: file too large: the edit makes ${args.path} ${bytes} bytes, over the file size limit (${context.maxFileBytes} bytes)`,
    );
  }
  await writeFile(file.host, edited);
  return { content: `Successfully replaced 1 occurrence in ${args.path}`, truncated: false };
}

/** Occurrences of `needle`, overlapping ones included (each is a place an edit could apply). */
function countOccurrences(text: string, needle: string): number {
  let count = 0;
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + 1)) count++;
  return count;
}

export async function lsTool(args: ToolArguments['ls'], context: FileToolContext): Promise<ToolSuccess> {
  const shown = args.path?.trim() || '.';
  const target = await resolveWorkspacePath(shown, context);
  const st = target.exists ? await stat(target.host).catch(() => null) : null;
  if (!st) throw notFound(shown);
  if (!st.isDirectory()) return { content: target.sandbox.split('/').pop() ?? shown, truncated: false };
  const entries = await readdir(target.host, { withFileTypes: true });
  if (entries.length === 0) return { content: '(empty directory)', truncated: false };
  const names = entries
    .map((e) => (e.isDirectory() ? `${e.name}/` : e.isSymbolicLink() ? `${e.name}@` : e.name))
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const lines: string[] = [];
  let used = 0;
  for (const name of names) {
    if (used + name.length + 1 > context.maxOutputChars - 64) break;
    lines.push(name);
    used += name.length + 1;
  }
  const left = names.length - lines.length;
  if (left === 0) return { content: lines.join('\n'), truncated: false };
  return { content: `${lines.join('\n')}\n[... ${left} more entries not shown]`, truncated: true };
}

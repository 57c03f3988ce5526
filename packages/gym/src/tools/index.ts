import { DEFAULT_LIMITS, type SandboxOptions } from '../sandbox/index.js';
import { isToolName, parseToolArguments, TOOL_NAMES } from './arguments.js';
import { execTool } from './exec-tool.js';
import { ToolFailure } from './failure.js';
import { editTool, type FileToolContext, lsTool, readTool, writeTool } from './file-tools.js';

/*
 * The OpenClaw / ClawGym agent tools (read, write, edit, exec, ls) over a task workspace: file tools
 * work on the host copy of the workspace through paths the agent sees inside the sandbox, exec runs in
 * the sandbox. A failure comes back as text an agent would get from a real harness ("Error: ..."),
 * which the gateway's tool-error detection recognizes, with a typed errorType beside it.
 */

export { TOOL_DEFINITIONS, type ToolDefinition } from './definitions.js';

export interface ToolContext {
  /** Host directory of the workspace. */
  workspace: string;
  /** Where the agent sees it (inside the sandbox). */
  mountDir: string;
  sandbox: SandboxOptions;
  /** Longest content returned to the agent; default 16 KiB. */
  maxOutputChars?: number;
  /** The tools offered to the agent (default: all); a call to another is an unknown tool. */
  offered?: readonly string[];
}

export interface ToolOutcome {
  ok: boolean;
  content: string;
  errorType: string | null;
  truncated: boolean;
}

const DEFAULT_MAX_OUTPUT_CHARS = 16 * 1024;

export async function runTool(name: string, args: unknown, ctx: ToolContext): Promise<ToolOutcome> {
  try {
    if (!isToolName(name) || (ctx.offered && !ctx.offered.includes(name))) {
      throw new ToolFailure(
        'unknown_tool',
        `Error: unknown tool '${name}'. Available tools: ${(ctx.offered ?? TOOL_NAMES).join(', ')}`,
      );
    }
    const maxOutputChars = ctx.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
    const files: FileToolContext = {
      workspace: ctx.workspace,
      mountDir: ctx.mountDir,
      maxOutputChars,
      maxFileBytes: Math.floor((ctx.sandbox.limits?.fileSizeMb ?? DEFAULT_LIMITS.fileSizeMb) * 1024 * 1024),
    };
    switch (name) {
      case 'read':
        return success(await readTool(parseToolArguments('read', args), files));
      case 'write':
        return success(await writeTool(parseToolArguments('write', args), files));
      case 'edit':
        return success(await editTool(parseToolArguments('edit', args), files));
      case 'ls':
        return success(await lsTool(parseToolArguments('ls', args), files));
      case 'exec':
        return await execTool(parseToolArguments('exec', args), { ...ctx, maxOutputChars });
    }
  } catch (error) {
    if (error instanceof ToolFailure) {
      return { ok: false, content: error.message, errorType: error.errorType, truncated: false };
    }
    // A host-side failure (disk full, workspace gone): the infrastructure's, not the agent's.
    return {
      ok: false,
      content: `Error: ${(error as Error).message}`,
      errorType: 'sandbox_failed',
      truncated: false,
    };
  }
}

function success(result: { content: string; truncated: boolean }): ToolOutcome {
  return { ok: true, content: result.content, errorType: null, truncated: result.truncated };
}

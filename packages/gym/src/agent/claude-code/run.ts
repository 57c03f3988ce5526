import { realpath } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { SandboxLimits } from '../../sandbox/index.js';
import type { SandboxedAgentOptions } from '../external.js';
import { type AgentDriver, type InstalledAgentResult, noReport, runInstalledAgent } from '../installed.js';
import { type ClaudeCodeResult, claudeCodeEnv, GYM_TOOLS, parseResult, resultMetadata } from './config.js';
import type { ClaudeCodeInstall } from './install.js';

/*
 * Claude Code as a gym agent: `claude -p` (non-interactive) run inside the task's bubblewrap sandbox
 * with its permission checks off, so its Bash, Read, Edit and Write tools act on the workspace and
 * are confined by ours. The install is mounted read-only; HOME (its ~/.claude) and TMPDIR live in the
 * sandbox's private /tmp; its only way out is the bridged gateway port, ANTHROPIC_BASE_URL this
 * trajectory's base_url less /v1. Its JSON result (turns, stop reason, session) becomes metadata.
 */

/** Where the install appears inside the sandbox. */
const INSIDE_ROOT = '/opt/stepwise/claude-code';

/**
 * Limits that fit Claude Code: a 373 MB Bun binary whose JavaScriptCore reserves more address space
 * than it uses (a synthesized task ran under 4 GiB of RLIMIT_AS; 8 GiB leaves room for long
 * sessions), and whose threads and shells count as processes.
 */
export const CLAUDE_CODE_LIMITS: Readonly<Partial<SandboxLimits>> = Object.freeze({
  memoryMb: 8_192,
  cpuSeconds: 900,
  processes: 512,
});

export interface ClaudeCodeDriverOptions {
  install: ClaudeCodeInstall;
  /** Built-in tools Claude Code may use (default: Bash, Read, Edit, Write). */
  tools?: readonly string[];
  /** Static headers on every request (`X-Stepwise-Session: auto` against the fixed base_url). */
  headers?: Record<string, string>;
}

export type ClaudeCodeRunOptions = SandboxedAgentOptions & ClaudeCodeDriverOptions;

/** `metadata` goes into the trajectory's metadata (`claude_code`). */
export type ClaudeCodeRunResult = InstalledAgentResult<{ result: ClaudeCodeResult | null }>;

/** Claude Code as an installed agent's driver (installed.ts). */
export function claudeCodeDriver(
  options: ClaudeCodeDriverOptions,
): AgentDriver<{ claude: string }, { result: ClaudeCodeResult | null }> {
  return {
    name: 'Claude Code',
    metadataKey: 'claude_code',
    insideRoot: INSIDE_ROOT,
    scratchName: 'stepwise-claude-code',
    limits: CLAUDE_CODE_LIMITS,
    prompt: 'stdin',
    async locate() {
      const claude = await realpath(options.install.claude);
      return { root: dirname(dirname(claude)), install: { claude } };
    },
    argv: (c) => [
      c.inside(c.install.claude),
      '--print',
      '--output-format',
      'json',
      '--model',
      c.model,
      '--tools',
      (options.tools ?? GYM_TOOLS).join(','),
      // Our sandbox is the boundary: Claude Code asks no one and runs every tool call itself.
      '--dangerously-skip-permissions',
      '--no-session-persistence',
      '--strict-mcp-config',
    ],
    env: (c) => ({
      ...claudeCodeEnv({ baseUrl: c.baseUrl, apiKey: c.apiKey, model: c.model, headers: options.headers }),
      // Claude Code refuses to skip permissions as root (an unsandboxed run by root) unless told
      // it is in a sandbox.
      IS_SANDBOX: '1',
      NO_COLOR: '1',
    }),
    files: () => ({}),
    parse(run, c) {
      const result = parseResult(run.stdout);
      const metadata = result
        ? resultMetadata(result, run.exitCode)
        : { status: run.timedOut ? 'timeout' : 'no_result', exit_code: run.exitCode };
      let reason: string | null = null;
      if (run.timedOut || !result)
        reason = noReport('Claude Code', 'a JSON result', run, c.timeoutMs, run.stderr.trim() || run.stdout);
      else if (result.isError || result.subtype !== 'success')
        reason = `Claude Code ended with ${result.subtype}${result.result ? `: ${result.result.slice(0, 500)}` : ''}`;
      return {
        ok: reason === null,
        reason,
        metadata,
        extra: { result },
        outcome: {
          ended: 'answer',
          turns: result?.numTurns ?? 0,
          toolCalls: 0,
          toolErrors: 0,
          answer: result?.result ?? null,
          ...(run.gatewayRefused ? { gatewayRefused: run.gatewayRefused } : {}),
        },
      };
    },
  };
}

export const runClaudeCodeAgent = (options: ClaudeCodeRunOptions): Promise<ClaudeCodeRunResult> =>
  runInstalledAgent(claudeCodeDriver(options), options);

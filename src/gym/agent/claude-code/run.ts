import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { runInSandbox, type SandboxLimits } from '../../sandbox/index.js';
import type { AgentOutcome } from '../builtin.js';
import {
  AGENT_API_KEY,
  BRIDGE_PORT,
  bridgeScope,
  insideBaseUrl,
  quote,
  type SandboxedAgentOptions,
} from '../external.js';
import { checkGateway } from '../openclaw/run.js';
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

export interface ClaudeCodeRunOptions extends SandboxedAgentOptions {
  install: ClaudeCodeInstall;
  /** Built-in tools Claude Code may use (default: Bash, Read, Edit, Write). */
  tools?: readonly string[];
  /** Static headers on every request (`X-Stepwise-Session: auto` against the fixed base_url). */
  headers?: Record<string, string>;
}

export interface ClaudeCodeRunResult {
  /** The run ended with a successful result. */
  ok: boolean;
  /** Why it did not, for the sample's record. */
  reason: string | null;
  outcome: AgentOutcome;
  result: ClaudeCodeResult | null;
  /** For the trajectory's metadata (`claude_code`). */
  metadata: Record<string, unknown>;
  durationMs: number;
}

export async function runClaudeCodeAgent(options: ClaudeCodeRunOptions): Promise<ClaudeCodeRunResult> {
  const started = performance.now();
  await checkGateway(options.baseUrl, options.apiKey);
  const unsafe = options.sandbox?.unsafeNoSandbox === true;
  // Sandboxed, Claude Code holds a placeholder and the bridge adds the runner's key on the way out.
  const apiKey = unsafe ? (options.apiKey ?? AGENT_API_KEY) : AGENT_API_KEY;
  const binary = await realpath(options.install.claude);
  const root = dirname(dirname(binary));
  const claude = unsafe ? binary : `${INSIDE_ROOT}/bin/claude`;
  const upstream = new URL(options.baseUrl);
  const baseUrl = unsafe ? options.baseUrl : insideBaseUrl(options.baseUrl);
  // Unsandboxed there is no private /tmp: a temporary directory of ours stands in for it.
  const hostScratch = unsafe ? await mkdtemp(join(tmpdir(), 'stepwise-claude-code-')) : undefined;
  const scratch = hostScratch ?? '/tmp/stepwise-claude-code';
  try {
    const promptPath = `${scratch}/prompt.txt`;
    const argv = [
      claude,
      '--print',
      '--output-format',
      'json',
      '--model',
      options.model,
      '--tools',
      (options.tools ?? GYM_TOOLS).join(','),
      // Our sandbox is the boundary: Claude Code asks no one and runs every tool call itself.
      '--dangerously-skip-permissions',
      '--no-session-persistence',
      '--strict-mcp-config',
    ];
    const script = [
      `mkdir -p ${quote(`${scratch}/home`)} ${quote(`${scratch}/tmp`)}`,
      `cat > ${quote(promptPath)}`,
      `exec ${argv.map(quote).join(' ')} < ${quote(promptPath)}`,
    ].join(' && ');
    const userLimits = Object.fromEntries(
      Object.entries(options.sandbox?.limits ?? {}).filter(([, v]) => v !== undefined),
    );
    const run = await runInSandbox(
      {
        ...options.sandbox,
        workspace: options.workspace,
        mountDir: options.task.mountDir,
        limits: { ...CLAUDE_CODE_LIMITS, ...userLimits },
        ...(unsafe
          ? {}
          : { gateway: { url: upstream.origin, port: BRIDGE_PORT, scope: bridgeScope(options) } }),
        readOnlyBinds: unsafe
          ? []
          : [...(options.sandbox?.readOnlyBinds ?? []), { source: root, target: INSIDE_ROOT }],
        env: {
          ...options.sandbox?.env,
          HOME: `${scratch}/home`,
          TMPDIR: `${scratch}/tmp`,
          ...claudeCodeEnv({ baseUrl, apiKey, model: options.model, headers: options.headers }),
          // Claude Code refuses to skip permissions as root (an unsandboxed run by root) unless told
          // it is in a sandbox.
          IS_SANDBOX: '1',
          NO_COLOR: '1',
        },
      },
      script,
      { stdin: options.task.prompt, timeoutMs: options.timeoutMs, maxOutputBytes: 4 * 1024 * 1024 },
    );
    const result = parseResult(run.stdout);
    const metadata = result
      ? resultMetadata(result, run.exitCode)
      : { status: run.timedOut ? 'timeout' : 'no_result', exit_code: run.exitCode };
    let reason: string | null = null;
    if (run.timedOut) reason = `Claude Code did not finish within ${options.timeoutMs} ms`;
    else if (!result) {
      const why = run.signal ? `was killed by ${run.signal}` : `exited with ${run.exitCode}`;
      reason = `Claude Code ${why} without a JSON result: ${(run.stderr.trim() || run.stdout.trim()).slice(-500)}`;
    } else if (result.isError || result.subtype !== 'success') {
      reason = `Claude Code ended with ${result.subtype}${result.result ? `: ${result.result.slice(0, 500)}` : ''}`;
    }
    return {
      ok: reason === null,
      reason,
      result,
      metadata,
      outcome: {
        ended: 'answer',
        turns: result?.numTurns ?? 0,
        toolCalls: 0,
        toolErrors: 0,
        answer: result?.result ?? null,
        ...(run.gatewayRefused ? { gatewayRefused: run.gatewayRefused } : {}),
      },
      durationMs: performance.now() - started,
    };
  } finally {
    if (hostScratch) await rm(hostScratch, { recursive: true, force: true });
  }
}

import { realpath } from 'node:fs/promises';
import { dirname } from 'node:path';
import { SANDBOX_PATH } from '../../sandbox/environment.js';
import type { SandboxLimits } from '../../sandbox/index.js';
import type { SandboxedAgentOptions } from '../external.js';
import { type AgentDriver, type InstalledAgentResult, noReport, runInstalledAgent } from '../installed.js';
import { CODEX_KEY_ENV, renderCodexConfig } from './config.js';
import type { CodexInstall } from './install.js';

/*
 * Codex CLI as a gym agent: `codex exec` (non-interactive) run inside the task's bubblewrap sandbox,
 * without Codex's own sandbox or approvals, so its shell tool runs commands itself and is confined
 * by ours. The install is mounted read-only; CODEX_HOME (config.toml), HOME and TMPDIR live in the
 * sandbox's private /tmp; its only way out is the bridged gateway port, and its provider's base_url
 * is this trajectory's. Its JSONL events (thread, commands, final message) become trajectory metadata.
 */

/** Where the install appears inside the sandbox. */
const INSIDE_ROOT = '/opt/stepwise/codex';

/**
 * Limits that fit Codex: it starts in ~140 MB (measured, 0.169.0) but lives for the whole sample, so
 * RLIMIT_CPU counts all of its CPU time; its Tokio threads and the shells it starts count as processes;
 * RLIMIT_AS is per process and leaves room for a long conversation.
 */
export const CODEX_LIMITS: Readonly<Partial<SandboxLimits>> = Object.freeze({
  memoryMb: 4_096,
  cpuSeconds: 600,
  processes: 512,
});

export interface CodexDriverOptions {
  install: CodexInstall;
  /** A whole config.toml to use instead of the gym's; its base_url must be one Codex can reach. */
  configText?: string;
}

export type CodexRunOptions = SandboxedAgentOptions & CodexDriverOptions;

export type CodexRunResult = InstalledAgentResult<{ metadata: CodexMetadata }>;

export interface CodexMetadata extends Record<string, unknown> {
  status: 'ok' | 'failed' | 'timeout' | 'no_events';
  exit_code: number | null;
  thread_id: string | null;
  /** Shell commands Codex ran, and how many exited non-zero. */
  commands: number;
  command_failures: number;
  /** Item types Codex reported, each once (agent_message, command_execution, …). */
  items: string[];
  /** turn.failed's or the last error event's message. */
  error?: string;
  usage?: Record<string, unknown>;
}

/** What `codex exec --json` printed: one JSON event a line (codex-rs exec/src/exec_events.rs). */
export function parseCodexEvents(stdout: string): {
  events: number;
  threadId: string | null;
  completed: boolean;
  failed: string | null;
  commands: number;
  commandFailures: number;
  items: string[];
  final: string | null;
  usage: Record<string, unknown> | null;
} {
  const out = {
    events: 0,
    threadId: null as string | null,
    completed: false,
    failed: null as string | null,
    commands: 0,
    commandFailures: 0,
    items: [] as string[],
    final: null as string | null,
    usage: null as Record<string, unknown> | null,
  };
  const types = new Set<string>();
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    let event: Record<string, unknown>;
    try {
      event = JSON.parse(line);
    } catch {
      continue;
    }
    out.events++;
    const item = (event.item ?? null) as Record<string, unknown> | null;
    switch (event.type) {
      case 'thread.started':
        out.threadId = typeof event.thread_id === 'string' ? event.thread_id : null;
        break;
      case 'turn.completed':
        out.completed = true;
        if (event.usage && typeof event.usage === 'object')
          out.usage = event.usage as Record<string, unknown>;
        break;
      case 'turn.failed': {
        const error = event.error as { message?: unknown } | undefined;
        out.failed = typeof error?.message === 'string' ? error.message : 'turn failed';
        break;
      }
      case 'error':
        if (typeof event.message === 'string') out.failed ??= event.message;
        break;
      case 'item.completed':
        if (!item || typeof item.type !== 'string') break;
        types.add(item.type);
        if (item.type === 'agent_message' && typeof item.text === 'string') out.final = item.text;
        if (item.type === 'command_execution') {
          out.commands++;
          if (item.exit_code !== 0) out.commandFailures++;
        }
        break;
    }
  }
  out.items = [...types].sort();
  return out;
}

/** Codex as an installed agent's driver (installed.ts). */
export function codexDriver(
  options: CodexDriverOptions,
): AgentDriver<{ codex: string; pathDir: string }, { metadata: CodexMetadata }> {
  const home = (scratch: string) => `${scratch}/codex-home`;
  return {
    name: 'Codex',
    metadataKey: 'codex',
    insideRoot: INSIDE_ROOT,
    scratchName: 'stepwise-codex',
    limits: CODEX_LIMITS,
    prompt: 'stdin',
    async locate() {
      const codex = await realpath(options.install.codex);
      const pathDir = await realpath(options.install.pathDir);
      return { root: dirname(dirname(codex)), install: { codex, pathDir } };
    },
    argv: (c) => [
      c.inside(c.install.codex),
      'exec',
      '--json',
      '--strict-config',
      '--skip-git-repo-check',
      '--ephemeral',
      '--color',
      'never',
      '--cd',
      c.cwd,
      '-',
    ],
    env: (c) => ({
      CODEX_HOME: home(c.scratch),
      [CODEX_KEY_ENV]: c.apiKey,
      // Codex's npm launcher puts its ripgrep on PATH; we run the binary, so we do.
      PATH: `${c.inside(c.install.pathDir)}:${c.sandboxEnv?.PATH ?? SANDBOX_PATH}`,
      NO_COLOR: '1',
      RUST_LOG: 'error',
    }),
    files: (c) => ({
      [`${home(c.scratch)}/config.toml`]:
        options.configText ??
        renderCodexConfig({ baseUrl: c.baseUrl, model: c.model, unsandboxed: true, retries: 0 }),
    }),
    parse(result, c) {
      const events = parseCodexEvents(result.stdout);
      const status: CodexMetadata['status'] = result.timedOut
        ? 'timeout'
        : events.events === 0
          ? 'no_events'
          : events.completed && result.exitCode === 0
            ? 'ok'
            : 'failed';
      const metadata: CodexMetadata = {
        status,
        exit_code: result.exitCode,
        thread_id: events.threadId,
        commands: events.commands,
        command_failures: events.commandFailures,
        items: events.items,
        ...(events.failed ? { error: events.failed.slice(0, 2000) } : {}),
        ...(events.usage ? { usage: events.usage } : {}),
      };
      const reason =
        status === 'timeout' || status === 'no_events'
          ? noReport('Codex', 'a JSON event', result, c.timeoutMs, result.stderr)
          : status === 'failed'
            ? `Codex exited with ${result.exitCode}${events.failed ? `: ${events.failed.slice(0, 500)}` : ''}`
            : null;
      return {
        ok: reason === null,
        reason,
        metadata,
        extra: { metadata },
        outcome: {
          ended: 'answer',
          // Codex's events count commands, not model calls: the steps are the gateway's record of those.
          turns: 0,
          toolCalls: events.commands,
          toolErrors: events.commandFailures,
          answer: events.final,
        },
      };
    },
  };
}

export const runCodexAgent = (options: CodexRunOptions): Promise<CodexRunResult> =>
  runInstalledAgent(codexDriver(options), options);

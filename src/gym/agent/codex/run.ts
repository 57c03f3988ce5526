import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, posix, relative, sep } from 'node:path';
import { SANDBOX_PATH } from '../../sandbox/environment.js';
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

export interface CodexRunOptions extends SandboxedAgentOptions {
  install: CodexInstall;
  /** A whole config.toml to use instead of the gym's; its base_url must be one Codex can reach. */
  configText?: string;
}

export interface CodexRunResult {
  /** The run finished its turn. */
  ok: boolean;
  /** Why it did not, for the sample's record. */
  reason: string | null;
  outcome: AgentOutcome;
  /** For the trajectory's metadata (`codex`). */
  metadata: CodexMetadata;
  durationMs: number;
}

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

export async function runCodexAgent(options: CodexRunOptions): Promise<CodexRunResult> {
  const started = performance.now();
  await checkGateway(options.baseUrl, options.apiKey);
  const unsafe = options.sandbox?.unsafeNoSandbox === true;
  // Sandboxed, Codex holds a placeholder and the bridge adds the runner's key on the way out.
  const apiKey = unsafe ? (options.apiKey ?? AGENT_API_KEY) : AGENT_API_KEY;
  const codex = await realpath(options.install.codex);
  const pathDir = await realpath(options.install.pathDir);
  const root = dirname(dirname(codex));
  const inside = (path: string) =>
    unsafe ? path : posix.join(INSIDE_ROOT, ...relative(root, path).split(sep));
  const upstream = new URL(options.baseUrl);
  const baseUrl = unsafe ? options.baseUrl : insideBaseUrl(options.baseUrl);
  const config =
    options.configText ?? renderCodexConfig({ baseUrl, model: options.model, unsandboxed: true, retries: 0 });
  // Unsandboxed there is no private /tmp: a temporary directory of ours stands in for it.
  const hostScratch = unsafe ? await mkdtemp(join(tmpdir(), 'stepwise-codex-')) : undefined;
  const scratch = hostScratch ?? '/tmp/stepwise-codex';
  const cwd = unsafe ? options.workspace : options.task.mountDir;
  try {
    const home = `${scratch}/codex-home`;
    const promptPath = `${scratch}/prompt.txt`;
    const argv = [
      inside(codex),
      'exec',
      '--json',
      '--strict-config',
      '--skip-git-repo-check',
      '--ephemeral',
      '--color',
      'never',
      '--cd',
      cwd,
      '-',
    ];
    const script = [
      `mkdir -p ${quote(home)} ${quote(`${scratch}/home`)} ${quote(`${scratch}/tmp`)}`,
      `printf %s ${Buffer.from(config).toString('base64')} | base64 -d > ${quote(`${home}/config.toml`)}`,
      `cat > ${quote(promptPath)}`,
      `exec ${argv.map(quote).join(' ')} < ${quote(promptPath)}`,
    ].join(' && ');
    const userLimits = Object.fromEntries(
      Object.entries(options.sandbox?.limits ?? {}).filter(([, v]) => v !== undefined),
    );
    const result = await runInSandbox(
      {
        ...options.sandbox,
        workspace: options.workspace,
        mountDir: options.task.mountDir,
        limits: { ...CODEX_LIMITS, ...userLimits },
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
          CODEX_HOME: home,
          [CODEX_KEY_ENV]: apiKey,
          // Codex's npm launcher puts its ripgrep on PATH; we run the binary, so we do.
          PATH: `${inside(pathDir)}:${options.sandbox?.env?.PATH ?? SANDBOX_PATH}`,
          NO_COLOR: '1',
          RUST_LOG: 'error',
        },
      },
      script,
      { stdin: options.task.prompt, timeoutMs: options.timeoutMs, maxOutputBytes: 4 * 1024 * 1024 },
    );
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
    let reason: string | null = null;
    if (status === 'timeout') reason = `Codex did not finish within ${options.timeoutMs} ms`;
    else if (status === 'no_events') {
      const why = result.signal ? `was killed by ${result.signal}` : `exited with ${result.exitCode}`;
      reason = `Codex ${why} without a JSON event: ${result.stderr.trim().slice(-500)}`;
    } else if (status === 'failed')
      reason = `Codex exited with ${result.exitCode}${events.failed ? `: ${events.failed.slice(0, 500)}` : ''}`;
    return {
      ok: reason === null,
      reason,
      metadata,
      outcome: {
        ended: 'answer',
        // Codex's events count commands, not model calls: the steps are the gateway's record of those.
        turns: 0,
        toolCalls: events.commands,
        toolErrors: events.commandFailures,
        answer: events.final,
      },
      durationMs: performance.now() - started,
    };
  } finally {
    if (hostScratch) await rm(hostScratch, { recursive: true, force: true });
  }
}

import { existsSync } from 'node:fs';
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix, relative, sep } from 'node:path';
import { StepwiseError } from '../../../domain/errors.js';
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
import { GYM_TOOLS, renderOpenClawConfig } from './config.js';
import { envelopeMetadata, type OpenClawEnvelope, parseEnvelope } from './envelope.js';
import type { OpenClawInstall } from './install.js';

/*
 * The stock OpenClaw agent as a gym agent: `openclaw agent exec` run inside the task's bubblewrap
 * sandbox, so its unconfined `exec` tool is confined too. The install (Node 24 and OpenClaw) is
 * mounted read-only; HOME, TMPDIR and the generated config live in the sandbox's private /tmp; its
 * only way out is the bridged gateway port, and its provider points at this trajectory's base_url.
 * Its JSON envelope (status, turns, tool summary) becomes trajectory metadata.
 */

/** Where the install appears inside the sandbox. */
const INSIDE_ROOT = '/opt/stepwise/openclaw';
/** OpenClaw stops itself this long before our wall clock ends, to print its envelope. */
const OWN_TIMEOUT_MARGIN_MS = 10_000;

/**
 * Limits that fit OpenClaw: Node 24 reserves far more address space than it uses (it does not start
 * under 2 GiB of RLIMIT_AS), one run takes ~11 CPU-seconds and up to 1.4 GB of memory, and its
 * worker threads count as processes.
 */
export const OPENCLAW_LIMITS: Readonly<Partial<SandboxLimits>> = Object.freeze({
  memoryMb: 16_384,
  cpuSeconds: 900,
  processes: 512,
});

export interface OpenClawRunOptions extends SandboxedAgentOptions {
  install: OpenClawInstall;
  /** Tools OpenClaw may use (default: files, shell and ls). */
  allowTools?: readonly string[];
  /**
   * A whole config to use instead of the gym's (e.g. `stepwise openclaw config`'s online one); its
   * provider must point where OpenClaw can reach: the bridge inside a sandbox, `baseUrl` without.
   */
  configText?: string;
  /** Measure OpenClaw's peak resident memory with GNU time (for benchmarks). */
  measureRss?: boolean;
}

export interface OpenClawRunResult {
  /** The run finished with status ok. */
  ok: boolean;
  /** Why it did not, for the sample's record. */
  reason: string | null;
  outcome: AgentOutcome;
  envelope: OpenClawEnvelope | null;
  /** For the trajectory's metadata (`openclaw`). */
  metadata: Record<string, unknown>;
  durationMs: number;
  /** Peak RSS of the OpenClaw process, KiB, when measured. */
  peakRssKb: number | null;
}

const TIME = '/usr/bin/time';
const RSS_MARK = 'STEPWISE_PEAK_RSS_KB=';

/** The gateway did not answer before the agent started: the infrastructure's fault, not the agent's. */
export class GatewayUnavailable extends StepwiseError {
  override readonly name = 'GatewayUnavailable';
  constructor(message: string) {
    super(message, 503, 'gateway_unavailable', undefined, true);
  }
}

/** One GET of `<base_url>/models`: OpenClaw would otherwise retry a dead gateway for ~80 s. */
export async function checkGateway(baseUrl: string, apiKey: string | undefined): Promise<void> {
  const url = `${baseUrl.replace(/\/+$/, '')}/models`;
  let res: Response;
  try {
    res = await fetch(url, {
      headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {},
      signal: AbortSignal.timeout(10_000),
    });
    await res.arrayBuffer();
  } catch (error) {
    throw new GatewayUnavailable(`the gateway at ${url} is unreachable (${(error as Error).message})`);
  }
  if (!res.ok) throw new GatewayUnavailable(`the gateway answered ${res.status} at ${url}`);
}

/** The deepest directory holding every path. */
function commonRoot(paths: readonly string[]): string {
  const split = paths.map((p) => p.split(sep));
  const out: string[] = [];
  for (let i = 0; split.every((parts) => i < parts.length - 1 && parts[i] === split[0]![i]); i++)
    out.push(split[0]![i]!);
  return out.join(sep) || sep;
}

export async function runOpenClawAgent(options: OpenClawRunOptions): Promise<OpenClawRunResult> {
  const started = performance.now();
  await checkGateway(options.baseUrl, options.apiKey);
  const unsafe = options.sandbox?.unsafeNoSandbox === true;
  // Sandboxed, OpenClaw holds a placeholder and the bridge adds the runner's key on the way out.
  const apiKey = unsafe ? (options.apiKey ?? AGENT_API_KEY) : AGENT_API_KEY;
  const node = await realpath(options.install.node);
  const entry = await realpath(options.install.entry);
  const root = commonRoot([node, entry]);
  const inside = (path: string) =>
    unsafe ? path : posix.join(INSIDE_ROOT, ...relative(root, path).split(sep));
  const upstream = new URL(options.baseUrl);
  const baseUrl = unsafe ? options.baseUrl : insideBaseUrl(options.baseUrl);
  const config =
    options.configText ??
    renderOpenClawConfig({
      baseUrl,
      apiKey,
      model: options.model,
      allowTools: options.allowTools ?? GYM_TOOLS,
    });
  const ownTimeoutS = Math.max(1, Math.floor((options.timeoutMs - OWN_TIMEOUT_MARGIN_MS) / 1000));
  // Unsandboxed there is no private /tmp: a temporary directory of ours stands in for it.
  const hostScratch = unsafe ? await mkdtemp(join(tmpdir(), 'stepwise-openclaw-')) : undefined;
  const scratch = hostScratch ?? '/tmp/stepwise-openclaw';
  const cwd = unsafe ? options.workspace : options.task.mountDir;
  try {
    const configPath = `${scratch}/openclaw.json5`;
    const promptPath = `${scratch}/prompt.txt`;
    const measure = options.measureRss === true && existsSync(TIME);
    const argv = [
      ...(measure ? [TIME, '-f', `${RSS_MARK}%M`] : []),
      inside(node),
      inside(entry),
      'agent',
      'exec',
      '--config',
      configPath,
      '--cwd',
      cwd,
      '--json',
      '--timeout',
      String(ownTimeoutS),
      '--message-file',
      promptPath,
    ];
    const script = [
      `mkdir -p ${quote(`${scratch}/home`)} ${quote(`${scratch}/tmp`)}`,
      `printf %s ${Buffer.from(config).toString('base64')} | base64 -d > ${quote(configPath)}`,
      `cat > ${quote(promptPath)}`,
      `exec ${argv.map(quote).join(' ')} < /dev/null`,
    ].join(' && ');
    const userLimits = Object.fromEntries(
      Object.entries(options.sandbox?.limits ?? {}).filter(([, v]) => v !== undefined),
    );
    const result = await runInSandbox(
      {
        ...options.sandbox,
        workspace: options.workspace,
        mountDir: options.task.mountDir,
        limits: { ...OPENCLAW_LIMITS, ...userLimits },
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
          OPENCLAW_NO_RESPAWN: '1',
          OPENCLAW_NO_AUTO_UPDATE: '1',
          CI: 'true',
          NO_COLOR: '1',
        },
      },
      script,
      { stdin: options.task.prompt, timeoutMs: options.timeoutMs, maxOutputBytes: 4 * 1024 * 1024 },
    );
    const envelope = parseEnvelope(result.stdout);
    const rss = measure ? new RegExp(`${RSS_MARK}(\\d+)`).exec(result.stderr) : null;
    const metadata = envelope
      ? envelopeMetadata(envelope, result.exitCode)
      : { status: result.timedOut ? 'timeout' : 'no_envelope', exit_code: result.exitCode };
    let reason: string | null = null;
    if (result.timedOut) reason = `OpenClaw did not finish within ${options.timeoutMs} ms`;
    else if (!envelope) {
      const why = result.signal ? `was killed by ${result.signal}` : `exited with ${result.exitCode}`;
      reason = `OpenClaw ${why} without a JSON envelope: ${result.stderr.trim().slice(-500)}`;
    } else if (envelope.status !== 'ok') {
      reason = `OpenClaw ended with status ${envelope.status}${envelope.error ? `: ${envelope.error.message}` : ''}`;
    }
    return {
      ok: reason === null,
      reason,
      envelope,
      metadata,
      outcome: {
        ended: 'answer',
        turns: envelope?.assistantTurns ?? 0,
        toolCalls: envelope?.toolCalls ?? 0,
        toolErrors: envelope?.toolFailures ?? 0,
        answer: envelope?.final ?? null,
      },
      durationMs: performance.now() - started,
      peakRssKb: rss ? Number(rss[1]) : null,
    };
  } finally {
    if (hostScratch) await rm(hostScratch, { recursive: true, force: true });
  }
}

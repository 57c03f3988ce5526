import { existsSync } from 'node:fs';
import { realpath } from 'node:fs/promises';
import { sep } from 'node:path';
import type { SandboxLimits } from '../../sandbox/index.js';
import type { SandboxedAgentOptions } from '../external.js';
import { type AgentDriver, type InstalledAgentResult, noReport, runInstalledAgent } from '../installed.js';
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

export interface OpenClawDriverOptions {
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

export type OpenClawRunOptions = SandboxedAgentOptions & OpenClawDriverOptions;

/** `metadata` goes into the trajectory's metadata (`openclaw`). */
export type OpenClawRunResult = InstalledAgentResult<OpenClawReport>;

/** What OpenClaw's run says beside its outcome. */
export interface OpenClawReport {
  envelope: OpenClawEnvelope | null;
  /** Peak RSS of the OpenClaw process, KiB, when measured. */
  peakRssKb: number | null;
}

const TIME = '/usr/bin/time';
const RSS_MARK = 'STEPWISE_PEAK_RSS_KB=';

/** The deepest directory holding every path. */
function commonRoot(paths: readonly string[]): string {
  const split = paths.map((p) => p.split(sep));
  const out: string[] = [];
  for (let i = 0; split.every((parts) => i < parts.length - 1 && parts[i] === split[0]![i]); i++)
    out.push(split[0]![i]!);
  return out.join(sep) || sep;
}

/** OpenClaw as an installed agent's driver (installed.ts). */
export function openClawDriver(
  options: OpenClawDriverOptions,
): AgentDriver<{ node: string; entry: string }, OpenClawReport> {
  const measure = options.measureRss === true && existsSync(TIME);
  const configPath = (scratch: string) => `${scratch}/openclaw.json5`;
  return {
    name: 'OpenClaw',
    metadataKey: 'openclaw',
    insideRoot: INSIDE_ROOT,
    scratchName: 'stepwise-openclaw',
    limits: OPENCLAW_LIMITS,
    prompt: 'file',
    async locate() {
      const node = await realpath(options.install.node);
      const entry = await realpath(options.install.entry);
      return { root: commonRoot([node, entry]), install: { node, entry } };
    },
    argv: (c) => [
      ...(measure ? [TIME, '-f', `${RSS_MARK}%M`] : []),
      c.inside(c.install.node),
      c.inside(c.install.entry),
      'agent',
      'exec',
      '--config',
      configPath(c.scratch),
      '--cwd',
      c.cwd,
      '--json',
      '--timeout',
      String(Math.max(1, Math.floor((c.timeoutMs - OWN_TIMEOUT_MARGIN_MS) / 1000))),
      '--message-file',
      c.promptPath,
    ],
    env: () => ({
      OPENCLAW_NO_RESPAWN: '1',
      OPENCLAW_NO_AUTO_UPDATE: '1',
      CI: 'true',
      NO_COLOR: '1',
    }),
    files: (c) => ({
      [configPath(c.scratch)]:
        options.configText ??
        renderOpenClawConfig({
          baseUrl: c.baseUrl,
          apiKey: c.apiKey,
          model: c.model,
          allowTools: options.allowTools ?? GYM_TOOLS,
        }),
    }),
    parse(result, c) {
      const envelope = parseEnvelope(result.stdout);
      const rss = measure ? new RegExp(`${RSS_MARK}(\\d+)`).exec(result.stderr) : null;
      const metadata = envelope
        ? envelopeMetadata(envelope, result.exitCode)
        : { status: result.timedOut ? 'timeout' : 'no_envelope', exit_code: result.exitCode };
      let reason: string | null = null;
      if (result.timedOut || !envelope)
        reason = noReport('OpenClaw', 'a JSON envelope', result, c.timeoutMs, result.stderr);
      else if (envelope.status !== 'ok')
        reason = `OpenClaw ended with status ${envelope.status}${envelope.error ? `: ${envelope.error.message}` : ''}`;
      return {
        ok: reason === null,
        reason,
        metadata,
        extra: { envelope, peakRssKb: rss ? Number(rss[1]) : null },
        outcome: {
          ended: 'answer',
          turns: envelope?.assistantTurns ?? 0,
          toolCalls: envelope?.toolCalls ?? 0,
          toolErrors: envelope?.toolFailures ?? 0,
          answer: envelope?.final ?? null,
        },
      };
    },
  };
}

export const runOpenClawAgent = (options: OpenClawRunOptions): Promise<OpenClawRunResult> =>
  runInstalledAgent(openClawDriver(options), options);

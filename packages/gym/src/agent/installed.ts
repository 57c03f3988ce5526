import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix, relative, sep } from 'node:path';
import { StepwiseError } from '@stepwise/core';
import { type RunResult, runInSandbox, type SandboxLimits } from '../sandbox/index.js';
import type { AgentOutcome } from './builtin.js';
import {
  AGENT_API_KEY,
  BRIDGE_PORT,
  bridgeScope,
  insideBaseUrl,
  quote,
  type SandboxedAgentOptions,
} from './external.js';

/*
 * An installed agent (Codex, Claude Code, OpenClaw) is a driver: what to run (argv), with what
 * environment (env), the files it needs beside it (files), and how to read what it printed (parse).
 * `runInstalledAgent` owns the rest, the same for each: the gateway check, the install mounted
 * read-only, a private scratch folder for HOME, TMPDIR, config and prompt, the bridged gateway port
 * and the limits. A driver never throws for what the agent did: `parse` says whether it finished.
 */

/** Where the agent stands when it starts: what a driver's argv, env and files are made from. */
export interface AgentContext<Install> {
  /** No sandbox of ours (`--unsafe-no-sandbox`): host paths, a host scratch folder, the real key. */
  unsafe: boolean;
  /** The install's files as real host paths (the driver's `locate`). */
  install: Install;
  /** A host path of the install as the agent sees it (under `insideRoot` in the sandbox). */
  inside(path: string): string;
  /** The agent's own folder: HOME (`scratch/home`), TMPDIR (`scratch/tmp`), config and prompt. */
  scratch: string;
  /** The prompt, written before the agent starts. */
  promptPath: string;
  /** The workspace as the agent sees it. */
  cwd: string;
  /** The trajectory's base_url as the agent reaches it (the bridge inside the sandbox). */
  baseUrl: string;
  /** The key the agent holds: a placeholder in the sandbox, where the bridge adds the runner's key. */
  apiKey: string;
  model: string;
  timeoutMs: number;
  /** The environment the caller gave the sandbox (the driver's env is laid over it). */
  sandboxEnv: Readonly<Record<string, string>> | undefined;
}

/** What a driver read from a finished run. */
export interface AgentReport<Extra extends object = object> {
  /** The agent finished its task (it may still have answered wrongly: the verifier says). */
  ok: boolean;
  /** Why it did not, for the sample's record. */
  reason: string | null;
  outcome: AgentOutcome;
  /** What it reported, for the trajectory's metadata under the driver's `metadataKey`. */
  metadata: Record<string, unknown>;
  /** The driver's own view of the run (Claude Code's result, OpenClaw's envelope, ...). */
  extra: Extra;
}

export interface AgentDriver<Install, Extra extends object = object> {
  /** Its name in messages: "Codex". */
  name: string;
  /** The trajectory metadata key of its report: `codex`. */
  metadataKey: string;
  /** Where the install is mounted in the sandbox: `/opt/stepwise/codex`. */
  insideRoot: string;
  /** Its scratch folder's name: `/tmp/<name>` in the sandbox, a `<name>-` temporary folder without. */
  scratchName: string;
  /** Limits that fit it; the caller's own limits win. */
  limits: Readonly<Partial<SandboxLimits>>;
  /** The install's real paths and the folder holding them all (mounted at insideRoot). */
  locate(): Promise<{ root: string; install: Install }>;
  argv(context: AgentContext<Install>): string[];
  env(context: AgentContext<Install>): Record<string, string>;
  /** Files written before it starts, by path (in its scratch folder), with their text. */
  files(context: AgentContext<Install>): Record<string, string>;
  /** `stdin`: the prompt is piped in; `file`: it reads promptPath itself and stdin is empty. */
  prompt: 'stdin' | 'file';
  parse(run: RunResult, context: AgentContext<Install>): AgentReport<Extra>;
}

export type InstalledAgentResult<Extra extends object = object> = Omit<AgentReport<Extra>, 'extra'> &
  Extra & { durationMs: number };

/** The gateway did not answer before the agent started: the infrastructure's fault, not the agent's. */
export class GatewayUnavailable extends StepwiseError {
  override readonly name = 'GatewayUnavailable';
  constructor(message: string) {
    super(message, 503, 'gateway_unavailable', undefined, true);
  }
}

/** One GET of `<base_url>/models`: an agent would otherwise retry a dead gateway for ~80 s. */
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

/** Largest stdout (and stderr) kept of an installed agent: its JSON report is at the end. */
const MAX_OUTPUT_BYTES = 4 * 1024 * 1024;

/**
 * Runs an installed agent on a task's workspace, inside the sandbox unless `unsafeNoSandbox`; throws
 * only for the infrastructure (the gateway down, the sandbox failing), never for the agent's failure.
 */
export async function runInstalledAgent<Install, Extra extends object>(
  driver: AgentDriver<Install, Extra>,
  options: SandboxedAgentOptions,
): Promise<InstalledAgentResult<Extra>> {
  const started = performance.now();
  await checkGateway(options.baseUrl, options.apiKey);
  const unsafe = options.sandbox?.unsafeNoSandbox === true;
  const { root, install } = await driver.locate();
  const upstream = new URL(options.baseUrl);
  // Unsandboxed there is no private /tmp: a temporary directory of ours stands in for it.
  const hostScratch = unsafe ? await mkdtemp(join(tmpdir(), `${driver.scratchName}-`)) : undefined;
  const scratch = hostScratch ?? `/tmp/${driver.scratchName}`;
  const context: AgentContext<Install> = {
    unsafe,
    install,
    inside: (path) => (unsafe ? path : posix.join(driver.insideRoot, ...relative(root, path).split(sep))),
    scratch,
    promptPath: `${scratch}/prompt.txt`,
    cwd: unsafe ? options.workspace : options.task.mountDir,
    baseUrl: unsafe ? options.baseUrl : insideBaseUrl(options.baseUrl),
    // Sandboxed, the agent holds a placeholder and the bridge adds the runner's key on the way out.
    apiKey: unsafe ? (options.apiKey ?? AGENT_API_KEY) : AGENT_API_KEY,
    model: options.model,
    timeoutMs: options.timeoutMs,
    sandboxEnv: options.sandbox?.env,
  };
  try {
    const files = Object.entries(driver.files(context));
    const dirs = new Set(files.map(([path]) => posix.dirname(path)).filter((dir) => dir !== scratch));
    const argv = driver.argv(context);
    const script = [
      `mkdir -p ${[...dirs, `${scratch}/home`, `${scratch}/tmp`].map(quote).join(' ')}`,
      ...files.map(
        ([path, text]) => `printf %s ${Buffer.from(text).toString('base64')} | base64 -d > ${quote(path)}`,
      ),
      `cat > ${quote(context.promptPath)}`,
      `exec ${argv.map(quote).join(' ')} < ${driver.prompt === 'stdin' ? quote(context.promptPath) : '/dev/null'}`,
    ].join(' && ');
    const userLimits = Object.fromEntries(
      Object.entries(options.sandbox?.limits ?? {}).filter(([, v]) => v !== undefined),
    );
    const run = await runInSandbox(
      {
        ...options.sandbox,
        workspace: options.workspace,
        mountDir: options.task.mountDir,
        limits: { ...driver.limits, ...userLimits },
        ...(unsafe
          ? {}
          : { gateway: { url: upstream.origin, port: BRIDGE_PORT, scope: bridgeScope(options) } }),
        readOnlyBinds: unsafe
          ? []
          : [...(options.sandbox?.readOnlyBinds ?? []), { source: root, target: driver.insideRoot }],
        env: {
          ...options.sandbox?.env,
          HOME: `${scratch}/home`,
          TMPDIR: `${scratch}/tmp`,
          ...driver.env(context),
        },
      },
      script,
      { stdin: options.task.prompt, timeoutMs: options.timeoutMs, maxOutputBytes: MAX_OUTPUT_BYTES },
    );
    const { extra, ...report } = driver.parse(run, context);
    return { ...report, ...extra, durationMs: performance.now() - started };
  } finally {
    if (hostScratch) await rm(hostScratch, { recursive: true, force: true });
  }
}

/** Why an installed agent's run produced no report: a timeout, a signal or an exit status. */
export function noReport(
  name: string,
  what: string,
  run: RunResult,
  timeoutMs: number,
  tail: string,
): string {
  if (run.timedOut) return `${name} did not finish within ${timeoutMs} ms`;
  const why = run.signal ? `was killed by ${run.signal}` : `exited with ${run.exitCode}`;
  return `${name} ${why} without ${what}: ${tail.trim().slice(-500)}`;
}

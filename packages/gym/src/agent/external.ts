import { StepwiseError } from '@stepwise/core';
import { basePathOf } from '../gateway-urls.js';
import { runInSandbox, type SandboxOptions } from '../sandbox/index.js';
import type { BridgeScope } from '../sandbox/types.js';
import type { GymTask } from '../tasks/schema.js';
import type { AgentOutcome } from './builtin.js';

/*
 * Any agent as a black box (the way ClawGym ran OpenClaw): a command template run inside the task's
 * sandbox, where it executes its own tools on the workspace. Its only way out is the gateway: the
 * sandbox has no network but a loopback port bridged to the Stepwise server, and the agent finds it
 * in OPENAI_BASE_URL. Placeholders: {prompt_file} (the task prompt, a file in the sandbox's private
 * /tmp), {workspace} (the workspace path inside the sandbox), {task_id}, {model}.
 */

/** What every agent run inside a task's sandbox is given. */
export interface SandboxedAgentOptions {
  /** The trajectory's base_url on the host (`http://host:port/<trajectory>/<group>/v1`). */
  baseUrl: string;
  apiKey?: string;
  model: string;
  task: GymTask;
  /** Host directory of the task's workspace (mounted at task.mountDir in the sandbox). */
  workspace: string;
  sandbox?: Omit<SandboxOptions, 'workspace' | 'mountDir' | 'gateway'>;
  timeoutMs: number;
}

export interface ExternalAgentOptions extends SandboxedAgentOptions {
  template: string;
}

/** The agent process failed (non-zero exit, killed, timed out): the sample scores 0. */
export class AgentFailed extends StepwiseError {
  override readonly name = 'AgentFailed';
  constructor(message: string) {
    super(message, 502, 'agent_failed');
  }
}

const PROMPT_PATH = '/tmp/stepwise-prompt.txt';
/** Inside the sandbox, 127.0.0.1:BRIDGE_PORT is the gateway. */
export const BRIDGE_PORT = 8100;

/** What a sandboxed agent finds in OPENAI_API_KEY: OpenAI clients want one; it grants nothing. */
export const AGENT_API_KEY = 'stepwise';

/**
 * The bridge's scope for a sample: its own trajectory's LLM routes, the runner's key added on the
 * way out (docs/security.md).
 */
export const bridgeScope = (options: Pick<SandboxedAgentOptions, 'baseUrl' | 'apiKey'>): BridgeScope => ({
  basePath: basePathOf(options.baseUrl),
  ...(options.apiKey ? { apiKey: options.apiKey } : {}),
});

/** Single-quotes a value for bash. */
export const quote = (value: string) => `'${value.replaceAll("'", `'\\''`)}'`;

/** A host base_url as an agent inside the sandbox reaches it: the same path on the bridged port. */
export const insideBaseUrl = (baseUrl: string) => `http://127.0.0.1:${BRIDGE_PORT}${basePathOf(baseUrl)}`;

export function renderTemplate(template: string, values: Record<string, string>): string {
  return template.replace(/\{(prompt_file|workspace|task_id|model)\}/g, (_, key: string) =>
    quote(values[key]!),
  );
}

export async function runExternalAgent(options: ExternalAgentOptions): Promise<AgentOutcome> {
  const { task } = options;
  const upstream = new URL(options.baseUrl);
  const inside = insideBaseUrl(options.baseUrl);
  const command = renderTemplate(options.template, {
    prompt_file: PROMPT_PATH,
    workspace: task.mountDir,
    task_id: task.id,
    model: options.model,
  });
  // The prompt arrives on stdin and is written into the sandbox's private /tmp before the agent starts.
  // The template runs as a bash script of its own, so `;`, `&&` and pipes behave as written (after an
  // `exec` only its first command ran); pipefail makes a failing stage fail the agent. stdin is empty.
  const script = `cat > ${PROMPT_PATH} && exec /bin/bash -o pipefail -c ${quote(command)} < /dev/null`;
  const result = await runInSandbox(
    {
      ...options.sandbox,
      workspace: options.workspace,
      mountDir: task.mountDir,
      gateway: { url: upstream.origin, port: BRIDGE_PORT, scope: bridgeScope(options) },
      env: {
        ...options.sandbox?.env,
        OPENAI_BASE_URL: inside,
        // A placeholder: the bridge adds the runner's key, which the agent never sees.
        OPENAI_API_KEY: AGENT_API_KEY,
        OPENAI_MODEL: options.model,
        STEPWISE_TASK_ID: task.id,
      },
    },
    script,
    { stdin: task.prompt, timeoutMs: options.timeoutMs },
  );
  if (result.timedOut) throw new AgentFailed(`the agent did not finish within ${options.timeoutMs} ms`);
  if (result.exitCode !== 0) {
    const why = result.signal ? `was killed by ${result.signal}` : `exited with ${result.exitCode}`;
    throw new AgentFailed(`the agent ${why}: ${result.stderr.trim().slice(-500)}`);
  }
  return {
    ended: 'answer',
    turns: 0,
    toolCalls: 0,
    toolErrors: 0,
    answer: result.stdout.trim().slice(-2000),
    ...(result.gatewayRefused ? { gatewayRefused: result.gatewayRefused } : {}),
  };
}

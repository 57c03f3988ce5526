import OpenAI from 'openai';
import type {
  ChatCompletionMessageParam,
  ChatCompletionMessageToolCall,
} from 'openai/resources/chat/completions';
import type { SandboxOptions } from '../sandbox/index.js';
import type { GymTask } from '../tasks/schema.js';
import { runTool, TOOL_DEFINITIONS } from '../tools/index.js';

/*
 * The built-in Claw-style agent: the official `openai` client pointed at a trajectory's base_url, a
 * system prompt, the workspace tools, and a loop of model turns until the model answers without a
 * tool call (or the turn budget runs out). Tool results go back as `tool` messages in the next
 * request, which is how the gateway attaches them to the step that asked for them.
 */

export interface BuiltinAgentOptions {
  /** The trajectory's base_url (`http://host:port/<trajectory>/<group>/v1`). */
  baseUrl: string;
  apiKey?: string;
  model: string;
  task: GymTask;
  /** Host directory of the task's workspace (mounted at task.mountDir in the sandbox). */
  workspace: string;
  /** Sandbox settings for `exec` (workspace and mount dir come from above). */
  sandbox?: Omit<SandboxOptions, 'workspace' | 'mountDir'>;
  maxTurns?: number;
  turnTimeoutMs?: number;
  /** Sent with every request: one seed per episode keeps a sampling policy's plan stable. */
  seed?: number;
  temperature?: number;
  signal?: AbortSignal;
}

export interface AgentOutcome {
  /** How the episode ended. */
  ended: 'answer' | 'max_turns';
  turns: number;
  toolCalls: number;
  toolErrors: number;
  answer: string | null;
}

export const SYSTEM_PROMPT = (mountDir: string) =>
  [
    'You are a capable assistant working on a task in a local workspace.',
    `The workspace is the directory ${mountDir}; relative paths are resolved against it.`,
    'Use the tools to read inputs, run commands and write outputs. Work step by step: inspect before you',
    'change anything, check your results, and fix mistakes when a tool reports an error.',
    'When the task is done, reply with a short summary of what you did and no tool call.',
  ].join(' ');

export async function runBuiltinAgent(options: BuiltinAgentOptions): Promise<AgentOutcome> {
  const { task } = options;
  const maxTurns = options.maxTurns ?? 30;
  const client = new OpenAI({
    baseURL: options.baseUrl,
    apiKey: options.apiKey ?? 'stepwise',
    maxRetries: 0,
    timeout: options.turnTimeoutMs ?? 300_000,
  });
  const messages: ChatCompletionMessageParam[] = [
    { role: 'system', content: SYSTEM_PROMPT(task.mountDir) },
    { role: 'user', content: task.prompt },
  ];
  const context = {
    workspace: options.workspace,
    mountDir: task.mountDir,
    sandbox: { ...options.sandbox, workspace: options.workspace, mountDir: task.mountDir },
  };
  let toolCalls = 0;
  let toolErrors = 0;
  for (let turn = 1; turn <= maxTurns; turn++) {
    const completion = await client.chat.completions.create(
      {
        model: options.model,
        messages,
        tools: TOOL_DEFINITIONS,
        ...(options.seed === undefined ? {} : { seed: options.seed }),
        ...(options.temperature === undefined ? {} : { temperature: options.temperature }),
      },
      { signal: options.signal },
    );
    const message = completion.choices[0]?.message;
    const calls = (message?.tool_calls ?? []).filter(
      (c): c is ChatCompletionMessageToolCall & { type: 'function' } => c.type === 'function',
    );
    messages.push({
      role: 'assistant',
      content: message?.content ?? null,
      ...(calls.length > 0 ? { tool_calls: calls } : {}),
    });
    if (calls.length === 0) {
      return { ended: 'answer', turns: turn, toolCalls, toolErrors, answer: message?.content ?? '' };
    }
    for (const call of calls) {
      toolCalls++;
      const outcome = await runTool(call.function.name, call.function.arguments, context);
      if (!outcome.ok) toolErrors++;
      messages.push({ role: 'tool', tool_call_id: call.id, content: outcome.content });
    }
  }
  return { ended: 'max_turns', turns: maxTurns, toolCalls, toolErrors, answer: null };
}

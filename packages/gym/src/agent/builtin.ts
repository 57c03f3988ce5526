import {
  type CleanerOptions,
  type CleanerReport,
  chatTurn,
  type ModelAdapter,
  qwen3Adapter,
  type Random,
  type RepairRecord,
  repairedAssistantMessage,
  SaarSession,
  seededRandom,
  type ToolResultsDecision,
  toolCallStart,
  withRetryNote,
} from '@stepwise/core';
import OpenAI from 'openai';
import type {
  ChatCompletionMessageParam,
  ChatCompletionMessageToolCall,
} from 'openai/resources/chat/completions';
import { z } from 'zod';
import type { SandboxOptions } from '../sandbox/index.js';
import type { GymTask } from '../tasks/schema.js';
import {
  runTool,
  TOOL_DEFINITIONS,
  type ToolContext,
  type ToolDefinition,
  type ToolOutcome,
} from '../tools/index.js';

// The built-in Claw-style agent: the `openai` client on a trajectory's base_url, the workspace tools, model
// turns until an answer without a tool call. With `cleaner`: docs/cleaner.md#online-the-built-in-agent

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
  /** The tools offered, by name (default: all of `TOOL_DEFINITIONS`). */
  tools?: readonly string[];
  /** `short`: each tool's first sentence and required parameters only (a shorter prompt for small models). */
  toolDescriptions?: 'full' | 'short';
  /** Replaces `SYSTEM_PROMPT`. */
  systemPrompt?: string;
  /** Sent as `max_tokens`: the longest turn (default: the engine's). */
  maxTokens?: number;
  /** Sent with every request as vLLM's `chat_template_kwargs` (e.g. `{ enable_thinking: false }`). */
  chatTemplateKwargs?: Record<string, unknown>;
  /** Sent with every request: one seed per episode keeps a sampling policy's plan stable. */
  seed?: number;
  temperature?: number;
  signal?: AbortSignal;
  /**
   * CLEANER rollback of failed tool calls. The p draw comes from `random`, else from `seed` (one
   * draw per episode), else Math.random.
   */
  cleaner?: CleanerOptions & { random?: Random };
  /**
   * Called with what CLEANER did whenever the episode ends, by an answer, the turn budget or a
   * throw (a timeout, an engine error): the runner stores it before the trajectory is completed.
   */
  onCleanerReport?: (report: CleanerReport) => void;
  /**
   * The adapter of the engine's model (default: the built-in Qwen3, as the gateway's): CLEANER
   * records its tool-call opener's id for the graft and decodes response ids with its tokenizer.
   * A model whose calls open with no one token refuses CLEANER, naming the model.
   */
  modelAdapter?: ModelAdapter;
}

export interface AgentOutcome {
  /** How the episode ended. */
  ended: 'answer' | 'max_turns';
  turns: number;
  toolCalls: number;
  toolErrors: number;
  answer: string | null;
  /** What CLEANER did (present when it was on); repair steps are LLM-call (= step) indices. */
  cleaner?: CleanerReport;
  /** Requests of a sandboxed agent the gateway bridge refused (docs/security.md). */
  gatewayRefused?: string[];
}

export const SYSTEM_PROMPT = (mountDir: string) =>
  [
    'You are a capable assistant working on a task in a local workspace.',
    `The workspace is the directory ${mountDir}; relative paths are resolved against it.`,
    'Use the tools to read inputs, run commands and write outputs. Work step by step: inspect before you',
    'change anything, check your results, and fix mistakes when a tool reports an error.',
    'When the task is done, reply with a short summary of what you did and no tool call.',
  ].join(' ');

/** The engine's response ids on a chat choice (`token_ids`, vLLM's and the sim's); absent from other APIs. */
const ChoiceTokenIds = z.looseObject({ token_ids: z.array(z.number().int()) });

/** The definitions of the named tools, in `TOOL_DEFINITIONS` order; an unknown name is an error. */
export function offeredTools(
  names: readonly string[] | undefined,
  descriptions: 'full' | 'short' = 'full',
): ToolDefinition[] {
  const known = new Set(TOOL_DEFINITIONS.map((t) => t.function.name));
  const unknown = (names ?? []).filter((n) => !known.has(n));
  if (unknown.length > 0)
    throw new Error(`unknown tool ${unknown.join(', ')}: the built-in agent has ${[...known].join(', ')}`);
  const chosen = names ? TOOL_DEFINITIONS.filter((t) => names.includes(t.function.name)) : TOOL_DEFINITIONS;
  return descriptions === 'full' ? chosen : chosen.map(shortTool);
}

/** A tool's first sentence and its required parameters, untyped beyond their JSON type. */
function shortTool(tool: ToolDefinition): ToolDefinition {
  const { properties = {}, required = [] } = tool.function.parameters as {
    properties?: Record<string, { type?: string }>;
    required?: string[];
  };
  return {
    type: 'function',
    function: {
      name: tool.function.name,
      description: tool.function.description.split(/(?<=\.)\s/)[0]!,
      parameters: {
        type: 'object',
        properties: Object.fromEntries(
          required.map((name) => [name, { type: properties[name]?.type ?? 'string' }]),
        ),
        required,
      },
    },
  };
}

type FunctionCall = ChatCompletionMessageToolCall & { type: 'function' };
type AssistantMessage = ChatCompletionMessageParam & { role: 'assistant'; tool_calls?: FunctionCall[] };

export async function runBuiltinAgent(options: BuiltinAgentOptions): Promise<AgentOutcome> {
  const episode = startEpisode(options);
  try {
    return await runTurns(episode);
  } finally {
    // Every way out, a throw included: the runner must know what was rolled back before it
    // completes the trajectory, or the failed attempts would be served as captured.
    if (episode.saar) options.onCleanerReport?.(cleanerReport(episode));
  }
}

/** What one episode's steps share: the client and history, CLEANER's session and record, the counts. */
interface EpisodeState {
  options: BuiltinAgentOptions;
  maxTurns: number;
  client: OpenAI;
  messages: ChatCompletionMessageParam[];
  context: ToolContext;
  tools: ToolDefinition[];
  saar: SaarSession | null;
  repairs: RepairRecord[];
  /** Regenerations asked for and never received (the episode ended while they were owed). */
  abandonedSteps: number[];
  marker: number | null;
  tokenizer: ModelAdapter['tokenizer'] | null;
  llmCalls: number;
  toolCalls: number;
  toolErrors: number;
}

/** A model turn as the loop uses it; `step` is the LLM call's index (the gateway's step index). */
interface GeneratedTurn {
  step: number;
  assistant: AssistantMessage;
  calls: FunctionCall[];
  text: string;
  callText: string | undefined;
}

/** The episode before its first turn; what refuses the options (CLEANER's model, a tool) throws here. */
function startEpisode(options: BuiltinAgentOptions): EpisodeState {
  const { task } = options;
  const client = new OpenAI({
    baseURL: options.baseUrl,
    apiKey: options.apiKey ?? 'stepwise',
    maxRetries: 0,
    timeout: options.turnTimeoutMs ?? 300_000,
  });
  const messages: ChatCompletionMessageParam[] = [
    { role: 'system', content: options.systemPrompt ?? SYSTEM_PROMPT(task.mountDir) },
    { role: 'user', content: task.prompt },
  ];
  const context = {
    workspace: options.workspace,
    mountDir: task.mountDir,
    sandbox: { ...options.sandbox, workspace: options.workspace, mountDir: task.mountDir },
    offered: options.tools,
  };
  const saar = options.cleaner
    ? new SaarSession(
        options.cleaner,
        options.cleaner.random ??
          (options.seed === undefined ? Math.random : seededRandom('cleaner-rollback', options.seed)),
      )
    : null;
  const adapter = saar ? (options.modelAdapter ?? qwen3Adapter()) : null;
  const marker = adapter?.toolCallOpenId() ?? null;
  const tokenizer = adapter?.tokenizer ?? null;
  const tools = offeredTools(options.tools, options.toolDescriptions);
  return {
    options,
    maxTurns: options.maxTurns ?? 30,
    client,
    messages,
    context,
    tools,
    saar,
    repairs: [],
    abandonedSteps: [],
    marker,
    tokenizer,
    llmCalls: 0,
    toolCalls: 0,
    toolErrors: 0,
  };
}

function cleanerReport(episode: EpisodeState): CleanerReport {
  return {
    options: episode.saar!.state.options,
    metrics: episode.saar!.finish(),
    repairs: [...episode.repairs],
    abandonedSteps: [...episode.abandonedSteps],
    toolCallTokenId: episode.marker,
  };
}

/** One model turn through the gateway. */
async function generate(
  episode: EpisodeState,
  history: ChatCompletionMessageParam[],
): Promise<GeneratedTurn> {
  const { options } = episode;
  const completion = await episode.client.chat.completions.create(
    {
      model: options.model,
      messages: history,
      tools: episode.tools,
      ...(options.maxTokens === undefined ? {} : { max_tokens: options.maxTokens }),
      ...(options.chatTemplateKwargs ? { chat_template_kwargs: options.chatTemplateKwargs } : {}),
      ...(options.seed === undefined ? {} : { seed: options.seed }),
      ...(options.temperature === undefined ? {} : { temperature: options.temperature }),
    },
    { signal: options.signal },
  );
  const step = episode.llmCalls++;
  const choice = completion.choices[0];
  const message = choice?.message;
  const calls = (message?.tool_calls ?? []).filter((c): c is FunctionCall => c.type === 'function');
  const assistant: AssistantMessage = {
    role: 'assistant',
    content: message?.content ?? null,
    ...(calls.length > 0 ? { tool_calls: calls } : {}),
  };
  return { step, assistant, calls, text: message?.content ?? '', callText: callText(episode, choice) };
}

/**
 * CLEANER's similarity text: the engine's response ids (`token_ids`, which the gateway asks vLLM
 * and the sim for) from the first `<tool_call>` on, decoded with special tokens kept, as the
 * authors decode theirs. Without ids, or without the marker in them, the text is rebuilt from the
 * parsed calls (saar.ts).
 */
function callText(episode: EpisodeState, choice: unknown): string | undefined {
  const { tokenizer, marker } = episode;
  if (!tokenizer || marker === null) return undefined;
  const parsed = ChoiceTokenIds.safeParse(choice);
  if (!parsed.success) return undefined;
  const ids = parsed.data.token_ids;
  const at = toolCallStart(ids, marker);
  return at === null ? undefined : tokenizer.decode(ids.slice(at));
}

/** Runs the calls one after another, counting them and their errors. */
async function execute(episode: EpisodeState, calls: readonly FunctionCall[]): Promise<ToolOutcome[]> {
  const outcomes: ToolOutcome[] = [];
  for (const call of calls) {
    episode.toolCalls++;
    const outcome = await runTool(call.function.name, call.function.arguments, episode.context);
    if (!outcome.ok) episode.toolErrors++;
    outcomes.push(outcome);
  }
  return outcomes;
}

const toolMessages = (calls: readonly FunctionCall[], outcomes: readonly ToolOutcome[]) =>
  calls.map(
    (call, i): ChatCompletionMessageParam => ({
      role: 'tool',
      tool_call_id: call.id,
      content: outcomes[i]!.content,
    }),
  );

function finish(
  episode: EpisodeState,
  ended: AgentOutcome['ended'],
  turns: number,
  answer: string | null,
): AgentOutcome {
  return {
    ended,
    turns,
    toolCalls: episode.toolCalls,
    toolErrors: episode.toolErrors,
    answer,
    ...(episode.saar ? { cleaner: cleanerReport(episode) } : {}),
  };
}

/** Model turns until one answers without a tool call, or the turn budget runs out. */
async function runTurns(episode: EpisodeState): Promise<AgentOutcome> {
  const { messages, maxTurns } = episode;
  let turn = 0;
  while (turn < maxTurns) {
    turn++;
    const generated = await generate(episode, messages);
    if (generated.calls.length === 0) {
      messages.push(generated.assistant);
      return finish(episode, 'answer', turn, generated.text);
    }
    const ended = await runToolTurn(episode, turn, generated);
    if (ended) return ended;
  }
  return finish(episode, 'max_turns', maxTurns, null);
}

/**
 * A turn with tool calls: its calls run and, while CLEANER rolls a failure back, the regenerated
 * turn takes its place and its calls run. Returns the outcome when the turn ends the episode, else null.
 */
async function runToolTurn(
  episode: EpisodeState,
  turn: number,
  generated: GeneratedTurn,
): Promise<AgentOutcome | null> {
  const { messages, maxTurns, saar } = episode;
  // The turn stands at `at` in the history; a rollback rewrites it there.
  const at = messages.push(generated.assistant) - 1;
  let current = generated;
  for (;;) {
    const outcomes = await execute(episode, current.calls);
    const decision = saar?.toolResults(outcomes) ?? { kind: 'keep' as const, recovered: false };
    if (decision.kind === 'keep') {
      messages.push(...toolMessages(current.calls, outcomes));
      return null;
    }
    const error = failedCallMessage(current.calls, outcomes, decision);
    if (decision.kind === 'give_up') {
      messages.push(error);
      return null;
    }
    if (turn + 1 >= maxTurns) {
      // The authors' regeneration counts as a turn until their checkpoint restores the counter, and
      // a turn that reaches max_assistant_turns ends the episode first: a failure on the last two
      // turns is never repaired. Their T′ is then thrown away unread, so it is not asked for here.
      saar!.abandon();
      return finish(episode, 'max_turns', turn, null);
    }
    // Show the model its error and let it redo the turn. Otherwise, as in the authors' loop, a
    // regeneration is not a turn of its own (maxRetries and maxAttempts bound them).
    const regenerated = await regenerate(episode, error);
    const failed = messages[at] as AssistantMessage;
    const repair = saar!.regenerated(
      chatTurn(failed.content, failed.tool_calls ?? [], current.callText),
      chatTurn(regenerated.assistant.content, regenerated.calls, regenerated.callText),
    );
    if (repair.kind === 'keep_error') {
      // T' answered instead of calling a tool: the error stays, and T' is the episode's answer.
      messages.push(error, regenerated.assistant);
      return finish(episode, 'answer', turn, regenerated.text);
    }
    episode.repairs.push({
      failedStep: current.step,
      retryStep: regenerated.step,
      similarity: repair.similarity,
      mode: repair.mode,
      errorTypes: repair.removedErrorTypes,
    });
    // The failed call and its error leave the history; the repaired turn's calls run next.
    messages[at] = repairedAssistantMessage(failed, regenerated.assistant, repair.mode);
    current = regenerated;
  }
}

/**
 * What the authors' loop shows on a failure it rolls back or gives up on: one tool message,
 * the last failed call's output (with the retry note when it gives up after N >= 2 rollbacks).
 */
function failedCallMessage(
  calls: readonly FunctionCall[],
  outcomes: readonly ToolOutcome[],
  decision: Exclude<ToolResultsDecision, { kind: 'keep' }>,
): ChatCompletionMessageParam {
  const last = outcomes.findLastIndex((o) => !o.ok);
  return {
    role: 'tool',
    tool_call_id: calls[last]!.id,
    content:
      decision.kind === 'give_up' && decision.note !== null
        ? withRetryNote(outcomes[last]!.content, decision.retries)
        : outcomes[last]!.content,
  };
}

/** The failed turn asked again with its error in view. */
async function regenerate(episode: EpisodeState, error: ChatCompletionMessageParam): Promise<GeneratedTurn> {
  const owed = episode.llmCalls;
  return generate(episode, [...episode.messages, error]).catch((e: unknown) => {
    // Its step, if the gateway stored it, was asked with the error in view: never served.
    episode.abandonedSteps.push(owed);
    episode.saar!.abandon();
    throw e;
  });
}

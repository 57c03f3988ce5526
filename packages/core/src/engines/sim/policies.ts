import { z } from 'zod';
import { ValidationError } from '../../domain/errors.js';
import { type ChatMessageInput, type ChatToolInput, parseToolCalls } from '../../text/index.js';
import { hashSeed, pick, type Random, randomInt, seededRandom } from '../../util/random.js';
import type { SimToolChoice } from './controls.js';
import { neededPlanSteps, shownPlanSteps } from './plan-hint.js';
import { adaptCall, type PolicyToolCall, withoutFilledDefaults } from './tool-adapter.js';

export type { PolicyToolCall } from './tool-adapter.js';

/** What a policy sees: the conversation as the agent sent it, and its own seeded randomness. */
export interface PolicyContext {
  /** The chat request's messages; empty for `/v1/completions`, which has only `prompt`. */
  messages: readonly ChatMessageInput[];
  tools: readonly ChatToolInput[];
  /**
   * The raw prompt of a `/v1/completions` request (token ids decoded), used as given: no template.
   * Absent for chat requests.
   */
  prompt?: string;
  /**
   * The request's `tool_choice` (absent means "auto"). With "none" the engine drops any tool calls;
   * "required" and a named function are requests a policy may honour (the random policy does).
   */
  toolChoice?: SimToolChoice;
  /** The request's seed (or the engine's derived one): the same seed gives the same output. */
  seed: number;
  /**
   * True when the request sent no seed and `seed` was derived by the engine: it then differs on every
   * request, so a plan that must hold for a whole episode cannot come from it (see `episodeSeed`).
   */
  seedDerived?: boolean;
  /**
   * Assistant turns already in `messages` (or in a raw ChatML `prompt`): 0 on the first call of an
   * episode. The scripted policies do not count them: they read the calls made (`pastTurnCalls`).
   */
  turn: number;
  /**
   * The calls of each completed assistant turn of a raw `prompt`, when the engine read them with its
   * family's parser (a prompt that is not ChatML); else they are read as ChatML here.
   */
  pastCalls?: PastToolCall[][];
  /** Seeded from `seed`; a policy must draw all its randomness from here. */
  random: Random;
}

/**
 * What the simulated assistant says. `text` is pasted into the completion verbatim (before any tool
 * calls), so a policy can also write a malformed `<tool_call>` block on purpose.
 */
export interface PolicyOutput {
  text?: string;
  reasoning?: string;
  toolCalls?: PolicyToolCall[];
}

export type Policy = (ctx: PolicyContext) => PolicyOutput;

function contentText(content: ChatMessageInput['content']): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content.map((p) => ('text' in p ? p.text : 'refusal' in p ? p.refusal : '')).join('\n');
}

/**
 * The text that opens a conversation: its first user message (or a raw prompt's first user turn).
 * Not the system prompt: some harnesses refresh state in it on every call, and a plan drawn from it
 * would change mid-episode.
 */
function conversationOpening(ctx: PolicyContext): string | undefined {
  if (ctx.messages.length > 0) {
    const user = ctx.messages.find((m) => m.role === 'user');
    return user ? contentText(user.content) : undefined;
  }
  return ctx.prompt?.match(/<\|im_start\|>user\n[\s\S]*?<\|im_end\|>/)?.[0];
}

/**
 * The seed of an episode-wide plan (injected errors, giving up): the request's seed when it sent one;
 * otherwise a hash of the conversation's opening, which every turn of an episode repeats while the
 * engine's derived seed changes per request. Agents that send no seed (OpenClaw) still get distinct
 * rollouts when their openings differ (OpenClaw's first user message holds a timestamp and a session
 * id); rollouts of one agent that opens every episode with the same bare prompt get the same plan.
 */
export function episodeSeed(ctx: PolicyContext): number {
  if (!ctx.seedDerived) return ctx.seed;
  const opening = conversationOpening(ctx);
  return opening === undefined ? ctx.seed : hashSeed('episode', opening);
}

/** Counts assistant messages: the number of turns the policy has already taken in this episode. */
export function assistantTurns(messages: readonly ChatMessageInput[]): number {
  return messages.filter((m) => m.role === 'assistant').length;
}

const PROMPT_ASSISTANT_TURN = /<\|im_start\|>assistant\n([\s\S]*?)<\|im_end\|>/g;

/**
 * Completed assistant turns in a raw ChatML prompt (`<|im_start|>assistant ... <|im_end|>`): the `turn`
 * of a `/v1/completions` request whose prompt is a rendered conversation; 0 for plain text.
 */
export function assistantTurnsInPrompt(prompt: string): number {
  return prompt.match(PROMPT_ASSISTANT_TURN)?.length ?? 0;
}

/** A tool call an assistant turn of the conversation made; `arguments` as parsed JSON when they parse. */
export interface PastToolCall {
  name: string;
  arguments: unknown;
}

function parsedArguments(args: unknown): unknown {
  if (typeof args !== 'string') return args;
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

/**
 * The tool calls of each assistant turn already in the conversation, in order (an empty list for a
 * turn that answered, or wrote a block no parser accepts): from `messages`, else from the turns of a
 * raw ChatML `prompt`, parsed as the hermes parser does. One entry per turn counted in `turn`.
 */
export function pastTurnCalls(
  ctx: Pick<PolicyContext, 'messages' | 'prompt' | 'pastCalls'>,
): PastToolCall[][] {
  if (ctx.messages.length > 0) {
    return ctx.messages
      .filter((m) => m.role === 'assistant')
      .map((m) => {
        // A turn whose calls stayed as `<tool_call>` text in content (Claw-R1's agents send it so)
        // is the same turn to the model: the template renders both alike.
        const calls =
          (m.tool_calls ?? []).length === 0 &&
          typeof m.content === 'string' &&
          m.content.includes('<tool_call>')
            ? parseToolCalls(m.content, { newToolCallId: () => '' }).toolCalls
            : (m.tool_calls ?? []);
        return calls.map((c) => ({
          name: c.function.name,
          arguments: parsedArguments(c.function.arguments),
        }));
      });
  }
  if (ctx.pastCalls) return ctx.pastCalls;
  if (ctx.prompt === undefined) return [];
  return [...ctx.prompt.matchAll(PROMPT_ASSISTANT_TURN)].map((m) =>
    parseToolCalls(m[1]!, { newToolCallId: () => '' }).toolCalls.map((c) => ({
      name: c.function.name,
      arguments: parsedArguments(c.function.arguments),
    })),
  );
}

/** The last user turn of a ChatML prompt that is not a tool response; undefined for plain text. */
function lastUserTurnInPrompt(prompt: string): string | undefined {
  let last: string | undefined;
  for (const m of prompt.matchAll(/<\|im_start\|>user\n([\s\S]*?)<\|im_end\|>/g)) {
    if (!m[1]!.startsWith('<tool_response>')) last = m[1];
  }
  return last;
}

/** Repeats the text of the last user message; for a raw prompt, its last user turn or the prompt itself. */
export const echoPolicy: Policy = ({ messages, prompt }) => {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m?.role === 'user') return { text: contentText(m.content) };
  }
  if (prompt !== undefined) return { text: lastUserTurnInPrompt(prompt) ?? prompt };
  return { text: '' };
};

const WORDS = [
  'the',
  'a',
  'file',
  'tool',
  'result',
  'check',
  'run',
  'test',
  'value',
  'next',
  'step',
  'answer',
  'looks',
  'fine',
  'error',
  'path',
  'read',
  'write',
  'list',
  'done',
  'maybe',
  'again',
  'output',
  'line',
  'simulated',
  'agent',
  'task',
  'plan',
  'data',
  'ok',
] as const;

function randomWords(random: Random, min: number, max: number): string {
  const n = min + randomInt(random, max - min + 1);
  return Array.from({ length: n }, () => pick(random, WORDS)).join(' ');
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Arguments shaped by the tool's JSON schema (top-level properties only; unknown types get a word). */
function randomArguments(random: Random, tool: ChatToolInput): Record<string, unknown> {
  const params = (tool.function as Record<string, unknown>).parameters;
  const props = isObject(params) && isObject(params.properties) ? params.properties : {};
  const args: Record<string, unknown> = {};
  for (const [key, schema] of Object.entries(props)) {
    const type = isObject(schema) ? schema.type : undefined;
    const enumValues = isObject(schema) && Array.isArray(schema.enum) ? schema.enum : undefined;
    if (enumValues && enumValues.length > 0) args[key] = pick(random, enumValues);
    else if (type === 'integer' || type === 'number') args[key] = randomInt(random, 100);
    else if (type === 'boolean') args[key] = random() < 0.5;
    else args[key] = pick(random, WORDS);
  }
  return args;
}

export interface RandomPolicyOptions {
  /** Chance of a tool call when the request offers tools (default 0.3). */
  toolCallRate?: number;
}

/**
 * Seeded random words; with tools offered, sometimes a call to a random tool with schema-shaped
 * arguments. It honours `toolChoice`: never a call with "none", always one with "required", always the
 * named tool with a named choice.
 */
export function randomPolicy(options: RandomPolicyOptions = {}): Policy {
  const rate = options.toolCallRate ?? 0.3;
  const call = (random: Random, tool: ChatToolInput): PolicyOutput => ({
    toolCalls: [{ name: tool.function.name, arguments: randomArguments(random, tool) }],
  });
  return ({ tools, random, toolChoice = 'auto' }) => {
    if (tools.length > 0 && toolChoice !== 'none') {
      if (typeof toolChoice === 'object') {
        const named = tools.find((t) => t.function.name === toolChoice.name);
        if (named) return call(random, named);
      } else if (toolChoice === 'required' || random() < rate) {
        return call(random, pick(random, tools));
      }
    }
    return { text: randomWords(random, 3, 24) };
  };
}

/** One step of a script: a tool call (optionally with text before it) or a final answer. */
export type ScriptStep = { toolCall: PolicyToolCall; text?: string } | { answer: string };

const NON_EMPTY_SCRIPT = 'the scripted policy needs a non-empty JSON array of steps';

/** A script as a `--script` file holds it: a bad step is named by its index and field. */
export const SimScript = z
  .array(
    z
      .looseObject({
        answer: z.string().optional(),
        toolCall: z
          .looseObject({ name: z.string().min(1), arguments: z.record(z.string(), z.unknown()) })
          .optional(),
        text: z.string().optional(),
      })
      .transform((step, ctx): ScriptStep => {
        // A step with both is an answer, as the policy reads it.
        if (step.answer !== undefined) return { ...step, answer: step.answer };
        if (step.toolCall !== undefined) return { ...step, toolCall: step.toolCall };
        ctx.addIssue({ code: 'custom', message: 'each script step needs "answer" or "toolCall"' });
        return z.NEVER;
      }),
    { error: NON_EMPTY_SCRIPT },
  )
  .min(1, NON_EMPTY_SCRIPT);

export type InjectedErrorKind = 'wrong_argument' | 'unknown_tool' | 'malformed';

export interface ScriptedPolicyOptions {
  /** Chance that a tool-call step is preceded by a wrong call (default 0). */
  errorRate?: number;
  /**
   * Kinds of injected error to draw from (default all). `wrong_argument` needs an argument whose wrong
   * value fails: a path for read, edit and ls, never write or exec; for other tools a string argument.
   * A step none of the kinds can fail gets no error. One kind pins the plan whatever the seed.
   */
  errorKinds?: readonly InjectedErrorKind[];
  /**
   * Seed of the error plan. Defaults to `episodeSeed`: the request's seed, or, when the request sent
   * none, one drawn from the conversation's opening (stable over the episode).
   */
  seed?: number;
  /** Said once the script is exhausted (default: the script's last answer, or "Done."). */
  finalAnswer?: string;
}

/** A script for every task, or one chosen from the request (e.g. by a task id in the first message). */
export type ScriptSource =
  | readonly ScriptStep[]
  | ((ctx: PolicyContext) => readonly ScriptStep[] | undefined);

/** Where the next turn falls in a script once injected errors take their extra turns. */
interface ScriptPosition {
  step: number;
  /** The wrong call that precedes the step's correct one. */
  injected?: InjectedErrorKind;
  /** The correct call that follows an injected one. */
  correction: boolean;
}

/**
 * JSON with object keys sorted and strings NFC-normalised (the sim's output goes through the
 * tokenizer, which normalises), so a call compares equal however an agent re-serialised it.
 */
function canonicalJson(value: unknown): string {
  const canon = (v: unknown): unknown => {
    if (typeof v === 'string') return v.normalize('NFC');
    if (Array.isArray(v)) return v.map(canon);
    if (isObject(v))
      return Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k.normalize('NFC'), canon(v[k])]),
      );
    return v;
  };
  return JSON.stringify(canon(value)) ?? 'undefined';
}

/**
 * Where the conversation stands in the script: every assistant turn completes its step, except the turn of
 * a planned wrong call; a step's own call there instead means it was rolled back (CLEANER) and is done.
 * A turn the script cannot explain still completes its step, so nothing repeats forever. Tool results
 * are not read: telling an error from an output is a guess (a file may start with "Error:").
 */
function locate(
  script: readonly ScriptStep[],
  past: readonly (readonly PastToolCall[])[],
  plan: (step: number) => InjectedErrorKind | undefined,
  isStepCall: (calls: readonly PastToolCall[], step: ScriptStep) => boolean,
): ScriptPosition | undefined {
  let step = 0;
  let wrongMade = false;
  for (const calls of past) {
    if (step >= script.length) return undefined;
    if (!wrongMade && plan(step) !== undefined && !isStepCall(calls, script[step]!)) {
      wrongMade = true;
      continue;
    }
    step++;
    wrongMade = false;
  }
  if (step >= script.length) return undefined;
  const injected = wrongMade ? undefined : plan(step);
  return injected ? { step, injected, correction: false } : { step, correction: wrongMade };
}

/**
 * The episode's error plan: for each tool-call step, whether a wrong call precedes it and of which
 * kind. One draw per step from its own stream: the plan for step i never depends on other steps.
 */
function errorPlan(
  script: readonly ScriptStep[],
  planSeed: number,
  errorRate: number,
  kinds: readonly InjectedErrorKind[],
): (step: number) => InjectedErrorKind | undefined {
  const plans = new Map<number, InjectedErrorKind | undefined>();
  return (i) => {
    if (!plans.has(i)) {
      const step = script[i]!;
      const r = seededRandom('scripted-error', planSeed, i);
      const injected = 'toolCall' in step && errorRate > 0 && r() < errorRate;
      plans.set(i, injected ? chooseKind(r, step.toolCall, kinds) : undefined);
    }
    return plans.get(i);
  };
}

/*
 * An injected error must be one: the tool has to fail, or CLEANER learns from a "mistake" that worked.
 * For our built-in tools (and the harness tools of the same name: OpenClaw's too) a wrong path fails
 * read, edit and ls (the file or directory does not exist), but not write (it creates a stray file)
 * nor exec (a changed command may well succeed): those get an unknown tool instead.
 */
const FAILING_ARGUMENT: Readonly<Record<string, string | null>> = {
  read: 'path',
  edit: 'path',
  ls: 'path',
  write: null,
  exec: null,
};

/** The argument whose wrong value makes the call fail; for tools we do not know, the first string one. */
function wrongArgument(call: PolicyToolCall): string | undefined {
  const key = Object.hasOwn(FAILING_ARGUMENT, call.name)
    ? FAILING_ARGUMENT[call.name]
    : Object.keys(call.arguments).find((k) => typeof call.arguments[k] === 'string');
  return typeof key === 'string' && typeof call.arguments[key] === 'string' ? key : undefined;
}

/**
 * A kind from `kinds` that fails this call, or none: with the kinds pinned to `wrong_argument`, a
 * step whose call has no failing argument (write, exec) gets no injected error at all.
 */
function chooseKind(
  r: Random,
  call: PolicyToolCall,
  kinds: readonly InjectedErrorKind[],
): InjectedErrorKind | undefined {
  const usable = kinds.filter((k) => k !== 'wrong_argument' || wrongArgument(call) !== undefined);
  return usable.length > 0 ? pick(r, usable) : undefined;
}

/**
 * The wrong version of a call, as the simulated assistant writes it. `offered` are the tool names the
 * request offers: an unknown tool's name is none of them.
 */
export function injectError(
  call: PolicyToolCall,
  kind: InjectedErrorKind,
  offered: readonly string[] = [],
): PolicyOutput {
  switch (kind) {
    case 'wrong_argument': {
      const key = wrongArgument(call);
      if (key === undefined) return injectError(call, 'malformed');
      const value = call.arguments[key] as string;
      return { toolCalls: [{ name: call.name, arguments: { ...call.arguments, [key]: `${value}_wrong` } }] };
    }
    case 'unknown_tool': {
      let version = 2;
      while (offered.includes(`${call.name}_v${version}`)) version++;
      return { toolCalls: [{ name: `${call.name}_v${version}`, arguments: call.arguments }] };
    }
    case 'malformed':
      // The closing brace of the call object is missing: parsers leave the block in `content`.
      return {
        text: `<tool_call>\n{"name": "${call.name}", "arguments": ${JSON.stringify(call.arguments)}\n</tool_call>`,
      };
  }
}

const CORRECTION_TEXT = 'That call was wrong; retrying with the correct one.';

/**
 * Follows a per-task script, finding its step from the calls already in the conversation (`locate`); with
 * `errorRate` a tool-call step first gets a wrong call, deterministic per episode seed.
 * With `toolChoice: "none"` a tool-call step answers instead. docs/engines.md#the-built-in-sim
 */
export function scriptedPolicy(source: ScriptSource, options: ScriptedPolicyOptions = {}): Policy {
  const errorRate = options.errorRate ?? 0;
  if (!(errorRate >= 0 && errorRate <= 1))
    throw new ValidationError('errorRate must be in [0, 1]', 'errorRate');
  const kinds = options.errorKinds ?? ['wrong_argument', 'unknown_tool', 'malformed'];
  return (ctx) => {
    const script = typeof source === 'function' ? source(ctx) : source;
    if (!script || script.length === 0) return { text: options.finalAnswer ?? 'Done.' };
    const finalAnswer = () => {
      const answers = script.filter((s): s is { answer: string } => 'answer' in s);
      return { text: options.finalAnswer ?? answers.at(-1)?.answer ?? 'Done.' };
    };
    const adapt = (call: PolicyToolCall) => adaptCall(call, ctx.tools);
    // The step's call as the sim writes it for the offered tools, compared as JSON.
    const isStepCall = (calls: readonly PastToolCall[], step: ScriptStep) => {
      if (!('toolCall' in step) || calls.length !== 1) return false;
      const made = calls[0]!;
      const call = adapt(step.toolCall);
      return (
        made.name === call.name &&
        canonicalJson(withoutFilledDefaults(made, call, ctx.tools)) === canonicalJson(call.arguments)
      );
    };
    const plan = errorPlan(script, options.seed ?? episodeSeed(ctx), errorRate, kinds);
    const pos = locate(script, pastTurnCalls(ctx), plan, isStepCall);
    if (!pos) return finalAnswer();
    const step = script[pos.step]!;
    if ('answer' in step) return { text: step.answer };
    if (ctx.toolChoice === 'none') return finalAnswer();
    if (pos.injected) {
      // The error is made on the action as written (its kinds are chosen for our tools), then adapted.
      const offered = ctx.tools.map((t) => t.function.name);
      const call = pos.injected === 'malformed' ? adapt(step.toolCall) : step.toolCall;
      const wrong = injectError(call, pos.injected, offered);
      return wrong.toolCalls ? { ...wrong, toolCalls: wrong.toolCalls.map(adapt) } : wrong;
    }
    const text = pos.correction ? CORRECTION_TEXT : step.text;
    return { ...(text !== undefined ? { text } : {}), toolCalls: [adapt(step.toolCall)] };
  };
}

/** The reference policy's injected errors: real mistakes only (a malformed block would end the episode). */
export const REFERENCE_ERROR_KINDS: readonly InjectedErrorKind[] = ['wrong_argument', 'unknown_tool'];

/** A task the `reference` policy knows: its prompt and the tool calls that solve it. */
export interface ReferenceTask {
  prompt: string;
  actions: readonly PolicyToolCall[];
  /** The closing answer (default: a one-line summary). */
  answer?: string;
}

export interface ReferencePolicyOptions {
  /** Chance that a tool call is preceded by a wrong one, then corrected (default 0). */
  errorRate?: number;
  /** Chance that an episode stops after a random prefix of its actions (default 0): failed rollouts. */
  giveUpRate?: number;
  /**
   * Kinds of injected error (default both): `wrong_argument`, `unknown_tool`. `malformed` is not one:
   * a block no parser accepts reads as a plain answer and would end the agent's episode.
   */
  errorKinds?: readonly InjectedErrorKind[];
  /**
   * A policy that needs a plan (ActGuide-RL's hard tasks): the share of a task's actions (0 to 1) that
   * a numbered plan in the first user message must show before an episode can finish; with fewer
   * shown, it takes the shown actions and gives up. 0 (default): no plan needed.
   */
  needsPlan?: number;
}

/**
 * The first user message that names a task, and the task: a harness may open with a user message
 * of its own (Codex CLI's `<environment_context>`) before the prompt.
 */
function taskMessage<T>(
  messages: readonly ChatMessageInput[],
  find: (text: string) => T | undefined,
): { text: string; task: T } | undefined {
  for (const m of messages) {
    if (m.role !== 'user') continue;
    const text = contentText(m.content).trim();
    const task = find(text);
    if (task) return { text, task };
  }
  return undefined;
}

/**
 * Follows the reference actions of the task whose prompt is the first user message that holds one
 * (equal or contained, so a harness may wrap it or open with a message of its own), with `scriptedPolicy`'s errors. The error plan and give-up draw come from
 * `episodeSeed` (else the opening), so rollouts with other seeds differ. An unknown task gets "Done.".
 */
export function referencePolicy(
  tasks: readonly ReferenceTask[],
  options: ReferencePolicyOptions = {},
): Policy {
  const giveUpRate = options.giveUpRate ?? 0;
  if (!(giveUpRate >= 0 && giveUpRate <= 1))
    throw new ValidationError('giveUpRate must be in [0, 1]', 'giveUpRate');
  const needsPlan = options.needsPlan ?? 0;
  if (!(needsPlan >= 0 && needsPlan <= 1))
    throw new ValidationError('needsPlan must be in [0, 1]', 'needsPlan');
  const errorKinds = options.errorKinds ?? REFERENCE_ERROR_KINDS;
  const bad = errorKinds.find((k) => !REFERENCE_ERROR_KINDS.includes(k));
  if (bad !== undefined || errorKinds.length === 0)
    throw new ValidationError(
      `errorKinds must list one or more of ${REFERENCE_ERROR_KINDS.join(', ')}${bad === undefined ? '' : `, not ${JSON.stringify(bad)}`}`,
      'errorKinds',
    );
  const byPrompt = new Map(tasks.map((t) => [t.prompt.trim(), t]));
  // Longest prompts first, so a prompt that contains a shorter one still finds its own task.
  const byLength = [...tasks].sort((a, b) => b.prompt.length - a.prompt.length);
  const find = (text: string) =>
    byPrompt.get(text) ?? byLength.find((t) => t.prompt.trim() !== '' && text.includes(t.prompt.trim()));
  return scriptedPolicy(
    (ctx) => {
      const found = taskMessage(ctx.messages, find);
      if (!found) return undefined;
      const { text, task } = found;
      let actions = task.actions;
      const r = seededRandom('reference-give-up', episodeSeed(ctx));
      if (giveUpRate > 0 && actions.length > 0 && r() < giveUpRate)
        actions = actions.slice(0, randomInt(r, actions.length));
      if (needsPlan > 0) {
        // The plan is in the user message, or in an assistant prefix (ActGuide's second mode).
        const prefixes = ctx.messages.flatMap((m) =>
          m.role === 'assistant' && typeof m.content === 'string' ? [m.content] : [],
        );
        const shown = shownPlanSteps([text, ...prefixes].join('\n'), task.actions);
        if (shown < neededPlanSteps(task.actions.length, needsPlan)) actions = actions.slice(0, shown);
      }
      const answer =
        actions.length < task.actions.length
          ? 'I could not finish the task.'
          : (task.answer ?? `Done: ${task.actions.length} actions taken.`);
      return [...actions.map((toolCall) => ({ toolCall })), { answer }];
    },
    { errorRate: options.errorRate ?? 0, errorKinds },
  );
}

/** Built-in policies by name, for configuration and the CLI (`scripted` needs a script, so it is not here). */
export const namedPolicies: Readonly<Record<'echo' | 'random', () => Policy>> = {
  echo: () => echoPolicy,
  random: () => randomPolicy(),
};

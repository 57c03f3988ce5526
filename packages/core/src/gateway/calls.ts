import { ClientId, clientIdParam, parseOrThrow, StepwiseError, ValidationError } from '../domain/index.js';
import { AGENT_HEADERS } from '../domain/wire-headers.js';
import { type ApiKey, agentOnly } from '../http/auth.js';
import { OFFLOAD_JSON_BYTES, parseJsonText } from '../http/json-body.js';
import { jsonOf } from '../http/offload-json.js';
import { offload } from '../services/offload.js';
import { Transfer } from '../util/worker-rpc.js';
import { type Answer, JSON_HEADERS } from './answer.js';
import { type CallKind, checkCallRequest, checkPromptLength } from './call-request.js';
import type { CallOrigin } from './call-trace.js';
import type { Gateway } from './gateway.js';
import { messageAnswer } from './messages.js';
import { chatRequestOf } from './messages-request.js';
import { responsesCall } from './responses.js';
import { checkResponsesRequest, type ResponsesBody } from './responses-request.js';
import type { Session } from './session.js';
import { CHANNEL_HEADER, SESSION_HEADER, sessionKeyOf } from './session-keys.js';
import { GenerateRequest } from './wire/generate.js';
import type { ChatCompletionRequest } from './wire/openai-chat.js';
import type { CompletionRequest } from './wire/openai-completions.js';

/*
 * The LLM calls (chat/completions, completions, responses, messages, /generate, models) independent
 * of the HTTP layer: what the gateway's listener (direct.ts) answers for each, from the request's
 * ids, headers and body.
 */

/** The LLM call a request makes: a chat or text completion, or a Responses or Messages API call (as chat). */
export type LlmCall = CallKind | 'responses' | 'messages';

export const TRAJECTORY_HEADER = AGENT_HEADERS.trajectory;
const MODEL_SEPARATOR = '__';

/** A request header by lower-case name. */
export type HeaderOf = (name: string) => string | undefined;

/** What a call at the fixed base_url brings besides its body: its headers, and the key it was admitted with. */
export interface FixedCallRequest {
  header: HeaderOf;
  /** null: keys are off (loopback only), every caller is the operator. */
  caller: ApiKey | null;
}

/** The body the chat path takes: a Messages API body is translated (its own text is not chat's). */
async function bodyOf(kind: LlmCall, text: string): Promise<{ body: unknown; raw: string | null }> {
  // A big one is parsed on the offload thread, where its fields besides the conversation are measured.
  const value =
    text.length >= OFFLOAD_JSON_BYTES
      ? await offload.call('parseCallBody', text)
      : parseJsonText(text, false).value;
  return kind === 'messages' ? { body: chatRequestOf(value), raw: null } : { body: value, raw: text };
}

/** A call's request, checked once against its protocol's schema: the type carries the check on. */
type CheckedCall =
  | { kind: 'responses'; request: ResponsesBody }
  | { kind: 'chat' | 'messages'; request: ChatCompletionRequest }
  | { kind: 'text'; request: CompletionRequest };

/** Checks a call's body (a Messages API body arrives translated to chat); a 400 naming the field. */
function checkCall(kind: LlmCall, body: unknown): CheckedCall {
  if (kind === 'responses') return { kind, request: checkResponsesRequest(body) };
  if (kind === 'text') return { kind, request: checkCallRequest('text', body) };
  return { kind, request: checkCallRequest('chat', body) };
}

/**
 * Forwards and captures one call of a session. Responses and Messages API calls go as chat and are
 * answered in their own shape; `size` (the request's length) is what keeping a response costs.
 */
async function callOn(
  gateway: Gateway,
  session: Session,
  call: CheckedCall,
  signal: AbortSignal,
  raw: string | null,
  size: number,
  origin: CallOrigin | undefined,
): Promise<Answer> {
  if (call.kind === 'responses') return responsesCall(gateway, session, call.request, signal, size, origin);
  if (call.kind === 'text') return gateway.call(session, 'text', call.request, signal, raw, origin);
  if (call.kind === 'chat') return gateway.call(session, 'chat', call.request, signal, raw, origin);
  const answer = await gateway.call(session, 'chat', call.request, signal, null, origin);
  return messageAnswer(answer, call.request.model);
}

/** A call under a trajectory's base_url (`/<trajectory>/<group>/v1/...`). */
export async function trajectoryCall(
  gateway: Gateway,
  kind: LlmCall,
  ids: { trajectory: string | undefined; group: string | undefined },
  text: string,
  signal: AbortSignal,
  origin?: CallOrigin,
): Promise<Answer> {
  const trajectory = clientIdParam(ids.trajectory, 'trajectory_uid');
  const group = clientIdParam(ids.group, 'group_id');
  const session = await gateway.sessionAt(trajectory, group);
  const { body, raw } = await bodyOf(kind, text);
  return callOn(gateway, session, checkCall(kind, body), signal, raw, text.length, origin);
}

/**
 * A call at the fixed base_url (`/v1/...`): the trajectory named in `X-Stepwise-Trajectory` or as
 * the model prefix `<trajectory>__<model>`, or an online session named in `X-Stepwise-Session`.
 */
export async function fixedCall(
  gateway: Gateway,
  kind: LlmCall,
  request: FixedCallRequest,
  text: string,
  signal: AbortSignal,
  origin?: CallOrigin,
): Promise<Answer> {
  const { header } = request;
  // The agent's text goes to the engine unless the gateway changes the body (see upstreamText).
  const parsed = await bodyOf(kind, text);
  const { body } = parsed;
  let { raw } = parsed;
  const sessionHeader = header(SESSION_HEADER);
  if (sessionHeader !== undefined)
    return sessionCall(gateway, kind, request, body, raw, sessionHeader, signal, text.length, origin);
  let trajectory = header(TRAJECTORY_HEADER) ?? null;
  const model = (body as { model?: unknown } | null)?.model;
  if (trajectory === null && typeof model === 'string' && model.includes(MODEL_SEPARATOR)) {
    const at = model.indexOf(MODEL_SEPARATOR);
    trajectory = model.slice(0, at);
    (body as { model: string }).model = model.slice(at + MODEL_SEPARATOR.length);
    raw = null;
  }
  if (trajectory === null) {
    // Thrown, so that each API's listener answers it in its own error shape.
    throw new StepwiseError(
      `no trajectory named: send the header X-Stepwise-Trajectory, set model to "<trajectory>${MODEL_SEPARATOR}<model>", or use the base_url from POST /init_trajectory`,
      400,
      'missing_trajectory',
      'model',
    );
  }
  const session = await gateway.session(parseOrThrow(ClientId, trajectory, 'trajectory_uid'));
  return callOn(gateway, session, checkCall(kind, body), signal, raw, text.length, origin);
}

/** A call of an online session: its trajectory is found (or opened) by session key. */
async function sessionCall(
  gateway: Gateway,
  kind: LlmCall,
  { header, caller }: FixedCallRequest,
  body: unknown,
  raw: string | null,
  sessionHeader: string,
  signal: AbortSignal,
  size: number,
  origin: CallOrigin | undefined,
): Promise<Answer> {
  if (header(TRAJECTORY_HEADER) !== undefined) {
    throw new ValidationError(
      'X-Stepwise-Session: send either X-Stepwise-Session or X-Stepwise-Trajectory, not both',
      'X-Stepwise-Session',
    );
  }
  // Checked before the session is found or opened: a call refused for its body opens no trajectory.
  const checked = checkCall(kind, body);
  const request: Record<string, unknown> = checked.request;
  const key = sessionKeyOf(sessionHeader, request);
  // A session is its key's: another key naming the same session gets a session of its own.
  const owner = { fingerprint: caller?.fingerprint ?? null, agentOnly: agentOnly(caller) };
  const channel = await gateway.online.channelFor(owner, header(CHANNEL_HEADER));
  const call = await gateway.online.acquire(owner, key, channel, header('user-agent') ?? null);
  try {
    // Feedback is judged against the session's last step (stored before its answer went out).
    // (Chat messages: a Messages call was translated to chat; a Responses call has none.)
    const feedback = kind === 'chat' || kind === 'messages' ? call.feedbackFor(request) : null;
    const answer = await callOn(gateway, call.session, checked, signal, raw, size, origin);
    // Only for a call the gateway accepted: a rejected one is sent again, and judged then.
    if (feedback) call.recordFeedback(feedback);
    return answer;
  } finally {
    call.release();
  }
}

/**
 * White-box token-in/token-out generation (`POST /generate`, Claw-R1's): prompt ids in, the engine's
 * ids and logprobs out; nothing is recorded (the agent submits its steps). `raw`: the request's body.
 */
export async function generateCall(
  gateway: Gateway,
  raw: Buffer | undefined,
  signal: AbortSignal,
): Promise<Answer> {
  const value = await generateBody(raw);
  // A big body's ids came checked, as Uint32Arrays: the schema checks the rest.
  const typed: Partial<Record<(typeof ID_FIELDS)[number], Uint32Array>> = {};
  if (typeof value === 'object' && value !== null)
    for (const field of ID_FIELDS) {
      const ids = (value as Record<string, unknown>)[field];
      if (!(ids instanceof Uint32Array)) continue;
      typed[field] = ids;
      delete (value as Record<string, unknown>)[field];
    }
  const body = parseOrThrow(GenerateRequest, value);
  const given = (field: (typeof ID_FIELDS)[number]) => typed[field] ?? body[field];
  const promptIds = given('prompt_ids') ?? given('input_ids');
  if (!promptIds || promptIds.length === 0) {
    throw new ValidationError('prompt_ids: must be a non-empty array of token ids', 'prompt_ids');
  }
  checkPromptLength(promptIds.length, given('prompt_ids') !== undefined ? 'prompt_ids' : 'input_ids');
  const sampling = { ...(body.sampling_params ?? {}) };
  // SGLang/verl name it max_new_tokens; the OpenAI-compatible API calls it max_tokens.
  if (sampling.max_new_tokens !== undefined && sampling.max_tokens === undefined) {
    sampling.max_tokens = sampling.max_new_tokens;
    delete sampling.max_new_tokens;
  }
  const out = await gateway.generate(
    { promptIds, sampling, trajectoryId: body.trajectory_uid ?? null, model: body.model },
    signal,
  );
  // 262,144 prompt ids and the answer's are 1.5 MB of JSON: written on the offload thread.
  return { status: 200, headers: JSON_HEADERS, body: await jsonOf(out, true) };
}

const ID_FIELDS = ['prompt_ids', 'input_ids'] as const;

/**
 * A `/generate` body's value; a big one (262,144 ids is 1.4 MB) is parsed on the offload thread,
 * its bytes moved there, and its ids come back as Uint32Arrays.
 */
async function generateBody(raw: Buffer | undefined): Promise<unknown> {
  if (raw === undefined || raw.length < OFFLOAD_JSON_BYTES)
    return parseJsonText(bodyText(raw), false, true).value;
  const whole = raw.byteOffset === 0 && raw.byteLength === raw.buffer.byteLength;
  const bytes = (
    whole ? raw.buffer : raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length)
  ) as ArrayBuffer;
  return offload.call('parseIdsBody', new Transfer(bytes, [bytes]), ID_FIELDS);
}

/** A body as text, as a fetch Request's `text()` reads it (UTF-8, a leading BOM dropped). */
export function bodyText(raw: Buffer | undefined): string {
  if (raw === undefined || raw.length === 0) return '';
  const text = raw.toString('utf8');
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

/** The models agents may name, at the fixed base_url or under a trajectory's (which must exist). */
export async function modelsCall(
  gateway: Gateway,
  ids: { trajectory: string; group: string } | null,
): Promise<Answer> {
  if (ids !== null)
    await gateway.sessionAt(
      clientIdParam(ids.trajectory, 'trajectory_uid'),
      clientIdParam(ids.group, 'group_id'),
    );
  return gateway.models();
}

import { createHash } from 'node:crypto';
import type { NewStep, Step, TokenSource, ToolResult } from '../domain/index.js';
import {
  allocTokens,
  commonPrefixLength,
  concatTokens,
  decodeFloats,
  decodeTokens,
  encodeFloats,
  encodeTokens,
  hashTokens,
  joinPrompt,
  toNumbers,
} from './token-codec.js';

/** A step as any backend stores it: tokens as blobs relative to a base step, views as JSON. */
export interface StepRow {
  /** trajectory seq * STEP_KEY_SPAN + idx */
  key: number;
  trajectory_id: string;
  idx: number;
  channel: string;
  group_id: string;
  base_idx: number | null;
  prefix_len: number;
  prompt_suffix: Uint8Array;
  response: Uint8Array;
  logprobs: Uint8Array | null;
  prompt_len: number;
  response_len: number;
  content_hash: number;
  reward: number | null;
  policy_version: number;
  is_last: number;
  finish_reason: string | null;
  token_source: string;
  metadata: string | null;
  view: string | null;
  latency_ms: number | null;
  ttft_ms: number | null;
  engine_id: string | null;
  created_at: number;
  /** Claw-R1's MoE routing, packed (encodeRoutedExperts); null when the step has none. */
  routed_experts: Uint8Array | null;
}

/** Steps per trajectory a key range holds (step_index is validated below it). */
export const STEP_KEY_SPAN = 2 ** 20;

/** The integer key of a step: its trajectory's sequence number, then its index. */
export function stepKey(trajectorySeq: number, index: number): number {
  return trajectorySeq * STEP_KEY_SPAN + index;
}

/** Column order for inserts; positional binding is much cheaper than named on the hot path. */
export const STEP_COLUMNS = [
  'key',
  'trajectory_id',
  'idx',
  'channel',
  'group_id',
  'base_idx',
  'prefix_len',
  'prompt_suffix',
  'response',
  'logprobs',
  'prompt_len',
  'response_len',
  'content_hash',
  'reward',
  'policy_version',
  'is_last',
  'finish_reason',
  'token_source',
  'metadata',
  'view',
  'latency_ms',
  'ttft_ms',
  'engine_id',
  'created_at',
  'routed_experts',
] as const satisfies readonly (keyof StepRow)[];

/** One positional INSERT of a step row, for SQL dialects that bind `?`. */
export const INSERT_STEP_SQL = `INSERT INTO steps (${STEP_COLUMNS.join(', ')}) VALUES (${STEP_COLUMNS.map(() => '?').join(', ')})`;

export function stepRowValues(row: StepRow): unknown[] {
  return STEP_COLUMNS.map((column) => row[column]);
}

/** What the next step of a trajectory is encoded against: its predecessor's full sequence. */
export interface StepTail {
  index: number;
  full: Uint32Array;
  messages: Record<string, unknown>[] | null;
  /** Its multi_modal_data: a later step of the trajectory with the same images refers to it. */
  multiModal?: Record<string, unknown> | null;
}

/** Messages, tools and tool traffic as the agent saw them; messages shared with the base are referenced. */
interface StepView {
  /** how many leading messages equal the base step's messages */
  mp?: number;
  m?: Record<string, unknown>[];
  /** content hash of the tools array in the docs table */
  th?: string;
  rt?: string;
  tc?: Record<string, unknown>[];
  tr?: ToolResult[];
  /** The training prompt as an edit of the prompt: `at` kept, `cut` ids replaced by `ins`. */
  tp?: PromptEdit;
  /** multi_modal_data (Claw-R1), or `mmb: 1` when it equals the base step's (a multi-turn prompt's images, once). */
  mm?: Record<string, unknown>;
  mmb?: 1;
  /** The response's version spans, where a generation spanned a weight switch. */
  vs?: [number, number][];
}

interface PromptEdit {
  at: number;
  cut: number;
  ins: number[];
}

/** `to` as one splice of `from` (their common prefix and suffix kept): a hint removed is a short edit. */
function promptEdit(from: readonly number[], to: readonly number[]): PromptEdit {
  let at = 0;
  const n = Math.min(from.length, to.length);
  while (at < n && from[at] === to[at]) at++;
  let tail = 0;
  while (tail < n - at && from[from.length - 1 - tail] === to[to.length - 1 - tail]) tail++;
  return { at, cut: from.length - at - tail, ins: to.slice(at, to.length - tail) };
}

function applyEdit(from: ArrayLike<number>, edit: PromptEdit): number[] {
  const out = toNumbers(from);
  out.splice(edit.at, edit.cut, ...edit.ins);
  return out;
}

export interface EncodedStep {
  row: StepRow;
  tail: StepTail;
  prefixBreak: boolean;
  toolsDoc: { hash: string; body: string } | null;
}

export function stepFingerprint(step: Pick<NewStep, 'promptIds' | 'responseIds'>): number {
  return hashTokens(step.responseIds, hashTokens(step.promptIds));
}

function sameMessage(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}

export function encodeStep(
  step: NewStep,
  key: number,
  channel: string,
  policyVersion: number,
  base: StepTail | null,
  now: number,
): EncodedStep {
  const prompt = step.promptIds;
  const prefixLen = base ? commonPrefixLength(prompt, base.full) : 0;
  // A break: the agent did not extend its previous sequence exactly (history rewritten or dropped).
  const prefixBreak = base !== null && base.index === step.index - 1 && prefixLen < base.full.length;

  const view: StepView = {};
  if (step.messages) {
    let mp = 0;
    if (base?.messages) {
      const n = Math.min(base.messages.length, step.messages.length);
      while (mp < n && sameMessage(base.messages[mp]!, step.messages[mp]!)) mp++;
    }
    if (mp > 0) view.mp = mp;
    view.m = step.messages.slice(mp);
  }
  let toolsDoc: EncodedStep['toolsDoc'] = null;
  if (step.tools) {
    const body = JSON.stringify(step.tools);
    const hash = createHash('sha256').update(body).digest('base64url');
    toolsDoc = { hash, body };
    view.th = hash;
  }
  if (step.responseText != null) view.rt = step.responseText;
  if (step.toolCalls) view.tc = step.toolCalls;
  if (step.toolResults) view.tr = step.toolResults;
  if (step.trainingPromptIds) view.tp = promptEdit(prompt, step.trainingPromptIds);
  if (step.versionSpans) view.vs = step.versionSpans;
  if (step.multiModalData) {
    const same =
      base?.multiModal != null && JSON.stringify(base.multiModal) === JSON.stringify(step.multiModalData);
    if (same) view.mmb = 1;
    else view.mm = step.multiModalData;
  }
  const hasView = Object.keys(view).length > 0;

  // One array holds prompt then response; the stored blobs are views into it.
  const full = allocTokens(prompt.length + step.responseIds.length);
  full.set(prompt, 0);
  full.set(step.responseIds, prompt.length);

  const row: StepRow = {
    key,
    trajectory_id: step.trajectoryId,
    idx: step.index,
    channel,
    group_id: step.groupId,
    // The base is recorded even when no token is shared: shared messages refer to it too.
    base_idx: base ? base.index : null,
    prefix_len: prefixLen,
    prompt_suffix: encodeTokens(full, prefixLen, prompt.length),
    response: encodeTokens(full, prompt.length),
    logprobs: step.responseLogprobs ? encodeFloats(step.responseLogprobs) : null,
    prompt_len: prompt.length,
    response_len: step.responseIds.length,
    content_hash: stepFingerprint(step),
    reward: step.reward,
    policy_version: policyVersion,
    is_last: step.isLast ? 1 : 0,
    finish_reason: step.finishReason,
    token_source: step.tokenSource,
    metadata: Object.keys(step.metadata).length > 0 ? JSON.stringify(step.metadata) : null,
    view: hasView ? JSON.stringify(view) : null,
    latency_ms: step.latencyMs,
    ttft_ms: step.ttftMs,
    engine_id: step.engineId,
    created_at: now,
    routed_experts: step.routedExperts ? encodeRoutedExperts(step.routedExperts) : null,
  };
  const tail = { index: step.index, full, messages: step.messages, multiModal: step.multiModalData };
  return { row, tail, prefixBreak, toolsDoc };
}

const ROUTED_HEADER = 13;

/**
 * MoE routing as bytes: the width of an id (1 when every id fits in a byte, else 2), the three
 * dimensions as uint32 LE, then the ids little-endian. A 4096-token, 48-layer, top-8 routing is
 * 1.5 MiB instead of ~5 MiB of JSON.
 */
export function encodeRoutedExperts(routed: readonly (readonly (readonly number[])[])[]): Uint8Array {
  const tokens = routed.length;
  const layers = routed[0]?.length ?? 0;
  const topK = routed[0]?.[0]?.length ?? 0;
  let max = 0;
  for (const token of routed) for (const slots of token) for (const id of slots) if (id > max) max = id;
  const width = max < 256 ? 1 : 2;
  const out = Buffer.alloc(ROUTED_HEADER + tokens * layers * topK * width);
  out[0] = width;
  out.writeUInt32LE(tokens, 1);
  out.writeUInt32LE(layers, 5);
  out.writeUInt32LE(topK, 9);
  let at = ROUTED_HEADER;
  for (const token of routed)
    for (const slots of token)
      for (const id of slots) {
        if (width === 1) out[at++] = id;
        else {
          out.writeUInt16LE(id, at);
          at += 2;
        }
      }
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

export function decodeRoutedExperts(bytes: Uint8Array): number[][][] {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const width = b[0]!;
  const tokens = b.readUInt32LE(1);
  const layers = b.readUInt32LE(5);
  const topK = b.readUInt32LE(9);
  let at = ROUTED_HEADER;
  const out: number[][][] = new Array(tokens);
  for (let t = 0; t < tokens; t++) {
    const token: number[][] = new Array(layers);
    for (let l = 0; l < layers; l++) {
      const slots: number[] = new Array(topK);
      for (let k = 0; k < topK; k++) {
        slots[k] = width === 1 ? b[at]! : b.readUInt16LE(at);
        at += width;
      }
      token[l] = slots;
    }
    out[t] = token;
  }
  return out;
}

/**
 * Rebuilds full steps from rows of one trajectory sorted by idx. Every base a row refers to must be
 * among the rows (callers load a trajectory from its first step up to the highest index they need).
 */
export function decodeSteps(
  rows: readonly StepRow[],
  docs: (hash: string) => Record<string, unknown>[] | null,
): { steps: Step[]; tails: Map<number, StepTail> } {
  const tails = new Map<number, StepTail>();
  const steps: Step[] = [];
  for (const row of rows) {
    const base = row.base_idx === null ? null : tails.get(row.base_idx);
    if (row.base_idx !== null && !base) {
      throw new Error(`step ${row.trajectory_id}#${row.idx} refers to missing base step ${row.base_idx}`);
    }
    const prompt = joinPrompt(base?.full ?? null, row.prefix_len, decodeTokens(row.prompt_suffix));
    const response = decodeTokens(row.response);
    const view: StepView = row.view ? JSON.parse(row.view) : {};
    let messages: Record<string, unknown>[] | null = null;
    if (view.m) {
      const shared = view.mp ? (base?.messages ?? []).slice(0, view.mp) : [];
      messages = shared.concat(view.m);
    }
    const multiModal = view.mm ?? (view.mmb ? (base?.multiModal ?? null) : null);
    tails.set(row.idx, { index: row.idx, full: concatTokens(prompt, response), messages, multiModal });
    steps.push({
      trajectoryId: row.trajectory_id,
      groupId: row.group_id,
      channel: row.channel,
      index: row.idx,
      promptIds: toNumbers(prompt),
      responseIds: toNumbers(response),
      responseLogprobs: decodeFloats(row.logprobs),
      versionSpans: view.vs ?? null,
      reward: row.reward,
      policyVersion: row.policy_version,
      isLast: row.is_last === 1,
      metadata: row.metadata ? JSON.parse(row.metadata) : {},
      tokenSource: row.token_source as TokenSource,
      finishReason: row.finish_reason,
      messages,
      tools: view.th ? docs(view.th) : null,
      responseText: view.rt ?? null,
      toolCalls: view.tc ?? null,
      toolResults: view.tr ?? null,
      latencyMs: row.latency_ms,
      ttftMs: row.ttft_ms,
      engineId: row.engine_id,
      trainingPromptIds: view.tp ? applyEdit(prompt, view.tp) : null,
      routedExperts: row.routed_experts ? decodeRoutedExperts(row.routed_experts) : null,
      multiModalData: multiModal,
      createdAt: row.created_at,
    });
  }
  return { steps, tails };
}

/**
 * Recently written tails by trajectory, bounded by total tokens. Only a cache: on a miss the store
 * rebuilds the tail from the database, so several processes may share one store safely.
 */
export class TailCache {
  private readonly entries = new Map<string, StepTail>();
  private tokens = 0;

  constructor(private readonly maxTokens = 32_000_000) {}

  get(trajectoryId: string): StepTail | undefined {
    const tail = this.entries.get(trajectoryId);
    if (tail) {
      this.entries.delete(trajectoryId);
      this.entries.set(trajectoryId, tail);
    }
    return tail;
  }

  set(trajectoryId: string, tail: StepTail): void {
    const old = this.entries.get(trajectoryId);
    if (old) {
      if (old.index > tail.index) return; // keep the newest tail
      this.tokens -= old.full.length;
      this.entries.delete(trajectoryId);
    }
    this.entries.set(trajectoryId, tail);
    this.tokens += tail.full.length;
    for (const [key, value] of this.entries) {
      if (this.tokens <= this.maxTokens) break;
      this.entries.delete(key);
      this.tokens -= value.full.length;
    }
  }

  delete(trajectoryId: string): void {
    const old = this.entries.get(trajectoryId);
    if (!old) return;
    this.tokens -= old.full.length;
    this.entries.delete(trajectoryId);
  }
}

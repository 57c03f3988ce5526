import { type Budget, htmlBytes, LIMITS, TextBlock, Truncated } from '../../bounded.js';
import { fmt } from '../../layout.js';
import type { StepDecoder } from './decoders.js';

/*
 * Token-level views: ids decoded with the tokenizer of the model each step records (decoders.ts;
 * ids of a model the server does not serve are shown as ids, with a note naming it), the response as
 * a heat strip by logprob, and a guided step's two prompt views side by side.
 */

/** The strip shows at most this many tokens per step; the page stays light on long generations. */
export const MAX_STRIP_TOKENS = LIMITS.stripTokens;

/** Logprob buckets, most confident first (h0) to least (h4); the legend names the ranges. */
const HEAT_BOUNDS = [-0.1, -0.5, -1.5, -3] as const;
export function heatClass(logprob: number | undefined): string {
  if (logprob === undefined) return 'hn';
  const bucket = HEAT_BOUNDS.findIndex((b) => logprob > b);
  return `h${bucket === -1 ? HEAT_BOUNDS.length : bucket}`;
}

export function HeatLegend() {
  const ranges = ['> -0.1', '-0.1 … -0.5', '-0.5 … -1.5', '-1.5 … -3', '< -3'];
  return (
    <p class="heat-legend">
      <span class="muted">logprob: </span>
      {ranges.map((r, i) => (
        <span class={`tok h${i}`}>{r}</span>
      ))}
      <span class="tok hn">no logprob</span>
    </p>
  );
}

/** Part of a token sequence: `ids[start, end)`, read in place. */
export type TokenRange = readonly [ids: readonly number[], start: number, end: number];
export const whole = (ids: readonly number[]): TokenRange => [ids, 0, ids.length];

/** The first `n` ids of the ranges laid end to end (copies only those). */
function head(ranges: readonly TokenRange[], n: number): number[] {
  const out: number[] = [];
  for (const [ids, start, end] of ranges) {
    for (let i = start; i < end && out.length < n; i++) out.push(ids[i]!);
  }
  return out;
}

/**
 * Ids decoded into a text block: only the head the block can show is decoded (a token is at least a
 * character), so a step of millions of tokens costs what its first few thousand do.
 */
export function DecodedText({
  ranges,
  decoder,
  budget,
  cls = 'content decoded',
  mark,
}: {
  /** Shown one after another (a prompt, then its response). */
  ranges: readonly TokenRange[];
  decoder: StepDecoder;
  budget: Budget;
  cls?: string;
  mark?: boolean;
}) {
  const total = ranges.reduce((n, [, start, end]) => n + Math.max(0, end - start), 0);
  const shown = head(ranges, Math.min(LIMITS.decodeTokens, LIMITS.textChars, budget.left));
  const more = total - shown.length;
  return (
    <>
      {decoder.note ? <UndecodedNote decoder={decoder} budget={budget} /> : null}
      <TextBlock
        text={decoder.decode(shown)}
        budget={budget}
        cls={cls}
        mark={mark}
        extra={more > 0 ? `${fmt(more)} more token${more === 1 ? '' : 's'} not decoded` : undefined}
      />
    </>
  );
}

/** Why a step's ids are shown as ids (charged to the budget, like every text on the page). */
export function UndecodedNote({ decoder, budget }: { decoder: StepDecoder; budget: Budget }) {
  const note = decoder.note ?? '';
  const bytes = htmlBytes(note) + SPAN_BYTES;
  if (bytes > budget.left) return null;
  budget.charge(bytes);
  return <p class="muted undecoded">{note}</p>;
}

/** Bytes a strip span takes besides its title and text: the tags and the class. */
const SPAN_BYTES = 64;

/**
 * The response tokens as spans coloured by logprob; each span's title gives id, text and logprob.
 * At most MAX_STRIP_TOKENS, and no more than the budget holds.
 */
export function HeatStrip({
  ids,
  logprobs,
  decoder,
  budget,
}: {
  ids: readonly number[];
  logprobs: readonly number[] | null;
  decoder: StepDecoder;
  budget: Budget;
}) {
  const spans = [];
  const end = Math.min(ids.length, MAX_STRIP_TOKENS);
  for (let i = 0; i < end; i++) {
    const id = ids[i]!;
    const text = decoder.token(id);
    const lp = logprobs?.[i];
    const title = `#${i} id ${id} ${JSON.stringify(text)}${lp === undefined ? '' : ` logprob ${lp.toFixed(3)}`}`;
    const bytes = SPAN_BYTES + htmlBytes(title) + htmlBytes(text);
    if (bytes > budget.left) break;
    budget.charge(bytes);
    spans.push(
      <span class={`tok ${heatClass(lp)}`} title={title}>
        {text === '' ? '\u2205' : text}
      </span>,
    );
  }
  const more = ids.length - spans.length;
  return (
    <>
      <div class="heat-strip">{spans}</div>
      {more > 0 ? (
        <Truncated
          more={`showing the first ${fmt(spans.length)} of ${fmt(ids.length)} response tokens; ${fmt(more)} more`}
          budget={budget}
          byBudget={spans.length < end}
        />
      ) : null}
    </>
  );
}

const commonPrefix = (a: readonly number[], b: readonly number[]) => {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
};
const commonSuffix = (a: readonly number[], b: readonly number[], prefix: number) => {
  let i = 0;
  while (i < a.length - prefix && i < b.length - prefix && a[a.length - 1 - i] === b[b.length - 1 - i]) i++;
  return i;
};

/**
 * A guided step's prompt as the engine saw it (with the hint) beside the prompt the trainer sees
 * (without it). The parts both share are shown once, collapsed; the columns hold what differs.
 */
export function PromptViews({
  engine,
  training,
  decoder,
  budget,
}: {
  engine: readonly number[];
  training: readonly number[];
  decoder: StepDecoder;
  budget: Budget;
}) {
  const p = commonPrefix(engine, training);
  const s = commonSuffix(engine, training, p);
  const column = (title: string, ids: readonly number[]) => {
    const middle: TokenRange = [ids, p, ids.length - s];
    return (
      <figure class="side">
        <figcaption>
          {title} <span class="muted">({fmt(ids.length)} tokens)</span>
        </figcaption>
        {middle[2] <= middle[1] ? (
          <pre class="decoded">
            <span class="muted">(nothing beyond the shared parts)</span>
          </pre>
        ) : (
          <DecodedText ranges={[middle]} decoder={decoder} budget={budget} cls="decoded" mark />
        )}
      </figure>
    );
  };
  return (
    <div class="prompt-views">
      {p > 0 ? (
        <details>
          <summary>Shared beginning: {fmt(p)} tokens</summary>
          <DecodedText ranges={[[engine, 0, p]]} decoder={decoder} budget={budget} cls="decoded" />
        </details>
      ) : null}
      <div class="side-by-side">
        {column('Engine prompt (prompt_ids, with the hint)', engine)}
        {column('Training prompt (training_prompt_ids, without it)', training)}
      </div>
      {s > 0 ? (
        <details>
          <summary>Shared end: {fmt(s)} tokens</summary>
          <DecodedText
            ranges={[[engine, engine.length - s, engine.length]]}
            decoder={decoder}
            budget={budget}
            cls="decoded"
          />
        </details>
      ) : null}
    </div>
  );
}

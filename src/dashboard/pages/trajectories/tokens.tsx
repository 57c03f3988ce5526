import { type ChatTokenizer, loadQwen3Tokenizer } from '../../../text/index.js';
import { fmt } from '../../layout.js';

/*
 * Token-level views: ids decoded with the Qwen3 tokenizer (what the sim and the gateway's default
 * model use; ids from another vocabulary decode to noise, and the page says which tokenizer it used),
 * the response as a heat strip by logprob, and a guided step's two prompt views side by side.
 */

/** The strip shows at most this many tokens per step; the page stays light on long generations. */
export const MAX_STRIP_TOKENS = 1500;

/** The tokenizer is loaded once per process by the text module; this only names the dependency. */
export function tokenizer(): ChatTokenizer {
  return loadQwen3Tokenizer();
}

/** Decodes ids; an id outside the vocabulary answers a marker instead of failing the page. */
export function decode(ids: readonly number[]): string {
  try {
    return tokenizer().decode(ids);
  } catch {
    return `[${ids.length} tokens outside the Qwen3 vocabulary]`;
  }
}

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

/** The response tokens as spans coloured by logprob; each span's title gives id, text and logprob. */
export function HeatStrip({ ids, logprobs }: { ids: readonly number[]; logprobs: readonly number[] | null }) {
  const shown = ids.slice(0, MAX_STRIP_TOKENS);
  const tk = tokenizer();
  return (
    <>
      <div class="heat-strip">
        {shown.map((id, i) => {
          let text: string;
          try {
            text = tk.decode([id]);
          } catch {
            text = '\ufffd';
          }
          const lp = logprobs?.[i];
          const title = `#${i} id ${id} ${JSON.stringify(text)}${lp === undefined ? '' : ` logprob ${lp.toFixed(3)}`}`;
          return (
            <span class={`tok ${heatClass(lp)}`} title={title}>
              {text === '' ? '\u2205' : text}
            </span>
          );
        })}
      </div>
      {ids.length > shown.length ? (
        <p class="muted">
          Showing the first {fmt(shown.length)} of {fmt(ids.length)} response tokens.
        </p>
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
}: {
  engine: readonly number[];
  training: readonly number[];
}) {
  const p = commonPrefix(engine, training);
  const s = commonSuffix(engine, training, p);
  const column = (title: string, ids: readonly number[]) => {
    const middle = ids.slice(p, ids.length - s);
    return (
      <figure class="side">
        <figcaption>
          {title} <span class="muted">({fmt(ids.length)} tokens)</span>
        </figcaption>
        <pre class="decoded">
          {middle.length === 0 ? (
            <span class="muted">(nothing beyond the shared parts)</span>
          ) : (
            <mark>{decode(middle)}</mark>
          )}
        </pre>
      </figure>
    );
  };
  return (
    <div class="prompt-views">
      {p > 0 ? (
        <details>
          <summary>Shared beginning: {fmt(p)} tokens</summary>
          <pre class="decoded">{decode(engine.slice(0, p))}</pre>
        </details>
      ) : null}
      <div class="side-by-side">
        {column('Engine prompt (prompt_ids, with the hint)', engine)}
        {column('Training prompt (training_prompt_ids, without it)', training)}
      </div>
      {s > 0 ? (
        <details>
          <summary>Shared end: {fmt(s)} tokens</summary>
          <pre class="decoded">{decode(engine.slice(engine.length - s))}</pre>
        </details>
      ) : null}
    </div>
  );
}

import type { Group, Label, Signal, Step, Trajectory } from '../../../domain/index.js';
import { currentSignals, MAX_METADATA_BYTES, Quality } from '../../../domain/index.js';
import type { CurrentLabel } from '../../../store/store.js';
import {
  BoundedList,
  Budget,
  inlineValue,
  JsonBlock,
  PAGE_CAP_BYTES,
  short,
  TextBlock,
} from '../../bounded.js';
import { CsrfField } from '../../csrf.js';
import { fmt, Page } from '../../layout.js';
import {
  Alert,
  Badges,
  groupHref,
  LIST_PATH,
  rawTrajectoryHref,
  StatusTag,
  Time,
  trajectoryHref,
} from './common.js';
import { Conversation } from './conversation.js';
import type { TokenDecoders } from './decoders.js';
import type { LabelFormValues } from './label-forms.js';
import { DecodedText, HeatLegend, HeatStrip, PromptViews, whole } from './tokens.js';

/*
 * One trajectory: its header, the conversation, each step's tokens, its signals and labels (the state
 * in force and every act that led there), where it came from (CLEANER's derivation, ActGuide's hint)
 * and a form to curate it. Each section draws within its part of the page's byte budget
 * (bounded.tsx), so what agents stored never makes the page larger than PAGE_CAP_BYTES.
 */

/** Bytes each section may draw; together well under PAGE_CAP_BYTES, which also holds the frame. */
const SECTION_BYTES = {
  header: 64 * 1024,
  provenance: 320 * 1024,
  conversation: 512 * 1024,
  steps: 640 * 1024,
  signals: 128 * 1024,
  labels: 128 * 1024,
} as const;
/** What a step's summary and facts take besides its texts and heat strip. */
const STEP_FRAME_BYTES = 3 * 1024;

export interface TrajectoryDetail {
  trajectory: Trajectory;
  steps: Step[];
  group: Group | null;
  signals: Signal[];
  current: CurrentLabel[];
  history: Label[];
  /** The trajectory this one was derived from, with its steps. */
  original: { trajectory: Trajectory; steps: Step[] } | null;
  /** The offline-purified trajectory derived from this one, when there is one. */
  derived: Trajectory | null;
  /** Each step's ids read with its own model's tokenizer. */
  decoders: TokenDecoders;
}

const ms = (v: number | null) => (v === null ? '–' : `${fmt(v, 1)} ms`);
const yesNo = (v: boolean | null) => (v === null ? '–' : v ? 'yes' : 'no');
const target = (stepIndex: number | null) => (stepIndex === null ? 'trajectory' : `step ${stepIndex}`);

function Header({ t, group, budget }: { t: Trajectory; group: Group | null; budget: Budget }) {
  return (
    <section class="card" aria-labelledby="h-summary">
      <h2 id="h-summary">Summary</h2>
      <dl class="facts">
        <div>
          <dt>status</dt>
          <dd>
            <StatusTag status={t.status} />
          </dd>
        </div>
        <div>
          <dt>reward</dt>
          <dd id="traj-reward">{fmt(t.reward)}</dd>
        </div>
        <div>
          <dt>channel</dt>
          <dd>
            <a href={`${LIST_PATH}?channel=${encodeURIComponent(t.channel)}`}>{t.channel}</a>
          </dd>
        </div>
        <div>
          <dt>group</dt>
          <dd>
            <a href={groupHref(t.channel, t.groupId)}>{t.groupId}</a>
            {group ? <span class="muted"> ({group.state})</span> : null}
          </dd>
        </div>
        <div>
          <dt>task</dt>
          <dd>{t.taskId ?? '–'}</dd>
        </div>
        <div>
          <dt>steps</dt>
          <dd>
            {fmt(t.nSteps)}
            {t.prefixBreaks > 0 ? <span class="tag bad">{t.prefixBreaks} prefix breaks</span> : null}
          </dd>
        </div>
        <div>
          <dt>created (UTC)</dt>
          <dd>
            <Time ms={t.createdAt} />
          </dd>
        </div>
        <div>
          <dt>completed (UTC)</dt>
          <dd>
            <Time ms={t.completedAt} />
          </dd>
        </div>
        <div>
          <dt>kind</dt>
          <dd>
            <Badges trajectory={t} />
            {!t.guided && !t.probe && t.derivedFrom === null ? 'rollout' : null}
          </dd>
        </div>
      </dl>
      {t.omittedMetadataBytes === undefined ? (
        <JsonBlock value={t.metadata} budget={budget} summary="Metadata (JSON)" />
      ) : (
        <p class="muted">
          Metadata of {t.omittedMetadataBytes.toLocaleString('en-US')} bytes, stored before the{' '}
          {MAX_METADATA_BYTES.toLocaleString('en-US')}-byte cap: not shown.
        </p>
      )}
    </section>
  );
}

/** A stored list in one line: its first `max` values, then how many more. */
function inlineList(values: readonly unknown[], max = 50): string {
  const shown = values.slice(0, max).map((v) => inlineValue(v, 60));
  return values.length > max ? `${shown.join(', ')} … ${fmt(values.length - max)} more` : shown.join(', ');
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

function Provenance({ d, budget }: { d: TrajectoryDetail; budget: Budget }) {
  const t = d.trajectory;
  const derivation = t.derivation ?? {};
  const similarity = Array.isArray(derivation.similarity) ? (derivation.similarity as unknown[]) : [];
  const removed = Object.entries(
    isRecord(derivation.removed_error_types) ? derivation.removed_error_types : {},
  );
  return (
    <section class="card" aria-labelledby="h-provenance" id="provenance">
      <h2 id="h-provenance">Provenance</h2>
      {d.derived ? (
        <p>
          CLEANER derived a trajectory from this one:{' '}
          <a href={trajectoryHref(d.derived.id)}>
            <code>{d.derived.id}</code>
          </a>{' '}
          in channel {d.derived.channel}.
        </p>
      ) : null}
      {t.derivedFrom !== null ? (
        <>
          <p>
            Derived from{' '}
            <a href={trajectoryHref(t.derivedFrom)} id="original-link">
              <code>{t.derivedFrom}</code>
            </a>
            {d.original ? null : <span class="muted"> (no longer stored)</span>}.
          </p>
          <dl class="facts">
            <div>
              <dt>mode</dt>
              <dd>
                {typeof derivation.mode === 'string'
                  ? short(derivation.mode)
                  : derivation.unchanged
                    ? 'copied unchanged'
                    : '–'}
              </dd>
            </div>
            <div>
              <dt>similarity</dt>
              <dd>{similarity.length === 0 ? '–' : inlineList(similarity)}</dd>
            </div>
            <div>
              <dt>removed error types</dt>
              <dd>
                {removed.length === 0
                  ? '–'
                  : removed.slice(0, 50).map(([k, n]) => (
                      <span class="tag bad">
                        {short(k, 60)} × {inlineValue(n, 60)}
                      </span>
                    ))}
                {removed.length > 50 ? ` … ${fmt(removed.length - 50)} more` : null}
              </dd>
            </div>
            <div>
              <dt>purified steps</dt>
              <dd>
                {Array.isArray(derivation.purified_step_indices)
                  ? inlineList(derivation.purified_step_indices) || '–'
                  : '–'}
              </dd>
            </div>
          </dl>
          <JsonBlock value={derivation} budget={budget.part(32 * 1024)} summary="Derivation (JSON)" />
          {d.original ? (
            <div class="side-by-side">
              <figure class="side">
                <figcaption>Original</figcaption>
                <Conversation
                  steps={d.original.steps}
                  decoders={d.decoders}
                  label="Original conversation"
                  budget={budget.part(128 * 1024, rawTrajectoryHref(d.original.trajectory.id))}
                  stepHref={trajectoryHref(d.original.trajectory.id)}
                />
              </figure>
              <figure class="side">
                <figcaption>Derived</figcaption>
                <Conversation
                  steps={d.steps}
                  decoders={d.decoders}
                  label="Derived conversation"
                  budget={budget.part(128 * 1024)}
                />
              </figure>
            </div>
          ) : null}
        </>
      ) : null}
      {t.guided || t.probe ? <Guidance t={t} steps={d.steps} decoders={d.decoders} budget={budget} /> : null}
    </section>
  );
}

function Guidance({
  t,
  steps,
  decoders,
  budget,
}: {
  t: Trajectory;
  steps: Step[];
  decoders: TokenDecoders;
  budget: Budget;
}) {
  const guidance = t.metadata.guidance;
  const g = isRecord(guidance) ? guidance : {};
  const guided = steps.filter((s) => s.trainingPromptIds !== null);
  return (
    <div class="guidance">
      <h3>Guidance</h3>
      <p>
        {t.probe ? 'A probe rollout (unguided, measures the task).' : 'A guided rollout'}
        {t.guidanceK !== null ? `, k = ${t.guidanceK}` : ''}.
      </p>
      {typeof g.hint === 'string' ? (
        <>
          <h4>Hint</h4>
          <TextBlock text={g.hint} budget={budget} cls="content hint" />
        </>
      ) : (
        <p class="muted">No hint in metadata.guidance.</p>
      )}
      {guided.length === 0 ? (
        <p class="muted">No step carries a training prompt (training_prompt_ids).</p>
      ) : (
        <BoundedList
          items={guided}
          budget={budget}
          noun={['guided step', 'guided steps']}
          wrap={(children) => children}
          render={(s, i) => (
            <details open={i === 0}>
              <summary>Step {s.index}: prompt views</summary>
              <PromptViews
                engine={s.promptIds}
                training={s.trainingPromptIds!}
                decoder={decoders.of(s.metadata)}
                budget={budget}
              />
            </details>
          )}
        />
      )}
    </div>
  );
}

/** A step's one-line summary: index, finish, sizes, latency, policy, and tags for errors and labels. */
function StepSummary({
  step,
  label,
  errors,
}: {
  step: Step;
  label: CurrentLabel | undefined;
  errors: number;
}) {
  return (
    <summary>
      <strong>Step {step.index}</strong> · {short(step.finishReason ?? 'no finish reason', 64)} ·{' '}
      {fmt(step.promptIds.length)} + {fmt(step.responseIds.length)} tokens
      {step.latencyMs === null ? '' : ` · ${ms(step.latencyMs)}`} · policy v{step.policyVersion}
      {errors > 0 ? (
        <span class="tag bad">
          {errors} tool error{errors > 1 ? 's' : ''}
        </span>
      ) : null}
      {label?.trainable === false ? <span class="tag bad">untrainable</span> : null}
      {label?.quality ? <span class="tag">{label.quality}</span> : null}
    </summary>
  );
}

/** What was recorded about a step besides its texts, one fact a row. */
function StepFacts({ step }: { step: Step }) {
  const facts: [string, string | number][] = [
    ['prompt ids', fmt(step.promptIds.length)],
    ['response ids', fmt(step.responseIds.length)],
    ['finish reason', short(step.finishReason ?? '–', 64)],
    ['token source', step.tokenSource],
    ['policy version', step.policyVersion],
    ['latency', ms(step.latencyMs)],
    ['time to first token', ms(step.ttftMs)],
    ['engine', short(step.engineId ?? '–', 256)],
    ['reward', fmt(step.reward)],
    ['logprobs', step.responseLogprobs === null ? 'none' : 'recorded'],
  ];
  return (
    <dl class="facts">
      {facts.map(([term, value]) => (
        <div>
          <dt>{term}</dt>
          <dd>{value}</dd>
        </div>
      ))}
    </dl>
  );
}

/** The step's share, split so its decoded text cannot crowd out the heat strip or the metadata. */
function stepBudgets(budget: Budget, hasErrors: boolean) {
  const weights = { decoded: 1, strip: 2, errors: hasErrors ? 1 : 0, metadata: 1 };
  const sum = weights.decoded + weights.strip + weights.errors + weights.metadata;
  const left = budget.left;
  const share = (w: number) => budget.part(Math.floor((left * w) / sum));
  return {
    decoded: share(weights.decoded),
    strip: share(weights.strip),
    errors: share(weights.errors),
    metadata: share(weights.metadata),
  };
}

function StepView({
  step,
  label,
  decoders,
  budget,
}: {
  step: Step;
  label: CurrentLabel | undefined;
  decoders: TokenDecoders;
  budget: Budget;
}) {
  const decoder = decoders.of(step.metadata);
  const errors = (step.toolResults ?? []).filter((r) => r.error);
  const own = stepBudgets(budget, errors.length > 0);
  return (
    <details class="step" id={`step-${step.index}`}>
      <StepSummary step={step} label={label} errors={errors.length} />
      <StepFacts step={step} />
      <h4>Response (decoded)</h4>
      <DecodedText ranges={[whole(step.responseIds)]} decoder={decoder} budget={own.decoded} />
      <h4>Response tokens</h4>
      <HeatStrip
        ids={step.responseIds}
        logprobs={step.responseLogprobs}
        decoder={decoder}
        budget={own.strip}
      />
      {errors.length > 0 ? (
        <>
          <h4>Failed tool results</h4>
          <BoundedList
            items={errors}
            budget={own.errors}
            noun={['failed tool result', 'failed tool results']}
            wrap={(children) => <ul>{children}</ul>}
            render={(r) => (
              <li class="msg error">
                <strong>{short(r.name ?? 'tool')}</strong>
                {r.error_type ? ` (${short(r.error_type, 60)})` : ''}:
                <TextBlock text={r.content} budget={own.errors} max={4_000} />
              </li>
            )}
          />
        </>
      ) : null}
      <JsonBlock value={step.metadata} budget={own.metadata} summary="Step metadata (JSON)" />
    </details>
  );
}

function Signals({ signals, budget }: { signals: Signal[]; budget: Budget }) {
  const current = new Set(currentSignals(signals));
  return (
    <section class="card" aria-labelledby="h-signals" id="signals">
      <h2 id="h-signals">Signals</h2>
      {signals.length === 0 ? (
        <p class="muted">No signals.</p>
      ) : (
        <BoundedList
          items={signals}
          budget={budget}
          noun={['signal', 'signals']}
          reserve={512}
          wrap={(rows) => (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">name</th>
                    <th scope="col">target</th>
                    <th scope="col">source</th>
                    <th scope="col" class="num">
                      value
                    </th>
                    <th scope="col">version</th>
                    <th scope="col">at (UTC)</th>
                    <th scope="col">details / evidence</th>
                  </tr>
                </thead>
                <tbody>{rows}</tbody>
              </table>
            </div>
          )}
          render={(s, _, own) => {
            const fields = isRecord(s.details) ? Object.keys(s.details).length : 0;
            return (
              <tr class={current.has(s) ? '' : 'superseded'}>
                <th scope="row">
                  {s.name}
                  {current.has(s) ? null : <span class="tag">superseded</span>}
                </th>
                <td>{target(s.stepIndex)}</td>
                <td>{s.source}</td>
                <td class="num">{fmt(s.value)}</td>
                <td>{s.version}</td>
                <td>
                  <Time ms={s.createdAt} />
                </td>
                <td>
                  {fields === 0 ? (
                    <span class="muted">–</span>
                  ) : (
                    <JsonBlock value={s.details} budget={own} summary={`${fmt(fields)} fields`} />
                  )}
                </td>
              </tr>
            );
          }}
        />
      )}
    </section>
  );
}

function Labels({ current, history, budget }: { current: CurrentLabel[]; history: Label[]; budget: Budget }) {
  const sorted = [...current].sort((a, b) => (a.stepIndex ?? -1) - (b.stepIndex ?? -1));
  return (
    <>
      <h3>In force</h3>
      {sorted.length === 0 ? (
        <p class="muted">No labels: every step is trained on.</p>
      ) : (
        <BoundedList
          items={sorted}
          budget={budget}
          noun={['label', 'labels']}
          wrap={(rows) => (
            <table id="labels-current">
              <thead>
                <tr>
                  <th scope="col">target</th>
                  <th scope="col">quality</th>
                  <th scope="col">trainable</th>
                  <th scope="col">tags</th>
                  <th scope="col">note</th>
                </tr>
              </thead>
              <tbody>{rows}</tbody>
            </table>
          )}
          render={(l) => (
            <tr>
              <th scope="row">{target(l.stepIndex)}</th>
              <td>{l.quality ?? '–'}</td>
              <td class={l.trainable === false ? 'error' : ''}>{yesNo(l.trainable)}</td>
              <td>{l.tags.length === 0 ? '–' : l.tags.map((x) => <span class="tag">{x}</span>)}</td>
              <td>{l.note ?? '–'}</td>
            </tr>
          )}
        />
      )}
      <h3>Audit trail</h3>
      {history.length === 0 ? (
        <p class="muted">Nobody has labelled this trajectory.</p>
      ) : (
        <BoundedList
          items={[...history].reverse()}
          budget={budget}
          noun={['label', 'labels']}
          wrap={(rows) => (
            <table id="labels-history">
              <thead>
                <tr>
                  <th scope="col">at (UTC)</th>
                  <th scope="col">author</th>
                  <th scope="col">target</th>
                  <th scope="col">quality</th>
                  <th scope="col">trainable</th>
                  <th scope="col">tags</th>
                  <th scope="col">note</th>
                </tr>
              </thead>
              <tbody>{rows}</tbody>
            </table>
          )}
          render={(l) => (
            <tr>
              <th scope="row">
                <Time ms={l.createdAt} />
              </th>
              <td>{l.author ?? '–'}</td>
              <td>{target(l.stepIndex)}</td>
              <td>{l.quality ?? '–'}</td>
              <td>{yesNo(l.trainable)}</td>
              <td>{l.tags.length === 0 ? '–' : l.tags.join(', ')}</td>
              <td>{l.note ?? '–'}</td>
            </tr>
          )}
        />
      )}
    </>
  );
}

export const EMPTY_LABEL_FORM: LabelFormValues = {
  steps: [],
  quality: 'keep',
  trainable: 'keep',
  tags: '',
  tagMode: 'add',
  note: '',
};

function LabelForm({
  t,
  steps,
  form,
  budget,
}: {
  t: Trajectory;
  steps: Step[];
  form: LabelFormValues;
  budget: Budget;
}) {
  const chosen = new Set(form.steps);
  const choice = (name: string, label: string, options: string[], chosen: string) => (
    <div>
      <label for={`l-${name}`}>{label}</label>
      <select id={`l-${name}`} name={name}>
        {options.map((o) => (
          <option value={o} selected={o === (chosen || 'keep')}>
            {o}
          </option>
        ))}
      </select>
    </div>
  );
  return (
    <form
      method="post"
      action={`${trajectoryHref(t.id)}/labels`}
      class="label-form"
      id="label-form"
      aria-labelledby="h-curate"
    >
      <h3 id="h-curate">Curate</h3>
      <CsrfField />
      <fieldset>
        <legend>Apply to (no step chosen: the whole trajectory)</legend>
        <BoundedList
          items={steps}
          budget={budget}
          noun={['step', 'steps']}
          wrap={(picks) => (
            <div class="step-picks">
              {picks}
              {steps.length === 0 ? <span class="muted">no steps</span> : null}
            </div>
          )}
          render={(s) => (
            <label>
              <input
                type="checkbox"
                name="step"
                value={String(s.index)}
                checked={chosen.has(String(s.index))}
              />{' '}
              step {s.index}
            </label>
          )}
        />
      </fieldset>
      <div class="filters">
        {choice('quality', 'Quality', ['keep', ...Quality.options, 'clear'], form.quality)}
        {choice('trainable', 'Trainable', ['keep', 'yes', 'no', 'clear'], form.trainable)}
        <div>
          <label for="l-tags">Tags (comma-separated)</label>
          <input id="l-tags" name="tags" value={form.tags} size={24} />
        </div>
        <div>
          <label for="l-tag_mode">Tags are</label>
          <select id="l-tag_mode" name="tag_mode">
            {[
              ['add', 'added'],
              ['remove', 'removed'],
              ['replace', 'the new set'],
            ].map(([v, text]) => (
              <option value={v} selected={v === form.tagMode}>
                {text}
              </option>
            ))}
          </select>
        </div>
      </div>
      <label for="l-note">Note</label>
      <textarea id="l-note" name="note" rows={2} cols={60}>
        {form.note}
      </textarea>
      <p>
        <button type="submit">Save label</button>{' '}
        <span class="muted">Author: dashboard. Blank fields stay as they are.</span>
      </p>
    </form>
  );
}

export function DetailPage({
  d,
  form = EMPTY_LABEL_FORM,
  errors = [],
}: {
  d: TrajectoryDetail;
  form?: LabelFormValues;
  errors?: string[];
}) {
  const t = d.trajectory;
  const current = new Map(d.current.map((l) => [l.stepIndex, l]));
  const provenance = t.derivedFrom !== null || d.derived !== null || t.guided || t.probe;
  const raw = rawTrajectoryHref(t.id);
  // The frame (header, forms, section headings) fits in what the sections leave of the cap.
  const page = new Budget(PAGE_CAP_BYTES - 128 * 1024, raw);
  const steps = page.part(SECTION_BYTES.steps);
  const labels = page.part(SECTION_BYTES.labels);
  return (
    <Page title={`Trajectory ${t.id}`} current={LIST_PATH} scripts={['trajectory.js']}>
      <nav class="toc" aria-label="On this page">
        <a href={LIST_PATH}>← all trajectories</a>
        <a href="#conversation">Conversation</a>
        <a href="#steps">Steps</a>
        <a href="#signals">Signals</a>
        <a href="#labels">Labels</a>
        {provenance ? <a href="#provenance">Provenance</a> : null}
        <a href={raw} class="raw-link" id="raw-json">
          Raw JSON
        </a>
      </nav>
      <Alert errors={errors} />
      <Header t={t} group={d.group} budget={page.part(SECTION_BYTES.header)} />
      {provenance ? <Provenance d={d} budget={page.part(SECTION_BYTES.provenance)} /> : null}
      <section class="card" aria-labelledby="h-conversation" id="conversation">
        <h2 id="h-conversation">Conversation</h2>
        <p class="muted">The last step's messages as the agent sent them, then that step's answer.</p>
        <Conversation
          steps={d.steps}
          decoders={d.decoders}
          label="Conversation"
          budget={page.part(SECTION_BYTES.conversation)}
        />
      </section>
      <section class="card" aria-labelledby="h-steps" id="steps">
        <h2 id="h-steps">Steps</h2>
        {d.steps.length === 0 ? (
          <p class="muted">No steps.</p>
        ) : (
          <>
            <p class="muted">
              Token ids decoded with the tokenizer of the model each step records (the built-in Qwen3 when
              none); hover a token for its id and logprob.
            </p>
            <HeatLegend />
            <BoundedList
              items={d.steps}
              budget={steps}
              noun={['step', 'steps']}
              reserve={STEP_FRAME_BYTES}
              wrap={(views) => views}
              render={(s, _, own) => (
                <StepView step={s} label={current.get(s.index)} decoders={d.decoders} budget={own} />
              )}
            />
          </>
        )}
      </section>
      <Signals signals={d.signals} budget={page.part(SECTION_BYTES.signals)} />
      <section class="card" aria-labelledby="h-labels" id="labels">
        <h2 id="h-labels">Labels</h2>
        <Labels current={d.current} history={d.history} budget={labels} />
        <LabelForm t={t} steps={d.steps} form={form} budget={labels} />
      </section>
    </Page>
  );
}

import type { Group, Label, Signal, Step, Trajectory } from '../../../domain/index.js';
import { currentSignals, Quality } from '../../../domain/index.js';
import type { CurrentLabel } from '../../../store/store.js';
import { fmt, Page } from '../../layout.js';
import { Alert, Badges, groupHref, JsonBlock, LIST_PATH, StatusTag, Time, trajectoryHref } from './common.js';
import { Conversation } from './conversation.js';
import type { LabelFormValues } from './label-forms.js';
import { decode, HeatLegend, HeatStrip, PromptViews } from './tokens.js';

/*
 * One trajectory: its header, the conversation, each step's tokens, its signals and labels (the state
 * in force and every act that led there), where it came from (CLEANER's derivation, ActGuide's hint)
 * and a form to curate it.
 */

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
}

const ms = (v: number | null) => (v === null ? '–' : `${fmt(v, 1)} ms`);
const yesNo = (v: boolean | null) => (v === null ? '–' : v ? 'yes' : 'no');
const target = (stepIndex: number | null) => (stepIndex === null ? 'trajectory' : `step ${stepIndex}`);

function Header({ t, group }: { t: Trajectory; group: Group | null }) {
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
      <JsonBlock value={t.metadata} summary="Metadata (JSON)" />
    </section>
  );
}

function Provenance({ d }: { d: TrajectoryDetail }) {
  const t = d.trajectory;
  const derivation = t.derivation ?? {};
  const similarity = Array.isArray(derivation.similarity) ? (derivation.similarity as unknown[]) : [];
  const removed = (derivation.removed_error_types ?? {}) as Record<string, unknown>;
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
                  ? derivation.mode
                  : derivation.unchanged
                    ? 'copied unchanged'
                    : '–'}
              </dd>
            </div>
            <div>
              <dt>similarity</dt>
              <dd>
                {similarity.length === 0
                  ? '–'
                  : similarity.map((s) => (typeof s === 'number' ? fmt(s) : String(s))).join(', ')}
              </dd>
            </div>
            <div>
              <dt>removed error types</dt>
              <dd>
                {Object.keys(removed).length === 0
                  ? '–'
                  : Object.entries(removed).map(([k, n]) => (
                      <span class="tag bad">
                        {k} × {String(n)}
                      </span>
                    ))}
              </dd>
            </div>
            <div>
              <dt>purified steps</dt>
              <dd>
                {Array.isArray(derivation.purified_step_indices)
                  ? (derivation.purified_step_indices as unknown[]).join(', ') || '–'
                  : '–'}
              </dd>
            </div>
          </dl>
          <JsonBlock value={derivation} summary="Derivation (JSON)" />
          {d.original ? (
            <div class="side-by-side">
              <figure class="side">
                <figcaption>Original</figcaption>
                <Conversation
                  steps={d.original.steps}
                  label="Original conversation"
                  stepHref={trajectoryHref(d.original.trajectory.id)}
                />
              </figure>
              <figure class="side">
                <figcaption>Derived</figcaption>
                <Conversation steps={d.steps} label="Derived conversation" />
              </figure>
            </div>
          ) : null}
        </>
      ) : null}
      {t.guided || t.probe ? <Guidance t={t} steps={d.steps} /> : null}
    </section>
  );
}

function Guidance({ t, steps }: { t: Trajectory; steps: Step[] }) {
  const guidance = t.metadata.guidance;
  const g = typeof guidance === 'object' && guidance !== null ? (guidance as Record<string, unknown>) : {};
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
          <pre class="content hint">{g.hint}</pre>
        </>
      ) : (
        <p class="muted">No hint in metadata.guidance.</p>
      )}
      {guided.length === 0 ? (
        <p class="muted">No step carries a training prompt (training_prompt_ids).</p>
      ) : (
        guided.map((s, i) => (
          <details open={i === 0}>
            <summary>Step {s.index}: prompt views</summary>
            <PromptViews engine={s.promptIds} training={s.trainingPromptIds!} />
          </details>
        ))
      )}
    </div>
  );
}

function StepView({ step, label }: { step: Step; label: CurrentLabel | undefined }) {
  const errors = (step.toolResults ?? []).filter((r) => r.error);
  return (
    <details class="step" id={`step-${step.index}`}>
      <summary>
        <strong>Step {step.index}</strong> · {step.finishReason ?? 'no finish reason'} ·{' '}
        {fmt(step.promptIds.length)} + {fmt(step.responseIds.length)} tokens
        {step.latencyMs === null ? '' : ` · ${ms(step.latencyMs)}`} · policy v{step.policyVersion}
        {errors.length > 0 ? (
          <span class="tag bad">
            {errors.length} tool error{errors.length > 1 ? 's' : ''}
          </span>
        ) : null}
        {label?.trainable === false ? <span class="tag bad">untrainable</span> : null}
        {label?.quality ? <span class="tag">{label.quality}</span> : null}
      </summary>
      <dl class="facts">
        <div>
          <dt>prompt ids</dt>
          <dd>{fmt(step.promptIds.length)}</dd>
        </div>
        <div>
          <dt>response ids</dt>
          <dd>{fmt(step.responseIds.length)}</dd>
        </div>
        <div>
          <dt>finish reason</dt>
          <dd>{step.finishReason ?? '–'}</dd>
        </div>
        <div>
          <dt>token source</dt>
          <dd>{step.tokenSource}</dd>
        </div>
        <div>
          <dt>policy version</dt>
          <dd>{step.policyVersion}</dd>
        </div>
        <div>
          <dt>latency</dt>
          <dd>{ms(step.latencyMs)}</dd>
        </div>
        <div>
          <dt>time to first token</dt>
          <dd>{ms(step.ttftMs)}</dd>
        </div>
        <div>
          <dt>engine</dt>
          <dd>{step.engineId ?? '–'}</dd>
        </div>
        <div>
          <dt>reward</dt>
          <dd>{fmt(step.reward)}</dd>
        </div>
        <div>
          <dt>logprobs</dt>
          <dd>{step.responseLogprobs === null ? 'none' : 'recorded'}</dd>
        </div>
      </dl>
      <h4>Response (decoded)</h4>
      <pre class="content decoded">{decode(step.responseIds)}</pre>
      <h4>Response tokens</h4>
      <HeatStrip ids={step.responseIds} logprobs={step.responseLogprobs} />
      {errors.length > 0 ? (
        <>
          <h4>Failed tool results</h4>
          <ul>
            {errors.map((r) => (
              <li class="msg error">
                <strong>{r.name ?? 'tool'}</strong>
                {r.error_type ? ` (${r.error_type})` : ''}: {r.content}
              </li>
            ))}
          </ul>
        </>
      ) : null}
      <JsonBlock value={step.metadata} summary="Step metadata (JSON)" />
    </details>
  );
}

function Signals({ signals }: { signals: Signal[] }) {
  const current = new Set(currentSignals(signals));
  return (
    <section class="card" aria-labelledby="h-signals" id="signals">
      <h2 id="h-signals">Signals</h2>
      {signals.length === 0 ? (
        <p class="muted">No signals.</p>
      ) : (
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
            <tbody>
              {signals.map((s) => (
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
                    {Object.keys(s.details).length === 0 ? (
                      <span class="muted">–</span>
                    ) : (
                      <JsonBlock value={s.details} summary={`${Object.keys(s.details).length} fields`} />
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function Labels({ current, history }: { current: CurrentLabel[]; history: Label[] }) {
  const sorted = [...current].sort((a, b) => (a.stepIndex ?? -1) - (b.stepIndex ?? -1));
  return (
    <>
      <h3>In force</h3>
      {sorted.length === 0 ? (
        <p class="muted">No labels: every step is trained on.</p>
      ) : (
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
          <tbody>
            {sorted.map((l) => (
              <tr>
                <th scope="row">{target(l.stepIndex)}</th>
                <td>{l.quality ?? '–'}</td>
                <td class={l.trainable === false ? 'error' : ''}>{yesNo(l.trainable)}</td>
                <td>{l.tags.length === 0 ? '–' : l.tags.map((x) => <span class="tag">{x}</span>)}</td>
                <td>{l.note ?? '–'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h3>Audit trail</h3>
      {history.length === 0 ? (
        <p class="muted">Nobody has labelled this trajectory.</p>
      ) : (
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
          <tbody>
            {[...history].reverse().map((l) => (
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
            ))}
          </tbody>
        </table>
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

function LabelForm({ t, steps, form }: { t: Trajectory; steps: Step[]; form: LabelFormValues }) {
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
      <fieldset>
        <legend>Apply to (no step chosen: the whole trajectory)</legend>
        <div class="step-picks">
          {steps.map((s) => (
            <label>
              <input
                type="checkbox"
                name="step"
                value={String(s.index)}
                checked={form.steps.includes(String(s.index))}
              />{' '}
              step {s.index}
            </label>
          ))}
          {steps.length === 0 ? <span class="muted">no steps</span> : null}
        </div>
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
  return (
    <Page title={`Trajectory ${t.id}`} current={LIST_PATH} scripts={['trajectory.js']}>
      <nav class="toc" aria-label="On this page">
        <a href={LIST_PATH}>← all trajectories</a>
        <a href="#conversation">Conversation</a>
        <a href="#steps">Steps</a>
        <a href="#signals">Signals</a>
        <a href="#labels">Labels</a>
        {provenance ? <a href="#provenance">Provenance</a> : null}
      </nav>
      <Alert errors={errors} />
      <Header t={t} group={d.group} />
      {provenance ? <Provenance d={d} /> : null}
      <section class="card" aria-labelledby="h-conversation" id="conversation">
        <h2 id="h-conversation">Conversation</h2>
        <p class="muted">The last step's messages as the agent sent them, then that step's answer.</p>
        <Conversation steps={d.steps} label="Conversation" />
      </section>
      <section class="card" aria-labelledby="h-steps" id="steps">
        <h2 id="h-steps">Steps</h2>
        {d.steps.length === 0 ? (
          <p class="muted">No steps.</p>
        ) : (
          <>
            <p class="muted">
              Token ids decoded with the Qwen3 tokenizer; hover a token for its id and logprob.
            </p>
            <HeatLegend />
            {d.steps.map((s) => (
              <StepView step={s} label={current.get(s.index)} />
            ))}
          </>
        )}
      </section>
      <Signals signals={d.signals} />
      <section class="card" aria-labelledby="h-labels" id="labels">
        <h2 id="h-labels">Labels</h2>
        <Labels current={d.current} history={d.history} />
        <LabelForm t={t} steps={d.steps} form={form} />
      </section>
    </Page>
  );
}

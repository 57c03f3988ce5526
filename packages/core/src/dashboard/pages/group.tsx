import type { Group, Step, Trajectory } from '../../domain/index.js';
import { type Packing, packPrefixTree } from '../../serving/packing.js';
import { fmt, Page, Stat } from '../layout.js';
import {
  Clip,
  LIST_PATH,
  Time,
  TrajectoryCells,
  TrajectoryHeaderCells,
  trajectoryHref,
} from './trajectories/common.js';
import type { StepDecoder, TokenDecoders } from './trajectories/decoders.js';

/*
 * A prompt group: its rollouts with their rewards, and the prefix tree a trainer's packed batch would
 * hold for it (packPrefixTree over each step's prompt + response ids, as JSON batches pack them),
 * drawn as an indented tree. A run of nodes without a branch stays at one indent, so the drawing
 * widens only where rollouts part ways.
 */

/** The drawing shows the first nodes in depth-first order; a huge group's tree is cut here. */
export const MAX_TREE_NODES = 200;
/** Trajectories a group page reads (a GRPO group is a few dozen rollouts; more is a runaway). */
export const MAX_GROUP_TRAJECTORIES = 256;
const PREVIEW_TOKENS = 16;
const PREVIEW_CHARS = 90;

export interface GroupDetail {
  channel: string;
  groupId: string;
  group: Group | null;
  total: number;
  trajectories: { trajectory: Trajectory; steps: Step[] }[];
  decoders: TokenDecoders;
}

/** The sequences packed for a group, in the order the page lists them (trajectory order, then step). */
export function groupSequences(trajectories: GroupDetail['trajectories']) {
  const seqs: { trajectory: number; step: number; tokens: number[]; promptLength: number }[] = [];
  trajectories.forEach(({ steps }, t) => {
    for (const s of steps)
      seqs.push({
        trajectory: t,
        step: s.index,
        tokens: [...s.promptIds, ...s.responseIds],
        promptLength: s.promptIds.length,
      });
  });
  return seqs;
}

/** Trajectory keys on this page: T1, T2, ... in list order. */
const key = (t: number) => `T${t + 1}`;

function preview(decoder: StepDecoder, ids: ArrayLike<number>, start: number, length: number): string {
  const slice = Array.from({ length: Math.min(length, PREVIEW_TOKENS) }, (_, i) => ids[start + i]!);
  const text = decoder.decode(slice).replace(/\n/g, '⏎').replace(/\s+/g, ' ');
  return text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS)}…` : text;
}

function PrefixTree({
  packing,
  labels,
  decoder,
}: {
  packing: Packing;
  labels: string[];
  decoder: StepDecoder;
}) {
  const n = packing.nodeStart.length;
  const children = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const p = packing.nodeParent[i]!;
    if (p >= 0) children[p]!++;
  }
  const through: number[][] = Array.from({ length: n }, () => []);
  packing.sequences.forEach((path, seq) => {
    for (const node of path) through[node]!.push(seq);
  });
  const roots = Array.from(packing.nodeParent).filter((p) => p < 0).length;
  // Indent grows only under a node with several children (and under the roots when there are several).
  const indent = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const p = packing.nodeParent[i]!;
    indent[i] = p < 0 ? (roots > 1 ? 1 : 0) : indent[p]! + (children[p]! > 1 ? 1 : 0);
  }
  const shown = Math.min(n, MAX_TREE_NODES);
  const all = labels.length;
  return (
    <>
      <ol class="ptree" aria-label="Prefix tree">
        {Array.from({ length: shown }, (_, i) => {
          const start = packing.nodeStart[i]!;
          const length = packing.nodeLength[i]!;
          const owner = packing.owner[start]!;
          const seqs = through[i]!;
          const who =
            seqs.length === all && all > 1
              ? `all ${all} steps`
              : seqs.length > 12
                ? `${seqs
                    .slice(0, 12)
                    .map((s) => labels[s])
                    .join(', ')} +${seqs.length - 12} more`
                : seqs.map((s) => labels[s]).join(', ');
          const branch = packing.nodeParent[i]! >= 0 && children[packing.nodeParent[i]!]! > 1;
          return (
            <li
              style={`--indent:${Math.min(indent[i]!, 24)}`}
              class={branch ? 'branch' : ''}
              data-node={String(i)}
            >
              <span class="node-size">{fmt(length)} tok</span>
              <span class={`tag ${owner >= 0 ? 'good' : ''}`}>
                {owner >= 0 ? `response of ${labels[owner]}` : 'prompt'}
              </span>
              <code class="node-text">{preview(decoder, packing.tokens, start, length)}</code>
              <span class="muted node-through">{who}</span>
            </li>
          );
        })}
      </ol>
      {n > shown ? (
        <p class="muted" id="tree-cut">
          Showing the first {fmt(shown)} of {fmt(n)} nodes (depth-first).
        </p>
      ) : null}
    </>
  );
}

/** Links to the group's list and tree, its state and counts, and when it was created, ready, consumed. */
function GroupHeader({ d }: { d: GroupDetail }) {
  const g = d.group;
  const rewards = d.trajectories.map((x) => x.trajectory.reward).filter((r): r is number => r !== null);
  const mean = rewards.length === 0 ? null : rewards.reduce((a, b) => a + b, 0) / rewards.length;
  return (
    <>
      <nav class="toc" aria-label="On this page">
        <a
          href={`${LIST_PATH}?group=${encodeURIComponent(d.groupId)}&channel=${encodeURIComponent(d.channel)}`}
        >
          ← its trajectories in the list
        </a>
        <a href="#prefix-tree">Prefix tree</a>
      </nav>
      <section class="stats" aria-label="Group">
        <Stat label="channel" value={d.channel} />
        <Stat label="state" value={g ? g.state + (g.dropReason ? ` (${g.dropReason})` : '') : 'unknown'} />
        <Stat label="trajectories" value={`${fmt(d.total)}${g?.expected ? ` of ${g.expected}` : ''}`} />
        <Stat label="complete" value={g ? fmt(g.nComplete) : '–'} />
        <Stat label="mean reward" value={fmt(mean)} />
        <Stat label="min policy version" value={fmt(g?.minPolicyVersion ?? null)} />
      </section>
      {g ? (
        <p class="muted">
          Created <Time ms={g.createdAt} />
          {g.readyAt !== null ? (
            <>
              , ready <Time ms={g.readyAt} />
            </>
          ) : null}
          {g.consumedAt !== null ? (
            <>
              , consumed <Time ms={g.consumedAt} />
            </>
          ) : null}
          {g.partial ? ' · served partial' : ''} (UTC).
        </p>
      ) : (
        <p class="muted">The group record is gone (or the trajectories name a group never registered).</p>
      )}
    </>
  );
}

/** The rollouts read, each under its key (T1, T2, ...) with the list's columns. */
function Rollouts({ d }: { d: GroupDetail }) {
  return (
    <section class="card" aria-labelledby="h-rollouts">
      <h2 id="h-rollouts">Rollouts</h2>
      <div class="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">key</th>
              <th scope="col">trajectory</th>
              <TrajectoryHeaderCells />
            </tr>
          </thead>
          <tbody>
            {d.trajectories.map(({ trajectory: t }, i) => (
              <tr>
                <th scope="row">{key(i)}</th>
                <td>
                  <a href={trajectoryHref(t.id)}>
                    <Clip text={t.id} max={22} />
                  </a>
                </td>
                <TrajectoryCells trajectory={t} />
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {d.total > d.trajectories.length ? (
        <p class="muted">
          Showing the first {fmt(d.trajectories.length)} of {fmt(d.total)} trajectories; the tree covers these
          only.
        </p>
      ) : null}
    </section>
  );
}

/** The packed tree's sizes against the sequences', then its drawing. */
function TreeSection({
  steps,
  packing,
  labels,
  decoder,
}: {
  steps: number;
  packing: Packing;
  labels: string[];
  decoder: StepDecoder;
}) {
  return (
    <section class="card" aria-labelledby="h-tree" id="prefix-tree">
      <h2 id="h-tree">Prefix tree</h2>
      <p>
        {fmt(steps)} steps, {fmt(packing.originalTokens)} tokens as sequences; packed into{' '}
        {fmt(packing.tokens.length)} tokens in {fmt(packing.nodeStart.length)} nodes. Packed / original:{' '}
        <strong id="pack-ratio" data-ratio={String(packing.ratio)}>
          {fmt(packing.ratio)}
        </strong>
        .
      </p>
      <p class="muted">
        Every stored step, trainable or not, in the order above; each node shows its size, the start of its
        text (Qwen3 tokenizer) and the steps that pass through it.
      </p>
      {steps === 0 ? (
        <p class="muted">No steps.</p>
      ) : (
        <PrefixTree packing={packing} labels={labels} decoder={decoder} />
      )}
    </section>
  );
}

export function GroupPage({ d }: { d: GroupDetail }) {
  const seqs = groupSequences(d.trajectories);
  const packing = packPrefixTree(seqs.map((s) => ({ tokens: s.tokens, promptLength: s.promptLength })));
  const labels = seqs.map((s) => `${key(s.trajectory)}·s${s.step}`);
  // A group's rollouts share a task and an engine pool: its first step's model reads the tree.
  const decoder = d.decoders.of(d.trajectories[0]?.steps[0]?.metadata);
  return (
    <Page title={`Group ${d.groupId}`} current={LIST_PATH}>
      <GroupHeader d={d} />
      <Rollouts d={d} />
      <TreeSection steps={seqs.length} packing={packing} labels={labels} decoder={decoder} />
    </Page>
  );
}

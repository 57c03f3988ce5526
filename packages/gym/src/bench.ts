import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SampleResult } from './runner.js';
import type { GymTask } from './tasks/schema.js';

/*
 * `stepwise bench`: a task set × k samples through an agent, scored the ClawGym-Bench way — mean
 * score, how many samples score above 0.5, coverage (samples that ran vs those the infrastructure
 * lost), pass@k — per category and overall, with the code-only score beside the hybrid one. The
 * manifest (task-set hash, agent, model, limits) says what a number can be compared with.
 */

export interface Stats {
  /** Mean score over the samples that ran. */
  mean: number;
  /** Samples scoring above 0.5, and their share. */
  above_half: number;
  above_half_rate: number;
  /** Samples that ran / all samples (the rest failed in the infrastructure). */
  coverage: number;
  /** Unbiased pass@k (k = samples per task), a sample passing when its score ≥ the threshold. */
  pass_at_k: number;
  /** Mean of the code score alone (script or checks), for comparison with the hybrid mean. */
  code_mean: number | null;
  samples: number;
  tasks: number;
}

export interface BenchReport {
  overall: Stats;
  categories: Record<string, Stats>;
  manifest: {
    task_set_hash: string;
    tasks: number;
    samples_per_task: number;
    agent: string;
    model: string;
    engine: string;
    pass_threshold: number;
    max_turns: number;
    sample_timeout_ms: number;
    run_id: string;
    created_at: string;
  };
}

/** sha256 over the tasks' canonical JSON, in id order: the same set gives the same hash. */
export function taskSetHash(tasks: readonly GymTask[]): string {
  const hash = createHash('sha256');
  for (const t of [...tasks].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)))
    hash.update(JSON.stringify(t)).update('\n');
  return hash.digest('hex');
}

/** 1 − C(n−c, k) / C(n, k): the chance that k of the n samples include a pass (Chen et al., 2021). */
export function passAtK(n: number, c: number, k: number): number {
  if (n - c < k) return 1;
  let fail = 1;
  for (let i = n - c + 1; i <= n; i++) fail *= 1 - k / i;
  return 1 - fail;
}

export function stats(results: readonly SampleResult[], samplesPerTask: number, threshold: number): Stats {
  const ran = results.filter((r) => r.status === 'complete');
  const byTask = new Map<string, SampleResult[]>();
  for (const r of results) byTask.set(r.taskId, [...(byTask.get(r.taskId) ?? []), r]);
  let passSum = 0;
  for (const samples of byTask.values()) {
    const done = samples.filter((r) => r.status === 'complete');
    const n = done.length;
    const c = done.filter((r) => r.score >= threshold).length;
    passSum += n === 0 ? 0 : passAtK(n, c, Math.min(samplesPerTask, n));
  }
  const codes = ran.filter((r) => r.code !== null).map((r) => r.code!);
  const above = ran.filter((r) => r.score > 0.5).length;
  return {
    mean: ran.length === 0 ? 0 : ran.reduce((a, r) => a + r.score, 0) / ran.length,
    above_half: above,
    above_half_rate: ran.length === 0 ? 0 : above / ran.length,
    coverage: results.length === 0 ? 0 : ran.length / results.length,
    pass_at_k: byTask.size === 0 ? 0 : passSum / byTask.size,
    code_mean: codes.length === 0 ? null : codes.reduce((a, b) => a + b, 0) / codes.length,
    samples: results.length,
    tasks: byTask.size,
  };
}

export function benchReport(
  results: readonly SampleResult[],
  tasks: readonly GymTask[],
  manifest: Omit<BenchReport['manifest'], 'task_set_hash' | 'tasks' | 'created_at'>,
): BenchReport {
  const categories: Record<string, Stats> = {};
  const names = [...new Set(tasks.map((t) => t.category || 'uncategorized'))].sort();
  for (const name of names) {
    const ids = new Set(tasks.filter((t) => (t.category || 'uncategorized') === name).map((t) => t.id));
    categories[name] = stats(
      results.filter((r) => ids.has(r.taskId)),
      manifest.samples_per_task,
      manifest.pass_threshold,
    );
  }
  return {
    overall: stats(results, manifest.samples_per_task, manifest.pass_threshold),
    categories,
    manifest: {
      ...manifest,
      task_set_hash: taskSetHash(tasks),
      tasks: tasks.length,
      created_at: new Date().toISOString(),
    },
  };
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const num = (x: number | null) => (x === null ? '–' : x.toFixed(3));

export function reportMarkdown(report: BenchReport): string {
  const row = (name: string, s: Stats) =>
    `| ${name} | ${s.tasks} | ${s.samples} | ${num(s.mean)} | ${num(s.code_mean)} | ${s.above_half} (${pct(s.above_half_rate)}) | ${pct(s.pass_at_k)} | ${pct(s.coverage)} |`;
  const m = report.manifest;
  return [
    '# Stepwise bench',
    '',
    `Agent \`${m.agent}\`, model \`${m.model}\` via ${m.engine}; ${m.tasks} tasks × ${m.samples_per_task} samples; pass@${m.samples_per_task} at score ≥ ${m.pass_threshold}; task set \`${m.task_set_hash.slice(0, 16)}\`; ${m.created_at}.`,
    '',
    `| category | tasks | samples | mean (hybrid) | mean (code only) | above 0.5 | pass@${m.samples_per_task} | coverage |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    row('**overall**', report.overall),
    ...Object.entries(report.categories).map(([name, s]) => row(name, s)),
    '',
  ].join('\n');
}

const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** A self-contained page: the table and an inline SVG bar chart of mean score per category. */
export function reportHtml(report: BenchReport): string {
  const entries = [['overall', report.overall] as const, ...Object.entries(report.categories)];
  const barH = 22;
  const width = 640;
  const label = 240;
  const bars = entries
    .map(([name, s], i) => {
      const y = i * (barH + 8);
      const w = Math.round((width - label - 60) * s.mean);
      const pass = Math.round((width - label - 60) * s.pass_at_k);
      return [
        `<text x="${label - 8}" y="${y + 15}" text-anchor="end">${escapeHtml(name)}</text>`,
        `<rect x="${label}" y="${y}" width="${pass}" height="${barH}" fill="#c7d7f2"><title>pass@k ${pct(s.pass_at_k)}</title></rect>`,
        `<rect x="${label}" y="${y + 5}" width="${w}" height="${barH - 10}" fill="#2f5da8"><title>mean ${num(s.mean)}</title></rect>`,
        `<text x="${label + Math.max(w, pass) + 6}" y="${y + 15}">${num(s.mean)}</text>`,
      ].join('');
    })
    .join('\n');
  const height = entries.length * (barH + 8);
  const table = reportMarkdown(report)
    .split('\n')
    .filter((l) => l.startsWith('|') && !l.startsWith('|---'))
    .map((l, i) => {
      const cells = l
        .slice(1, -1)
        .split('|')
        .map((c) => escapeHtml(c.trim().replaceAll('**', '')));
      const tag = i === 0 ? 'th' : 'td';
      return `<tr>${cells.map((c) => `<${tag}>${c}</${tag}>`).join('')}</tr>`;
    })
    .join('\n');
  const m = report.manifest;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Stepwise bench</title>
<style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child{text-align:left}svg text{font:12px system-ui,sans-serif}</style>
</head><body>
<h1>Stepwise bench</h1>
<p>Agent <code>${escapeHtml(m.agent)}</code>, model <code>${escapeHtml(m.model)}</code> via ${escapeHtml(m.engine)}; ${m.tasks} tasks × ${m.samples_per_task} samples; task set <code>${m.task_set_hash.slice(0, 16)}</code>; ${escapeHtml(m.created_at)}.</p>
<svg width="${width}" height="${height}" role="img" aria-label="mean score (dark) and pass@k (light) per category">
${bars}
</svg>
<table>
${table}
</table>
<script type="application/json" id="report">${JSON.stringify(report).replaceAll('<', '\\u003c')}</script>
</body></html>
`;
}

export function writeReport(outDir: string, report: BenchReport): void {
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(join(outDir, 'report.md'), reportMarkdown(report));
  writeFileSync(join(outDir, 'report.html'), reportHtml(report));
}

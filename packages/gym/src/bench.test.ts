import { describe, expect, it } from 'vitest';
import { benchReport, passAtK, reportHtml, reportMarkdown, stats, taskSetHash } from './bench.js';
import type { SampleResult } from './runner.js';
import { GymTask } from './tasks/schema.js';

const task = (id: string, category: string) =>
  GymTask.parse({
    id,
    prompt: `do ${id}`,
    category,
    verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'x', path: 'x' }] },
  });

const sample = (taskId: string, score: number, over: Partial<SampleResult> = {}): SampleResult => ({
  taskId,
  category: '',
  sample: 0,
  groupId: `g.${taskId}`,
  trajectoryUid: null,
  status: 'complete',
  score,
  code: score,
  rubric: null,
  verifierFailed: false,
  agent: 'finished',
  reason: null,
  toolCalls: 0,
  toolErrors: 0,
  durationMs: 1,
  ...over,
});

describe('bench statistics', () => {
  it('pass@k is the unbiased estimator 1 - C(n-c, k) / C(n, k)', () => {
    expect(passAtK(4, 0, 1)).toBe(0);
    expect(passAtK(4, 4, 1)).toBe(1);
    expect(passAtK(4, 1, 1)).toBeCloseTo(0.25, 12);
    // n = 5, c = 2, k = 2: 1 - C(3,2)/C(5,2) = 1 - 3/10.
    expect(passAtK(5, 2, 2)).toBeCloseTo(0.7, 12);
    expect(passAtK(3, 1, 3)).toBe(1);
  });

  it('mean, above 0.5, coverage and pass@k over samples; infrastructure failures only lower coverage', () => {
    const results = [
      sample('a', 1),
      sample('a', 0),
      sample('b', 0.6),
      sample('b', 0.4, { code: 0.2, rubric: 1 }),
      sample('b', 0, { status: 'infra_failed', code: null }),
    ];
    const s = stats(results, 2, 1);
    expect(s.mean).toBeCloseTo(0.5, 12);
    expect(s.above_half).toBe(2);
    expect(s.coverage).toBeCloseTo(4 / 5, 12);
    // Task a: 1 of 2 passes at k = 2 -> 1; task b: none scores 1 -> 0.
    expect(s.pass_at_k).toBeCloseTo(0.5, 12);
    expect(s.code_mean).toBeCloseTo((1 + 0 + 0.6 + 0.2) / 4, 12);
    expect(s.tasks).toBe(2);
  });

  it('reports per category with a manifest whose task-set hash ignores task order', () => {
    const tasks = [task('a', 'Analysis & Reasoning'), task('b', 'Software Development')];
    const report = benchReport([sample('a', 1), sample('b', 0)], tasks, {
      agent: 'builtin',
      model: 'sim-qwen3',
      engine: 'sim',
      samples_per_task: 1,
      pass_threshold: 1,
      max_turns: 30,
      sample_timeout_ms: 1000,
      run_id: 'r',
    });
    expect(Object.keys(report.categories)).toEqual(['Analysis & Reasoning', 'Software Development']);
    expect(report.categories['Analysis & Reasoning']!.mean).toBe(1);
    expect(report.categories['Software Development']!.mean).toBe(0);
    expect(report.manifest.task_set_hash).toBe(taskSetHash([...tasks].reverse()));
    expect(report.manifest.task_set_hash).not.toBe(taskSetHash([tasks[0]!]));
    const md = reportMarkdown(report);
    expect(md).toMatch(/\| \*\*overall\*\* \| 2 \| 2 \| 0\.500 /);
    const html = reportHtml(report);
    expect(html).toMatch(/^<!doctype html>/);
    expect(html).toContain('<svg');
    expect(html).not.toMatch(/<script src=|<link /); // self-contained
    const embedded = /<script type="application\/json" id="report">(.*)<\/script>/.exec(html)![1]!;
    expect(JSON.parse(embedded).overall.mean).toBe(0.5);
  });
});

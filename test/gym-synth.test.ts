/**
 * Procedural task synthesis (packages/gym-synth/src): determinism, coverage, dedup, the structure every task
 * must have, the validation gate (no-op 0, scaffold 0, reference actions through the real tools and
 * sandbox exactly 1) for 60 tasks across all categories, the ClawGym folder form (its Python check
 * evaluator gated the same way), the gate on real ClawGym samples, and `stepwise gym synth`.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gateTask, gateTasks, scaffoldPaths } from '../packages/gym/src/gate.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { loadTasks } from '../packages/gym/src/tasks/index.js';
import { CATEGORIES, type Check, GymTask } from '../packages/gym/src/tasks/schema.js';
import {
  buildTask,
  CLOSING_SENTENCE,
  contentHash,
  dedupKey,
  SYNTH_VERSION,
  synthesize,
  TEMPLATES,
  templatesOf,
} from '../packages/gym-synth/src/index.js';
import { MANIFEST_FILE, TASKS_FILE, writeSynthOutput } from '../packages/gym-synth/src/output.js';
import { CLAWGYM_SAMPLE } from './support/clawgym-sample.js';
import { synthCli } from './support/synth-cli.js';

const sandbox = checkSandbox();
const noSandbox = !sandbox.ok;
const sandboxReason = sandbox.ok ? '' : sandbox.reason;
const SAMPLES = CLAWGYM_SAMPLE;
const hasSamples = existsSync(SAMPLES);

const TOOL_ARGS: Record<string, { required: string[]; allowed: string[] }> = {
  read: { required: ['path'], allowed: ['path', 'offset', 'limit'] },
  write: { required: ['path', 'content'], allowed: ['path', 'content'] },
  edit: { required: ['path', 'oldText', 'newText'], allowed: ['path', 'oldText', 'newText'] },
  exec: { required: ['command'], allowed: ['command', 'workdir', 'timeout'] },
  ls: { required: [], allowed: ['path'] },
};

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'gym-synth-test-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('synthesize', () => {
  it('is deterministic for a seed and differs between seeds', () => {
    const a = synthesize({ n: 48, seed: 3 });
    const b = synthesize({ n: 48, seed: 3 });
    expect(b).toEqual(a);
    expect(contentHash(b)).toBe(contentHash(a));
    const c = synthesize({ n: 48, seed: 4 });
    expect(contentHash(c)).not.toBe(contentHash(a));
    // A prefix is stable: task i does not depend on n.
    expect(synthesize({ n: 12, seed: 3 })).toEqual(a.slice(0, 12));
    // Label seeds work too, and "7" is the seed 7.
    expect(contentHash(synthesize({ n: 6, seed: 'pilot-a' }))).not.toBe(
      contentHash(synthesize({ n: 6, seed: 'pilot-b' })),
    );
    expect(synthesize({ n: 6, seed: '7' })).toEqual(synthesize({ n: 6, seed: 7 }));
  });

  it('refuses a bad n or seed', () => {
    expect(() => synthesize({ n: -1, seed: 1 })).toThrow(/n must be/);
    expect(() => synthesize({ n: 1.5, seed: 1 })).toThrow(/n must be/);
    expect(() => synthesize({ n: 1, seed: 'has space' })).toThrow(/seed/);
    expect(() => synthesize({ n: 1, seed: -3 })).toThrow(/seed/);
  });

  it('covers all six categories evenly, with at least 4 templates each, all used within 60 tasks', () => {
    for (const category of CATEGORIES) expect(templatesOf(category).length).toBeGreaterThanOrEqual(4);
    const tasks = synthesize({ n: 60, seed: 11 });
    for (const category of CATEGORIES) expect(tasks.filter((t) => t.category === category)).toHaveLength(10);
    const used = new Set(tasks.map((t) => t.provenance.template));
    expect(used.size).toBe(TEMPLATES.length);
    expect(TEMPLATES.length).toBeGreaterThanOrEqual(24);
    expect(new Set(TEMPLATES.map((t) => t.id)).size).toBe(TEMPLATES.length);
  });

  it('gives 200 distinct tasks (prompt + files), ids and varied personas', () => {
    const tasks = synthesize({ n: 200, seed: 1 });
    expect(new Set(tasks.map(dedupKey)).size).toBe(200);
    expect(new Set(tasks.map((t) => t.id)).size).toBe(200);
    expect(new Set(tasks.map((t) => t.prompt)).size).toBe(200);
    expect(new Set(tasks.map((t) => t.persona)).size).toBeGreaterThanOrEqual(15);
    // Each template's tasks differ from each other, not just across templates.
    for (const template of TEMPLATES) {
      const mine = tasks.filter((t) => t.provenance.template === template.id);
      expect(new Set(mine.map((t) => t.prompt)).size).toBe(mine.length);
    }
  });

  it('dedupKey sees a change in any file', () => {
    const task = buildTask(TEMPLATES[0]!, 1, 0);
    const changed = {
      ...task,
      files: task.files.map((f, i) => (i === 0 ? { ...f, content: `${f.content} ` } : f)),
    };
    expect(dedupKey(changed)).not.toBe(dedupKey(task));
    expect(dedupKey({ ...task, files: [...task.files].reverse() })).toBe(dedupKey(task));
  });
});

/** Paths a check reads or writes. */
function checkPath(check: Check): string | null {
  return 'path' in check ? check.path : null;
}

describe('every synthesized task (n = 200)', () => {
  const tasks = synthesize({ n: 200, seed: 1 });

  it('is a valid GymTask with a checks verifier, provenance and a ClawGym-style prompt', () => {
    for (const task of tasks) {
      expect(GymTask.parse(task)).toEqual(task);
      expect(task.prompt.endsWith(CLOSING_SENTENCE)).toBe(true);
      expect(task.verifier.kind).toBe('checks');
      expect(task.files.length).toBeGreaterThan(0);
      expect(task.persona).toBeTruthy();
      expect(task.skills.length).toBeGreaterThan(0);
      expect(task.difficulty).not.toBeNull();
      expect(task.weights).toEqual({ code: 1, rubric: 0 });
      expect(task.provenance).toMatchObject({ source: 'synth', version: SYNTH_VERSION, seed: 1 });
    }
  });

  it('has several named checks of several kinds, and never rewards an absence in an output', () => {
    for (const task of tasks) {
      if (task.verifier.kind !== 'checks') throw new Error('not a checks task');
      const checks = task.verifier.checks;
      expect(checks.length, task.id).toBeGreaterThanOrEqual(3);
      expect(new Set(checks.map((c) => c.name)).size, task.id).toBe(checks.length);
      expect(new Set(checks.map((c) => c.kind)).size, task.id).toBeGreaterThanOrEqual(2);
      const inputs = new Set(task.files.map((f) => f.path));
      for (const check of checks) {
        // An empty placeholder must not pass: absences are only asserted of files the task ships.
        if (check.kind === 'text_contains' && check.absent)
          expect(inputs.has(check.path), `${task.id} ${check.name}`).toBe(true);
        if (check.kind === 'file_absent')
          expect(inputs.has(check.path), `${task.id} ${check.name}`).toBe(true);
        if (check.kind === 'word_count')
          expect(check.min ?? 0, `${task.id} ${check.name}`).toBeGreaterThanOrEqual(1);
        if (check.kind === 'rows_match') expect(check.expected.length).toBeGreaterThan(0);
      }
    }
  });

  it('names every output path it checks in the prompt (exact paths)', () => {
    for (const task of tasks) {
      if (task.verifier.kind !== 'checks') continue;
      const inputs = new Set(task.files.map((f) => f.path));
      const named = new Set(scaffoldPaths(task.prompt, task.mountDir));
      for (const check of task.verifier.checks) {
        const path = checkPath(check);
        // Files the task renames in an input folder are described by a pattern, not named.
        const inInputFolder =
          path !== null && [...inputs].some((i) => i.includes('/') && dirname(i) === dirname(path));
        if (path === null || inputs.has(path) || inInputFolder) continue;
        expect(named.has(path), `${task.id}: ${path} (${check.name})`).toBe(true);
      }
    }
  });

  it('has 2–6 reference actions with the tools’ argument names, reading before acting', () => {
    for (const task of tasks) {
      const actions = task.referenceActions ?? [];
      expect(actions.length, task.id).toBeGreaterThanOrEqual(2);
      expect(actions.length, task.id).toBeLessThanOrEqual(6);
      for (const action of actions) {
        const spec = TOOL_ARGS[action.name];
        expect(spec, `${task.id}: tool ${action.name}`).toBeDefined();
        for (const key of spec!.required)
          expect(typeof action.arguments[key], `${task.id} ${action.name}.${key}`).toBe('string');
        for (const key of Object.keys(action.arguments))
          expect(spec!.allowed, `${task.id} ${action.name}.${key}`).toContain(key);
      }
      expect(['read', 'ls', 'exec'], task.id).toContain(actions[0]!.name);
    }
  });
});

describe.skipIf(noSandbox)(`the validation gate (sandbox: ${sandboxReason || 'ok'})`, () => {
  it('holds for 60 tasks across all categories: no-op 0, scaffold 0, reference actions 1', async () => {
    const tasks = synthesize({ n: 60, seed: 2024 });
    expect(new Set(tasks.map((t) => t.category)).size).toBe(6);
    const results = await gateTasks(tasks, { concurrency: 2, workDir: tmp });
    const failures = results.flatMap((r, i) => (r.ok ? [] : [`${tasks[i]!.id}: ${r.problems.join(' | ')}`]));
    expect(failures).toEqual([]);
    for (const [i, r] of results.entries()) {
      expect(r.noopScore, tasks[i]!.id).toBe(0);
      expect(r.scaffoldScore, tasks[i]!.id).toBe(0);
      expect(r.referenceScore, tasks[i]!.id).toBe(1);
      for (const p of r.scaffolded) expect(tasks[i]!.prompt, tasks[i]!.id).toContain(p);
    }
  }, 600_000);

  it('fails a task whose expected value is wrong, one that rewards a placeholder, and one that rewards doing nothing', async () => {
    const task = synthesize({ n: 1, seed: 5 })[0]!;
    if (task.verifier.kind !== 'checks') throw new Error('not a checks task');
    const checks = task.verifier.checks;
    const valueCheck = checks.findIndex((c) => c.kind === 'json_value' || c.kind === 'rows_match');
    expect(valueCheck).toBeGreaterThanOrEqual(0);
    const wrong: GymTask = {
      ...task,
      verifier: {
        kind: 'checks',
        checks: checks.map((c, i) =>
          i === valueCheck
            ? ({ ...c, kind: 'json_value', pointer: '/nope', expected: 42, tolerance: 0 } as Check)
            : c,
        ),
      },
    };
    const output = scaffoldPaths(task.prompt).find((p) => !task.files.some((f) => f.path === p))!;
    const lenient: GymTask = {
      ...task,
      verifier: {
        kind: 'checks',
        checks: [...checks, { kind: 'file_exists', name: 'output_there', path: output }],
      },
    };
    const trivial: GymTask = {
      ...task,
      verifier: {
        kind: 'checks',
        checks: [...checks, { kind: 'file_exists', name: 'input_there', path: task.files[0]!.path }],
      },
    };
    const [r1, r2, r3] = await Promise.all(
      [wrong, lenient, trivial].map((t) => gateTask(t, { workDir: tmp })),
    );
    expect(r1!.ok).toBe(false);
    expect(r1!.referenceScore).toBeLessThan(1);
    expect(r1!.problems.join('\n')).toMatch(/^reference: scored/m);
    expect(r2!.ok).toBe(false);
    expect(r2!.noopScore).toBe(0);
    expect(r2!.problems.join('\n')).toMatch(/scaffold .*output_there=1/);
    expect(r3!.ok).toBe(false);
    expect(r3!.problems.join('\n')).toMatch(/no-op: scored .*input_there=1/);
    // A reference action that fails is reported by number and tool.
    const broken = {
      ...task,
      referenceActions: [{ name: 'edit', arguments: { path: 'missing.txt', oldText: 'a', newText: 'b' } }],
    };
    const r4 = await gateTask(broken, { workDir: tmp });
    expect(r4.problems.join('\n')).toMatch(/reference: action 1 \(edit\) failed/);
  }, 120_000);

  it('writes ClawGym folders whose Python check evaluator gates like the check DSL (one task per template)', async () => {
    const tasks = synthesize({ n: 36, seed: 8 });
    expect(new Set(tasks.map((t) => t.provenance.template)).size).toBe(TEMPLATES.length);
    const out = join(tmp, 'folders');
    const manifest = await writeSynthOutput({ tasks, outDir: out, format: 'folders', seed: 8 });
    expect(manifest.content_hash).toBe(`sha256:${contentHash(tasks)}`);
    const loaded = await loadTasks(out);
    expect(loaded.map((t) => t.id).sort()).toEqual(tasks.map((t) => t.id).sort());
    for (const t of loaded) {
      expect(t.verifier.kind).toBe('script');
      const original = tasks.find((o) => o.id === t.id)!;
      expect(t.prompt).toBe(original.prompt);
      expect(t.category).toBe(original.category);
      const byPath = (a: { path: string }, b: { path: string }) => (a.path < b.path ? -1 : 1);
      expect([...t.files].sort(byPath)).toEqual([...original.files].sort(byPath));
    }
    // The reference actions travel in data_entry.json's metadata.
    const withReference = loaded.map((t) => {
      const metadata = (
        t.provenance.clawgym as { metadata: { reference_actions: GymTask['referenceActions'] } }
      ).metadata;
      return { ...t, referenceActions: metadata.reference_actions };
    });
    const results = await gateTasks(withReference, { concurrency: 2, workDir: tmp });
    const failures = results.flatMap((r, i) =>
      r.ok ? [] : [`${withReference[i]!.id}: ${r.problems.join(' | ')}`],
    );
    expect(failures).toEqual([]);
  }, 600_000);

  it.skipIf(!hasSamples)(
    'reports the known flaws of real ClawGym tasks (script verifier, no reference)',
    async () => {
      const [clean] = await loadTasks(join(SAMPLES, 'task_0000'));
      const [flawed] = await loadTasks(join(SAMPLES, 'task_1550'));
      const ok = await gateTask(clean!, { requireReference: false, workDir: tmp });
      expect(ok).toMatchObject({ ok: true, noopScore: 0, scaffoldScore: 0, referenceScore: null });
      expect(ok.scaffolded).toEqual(expect.arrayContaining(['output/reminders.csv', 'output/summary.json']));
      // task_1550 scores 0.0175 on the untouched workspace (docs of the sample).
      const bad = await gateTask(flawed!, { requireReference: false, workDir: tmp });
      expect(bad.ok).toBe(false);
      expect(bad.noopScore).toBeGreaterThan(0);
      expect(bad.problems[0]).toMatch(/^no-op: scored 0\.017/);
      // Without requireReference: false a task with no reference actions fails.
      expect((await gateTask(clean!, { workDir: tmp })).problems).toContain(
        'reference: the task has no reference actions',
      );
    },
    120_000,
  );
});

describe.skipIf(!hasSamples)('scaffoldPaths on the ClawGym samples', () => {
  const prompts = hasSamples
    ? readdirSync(SAMPLES)
        .sort()
        .map(
          (id) =>
            [
              id,
              JSON.parse(readFileSync(join(SAMPLES, id, 'data_entry.json'), 'utf8')).user_query as string,
            ] as const,
        )
    : [];

  it('finds the outputs the prompts ask for', () => {
    const of = (id: string) => scaffoldPaths(prompts.find(([k]) => k === id)![1]);
    expect(of('task_0000')).toEqual(
      expect.arrayContaining([
        'input/incidents.csv',
        'input/contacts.csv',
        'output/reminders.csv',
        'output/summary.json',
      ]),
    );
    expect(of('task_0350')).toEqual(
      expect.arrayContaining([
        'output/search/queries_log.json',
        'output/search/results.json',
        'output/downloads_report.json',
        'output/errors.log',
        'output/meeting_notes.md',
        'scripts/fiji_civic_fetcher.py',
      ]),
    );
    expect(of('task_1200')).toEqual(
      expect.arrayContaining([
        'output/contacts/index.md',
        'output/contacts/birthdays.md',
        'output/meetings/reminders.md',
      ]),
    );
    expect(of('task_1550')).toEqual(expect.arrayContaining(['output/PORTFOLIO.md', 'output/summary.json']));
  });

  it('never returns templates, URLs, directories or paths that leave the workspace', () => {
    expect(prompts).toHaveLength(40);
    for (const [id, prompt] of prompts) {
      const paths = scaffoldPaths(prompt);
      expect(paths.length, id).toBeGreaterThan(0);
      for (const p of paths) {
        expect(p, id).not.toMatch(/[<>{}*]|:\/\/|^\/|(^|\/)\.\.?(\/|$)|\/$/);
        expect(prompt.includes(p), `${id}: ${p}`).toBe(true);
      }
    }
    expect(scaffoldPaths(prompts.find(([k]) => k === 'task_1200')![1]).some((p) => p.includes('slug'))).toBe(
      false,
    );
  });
});

describe('stepwise gym synth', () => {
  it('writes tasks.jsonl and a manifest (n, seed, counts, content hash), with plain progress lines', async () => {
    const out = join(tmp, 'cli-jsonl');
    const run = await synthCli('--n', '24', '--seed', '9', '--out', out);
    expect(run.error).toBeNull();
    expect(run.out).toMatch(/^synth: 24\/24 tasks$/m);
    expect(run.out).toMatch(/^write: 24\/24 tasks$/m);
    expect(run.out).toContain(`synthesized 24 tasks`);
    const lines = (await readFile(join(out, TASKS_FILE), 'utf8')).trim().split('\n');
    expect(lines).toHaveLength(24);
    const expected = synthesize({ n: 24, seed: 9 });
    expect(lines.map((l) => JSON.parse(l))).toEqual(expected);
    const manifest = JSON.parse(await readFile(join(out, MANIFEST_FILE), 'utf8'));
    expect(manifest).toMatchObject({
      n: 24,
      seed: 9,
      format: 'jsonl',
      content_hash: `sha256:${contentHash(expected)}`,
    });
    expect(Object.values(manifest.counts.by_category).reduce((a: number, b) => a + (b as number), 0)).toBe(
      24,
    );
    expect(Object.keys(manifest.counts.by_category).sort()).toEqual([...CATEGORIES].sort());
    expect(manifest.templates_used).toBe(new Set(expected.map((t) => t.provenance.template)).size);
    expect(manifest.files[0]).toMatchObject({ path: TASKS_FILE });
    expect(manifest.files[0].sha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it('writes one ClawGym folder per task with --format folders', async () => {
    const out = join(tmp, 'cli-folders');
    const run = await synthCli('--n', '7', '--seed', 'demo', '--format', 'folders', '--out', out);
    expect(run.error).toBeNull();
    const entries = (await readdir(out)).sort();
    expect(entries).toHaveLength(8);
    expect(entries).toContain(MANIFEST_FILE);
    const folder = join(out, entries.find((e) => e !== MANIFEST_FILE)!);
    expect((await readdir(folder)).sort()).toEqual(['data_entry.json', 'input_files', 'reward']);
    expect((await readdir(join(folder, 'reward'))).sort()).toEqual(['check.py', 'checks.json', 'reward.sh']);
    const entry = JSON.parse(await readFile(join(folder, 'data_entry.json'), 'utf8'));
    expect(entry.user_query.endsWith(CLOSING_SENTENCE)).toBe(true);
    expect(CATEGORIES).toContain(entry.metadata.category);
    expect(JSON.parse(await readFile(join(out, MANIFEST_FILE), 'utf8'))).toMatchObject({
      n: 7,
      seed: 'demo',
      format: 'folders',
    });
  });

  it('names the flag when a flag is bad, and refuses a non-empty --out', async () => {
    expect((await synthCli('--n', '0', '--out', join(tmp, 'x'))).error).toMatch(/--n/);
    expect((await synthCli('--n', 'lots', '--out', join(tmp, 'x'))).error).toMatch(/--n/);
    expect((await synthCli('--seed', 'a b', '--out', join(tmp, 'x'))).error).toMatch(/--seed/);
    expect((await synthCli('--format', 'csv', '--out', join(tmp, 'x'))).error).toMatch(/--format/);
    expect((await synthCli('--n', '2')).error).toMatch(/--out/);
    expect((await synthCli('--n', '2', '--out', join(tmp, 'x'), '--bogus')).error).toMatch(/--bogus/);
    expect((await synthCli('--n', '2', '--out', join(tmp, 'cli-jsonl'))).error).toMatch(
      /^--out: .* is not empty/,
    );
    expect(existsSync(join(tmp, 'x'))).toBe(false);
  });

  it('documents its flags in --help', async () => {
    const run = await synthCli('--help');
    for (const flag of [
      '--n <count>',
      '--seed <seed>',
      '--out <dir>',
      '--format <format>',
      'jsonl',
      'folders',
    ]) {
      expect(run.out).toContain(flag);
    }
  });
});

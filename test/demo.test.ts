import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Step } from '../packages/core/src/domain/step.js';
import { neededPlanSteps } from '../packages/core/src/engines/sim/plan-hint.js';
import { startServer } from '../packages/core/src/server/server.js';
import { runDemo } from '../src/cli/demo.js';

type Message = { role: string; content?: unknown };

/** Failed tool results (as the gateway flagged them) still in a trajectory's last prompt. */
function errorsInFinalContext(steps: readonly Step[]): number {
  const flagged = new Set(
    steps.flatMap((s) => (s.toolResults ?? []).filter((r) => r.error).map((r) => r.content)),
  );
  const last = (steps.at(-1)?.messages ?? []) as Message[];
  return last.filter((m) => m.role === 'tool' && typeof m.content === 'string' && flagged.has(m.content))
    .length;
}

describe('demo (the README main job)', () => {
  it('synthesizes tasks, runs the agent through the gateway, verifies, trains on the groups and exports SFT; then CLEANER and ActGuide', async () => {
    const out = mkdtempSync(join(tmpdir(), 'stepwise-demo-test-'));
    try {
      const lines: string[] = [];
      const result = await runDemo({
        out,
        port: 0,
        tasks: 4,
        rollouts: 3,
        concurrency: 4,
        batchSize: 2,
        seed: 3,
        errorRate: 0.5,
        giveUpRate: 0.3,
        cleanerTasks: 3,
        cleanerSamples: 2,
        guideTasks: 2,
        guideSamples: 2,
        print: (l) => lines.push(l),
      });
      expect(result.samples).toBe(12);
      // Every group completed and was consumed (after one nack), every step trained on.
      expect(result.consumedGroups).toBe(4);
      expect(result.consumedSteps).toBe(result.producedSteps);
      expect(lines.filter((l) => l.startsWith('trainer   acked'))).toHaveLength(2);
      expect(lines.some((l) => l.includes('nacked'))).toBe(true);
      // Injected mistakes were recorded as failed tool results on the steps that made them.
      expect(result.toolErrors).toBeGreaterThan(0);
      // Give-ups make some rollouts fail: the mean is below 1, and the SFT export keeps only successes.
      expect(result.meanScore).toBeLessThan(1);
      expect(result.meanScore).toBeGreaterThan(0);
      const sft = readFileSync(join(out, 'sft', 'sft.jsonl'), 'utf8')
        .trim()
        .split('\n');
      expect(sft).toHaveLength(result.sftLines);
      const successes = lines.filter((l) => /^agent .* score 1\.00/.test(l)).length;
      expect(result.sftLines).toBe(successes);
      const first = JSON.parse(sft[0]!) as { messages: { role: string }[] };
      expect(first.messages.map((m) => m.role)).toContain('tool');

      // CLEANER: the same mistakes in both passes (same seeds); without it they stay in the contexts
      // that are trained on, with it every one was rolled back and none is left.
      const cleaner = result.cleaner!;
      expect(cleaner.plain.samples).toBe(6);
      expect(cleaner.cleaner.samples).toBe(6);
      expect(cleaner.plain.capturedToolErrors).toBeGreaterThan(0);
      expect(cleaner.cleaner.capturedToolErrors).toBe(cleaner.plain.capturedToolErrors);
      expect(cleaner.plain.contextToolErrors).toBe(cleaner.plain.capturedToolErrors);
      expect(cleaner.cleaner.contextToolErrors).toBeLessThan(cleaner.plain.contextToolErrors);
      expect(cleaner.cleaner.contextToolErrors).toBe(0);
      expect(cleaner.rollbacksTriggered).toBe(cleaner.plain.capturedToolErrors);
      expect(cleaner.recovered).toBe(cleaner.rollbacksTriggered);
      expect(cleaner.failed).toBe(0);
      expect(cleaner.shallow + cleaner.deep).toBe(cleaner.rollbacksTriggered);
      expect(Object.values(cleaner.removedErrorTypes).reduce((a, b) => a + b, 0)).toBe(
        cleaner.rollbacksTriggered,
      );
      // A rollback's regeneration is the call the plain run makes on its next turn (the correction), and
      // the sim goes on from the purified history without repeating it: the same number of LLM calls.
      expect(cleaner.cleaner.steps).toBe(cleaner.plain.steps);
      expect(lines.some((l) => l.includes('repeats the corrected call'))).toBe(false);
      const example = cleaner.example!;
      expect(example.before.some((l) => l.startsWith('✗ '))).toBe(true);
      expect(example.after.some((l) => l.startsWith('✗ '))).toBe(false);
      expect(example.after.filter((l) => l.startsWith('→ ')).length).toBeGreaterThan(0);
      expect(lines.some((l) => l.includes('│ with CLEANER'))).toBe(true);
      expect(lines).toContain(
        `cleaner   rollbacks: ${cleaner.rollbacksTriggered} triggered, ${cleaner.recovered} recovered, 0 failed; repairs ${cleaner.shallow} shallow (reasoning kept, call replaced), ${cleaner.deep} deep (whole turn replaced); removed errors ${Object.entries(
          cleaner.removedErrorTypes,
        )
          .map(([t, n]) => `${t} ×${n}`)
          .join(', ')}`,
      );

      // ActGuide: every unguided group is hard, probes choose k, the guided groups are rescued.
      const guide = result.actguide!;
      expect(guide).toMatchObject({
        groups: 2,
        hard: 2,
        guided: 2,
        rescued: 2,
        hardFraction: 1,
        rescuedFraction: 1,
      });
      for (const t of guide.tasks) {
        expect(t.hard).toBe(true);
        expect(t.unguided).toEqual([0, 0]);
        expect(t.probes.length).toBeGreaterThan(0);
        // The smallest working prefix: shorter plans failed, the chosen one succeeded (or was never probed).
        expect(t.k).toBe(neededPlanSteps(t.actions, 0.6));
        for (const p of t.probes) expect(p.rewards.every((r) => r > 0)).toBe(p.k >= t.k!);
        expect(t.guided.length).toBe(2);
        expect(t.guided.every((r) => r > 0)).toBe(true);
      }
      expect(guide.probeRollouts).toBe(guide.tasks.reduce((n, t) => n + 2 * t.probes.length, 0));
      expect(guide.stored).toEqual({
        guided: guide.guidedRollouts,
        guidedWithGuidance: guide.guidedRollouts,
        replacedUntrainable: 4,
        probes: guide.probeRollouts,
      });
      const summaryLine = `actguide  2 of 2 groups hard (100%), 2 rescued (100%); ${guide.probeRollouts} probe and ${guide.guidedRollouts} guided rollouts`;
      expect(lines.some((l) => l.startsWith(summaryLine))).toBe(true);

      // Counted again from the stores the demo left in --out, through the pool rather than HTTP.
      const cleanerDb = await startServer({ dbPath: join(out, 'cleaner.db'), port: 0, engines: ['sim'] });
      try {
        const contextErrors = async (channel: string) => {
          const { items } = await cleanerDb.pool.listTrajectories({ channel, limit: 100, offset: 0 });
          expect(items).toHaveLength(6);
          let n = 0;
          for (const t of items) {
            expect(t.metadata.cleaner !== undefined).toBe(channel === 'cleaner-on');
            n += errorsInFinalContext(await cleanerDb.pool.getTrajectorySteps(t.id));
          }
          return n;
        };
        expect(await contextErrors('cleaner-off')).toBe(cleaner.plain.contextToolErrors);
        expect(await contextErrors('cleaner-on')).toBe(0);
      } finally {
        await cleanerDb.close();
      }
      const guideDb = await startServer({ dbPath: join(out, 'actguide.db'), port: 0, engines: ['sim'] });
      try {
        const { items } = await guideDb.pool.listTrajectories({ channel: 'train', limit: 100, offset: 0 });
        const guided = items.filter((t) => t.groupId.endsWith('.guided'));
        expect(guided).toHaveLength(4);
        for (const t of guided) {
          expect(t.reward).toBeGreaterThan(0);
          expect(t.metadata.guidance).toMatchObject({ strategy: 'adaptive', off_policy: true });
        }
        for (const t of items.filter((t) => !t.groupId.endsWith('.guided'))) expect(t.reward).toBe(0);
      } finally {
        await guideDb.close();
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 180_000);
});

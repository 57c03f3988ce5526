import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runDemo } from '../src/cli/demo.js';

describe('demo (the README main job)', () => {
  it('synthesizes tasks, runs the agent through the gateway, verifies, trains on the groups and exports SFT', async () => {
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
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});

import { describe, expect, it } from 'vitest';
import { runDemo } from '../src/cli/demo.js';

describe('demo (the README main job)', () => {
  it('runs the producer/trainer loop to the end over real HTTP and SQLite', async () => {
    const lines: string[] = [];
    const result = await runDemo({
      port: 0,
      groups: 4,
      rollouts: 3,
      steps: 3,
      batchSize: 2,
      seed: 1,
      print: (l) => lines.push(l),
    });
    expect(result).toEqual({ consumedGroups: 4, consumedSteps: 4 * 3 * 3 });
    expect(lines.filter((l) => l.startsWith('trainer   acked'))).toHaveLength(2);
    expect(lines.some((l) => l.includes('nacked'))).toBe(true);
    expect(lines.at(-1)).toMatch(/produced 36 steps \/ 12 trajectories, consumed 4 groups \/ 36 steps/);
  });
});

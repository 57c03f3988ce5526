import { describe, expect, it } from 'vitest';
import { runDemo } from '../src/cli/demo.js';

describe('demo (the README main job)', () => {
  it('runs agents through the gateway and the trainer loop to the end over real HTTP and SQLite', async () => {
    const lines: string[] = [];
    const result = await runDemo({
      port: 0,
      groups: 4,
      rollouts: 3,
      batchSize: 2,
      seed: 1,
      errorRate: 0.5,
      print: (l) => lines.push(l),
    });
    expect(result.consumedGroups).toBe(4);
    expect(result.consumedSteps).toBe(result.producedSteps);
    // Wrong calls were made and their failed tool results attached to the steps that made them.
    expect(result.toolErrors).toBeGreaterThan(0);
    const agentLines = lines.filter((l) => l.startsWith('agents    prompt-'));
    expect(agentLines).toHaveLength(4);
    const errorsReported = agentLines
      .flatMap((l) => /tool errors \[([\d,]+)\]/.exec(l)![1]!.split(','))
      .reduce((n, x) => n + Number(x), 0);
    expect(errorsReported).toBe(result.toolErrors);
    // Every LLM call an agent made became exactly one stored step.
    const callsMade = agentLines
      .flatMap((l) => /LLM calls \[([\d,]+)\]/.exec(l)![1]!.split(','))
      .reduce((n, x) => n + Number(x), 0);
    expect(callsMade).toBeGreaterThanOrEqual(12);
    expect(result.producedSteps).toBe(callsMade);
    expect(lines.filter((l) => l.startsWith('trainer   acked'))).toHaveLength(2);
    expect(lines.some((l) => l.includes('nacked'))).toBe(true);
    expect(lines.at(-1)).toMatch(
      new RegExp(
        `produced ${result.producedSteps} steps / 12 trajectories, consumed 4 groups / ${result.producedSteps} steps`,
      ),
    );
  });
});

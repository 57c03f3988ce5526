import { availableParallelism } from 'node:os';
import { relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// The long poles start first, so that on a clean checkout (no timing cache) none of them is left to
// run alone at the end; measured in CI (`.ci/run` prints the ten slowest files).
const LONG_POLES = [
  'test/train-loop.test.ts',
  'test/openclaw.test.ts',
  'test/store.worker.test.ts',
  'test/gym-synth.test.ts',
  'test/openclaw-install.test.ts',
  'test/gym-cli.test.ts',
];

class LongPolesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (f: TestSpecification) => {
      const i = LONG_POLES.indexOf(relative(process.cwd(), f.moduleId));
      return i === -1 ? LONG_POLES.length : i;
    };
    return sorted
      .map((f, i) => ({ f, i }))
      .sort((a, b) => rank(a.f) - rank(b.f) || a.i - b.i)
      .map((x) => x.f);
  }
}

// Most test time is spent waiting on servers, sandboxes and child processes, not on this process's
// CPU: two files at a time on two cores (vitest's default there is one) halves the wall time.
const workers = Number(process.env.STEPWISE_TEST_WORKERS) || Math.max(2, availableParallelism() - 1);

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'packages/*/src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: workers,
    sequence: { sequencer: LongPolesFirst },
  },
});

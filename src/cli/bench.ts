import { join, resolve } from 'node:path';
import { benchReport, reportMarkdown, writeReport } from '@stepwise/gym/bench.js';
import { formatSummary, type RunCommandOptions } from '@stepwise/gym/run.js';
import type { Command } from 'commander';
import { addRunOptions, runWithGateway } from './gym.js';

/* `stepwise bench`: a gym run scored the ClawGym-Bench way (packages/gym/src/bench.ts), its report written to --out. */

export function registerBenchCommand(program: Command): void {
  addRunOptions(
    program
      .command('bench')
      .description(
        'benchmark an agent on a task set: mean score, above 0.5, coverage and pass@k per category',
      ),
  )
    .option(
      '--pass-threshold <score>',
      'a sample passes at this score or above',
      (v) => {
        const n = Number(v);
        if (!(n > 0 && n <= 1)) throw new Error('--pass-threshold must be in (0, 1]');
        return n;
      },
      1,
    )
    .action(async (opts: RunCommandOptions & { passThreshold: number }) => {
      const { tasks, results, summary, runId } = await runWithGateway(opts, (line) => console.error(line));
      const report = benchReport(results, tasks, {
        agent: opts.agent,
        model: opts.model,
        engine: opts.gateway
          ? `gateway ${opts.gateway}`
          : (opts.engine.length > 0 ? opts.engine : ['sim']).join(', '),
        samples_per_task: opts.samples,
        pass_threshold: opts.passThreshold,
        max_turns: opts.maxTurns,
        sample_timeout_ms: opts.sampleTimeoutMs,
        run_id: runId,
      });
      const out = resolve(opts.out);
      writeReport(out, report);
      console.log(
        `${formatSummary(summary)}\n\n${reportMarkdown(report)}\nwrote ${join(out, 'report.{json,md,html}')}`,
      );
    });
}

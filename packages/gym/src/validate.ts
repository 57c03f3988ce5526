import { gateTasks } from './gate.js';
import { sandboxRoot } from './run.js';
import { requireSandbox } from './sandbox/index.js';
import { loadTasks } from './tasks/index.js';

/** `stepwise gym validate`'s options. */
export interface ValidateOptions {
  json?: boolean;
  concurrency: number;
  unsafeNoSandbox?: boolean;
  rootfs?: string | true;
  toolsDir?: string;
}

/** `stepwise gym validate`: prints the offenders (or JSON) and returns how many tasks failed. */
export async function validateCommand(
  source: string,
  opts: ValidateOptions,
  print: (line: string) => void,
): Promise<number> {
  const rootfs = sandboxRoot(opts);
  if (!opts.unsafeNoSandbox) requireSandbox(rootfs);
  const tasks = await loadTasks(source);
  const results = await gateTasks(tasks, {
    concurrency: opts.concurrency,
    sandbox: opts.unsafeNoSandbox ? { unsafeNoSandbox: true } : rootfs ? { rootfs } : {},
    // Native tasks must be solvable by their reference actions; ClawGym's come without any.
    requireReference: false,
    // The scaffold probe is our heuristic, not ClawGym's gate: it warns (half of ClawGym-Bench's
    // checkers give partial credit for a file at a named path) and does not fail a task.
    scaffoldAsWarning: true,
    onResult: (task, result, done) => {
      if (!opts.json && !result.ok) print(`${task.id}: ${result.problems.join('; ')}`);
      if (!opts.json && result.warnings.length > 0)
        print(`${task.id}: warning: ${result.warnings.join('; ')}`);
      if (!opts.json && done % 10 === 0) process.stderr.write(`validated ${done}/${tasks.length}\n`);
    },
  });
  const rows = tasks.map((task, i) => {
    const r = results[i]!;
    const problems = [...r.problems];
    if (task.verifier.kind === 'checks' && (task.referenceActions?.length ?? 0) === 0)
      problems.push('a native task needs reference actions that score 1');
    return {
      task_id: task.id,
      ok: r.ok && problems.length === r.problems.length,
      noop_score: r.noopScore,
      scaffold_score: r.scaffoldScore,
      reference_score: r.referenceScore,
      problems,
      warnings: r.warnings,
    };
  });
  const failed = rows.filter((r) => !r.ok).length;
  const warned = rows.filter((r) => r.warnings.length > 0).length;
  const summary = `${rows.length - failed} of ${rows.length} tasks pass the gate; ${failed} fail; ${warned} with scaffold warnings (placeholder files at the paths the prompt names score above 0)`;
  if (opts.json)
    print(
      JSON.stringify({
        tasks: rows,
        summary: { tasks: rows.length, passed: rows.length - failed, failed, scaffold_warnings: warned },
      }),
    );
  else print(summary);
  return failed;
}

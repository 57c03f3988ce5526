import { createInterface } from 'node:readline';
import type { PythonProcess } from './python.js';

// The Python trainer's JSON lines (stepwise_client.rl): readiness, each update, the end, and its
// failure, as promises and a list the loop reads.

/** One `update` line of the trainer process. */
export interface TrainerUpdate {
  version: number;
  groups: number | null;
  trajectories: number;
  reward_mean: number;
  staleness_max: number;
  loss?: number;
  tokens?: number;
  pack_ratio?: number | null;
  update_s?: number;
  wait_s: number;
  publish_s: number;
}

export interface TrainerEvents {
  ready: Promise<void>;
  done: Promise<void>;
  updates: TrainerUpdate[];
  failed(): boolean;
  error(): Error;
}

/**
 * Follows the trainer's JSON lines; `ready` and `done` reject when it fails or exits early.
 * `onUpdate` sees each update as its line arrives (the loop stops the trainer at once from there).
 */
export function trainerEvents(
  proc: PythonProcess,
  say: (line: string) => void,
  onUpdate?: (update: TrainerUpdate, count: number) => void,
): TrainerEvents {
  const updates: TrainerUpdate[] = [];
  let failure: Error | null = null;
  let onReady!: () => void;
  let onDone!: () => void;
  let onFail!: (error: Error) => void;
  const ready = new Promise<void>((res, rej) => {
    onReady = res;
    onFail = (error) => {
      failure = error;
      rej(error);
      doneReject(error);
    };
  });
  let doneReject!: (error: Error) => void;
  const done = new Promise<void>((res, rej) => {
    onDone = res;
    doneReject = rej;
  });
  // Whichever of the two nobody awaits yet must not surface as an unhandled rejection.
  ready.catch(() => {});
  done.catch(() => {});
  let message = '';
  createInterface({ input: proc.child.stdout! }).on('line', (line) => {
    let event: Record<string, unknown>;
    try {
      event = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    switch (event.event) {
      case 'warmup':
        if ((event.step as number) % 40 === 0 || event.step === event.steps)
          say(
            `trainer   warm-up step ${event.step}/${event.steps}: loss ${(event.loss as number).toFixed(4)}`,
          );
        break;
      case 'ready':
        onReady();
        break;
      case 'update': {
        const u = event as unknown as TrainerUpdate;
        updates.push(u);
        say(
          `trainer   version ${u.version}: ${u.trajectories} rollouts, reward ${u.reward_mean.toFixed(3)}, staleness <= ${u.staleness_max}` +
            (u.loss === undefined ? '' : `, loss ${u.loss.toFixed(4)}`) +
            (u.pack_ratio ? `, packed ${(u.pack_ratio * 100).toFixed(0)}% of the tokens` : '') +
            (u.update_s === undefined ? '' : `, update ${u.update_s.toFixed(1)} s`),
        );
        onUpdate?.(u, updates.length);
        break;
      }
      case 'done':
        onDone();
        break;
      case 'error':
        message = String(event.message);
        break;
    }
  });
  void proc.exited.then((code) => {
    onFail(new Error(`the trainer exited with code ${code}${message ? `: ${message}` : ''}\n${proc.log()}`));
  });
  return {
    ready,
    done,
    updates,
    failed: () => failure !== null,
    error: () => failure ?? new Error('the trainer failed'),
  };
}

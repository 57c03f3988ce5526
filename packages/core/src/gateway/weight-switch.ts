import type { Logger } from 'pino';
import { StepwiseError, ValidationError } from '../domain/errors.js';
import type { EngineRouter } from '../engines/router.js';
import {
  type EngineSwitch,
  engineSwitch,
  type SwitchMode,
  switchUnsupported,
  type WeightsSource,
} from '../engines/switch.js';
import type { PolicyGate } from './policy-gate.js';

/*
 * A weight switch the gateway runs for the whole fleet (`PUT /v1/policy-version` with a mode):
 * new calls wait at the gate; every engine pauses (abort, keep or wait), loads the new weights and
 * resumes; the new version is in force before any engine resumes, so nothing generated under the
 * new weights is stamped with the old version. An engine that fails a phase is taken out of routing
 * and reported, never left serving the old policy; if none switches, nothing changes.
 */

export interface SwitchRequest {
  version: number;
  mode: SwitchMode;
  weights: WeightsSource | null;
}

export interface SwitchFailure {
  engine: string;
  phase: 'pause' | 'load' | 'resume';
  error: string;
}

export interface SwitchReport {
  version: number;
  mode: SwitchMode;
  /** Engines now serving the new weights. */
  switched: string[];
  /** Engines that failed a phase: out of routing until a later switch succeeds on them. */
  failed: SwitchFailure[];
  /** How long new calls were held, ms. */
  held_ms: number;
  /** For `wait`: the gateway's own running calls drained first, in ms, and whether that timed out. */
  drained_ms?: number;
  drain_timed_out?: boolean;
}

export interface WeightSwitchDeps {
  router: EngineRouter;
  gate: PolicyGate;
  setVersion(version: number): Promise<void>;
  logger?: Pick<Logger, 'warn' | 'info'>;
  /** Longest one engine may take for one phase (a load of big weights is the slow one). */
  phaseTimeoutMs: number;
  /** Longest `wait` waits for running calls before switching anyway. */
  drainTimeoutMs: number;
}

interface Member {
  id: string;
  control: EngineSwitch;
}

const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** Runs `phase` on every member at once; the failures come back, the rest stay members. */
async function phase(
  members: Member[],
  name: SwitchFailure['phase'],
  run: (m: Member, signal: AbortSignal) => Promise<void>,
  timeoutMs: number,
): Promise<{ ok: Member[]; failed: SwitchFailure[] }> {
  const results = await Promise.allSettled(members.map((m) => run(m, AbortSignal.timeout(timeoutMs))));
  const ok: Member[] = [];
  const failed: SwitchFailure[] = [];
  results.forEach((r, i) => {
    if (r.status === 'fulfilled') ok.push(members[i]!);
    else failed.push({ engine: members[i]!.id, phase: name, error: message(r.reason) });
  });
  return { ok, failed };
}

export async function switchWeights(deps: WeightSwitchDeps, request: SwitchRequest): Promise<SwitchReport> {
  const { router, gate } = deps;
  const engines = router.engineList();
  for (const engine of engines) {
    const why = switchUnsupported(engine, request.weights);
    if (why)
      throw new ValidationError(`${why}; nothing was changed`, engine.kind === 'openai' ? 'mode' : 'weights');
  }
  const members: Member[] = engines.map((e) => ({ id: e.id, control: engineSwitch(e) }));
  const started = performance.now();
  const run = async (): Promise<SwitchReport> => {
    const paused = await phase(
      members,
      'pause',
      (m, s) => m.control.pause(request.mode, s),
      deps.phaseTimeoutMs,
    );
    const loaded = await phase(
      paused.ok,
      'load',
      (m, s) => m.control.load(request.weights, request.version, s),
      deps.phaseTimeoutMs,
    );
    if (loaded.ok.length === 0) {
      // Nothing switched: the fleet goes on as it was, under the old version.
      await phase(paused.ok, 'resume', (m, s) => m.control.resume(s), deps.phaseTimeoutMs);
      const failures = [...paused.failed, ...loaded.failed];
      throw new StepwiseError(
        `no engine switched to version ${request.version}; the version is unchanged: ${failures
          .map((f) => `${f.engine} (${f.phase}): ${f.error}`)
          .join('; ')}`,
        502,
        'switch_failed',
      );
    }
    await deps.setVersion(request.version);
    const resumed = await phase(loaded.ok, 'resume', (m, s) => m.control.resume(s), deps.phaseTimeoutMs);
    const failed = [...paused.failed, ...loaded.failed, ...resumed.failed];
    for (const f of failed)
      router.disable(f.engine, `weight switch to version ${request.version}: ${f.phase} failed: ${f.error}`);
    for (const m of resumed.ok) router.enable(m.id);
    if (failed.length > 0)
      deps.logger?.warn({ version: request.version, failed }, 'engines failed the weight switch');
    return {
      version: request.version,
      mode: request.mode,
      switched: resumed.ok.map((m) => m.id),
      failed,
      held_ms: Math.round(performance.now() - started),
    };
  };
  if (request.mode !== 'wait') return gate.hold(run);
  let drainedMs = 0;
  const { value, timedOut } = await gate.drain(async () => {
    drainedMs = Math.round(performance.now() - started);
    return run();
  }, deps.drainTimeoutMs);
  return { ...value, drained_ms: drainedMs, drain_timed_out: timedOut };
}

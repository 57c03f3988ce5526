import type { SwitchMode, WeightsSource } from '../domain/weight-switch.js';
import type { Engine } from './router.js';
import { UpstreamError } from './upstream.js';

export type { SwitchMode, WeightsSource };

/*
 * How one engine switches weights, in its own protocol. The gateway runs the same three phases on
 * every engine of the fleet (gateway/weight-switch.ts): pause, load, resume.
 * - vLLM (and the reference engine and the sim, which speak its dev-mode RL routes,
 *   vllm/entrypoints/serve/rlhf/api_router.py): POST /pause?mode=abort|wait|keep, then
 *   /start_weight_update, /update_weights {update_info}, /finish_weight_update {weight_version},
 *   then /resume. Weights the trainer pushed itself
 *   (NCCL, between the pause and the switch) are named by /update_weight_version {new_version}.
 * - SGLang (python/sglang/srt/entrypoints/http_server.py): POST /pause_generation {mode}, then
 *   /update_weights_from_disk {model_path, weight_version}, then /continue_generation.
 */

export interface EngineSwitch {
  pause(mode: SwitchMode, signal: AbortSignal): Promise<void>;
  load(weights: WeightsSource | null, version: number, signal: AbortSignal): Promise<void>;
  resume(signal: AbortSignal): Promise<void>;
}

/** Why an engine cannot take part in a switch at all (checked before anything is paused). */
export function switchUnsupported(engine: Engine, weights: WeightsSource | null): string | null {
  if (engine.kind === 'openai')
    return `engine ${engine.id} is an OpenAI-compatible API: its weights cannot be switched`;
  if (engine.kind === 'sglang' && weights !== null && !('path' in weights))
    return `engine ${engine.id} is SGLang: it loads a checkpoint folder (weights.path), not a vLLM update_info`;
  return null;
}

async function call(
  engine: Engine,
  method: 'GET' | 'POST',
  path: string,
  body: object | null,
  signal: AbortSignal,
): Promise<unknown> {
  const reply = await engine.transport.send(
    method,
    path,
    body === null ? null : JSON.stringify(body),
    signal,
  );
  const text = await reply.text();
  if (reply.status !== 200)
    throw new UpstreamError(`${method} ${path} answered ${reply.status}: ${text.slice(0, 300)}`, 502, true);
  try {
    return text === '' ? {} : JSON.parse(text);
  } catch {
    throw new UpstreamError(`${method} ${path} answered ${text.slice(0, 100)}, not JSON`, 502, true);
  }
}

/**
 * Weights the trainer pushed itself (both vLLM and SGLang name it `/update_weight_version`): the
 * engine only learns their version, which its answers stamp on the tokens after it.
 */
async function nameVersion(engine: Engine, version: number, signal: AbortSignal): Promise<void> {
  await call(engine, 'POST', '/update_weight_version', { new_version: String(version) }, signal);
}

function vllmSwitch(engine: Engine): EngineSwitch {
  return {
    async pause(mode, signal) {
      await call(engine, 'POST', `/pause?mode=${mode}`, null, signal);
    },
    async load(weights, version, signal) {
      if (weights === null) return nameVersion(engine, version, signal);
      const updateInfo = 'path' in weights ? { model_path: weights.path } : weights.update_info;
      await call(engine, 'POST', '/start_weight_update', {}, signal);
      await call(engine, 'POST', '/update_weights', { update_info: updateInfo }, signal);
      await call(engine, 'POST', '/finish_weight_update', { weight_version: String(version) }, signal);
    },
    async resume(signal) {
      await call(engine, 'POST', '/resume', null, signal);
    },
  };
}

/** SGLang's pause modes: keep is `retract` (the KV is recomputed after the switch, under the new weights). */
const SGLANG_MODE: Record<SwitchMode, string> = { abort: 'abort', keep: 'retract', wait: 'abort' };

function sglangSwitch(engine: Engine): EngineSwitch {
  return {
    async pause(mode, signal) {
      // `wait` has drained the gateway's own calls before this: nothing is left to abort.
      await call(engine, 'POST', '/pause_generation', { mode: SGLANG_MODE[mode] }, signal);
    },
    async load(weights, version, signal) {
      if (weights === null) return nameVersion(engine, version, signal);
      if (!('path' in weights)) throw new UpstreamError('SGLang loads weights.path only', 502, false);
      await call(
        engine,
        'POST',
        '/update_weights_from_disk',
        { model_path: weights.path, weight_version: String(version) },
        signal,
      );
    },
    async resume(signal) {
      await call(engine, 'POST', '/continue_generation', {}, signal);
    },
  };
}

export function engineSwitch(engine: Engine): EngineSwitch {
  return engine.kind === 'sglang' ? sglangSwitch(engine) : vllmSwitch(engine);
}

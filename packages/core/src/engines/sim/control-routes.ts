import type { Context, Hono } from 'hono';
import { ValidationError } from '../../domain/errors.js';
import { PAUSE_MODES, type PauseMode, type SimPauseControl } from './pause.js';

/*
 * vLLM's dev-mode RL routes as the sim serves them (vllm/entrypoints/serve/rlhf/api_router.py):
 * /pause, /resume, /is_paused, /abort_requests, and the weight update's state machine
 * /start_weight_update → /update_weights → /finish_weight_update, with /weight_info. The sim has no
 * weights to load: an update records its version, which its answers stamp on the tokens after it.
 */

async function bodyOf(c: Context): Promise<Record<string, unknown>> {
  const text = await c.req.text();
  if (text.trim() === '') return {};
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new ValidationError(`malformed JSON body (${(error as Error).message})`, 'body');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new ValidationError('the body must be a JSON object', 'body');
  return body as Record<string, unknown>;
}

const conflict = (c: Context, detail: string) => c.json({ detail }, 409);

export function mountControlRoutes(app: Hono, control: SimPauseControl): void {
  app.post('/pause', async (c) => {
    const mode = c.req.query('mode') ?? 'abort';
    if (!PAUSE_MODES.includes(mode as PauseMode))
      throw new ValidationError(`mode: must be one of ${PAUSE_MODES.join(', ')}`, 'mode');
    await control.pause(mode as PauseMode);
    return c.json({ status: 'paused' });
  });
  app.post('/resume', (c) => {
    control.resume();
    return c.json({ status: 'resumed' });
  });
  app.get('/is_paused', (c) => c.json({ is_paused: control.paused }));
  // The sim's own: how busy it has been (bench/async.ts reads an engine's busy fraction here).
  app.get('/sim/usage', (c) => {
    const { busyMs, totalMs } = control.usage();
    return c.json({ busy_ms: busyMs, total_ms: totalMs, running: control.runningCount });
  });
  app.post('/abort_requests', async (c) => {
    await bodyOf(c);
    return c.json({ status: 'aborted', aborted: control.abortAll() });
  });

  const weights = control.weights;
  app.post('/start_weight_update', (c) => {
    if (weights.updating)
      return conflict(c, 'start_weight_update called while a weight update is already in progress');
    weights.updating = true;
    return c.json({ message: 'Weight update started' });
  });
  app.post('/update_weights', async (c) => {
    const body = await bodyOf(c);
    const info = body.update_info;
    if (typeof info !== 'object' || info === null || Array.isArray(info))
      throw new ValidationError("update_info: missing 'update_info' in request body", 'update_info');
    if (!weights.updating) return conflict(c, 'update_weights called without start_weight_update');
    return c.json({ message: 'Weights updated' });
  });
  app.post('/finish_weight_update', async (c) => {
    const body = await bodyOf(c);
    if (!weights.updating)
      return conflict(c, 'finish_weight_update called without a preceding start_weight_update');
    weights.updating = false;
    weights.gen++;
    if (body.weight_version != null) weights.version = String(body.weight_version);
    if (typeof body.weight_label === 'string') weights.label = body.weight_label;
    return c.json({
      message: 'Weight update finished',
      weight_gen: weights.gen,
      weight_label: weights.label,
    });
  });
  app.post('/update_weight_version', async (c) => {
    const body = await bodyOf(c);
    if (typeof body.new_version !== 'string')
      throw new ValidationError('new_version: must be a string', 'new_version');
    weights.version = body.new_version;
    return c.json({ success: true, new_version: body.new_version });
  });
  app.get('/weight_info', (c) =>
    c.json({ weight_version: weights.version, weight_gen: weights.gen, weight_label: weights.label }),
  );
}

import type { Context } from 'hono';
import { z } from 'zod';
import { ChannelName, ClientId, parseOrThrow, stepToWire, TrajectoryStatus } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import { offload } from '../services/offload.js';
import { OFFLOAD_BODY_BYTES, type ParsedSteps, parseStepsBody } from '../services/steps-body.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { ownedBytes } from './json-body.js';
import { LabelQuery, optionalNumber, Pagination } from './queries.js';

const StepListQuery = z.strictObject({
  channel: ChannelName.optional(),
  trajectory_uid: ClientId.optional(),
  prompt_uid: ClientId.optional(),
  reward_min: optionalNumber,
  reward_max: optionalNumber,
  status: TrajectoryStatus.optional(),
  ...LabelQuery,
  ...Pagination,
});

/** Reads and parses a step batch, off the event loop when it is big. */
export async function readStepsBody(c: Context): Promise<ParsedSteps> {
  const length = Number(c.req.header('content-length') ?? Number.NaN);
  if (!(length >= OFFLOAD_BODY_BYTES)) return parseStepsBody(await c.req.text());
  // The buffer the body was read into moves to the offload thread: no copy of it on the event loop.
  return offload.call('parseSteps', await ownedBytes(c));
}

/** `POST /v1/steps` and Claw-R1's `/submit_steps`: an episode's owner submits its steps. */
export function mountStepSubmission(app: ApiApp, pool: DataPool): void {
  const submit = async (c: Context, channelParam?: string) => {
    const batch = await readStepsBody(c);
    const channel =
      batch.channel ?? (channelParam ? parseOrThrow(ChannelName, channelParam, 'channel') : 'train');
    const result = await pool.submitSteps(batch.steps, { channel, nRollouts: batch.nRollouts });
    // `accepted`: what Claw-R1's client reads (every step is in: new, or an identical resubmission).
    return c.json({ ...result, accepted: result.inserted + result.duplicates, channel });
  };
  // Steps, completions and signals by trajectory id are the episode owner's (docs/security.md).
  const owner = requireScope('runner', 'trainer');
  app.post('/v1/steps', owner, (c) => submit(c));
  app.post('/submit_steps', owner, (c) => submit(c, c.req.query('channel')));
}

/** `GET /v1/steps`: stored steps by filter, a page at a time (trainer). */
export function mountStepList(app: ApiApp, pool: DataPool): void {
  app.get('/v1/steps', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(StepListQuery, c.req.query());
    const page = await pool.listSteps({
      channel: q.channel,
      trajectoryId: q.trajectory_uid,
      groupId: q.prompt_uid,
      rewardMin: q.reward_min,
      rewardMax: q.reward_max,
      status: q.status,
      trainable: q.trainable,
      quality: q.quality,
      tag: q.label,
      limit: q.limit,
      offset: q.offset,
    });
    return c.json({ total: page.total, items: page.items.map(stepToWire) });
  });
}

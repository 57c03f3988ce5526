import { describe, expect, it } from 'vitest';
import { answered, callContext } from '../../../../../test/support/call-context.js';
import type { PendingResults } from '../capture.js';
import { toolResults } from './tool-results.js';

const body = { messages: [{ role: 'user', content: 'x' }] };
const attachment = { trajectoryId: 'traj-1', index: 0, results: [] };

function recorder() {
  const dropped: number[] = [];
  return {
    dropped,
    toolResultsOf: (): PendingResults => ({ take: () => [attachment], drop: () => dropped.push(1) }),
  };
}

describe('toolResults', () => {
  it('hands the matched results to the step of this call', async () => {
    const r = recorder();
    const ctx = callContext({ body });
    await toolResults(r)(ctx, answered());
    expect(ctx.attachments()).toEqual([attachment]);
    expect(r.dropped).toEqual([]);
  });

  it('drops them when the call fails, for its retry to bring again', async () => {
    const r = recorder();
    await expect(
      toolResults(r)(callContext({ body }), async () => {
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    expect(r.dropped).toEqual([1]);
  });
});

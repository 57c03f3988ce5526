import { describe, expect, it } from 'vitest';
import { findTrainPython, runPython } from '../src/train/python.js';

/*
 * The trainer's LM-head log-probs write their backward out (in place in the logits, kept for one
 * chunk, recomputed for several) to spare the warm-up and every RL update the chunk-sized tensors
 * autograd's logsumexp and gather backwards allocate. The training runs must not move by a bit:
 * tests/check_head_logprobs.py compares outputs and gradients with autograd's own graph.
 */

const python = findTrainPython();

describe.skipIf(!python)("the trainer's LM-head log-probs", () => {
  it("equal autograd's outputs and gradients bit for bit: one chunk, several, a second backward", async () => {
    const out = await runPython(python!, ['tests/check_head_logprobs.py'], { timeoutMs: 120_000 });
    const report = JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, Record<string, unknown>>;
    expect(Object.keys(report)).toEqual([
      'one_chunk',
      'several_chunks',
      'second_backward',
      'second_backward_one_chunk',
    ]);
    for (const [name, c] of Object.entries(report))
      expect({ name, ...c }).toEqual({
        name,
        out: true,
        grad_hidden: true,
        grad_weight: true,
        max_abs_diff: 0,
      });
  }, 130_000);
});

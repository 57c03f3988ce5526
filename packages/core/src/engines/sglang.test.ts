import { describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/errors.js';
import { readSglangGenerate, SglangAnswerError, sglangGenerateBody } from './sglang.js';

// Shapes as SGLang's TokenizerManager._handle_batch_output builds a whole /generate answer
// (python/sglang/srt/managers/tokenizer_manager.py).
const answer = (meta: Record<string, unknown> = {}, ids = [5, 6]) => ({
  text: 'ab',
  output_ids: ids,
  meta_info: {
    finish_reason: { type: 'stop', matched: 6 },
    prompt_tokens: 3,
    completion_tokens: ids.length,
    output_token_logprobs: [
      [-0.5, 5, null],
      [-0.25, 6, 'b'],
    ],
    ...meta,
  },
});

describe('sglangGenerateBody', () => {
  it('renames OpenAI/vLLM sampling names to SGLang, drops what the gateway decides, sets the length', () => {
    const body = JSON.parse(
      sglangGenerateBody(
        [1, 2],
        { max_tokens: 9, min_tokens: 2, seed: 3, logprobs: true, top_logprobs: 2, stop_token_ids: [7], n: 1 },
        9,
      ),
    );
    expect(body).toEqual({
      input_ids: [1, 2],
      sampling_params: { max_new_tokens: 9, min_new_tokens: 2, sampling_seed: 3, stop_token_ids: [7], n: 1 },
      return_logprob: true,
      logprob_start_len: -1,
      stream: false,
    });
    expect(JSON.parse(sglangGenerateBody([1], {}, null)).sampling_params).toEqual({ max_new_tokens: null });
  });

  it('names a sampling parameter SGLang does not take', () => {
    expect(() => sglangGenerateBody([1], { use_beam_search: true }, 4)).toThrow(ValidationError);
    expect(() => sglangGenerateBody([1], { use_beam_search: true }, 4)).toThrow(
      /^sampling_params\.use_beam_search: not a sampling parameter of SGLang/,
    );
  });
});

describe('readSglangGenerate', () => {
  it('reads the ids, one logprob per id, the text and the finish type', () => {
    expect(readSglangGenerate(answer(), 3, 'e')).toEqual({
      responseIds: [5, 6],
      logprobs: [-0.5, -0.25],
      text: 'ab',
      finishReason: 'stop',
      promptTokens: 3,
    });
  });

  it('keeps the ids without logprobs when a logprob is null or none were sent', () => {
    const nulls = answer({
      output_token_logprobs: [
        [null, 5, null],
        [-0.25, 6, null],
      ],
    });
    expect(readSglangGenerate(nulls, 3, 'e')).toMatchObject({ responseIds: [5, 6], logprobs: null });
    expect(readSglangGenerate(answer({ output_token_logprobs: undefined }), 3, 'e').logprobs).toBeNull();
  });

  it('refuses counts that disagree with the ids', () => {
    expect(() => readSglangGenerate(answer({ completion_tokens: 3 }), 3, 'e')).toThrow(SglangAnswerError);
    expect(() => readSglangGenerate(answer({ completion_tokens: 3 }), 3, 'e')).toThrow(
      /sent 2 output_ids but counted 3 completion tokens/,
    );
    expect(() => readSglangGenerate(answer(), 4, 'e')).toThrow(/counted 3 prompt tokens for the 4 ids sent/);
  });
});

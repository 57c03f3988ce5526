import { describe, expect, it } from 'vitest';
import { renderChat } from './chat-template.js';
import { continuationIds, continuationText } from './continuation.js';
import { loadQwen3Tokenizer } from './tokenizer.js';

const tokenizer = loadQwen3Tokenizer();
const IM_END = tokenizer.tokenId('<|im_end|>')!;

const history = [
  { role: 'user' as const, content: 'Hi' },
  { role: 'assistant' as const, content: 'Hello.' },
  { role: 'user' as const, content: 'And now?' },
];

describe('continuationText', () => {
  it('is what the template writes after the last assistant turn, generation prompt included', () => {
    expect(continuationText({ messages: history }, tokenizer)).toBe(
      '\n<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n',
    );
    // The whole rendering ends with it.
    expect(renderChat({ messages: history, addGenerationPrompt: true }, tokenizer)).toMatch(
      /Hello\.<\|im_end\|>\n<\|im_start\|>user\nAnd now\?<\|im_end\|>\n<\|im_start\|>assistant\n$/,
    );
  });

  it('refuses a conversation with no assistant turn to continue', () => {
    expect(() => continuationText({ messages: [history[0]!] }, tokenizer)).toThrow(/ChatML turns/);
  });
});

describe('continuationIds', () => {
  const tail = tokenizer.encode('\n<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n', {
    addSpecialTokens: false,
  });

  it('extends the previous ids by the new turns', () => {
    const ids = continuationIds(
      { messages: history, promptIds: [1, 2], responseIds: [3, IM_END] },
      tokenizer,
    );
    expect(ids).toEqual([1, 2, 3, IM_END, ...tail]);
  });

  it('closes a response cut at the length limit with the end-of-turn token', () => {
    const ids = continuationIds({ messages: history, promptIds: [1, 2], responseIds: [3] }, tokenizer);
    expect(ids).toEqual([1, 2, 3, IM_END, ...tail]);
  });
});

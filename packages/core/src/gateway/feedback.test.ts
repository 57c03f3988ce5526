import { describe, expect, it } from 'vitest';
import {
  classifyFeedback,
  excerpt,
  latestUserTurn,
  OPENCLAW_INTERNAL_MARKER,
  userWords,
} from './feedback.js';

const internal = {
  role: 'user',
  content: `${OPENCLAW_INTERNAL_MARKER}\nworkspace: /home/me\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>`,
};

describe('classifyFeedback', () => {
  it.each([
    'thanks!',
    'Thank you so much',
    'thx',
    'perfect',
    'Perfect, that is exactly it',
    'great, that works',
    'that works now',
    'Looks good to me',
    'LGTM',
    'nice job',
    '👍',
    'awesome 🙏',
    'much appreciated',
  ])('%s is thanks', (text) => {
    expect(classifyFeedback(text)).toBe('thanks');
  });

  it.each([
    'no, that is not what I wanted',
    "No, that's wrong",
    'nope',
    "that's wrong",
    'This is incorrect.',
    'not what I asked',
    'undo',
    'please revert that',
    'undo the last change',
    'you broke the build',
    "you've deleted my notes",
    'still failing',
    'the tests still fail',
    "it doesn't work",
    'Actually, I meant the other file',
    'I meant tomorrow, not today',
    'wrong file',
    'stop',
    '👎',
    // Curly apostrophes are what phones type.
    'that\u2019s wrong',
  ])('%s is a correction', (text) => {
    expect(classifyFeedback(text)).toBe('correction');
  });

  it.each([
    'can you also add a test?',
    'what is wrong with my code?',
    'how do I undo a git commit?',
    'now summarize my inbox',
    'ok',
    'Notes for tomorrow: buy milk',
    'No thanks, I am good',
    '',
  ])('%s is neutral', (text) => {
    expect(classifyFeedback(text)).toBeNull();
  });

  it('removes benign negations before the correction rules (negation traps)', () => {
    expect(classifyFeedback('no problem, thanks')).toBe('thanks');
    expect(classifyFeedback('No worries, perfect')).toBe('thanks');
    expect(classifyFeedback('not bad, thanks!')).toBe('thanks');
    expect(classifyFeedback('nothing wrong with it, works great')).toBe('thanks');
    expect(classifyFeedback("thanks! I'll tell you if it doesn't work")).toBe('thanks');
  });

  it('lets a correction beat thanks in the same message', () => {
    expect(classifyFeedback("thanks but that's wrong")).toBe('correction');
    expect(classifyFeedback('Thank you, but it still fails')).toBe('correction');
    expect(classifyFeedback('thanks for nothing')).toBe('correction');
    expect(classifyFeedback('no problem, but you broke the build')).toBe('correction');
  });
});

describe('userWords', () => {
  it('drops OpenClaw’s time prefix and runtime suffix', () => {
    expect(userWords('[Thu 2026-12-03 05:31 UTC] thanks!\n\nRuntime: agent=main | model=x')).toBe('thanks!');
  });

  it('drops the internal context, inline or as the whole message', () => {
    expect(userWords(`thanks\n${OPENCLAW_INTERNAL_MARKER}\nstuff`)).toBe('thanks');
    expect(userWords(internal.content)).toBe('');
  });
});

describe('latestUserTurn', () => {
  it('is the newest user message after the last assistant message, internal context skipped', () => {
    const messages = [
      { role: 'system', content: 'you are helpful' },
      { role: 'user', content: '[Thu 2026-12-03 05:31 UTC] list my files' },
      { role: 'assistant', content: 'a.txt b.txt' },
      { role: 'user', content: [{ type: 'text', text: 'thanks!' }] },
      internal,
    ];
    expect(latestUserTurn(messages)).toBe('thanks!');
  });

  it('is null when only tool results and internal context follow the last assistant message', () => {
    const messages = [
      { role: 'user', content: 'thanks, now read a.txt' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function' }] },
      { role: 'tool', tool_call_id: 'c1', content: 'hello' },
      internal,
    ];
    expect(latestUserTurn(messages)).toBeNull();
  });

  it('is null for a message without text (an image only)', () => {
    const messages = [
      { role: 'assistant', content: 'done' },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] },
    ];
    expect(latestUserTurn(messages)).toBeNull();
  });
});

describe('excerpt', () => {
  it('keeps at most 200 code points without splitting an emoji', () => {
    expect(Array.from(excerpt('👍'.repeat(300))).length).toBe(200);
    expect(excerpt('short')).toBe('short');
  });
});

import { describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/index.js';
import { sessionKeyFromBody, sessionKeyOf, stripCounter } from './session-keys.js';

describe('session keys', () => {
  it('drops an all-digit counter after the last colon, and only that', () => {
    expect(stripCounter('6f553265-9491-470f-9fc9-d2b8a9629b6a:0')).toBe(
      '6f553265-9491-470f-9fc9-d2b8a9629b6a',
    );
    expect(stripCounter('abc:12')).toBe('abc');
    expect(stripCounter('a:b:7')).toBe('a:b');
    expect(stripCounter('abc:x1')).toBe('abc:x1');
    expect(stripCounter('abc:')).toBe('abc:');
    expect(stripCounter(':5')).toBe(':5');
    expect(stripCounter('plain')).toBe('plain');
  });

  it('derives the key from prompt_cache_key, then user, safety_identifier, metadata.session_id', () => {
    const all = {
      prompt_cache_key: 'pck:3',
      user: 'u',
      safety_identifier: 's',
      metadata: { session_id: 'm' },
    };
    expect(sessionKeyFromBody(all)).toBe('pck');
    expect(sessionKeyFromBody({ ...all, prompt_cache_key: undefined })).toBe('u');
    expect(sessionKeyFromBody({ ...all, prompt_cache_key: '', user: undefined })).toBe('s');
    expect(sessionKeyFromBody({ metadata: { session_id: 'm' } })).toBe('m');
    expect(sessionKeyFromBody({ user: 42, metadata: 'x' })).toBeNull();
    expect(sessionKeyFromBody({})).toBeNull();
  });

  it('reads the header: `auto` (any case) derives, anything else is the key', () => {
    expect(sessionKeyOf('auto', { prompt_cache_key: 'k:1' })).toBe('k');
    expect(sessionKeyOf(' AUTO ', { user: 'u' })).toBe('u');
    expect(sessionKeyOf('laptop-1', { prompt_cache_key: 'k:1' })).toBe('laptop-1');
  });

  it('names what is missing or wrong', () => {
    expect(() => sessionKeyOf('auto', {})).toThrow(ValidationError);
    expect(() => sessionKeyOf('auto', {})).toThrow(/prompt_cache_key/);
    expect(() => sessionKeyOf('', {})).toThrow(/X-Stepwise-Session/);
    expect(() => sessionKeyOf('x'.repeat(513), {})).toThrow(/X-Stepwise-Session/);
  });
});

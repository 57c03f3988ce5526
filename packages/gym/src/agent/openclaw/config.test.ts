import { describe, expect, it } from 'vitest';
import { openClawConfig, renderOpenClawConfig } from './config.js';

describe('openClawConfig', () => {
  it('declares one custom provider at the given base_url and makes it the primary model', () => {
    const c = openClawConfig({ baseUrl: 'http://127.0.0.1:8100/t/g/v1', apiKey: 'k', model: 'qwen3' });
    expect(c.models.mode).toBe('replace');
    expect(c.models.providers.stepwise).toMatchObject({
      baseUrl: 'http://127.0.0.1:8100/t/g/v1',
      apiKey: 'k',
      api: 'openai-completions',
    });
    expect(c.models.providers.stepwise!.models).toEqual([
      expect.objectContaining({ id: 'qwen3', reasoning: false }),
    ]);
    expect(c.agents.defaults.model.primary).toBe('stepwise/qwen3');
    expect(c.tools).toEqual({ profile: 'coding', toolSearch: false });
    expect(c.update).toEqual({ checkOnStart: false });
    // Nothing online-only unless asked for.
    expect(c.models.providers.stepwise!.headers).toBeUndefined();
    expect(c.models.providers.stepwise!.models[0]!.compat).toBeUndefined();
  });

  it('online: session keys on, static headers, and a narrowed tool list when given', () => {
    const c = openClawConfig({
      baseUrl: 'http://h:1/v1',
      apiKey: 'k',
      model: 'm',
      sessionKeys: true,
      headers: { 'X-Stepwise-Session': 'auto' },
      allowTools: ['read', 'exec'],
    });
    expect(c.models.providers.stepwise!.models[0]!.compat).toEqual({ supportsPromptCacheKey: true });
    expect(c.models.providers.stepwise!.headers).toEqual({ 'X-Stepwise-Session': 'auto' });
    expect(c.tools.allow).toEqual(['read', 'exec']);
  });

  it('renders JSON with a comment header that JSON5 readers skip', () => {
    const text = renderOpenClawConfig(
      { baseUrl: 'http://h:1/v1', apiKey: 'k', model: 'm' },
      'line one\nline two',
    );
    const lines = text.split('\n');
    expect(lines.slice(0, 2)).toEqual(['// line one', '// line two']);
    expect(JSON.parse(lines.slice(2).join('\n'))).toEqual(
      openClawConfig({ baseUrl: 'http://h:1/v1', apiKey: 'k', model: 'm' }),
    );
  });
});

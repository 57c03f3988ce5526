import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildHostileTree } from '../../../../test/support/hostile-trees.js';
import { treeBytes } from './disk-usage.js';
import { removeTree, walkTree } from './workspace-tree.js';

/*
 * The host's walks over a workspace the agent built (issue 38, finding 4), on a plain directory (the
 * fallback where no workspace tmpfs can be mounted): paths far past PATH_MAX, 1,800 levels, loops and
 * special files. Measuring counts what lies past PATH_MAX; removing removes it all; neither throws.
 */

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'stepwise-tree-'));
});
afterAll(() => {
  execFileSync('rm', ['-rf', root]);
});

function tree(kind: 'long' | 'deep' | 'special'): string {
  const dir = join(root, kind);
  mkdirSync(dir);
  buildHostileTree(dir, kind);
  return dir;
}

describe('walking a hostile workspace from the host', () => {
  for (const kind of ['long', 'deep'] as const) {
    it(`${kind}: measures the 64 KiB file at the bottom, and removes everything`, async () => {
      const dir = tree(kind);
      // Every level is a directory of at least one block, and the bottom file is 64 KiB.
      expect(await treeBytes(dir)).toBeGreaterThan(64 * 1024 + (kind === 'long' ? 17 : 1800) * 4096);
      let files = 0;
      const problems = await walkTree(dir, { entry: (_p, st) => void (st.isFile() && files++) });
      expect(problems).toEqual({ count: 0, first: null });
      expect(files).toBe(1);
      expect(await removeTree(dir)).toBeNull();
      expect(existsSync(dir)).toBe(false);
    });
  }

  it('special: never follows a loop or opens a FIFO, and removes them', async () => {
    const dir = tree('special');
    // A FIFO opened for reading would block forever; a followed loop would never end.
    expect(await treeBytes(dir)).toBeGreaterThan(0);
    expect(await removeTree(dir)).toBeNull();
    expect(existsSync(dir)).toBe(false);
  });

  it('removing what is not there is no error; a file is removed too', async () => {
    expect(await removeTree(join(root, 'absent'))).toBeNull();
    const file = join(root, 'plain.txt');
    writeFileSync(file, 'x');
    expect(await removeTree(file)).toBeNull();
    expect(existsSync(file)).toBe(false);
  });
});

import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { scaffoldPaths, scaffoldWorkspace } from './gate.js';

describe('scaffoldPaths', () => {
  it('finds the output and input paths a prompt names, in order, once each', () => {
    const prompt = [
      'Inputs (do not modify):',
      '- input/sales.csv — orders',
      'Write output/summary.json and output/report.md. Also update output/summary.json.',
      'Place the script at scripts/run.py, then run `python3 scripts/run.py`.',
      'Keep README.md short.',
    ].join('\n');
    expect(scaffoldPaths(prompt)).toEqual([
      'input/sales.csv',
      'output/summary.json',
      'output/report.md',
      'scripts/run.py',
      'README.md',
    ]);
  });

  it('leaves out templates, URLs, globs, directories, versions and abbreviations', () => {
    const prompt = [
      'Create output/people/{slug}.md and output/projects/<name>/README.md for each, plus *.log files.',
      'Fetch https://example.org/data/file.csv and save it under output/downloads/.',
      'Query site:parliament.gov.fj, e.g. the 1.50 fee, version v1.4.2, and U.S. numbers.',
      'Write output/final.csv.',
    ].join('\n');
    expect(scaffoldPaths(prompt)).toEqual(['output/final.csv']);
  });

  it('makes paths under the mount dir relative and drops other absolute paths', () => {
    const prompt = 'Write /root/.openclaw/workspace/out/a.txt but never /etc/passwd.txt; also ./out/b.json.';
    expect(scaffoldPaths(prompt)).toEqual(['out/a.txt', 'out/b.json']);
    expect(scaffoldPaths('Write /work/ws/x/y.md.', '/work/ws')).toEqual(['x/y.md']);
  });
});

describe('scaffoldWorkspace', () => {
  it('creates empty files only where nothing exists', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'scaffold-test-'));
    try {
      await mkdir(join(dir, 'input'));
      await writeFile(join(dir, 'input', 'data.csv'), 'a\n1\n');
      await writeFile(join(dir, 'blocker'), 'x');
      const created = await scaffoldWorkspace(dir, ['input/data.csv', 'output/x.json', 'blocker/y.txt']);
      expect(created).toEqual(['output/x.json']);
      expect(await readFile(join(dir, 'input', 'data.csv'), 'utf8')).toBe('a\n1\n');
      expect(await readFile(join(dir, 'output', 'x.json'), 'utf8')).toBe('');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/*
 * No function on the call path runs over MAX_LINES lines (issue 39), and none anywhere in the sources
 * over PROJECT_MAX_LINES (issue 41), the task families of the synthesis included (declared as data,
 * their pieces small functions): a long one is split into named steps. The whole-project rule reads
 * the sources' .ts, .tsx, .js and .mjs files (the dashboard's pages and browser scripts, the workers'
 * entry points) and the .ts files of bench/ and scripts/. Functions, methods, accessors, constructors
 * and arrows (tests aside) are measured from their first line to their last.
 */

const MAX_LINES = 80;
const ROOT = join(import.meta.dirname, '..');
const FOLDERS = ['gateway', 'engines', 'http', 'services'].map((f) => `packages/core/src/${f}`);

/** Functions allowed over the limit, `path:name`, each with why; empty since responseEvents was split. */
const ALLOWED = new Set<string>([]);

const PROJECT_MAX_LINES = 100;
/** The folders the whole-project rule reads, each with the files it measures there. */
const PROJECT_SOURCES: { dir: string; ext: RegExp }[] = [
  { dir: 'src', ext: /\.(ts|tsx|js|mjs)$/ },
  { dir: 'packages', ext: /\.(ts|tsx|js|mjs)$/ },
  { dir: 'bench', ext: /\.ts$/ },
  { dir: 'scripts', ext: /\.ts$/ },
];

/** The files under `dir` whose names match `ext`, tests and installed packages (node_modules) aside. */
function sourceFiles(dir: string, ext = /\.ts$/): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules') out.push(...sourceFiles(path, ext));
    } else if (ext.test(entry.name) && !/\.test\.[cm]?[jt]sx?$/.test(entry.name)) out.push(path);
  }
  return out;
}

const projectFiles = () => PROJECT_SOURCES.flatMap(({ dir, ext }) => sourceFiles(join(ROOT, dir), ext));

function nameOf(node: ts.Node, file: ts.SourceFile): string {
  const named = node as ts.Node & { name?: ts.Node };
  if (named.name) return named.name.getText(file);
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent))
    return parent.name.getText(file);
  return `<anonymous@${file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1}>`;
}

/** `path:name (n lines)` of each function over `max` lines in a file. */
function longFunctions(path: string, max = MAX_LINES): string[] {
  const file = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);
  const out: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
      const last = file.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = last - first + 1;
      if (lines > max) out.push(`${relative(ROOT, path)}:${nameOf(node, file)} (${lines} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return out;
}

describe('function length on the call path', () => {
  it(`has no function over ${MAX_LINES} lines in ${FOLDERS.join(', ')} outside the allow-list`, () => {
    const long = FOLDERS.flatMap((f) => sourceFiles(join(ROOT, f))).flatMap((path) => longFunctions(path));
    const over = long.filter((entry) => !ALLOWED.has(entry.replace(/ \(\d+ lines\)$/, '')));
    expect(over).toEqual([]);
  });

  it('allows only functions that are still long (an entry split since is removed)', () => {
    const long = new Set(
      FOLDERS.flatMap((f) => sourceFiles(join(ROOT, f)))
        .flatMap((path) => longFunctions(path))
        .map((entry) => entry.replace(/ \(\d+ lines\)$/, '')),
    );
    expect([...ALLOWED].filter((entry) => !long.has(entry))).toEqual([]);
  });
});

describe('function length in the whole project', () => {
  it(`has no function over ${PROJECT_MAX_LINES} lines, the task families' pieces included`, () => {
    const long = projectFiles().flatMap((path) => longFunctions(path, PROJECT_MAX_LINES));
    expect(long).toEqual([]);
  });

  it('reads every kind of file it names: pages, browser scripts, worker entries, benchmarks, scripts', () => {
    const files = new Set(projectFiles().map((path) => relative(ROOT, path)));
    for (const path of [
      'packages/core/src/dashboard/pages/events.tsx',
      'packages/core/src/dashboard/assets/events.js',
      'packages/core/src/pool/pool-worker-entry.mjs',
      'bench/serving.ts',
      'scripts/wire.ts',
    ])
      expect(files).toContain(path);
    expect([...files].filter((path) => /\.test\.|node_modules/.test(path))).toEqual([]);
  });
});

import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/*
 * The packages and layers of docs/architecture.md, checked on the source: every import of a file of
 * ours (relative, or a workspace package's name; type-only ones included: they couple files too) is an
 * edge between files, between their folders and between their packages. A file's logical path is its
 * path under its package's src/, the gym's under `gym/`, the synthesis's under `gym-synth/`, the CLI's
 * (the root package, the composition root) under src/ as it is.
 */

const ROOT = join(import.meta.dirname, '..');
const PACKAGES = {
  core: join(ROOT, 'packages/core/src'),
  gym: join(ROOT, 'packages/gym/src'),
  'gym-synth': join(ROOT, 'packages/gym-synth/src'),
  app: join(ROOT, 'src'),
} as const;
type Package = keyof typeof PACKAGES;
const NAMES: Record<string, Package> = {
  '@stepwise/core': 'core',
  '@stepwise/gym': 'gym',
  '@stepwise/gym-synth': 'gym-synth',
};

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return /\.(ts|tsx|mjs)$/.test(e.name) && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

const packageOf = (file: string): Package =>
  (Object.keys(PACKAGES) as Package[]).find((p) => p !== 'app' && file.startsWith(`${PACKAGES[p]}/`)) ??
  'app';

/** The path the layer rules speak of: the core's folders at the top, the gym's under gym/. */
const logical = (file: string): string => {
  const pkg = packageOf(file);
  const rel = relative(PACKAGES[pkg], file);
  return pkg === 'core' || pkg === 'app' ? rel : `${pkg}/${rel}`;
};

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'"]*?['"]((?:\.{1,2}\/|@stepwise\/)[^'"]+)['"]/g;

function existing(base: string): string | null {
  for (const candidate of [`${base}.ts`, `${base}.tsx`, `${base}.mjs`, join(base, 'index.ts'), base]) {
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {}
  }
  return null;
}

/** The file an import names: relative to the importer, or a package's entry (its index, or a module path). */
function resolveImport(from: string, spec: string): string | null {
  if (spec.startsWith('.')) return existing(normalize(join(dirname(from), spec)).replace(/\.js$/, ''));
  const [scope, name, ...rest] = spec.split('/');
  const pkg = NAMES[`${scope}/${name}`];
  if (!pkg) throw new Error(`${from}: unknown package ${spec}`);
  return existing(join(PACKAGES[pkg], rest.length ? rest.join('/').replace(/\.js$/, '') : 'index'));
}

const folderOf = (file: string) => {
  const parts = logical(file).split('/');
  return parts.length > 1 ? parts[0]! : '(root)';
};

/** Each import as written, by importing file. */
const specs = new Map<string, string[]>();
const fileEdges = new Map<string, Set<string>>();
const folderEdges = new Map<string, Set<string>>();
const packageEdges = new Map<Package, Set<Package>>();
for (const file of Object.values(PACKAGES).flatMap((dir) => sourceFiles(dir))) {
  const targets = new Set<string>();
  const written: string[] = [];
  for (const match of readFileSync(file, 'utf8').matchAll(IMPORT)) {
    written.push(match[1]!);
    const target = resolveImport(file, match[1]!);
    if (!target) continue;
    targets.add(target);
    if (folderOf(file) !== folderOf(target)) {
      const set = folderEdges.get(folderOf(file)) ?? new Set();
      folderEdges.set(folderOf(file), set.add(folderOf(target)));
    }
    if (packageOf(file) !== packageOf(target)) {
      const set = packageEdges.get(packageOf(file)) ?? new Set();
      packageEdges.set(packageOf(file), set.add(packageOf(target)));
    }
  }
  fileEdges.set(file, targets);
  specs.set(file, written);
}

/** Strongly connected components with more than one member (Tarjan). */
function cycles(graph: Map<string, Set<string>>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) out.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return out;
}

describe('packages', () => {
  it('depend downward only: the core on nothing of ours, the gym on the core, the synthesis on both', () => {
    const edges = Object.fromEntries([...packageEdges].map(([p, to]) => [p, [...to].sort()]));
    expect(edges).toEqual({ gym: ['core'], 'gym-synth': ['core', 'gym'], app: ['core', 'gym', 'gym-synth'] });
  });

  it('has the gym and the synthesis use only the public API of the packages below them', () => {
    const inward = [...specs]
      .filter(([file]) => packageOf(file) === 'gym' || packageOf(file) === 'gym-synth')
      .flatMap(([file, written]) =>
        written
          .filter((s) => s.startsWith('@stepwise/') && s.split('/').length > 2)
          .map((s) => `${logical(file)}: ${s}`),
      );
    expect(inward).toEqual([]);
  });

  it('has no relative import that leaves its package', () => {
    const leaving = [...specs].flatMap(([file, written]) =>
      written
        .filter((s) => s.startsWith('.'))
        .filter((s) => {
          const target = resolveImport(file, s);
          return target !== null && packageOf(target) !== packageOf(file);
        })
        .map((s) => `${logical(file)}: ${s}`),
    );
    expect(leaving).toEqual([]);
  });

  it('declares in each package.json the workspace packages it imports', () => {
    for (const [pkg, dir] of Object.entries(PACKAGES) as [Package, string][]) {
      const manifest = JSON.parse(readFileSync(join(dir, '..', 'package.json'), 'utf8')) as {
        dependencies?: Record<string, string>;
      };
      const declared = Object.keys(manifest.dependencies ?? {})
        .filter((d) => d in NAMES)
        .map((d) => NAMES[d]);
      expect(declared.sort(), pkg).toEqual([...(packageEdges.get(pkg) ?? [])].sort());
    }
  });
});

describe('import graph of the sources', () => {
  it('has no cycle between files', () => {
    expect(cycles(fileEdges).map((c) => c.map((f) => logical(f)))).toEqual([]);
  });

  it('has no cycle between folders', () => {
    expect(cycles(folderEdges)).toEqual([]);
  });

  it('keeps the lower layers free of the upper ones', () => {
    const below: Record<string, string[]> = {
      domain: [],
      util: ['domain'],
      text: ['domain'],
      engines: ['domain', 'text', 'util'],
      store: ['domain'],
      serving: ['domain', 'pool', 'store'],
      sdk: ['domain', 'serving', 'store'],
      services: ['curation', 'domain', 'engines', 'text', 'util'],
      http: ['domain', 'pool', 'serving', 'services', 'text', 'util'],
      curation: ['domain', 'engines', 'store', 'text', 'util'],
      pool: ['curation', 'domain', 'store'],
      rewards: ['curation', 'domain', 'http', 'pool', 'store', 'text'],
      dashboard: ['curation', 'domain', 'http', 'pool', 'services', 'serving', 'store', 'text'],
      export: ['curation', 'domain', 'http', 'pool', 'serving', 'store'],
      gateway: [
        'curation',
        'domain',
        'engines',
        'http',
        'pool',
        'rewards',
        'services',
        'store',
        'text',
        'util',
      ],
      server: [
        'dashboard',
        'domain',
        'engines',
        'export',
        'gateway',
        'http',
        'pool',
        'rewards',
        'store',
        'util',
      ],
    };
    for (const [folder, allowed] of Object.entries(below)) {
      const extra = [...(folderEdges.get(folder) ?? [])].filter((f) => !allowed.includes(f));
      expect(extra, `${folder} imports`).toEqual([]);
    }
    // What serving reads of the pool is its vocabulary (what a lease serves), not its rules.
    const servingToPool = [...fileEdges]
      .filter(([file]) => packageOf(file) === 'core' && logical(file).startsWith('serving/'))
      .flatMap(([, targets]) => [...targets].map((t) => logical(t)))
      .filter((t) => t.startsWith('pool/'));
    expect(new Set(servingToPool)).toEqual(new Set(['pool/types.ts']));
  });

  it('keeps the layers inside gym/: the install kit below the sandbox and the agents, each agent its own', () => {
    /** `from`'s files (a folder under src/) that import a file under `to`. */
    const edges = (from: string, to: string) =>
      [...fileEdges]
        .filter(([file]) => logical(file).startsWith(`${from}/`))
        .flatMap(([file, targets]) =>
          [...targets]
            .filter((t) => logical(t).startsWith(`${to}/`))
            .map((t) => `${logical(file)} -> ${logical(t)}`),
        );
    // The sandbox runs agents; it knows none of them (its root image's install uses the kit).
    expect(edges('gym/sandbox', 'gym/agent')).toEqual([]);
    // The install kit (tools folder, checked downloads, build-once) is below both.
    for (const above of ['gym/agent', 'gym/sandbox', 'gym/tools', 'gym/verify'])
      expect(edges('gym/install-kit', above)).toEqual([]);
    expect(
      [...fileEdges]
        .filter(([file]) => logical(file).startsWith('gym/install-kit/'))
        .flatMap(([, targets]) => [...targets].map((t) => logical(t)))
        .filter((t) => t.startsWith('gym/') && !t.startsWith('gym/install-kit/')),
    ).toEqual([]);
    // An installed agent is a driver (agent/installed.ts); none reaches into another's folder.
    const agents = ['codex', 'claude-code', 'openclaw'];
    for (const agent of agents)
      for (const other of agents.filter((a) => a !== agent))
        expect(edges(`gym/agent/${agent}`, `gym/agent/${other}`)).toEqual([]);
    // One workspace-path walk (sandbox/workspace-path.ts): the tools and the verifier share no code of their own.
    expect(edges('gym/tools', 'gym/verify')).toEqual([]);
    expect(edges('gym/verify', 'gym/tools')).toEqual([]);
  });
});

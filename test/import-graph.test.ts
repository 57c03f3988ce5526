import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/*
 * The layers of docs/architecture.md, checked on the source: every relative import (type-only ones
 * included: they couple files too) is an edge between files and between their folders under src/.
 */

const SRC = join(import.meta.dirname, '..', 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return /\.(ts|tsx|mjs)$/.test(e.name) && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'"]*?['"](\.{1,2}\/[^'"]+)['"]/g;

function resolveImport(from: string, spec: string): string | null {
  const base = normalize(join(dirname(from), spec)).replace(/\.js$/, '');
  for (const candidate of [`${base}.ts`, `${base}.tsx`, `${base}.mjs`, join(base, 'index.ts'), base]) {
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {}
  }
  return null;
}

const folderOf = (file: string) => {
  const parts = relative(SRC, file).split('/');
  return parts.length > 1 ? parts[0]! : '(root)';
};

const fileEdges = new Map<string, Set<string>>();
const folderEdges = new Map<string, Set<string>>();
for (const file of sourceFiles(SRC)) {
  const targets = new Set<string>();
  for (const match of readFileSync(file, 'utf8').matchAll(IMPORT)) {
    const target = resolveImport(file, match[1]!);
    if (!target) continue;
    targets.add(target);
    if (folderOf(file) !== folderOf(target)) {
      const set = folderEdges.get(folderOf(file)) ?? new Set();
      folderEdges.set(folderOf(file), set.add(folderOf(target)));
    }
  }
  fileEdges.set(file, targets);
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

describe('import graph of src/', () => {
  it('has no cycle between files', () => {
    expect(cycles(fileEdges).map((c) => c.map((f) => relative(SRC, f)))).toEqual([]);
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
      gym: ['curation', 'domain', 'engines', 'sdk', 'text', 'util'],
      services: ['curation', 'domain', 'engines', 'text', 'util'],
      http: ['domain', 'pool', 'serving', 'services', 'text', 'util'],
    };
    for (const [folder, allowed] of Object.entries(below)) {
      const extra = [...(folderEdges.get(folder) ?? [])].filter((f) => !allowed.includes(f));
      expect(extra, `${folder} imports`).toEqual([]);
    }
    // What serving reads of the pool is its vocabulary (what a lease serves), not its rules.
    const servingToPool = [...fileEdges]
      .filter(([file]) => relative(SRC, file).startsWith('serving/'))
      .flatMap(([, targets]) => [...targets].map((t) => relative(SRC, t)))
      .filter((t) => t.startsWith('pool/'));
    expect(new Set(servingToPool)).toEqual(new Set(['pool/types.ts']));
  });

  it('keeps the layers inside gym/: the install kit below the sandbox and the agents, each agent its own', () => {
    /** `from`'s files (a folder under src/) that import a file under `to`. */
    const edges = (from: string, to: string) =>
      [...fileEdges]
        .filter(([file]) => relative(SRC, file).startsWith(`${from}/`))
        .flatMap(([file, targets]) =>
          [...targets]
            .filter((t) => relative(SRC, t).startsWith(`${to}/`))
            .map((t) => `${relative(SRC, file)} -> ${relative(SRC, t)}`),
        );
    // The sandbox runs agents; it knows none of them (its root image's install uses the kit).
    expect(edges('gym/sandbox', 'gym/agent')).toEqual([]);
    // The install kit (tools folder, checked downloads, build-once) is below both.
    for (const above of ['gym/agent', 'gym/sandbox', 'gym/tools', 'gym/verify'])
      expect(edges('gym/install-kit', above)).toEqual([]);
    expect(
      [...fileEdges]
        .filter(([file]) => relative(SRC, file).startsWith('gym/install-kit/'))
        .flatMap(([, targets]) => [...targets].map((t) => relative(SRC, t)))
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

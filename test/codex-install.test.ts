/*
 * `stepwise tools install codex`: the pinned hash check on the platform tarball (local tarballs, and
 * npm against a local fake registry: no network), what findCodex accepts, and, where the real
 * install is there, that it is the pinned Codex.
 */
import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CODEX_INTEGRITY,
  CODEX_PACKAGE,
  CODEX_VERSION,
  findCodex,
  installCodex,
  unpackCodex,
} from '../packages/gym/src/agent/codex/install.js';
import { IntegrityError } from '../packages/gym/src/install-kit/index.js';
import { testCodex } from './support/codex.js';

const execFileP = promisify(execFile);
const sri = (data: Buffer) => `sha512-${createHash('sha512').update(data).digest('base64')}`;
const VENDOR = 'package/vendor/x86_64-unknown-linux-musl';

let scratch = '';
let folders = 0;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'stepwise-codex-install-'));
});
afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});
async function freshDir(label: string): Promise<string> {
  const dir = join(scratch, `${label}-${++folders}`);
  await mkdir(dir, { recursive: true });
  return dir;
}

/** A tarball shaped like @openai/codex's linux-x64 one: the binary (a script), rg, and a helper. */
async function fakeCodexTarball(dir: string): Promise<string> {
  const src = join(dir, 'src');
  for (const sub of ['bin', 'codex-path', 'codex-resources'])
    await mkdir(join(src, VENDOR, sub), { recursive: true });
  await writeFile(join(src, VENDOR, 'bin', 'codex'), `#!/bin/sh\necho codex-cli ${CODEX_VERSION}\n`);
  await writeFile(join(src, VENDOR, 'codex-path', 'rg'), '#!/bin/sh\necho rg\n');
  await writeFile(join(src, VENDOR, 'codex-resources', 'bwrap'), 'not taken\n');
  await writeFile(join(src, 'package', 'package.json'), '{"name":"@openai/codex"}');
  const tarball = join(dir, `codex-${CODEX_VERSION}-linux-x64.tgz`);
  await execFileP('tar', ['-czf', tarball, '-C', src, 'package']);
  return tarball;
}

describe('the Codex tarball integrity check', () => {
  it('accepts a tarball whose sha512 matches and takes only the codex binary and rg', async () => {
    const dir = await freshDir('unpack-ok');
    const tarball = await fakeCodexTarball(dir);
    const out = join(dir, 'install');
    const paths = await unpackCodex(tarball, out, sri(await readFile(tarball)));
    expect(paths).toEqual({ codex: join(out, 'bin', 'codex'), pathDir: join(out, 'path') });
    expect((await readdir(out)).sort()).toEqual(['bin', 'path']);
    expect(await readdir(join(out, 'path'))).toEqual(['rg']);
    expect(execFileSync(paths.codex, ['--version'], { encoding: 'utf8' }).trim()).toBe(
      `codex-cli ${CODEX_VERSION}`,
    );
  });

  it('holds any other tarball to the pinned hash, naming expected and actual, and writes nothing', async () => {
    const dir = await freshDir('unpack-bad');
    const tarball = await fakeCodexTarball(dir);
    const out = join(dir, 'install');
    const error = await unpackCodex(tarball, out).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(IntegrityError);
    expect((error as IntegrityError).expected).toBe(CODEX_INTEGRITY);
    expect((error as IntegrityError).actual).toBe(sri(await readFile(tarball)));
    expect(existsSync(out)).toBe(false);
  });
});

describe('installCodex against a local fake registry (no network)', () => {
  let registry: Server;
  let registryUrl = '';
  let tarballRequests = 0;
  let served = Buffer.alloc(0);
  const version = `${CODEX_VERSION}-linux-x64`;

  beforeAll(async () => {
    // The registry's packument carries the fake tarball's own hash, so npm accepts it and only our
    // pinned check can refuse it.
    served = await readFile(await fakeCodexTarball(await freshDir('registry')));
    registry = createServer((req, res) => {
      const url = decodeURIComponent(req.url ?? '');
      if (url === '/@openai/codex') {
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            name: '@openai/codex',
            'dist-tags': { latest: CODEX_VERSION },
            versions: {
              [version]: {
                name: '@openai/codex',
                version,
                dist: {
                  tarball: `${registryUrl}/@openai/codex/-/codex-${version}.tgz`,
                  integrity: sri(served),
                  shasum: createHash('sha1').update(served).digest('hex'),
                },
              },
            },
          }),
        );
      } else if (url === `/@openai/codex/-/codex-${version}.tgz`) {
        tarballRequests++;
        res.setHeader('content-type', 'application/octet-stream');
        res.end(served);
      } else {
        res.statusCode = 404;
        res.end('{}');
      }
    });
    await new Promise<void>((done) => registry.listen(0, '127.0.0.1', done));
    registryUrl = `http://127.0.0.1:${(registry.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((done) => registry?.close(done));
  });

  it('refuses a Codex tarball that is not the pinned one and installs nothing', async () => {
    const dir = await freshDir('tools');
    const vars = {
      npm_config_registry: `${registryUrl}/`,
      npm_config_cache: await freshDir('npm-cache'),
      npm_config_fetch_retries: '0',
    };
    const before = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
    Object.assign(process.env, vars);
    let error: unknown = null;
    try {
      await installCodex({ dir });
    } catch (e) {
      error = e;
    } finally {
      for (const [k, v] of Object.entries(before)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    expect(tarballRequests).toBe(1);
    expect(error).toBeInstanceOf(IntegrityError);
    expect((error as Error).message).toContain(CODEX_INTEGRITY);
    // No install, no staging folder, no lock left behind.
    expect(await readdir(dir)).toEqual([]);
    expect(findCodex(dir)).toBeNull();
  });
});

describe('findCodex', () => {
  const stamp = (over: Record<string, string> = {}) =>
    JSON.stringify({
      codex: CODEX_VERSION,
      package: CODEX_PACKAGE,
      integrity: CODEX_INTEGRITY,
      installedAt: '2026-12-05T00:00:00.000Z',
      ...over,
    });
  async function fakeInstall(stampText: string | null): Promise<string> {
    const tools = await freshDir('find');
    const dir = join(tools, `codex-${CODEX_VERSION}`);
    await mkdir(join(dir, 'bin'), { recursive: true });
    await mkdir(join(dir, 'path'), { recursive: true });
    await writeFile(join(dir, 'bin', 'codex'), '#!/bin/sh\n');
    await writeFile(join(dir, 'path', 'rg'), '#!/bin/sh\n');
    await chmod(join(dir, 'bin', 'codex'), 0o755);
    if (stampText !== null) await writeFile(join(dir, 'stamp.json'), stampText);
    return tools;
  }

  it('accepts a complete install whose stamp names the pinned package and hash', async () => {
    const tools = await fakeInstall(stamp());
    expect(findCodex(tools)).toEqual({
      dir: join(tools, `codex-${CODEX_VERSION}`),
      codex: join(tools, `codex-${CODEX_VERSION}`, 'bin', 'codex'),
      pathDir: join(tools, `codex-${CODEX_VERSION}`, 'path'),
      version: CODEX_VERSION,
    });
  });

  it('returns null without a stamp, for another version or hash, or with a binary missing', async () => {
    expect(findCodex(await fakeInstall(null))).toBeNull();
    expect(findCodex(await fakeInstall('{garbled'))).toBeNull();
    expect(findCodex(await fakeInstall(stamp({ codex: '0.168.0' })))).toBeNull();
    expect(findCodex(await fakeInstall(stamp({ integrity: 'sha512-AAAA' })))).toBeNull();
    const noRg = await fakeInstall(stamp());
    await rm(join(noRg, `codex-${CODEX_VERSION}`, 'path', 'rg'));
    expect(findCodex(noRg)).toBeNull();
  });
});

const real = testCodex();
describe.skipIf(real.install === null)('the real install', () => {
  it(`is codex-cli ${CODEX_VERSION}`, () => {
    const out = execFileSync(real.install!.codex, ['--version'], {
      encoding: 'utf8',
      env: { PATH: '/usr/bin:/bin' },
    });
    expect(out.trim()).toBe(`codex-cli ${CODEX_VERSION}`);
  });
});

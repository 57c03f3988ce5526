import { execFileSync, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkSandbox,
  runInSandbox,
  SandboxError,
  type SandboxOptions,
} from '../packages/gym/src/sandbox/index.js';

/*
 * Containment tests against the real bubblewrap: every one runs an escape or an abuse and asserts it
 * fails, and that the host is untouched.
 */

const MOUNT = '/root/.openclaw/workspace';
let root: string;
let workspace: string;
let outside: string;
let secretFile: string;
const SECRET = `host-secret-${randomUUID()}`;
const base = (): SandboxOptions => ({ workspace, mountDir: MOUNT });

/** Processes on the host whose command line contains `marker`. */
function leftovers(marker: string): string[] {
  try {
    return execFileSync('pgrep', ['-af', marker], { encoding: 'utf8' }).trim().split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

/** Whether the host can open a TCP connection to 127.0.0.1:port. */
function hostCanConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

beforeAll(() => {
  // Like the runner's workspaces: inside a private (0700) temporary directory.
  root = mkdtempSync(join(tmpdir(), 'stepwise-sbx-test-'));
  workspace = join(root, 'workspace');
  mkdirSync(workspace);
  outside = mkdtempSync(join(tmpdir(), 'stepwise-sbx-outside-'));
  secretFile = join(outside, 'secret.txt');
  writeFileSync(secretFile, SECRET);
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

describe('sandbox basics', () => {
  it('bubblewrap can create sandboxes here', () => {
    expect(checkSandbox()).toEqual({ ok: true });
  });

  it('runs bash and python3 in the workspace, which the host sees', async () => {
    writeFileSync(join(workspace, 'input.txt'), 'from the host\n');
    const r = await runInSandbox(
      { ...base(), env: { GREETING: 'hi' } },
      'pwd; cat input.txt; echo "$GREETING $((6 * 7))"; python3 -c "print(sum(range(10)))" > out.txt; echo "$HOME|$LC_ALL|$PATH"',
    );
    expect(r).toMatchObject({ exitCode: 0, signal: null, timedOut: false, limitHit: null });
    expect(r.stdout).toBe(
      `${MOUNT}\nfrom the host\nhi 42\n/root|C.UTF-8|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/stepwise/bin\n`,
    );
    expect(readFileSync(join(workspace, 'out.txt'), 'utf8')).toBe('45\n');
  });

  // ClawGym-Bench's checkers call `subprocess.run(['python', '-m', 'unittest', '-q'])` and
  // `['python', script]` (eval tasks 0112, 0119, 0194); its image links python -> python3.
  it('resolves bare `python` (to python3) though the host /usr may have none, and writes nothing to it', async () => {
    const hostPython = existsSync('/usr/bin/python');
    mkdirSync(join(workspace, 'tests'), { recursive: true });
    writeFileSync(join(workspace, 'tests', '__init__.py'), '');
    writeFileSync(
      join(workspace, 'tests', 'test_sum.py'),
      'import unittest\n\nclass T(unittest.TestCase):\n    def test_sum(self):\n        self.assertEqual(sum([1, 2]), 3)\n',
    );
    const r = await runInSandbox(
      base(),
      `python -c 'import sys; print(sys.version_info[0])'; python3 -c "import subprocess; print(subprocess.run(['python', '-m', 'unittest', '-q'], capture_output=True).returncode)"; /usr/bin/env python -c 'print("env ok")'`,
    );
    expect(r.stderr).not.toMatch(/not found|No such file/);
    expect(r.stdout).toBe('3\n0\nenv ok\n');
    expect(existsSync('/usr/bin/python')).toBe(hostPython);
    expect(existsSync('/run/stepwise/bin')).toBe(false);
    rmSync(join(workspace, 'tests'), { recursive: true, force: true });
  });

  it('does not pass the host environment in', async () => {
    process.env.STEPWISE_HOST_ONLY = SECRET;
    try {
      const r = await runInSandbox(base(), 'env');
      expect(r.stdout).not.toContain(SECRET);
    } finally {
      delete process.env.STEPWISE_HOST_ONLY;
    }
  });

  it('runs the command without privileges', async () => {
    const r = await runInSandbox(
      base(),
      'id -u; grep -E "^(CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)" /proc/self/status',
    );
    const [uid, ...caps] = r.stdout.trim().split('\n');
    if (process.getuid?.() === 0) expect(uid).not.toBe('0');
    expect(caps).toEqual([
      'CapPrm:\t0000000000000000',
      'CapEff:\t0000000000000000',
      'CapBnd:\t0000000000000000',
      'CapAmb:\t0000000000000000',
      'NoNewPrivs:\t1',
    ]);
  });

  it('works in a private (0700) workspace, as mkdtemp makes them', async () => {
    const privateWs = mkdtempSync(join(root, 'private-'));
    const r = await runInSandbox({ workspace: privateWs, mountDir: MOUNT }, 'pwd; echo ok > made.txt');
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(MOUNT);
    expect(readFileSync(join(privateWs, 'made.txt'), 'utf8')).toBe('ok\n');
  });

  it('passes stdin, honours cwd, and truncates long output', async () => {
    mkdirSync(join(workspace, 'sub'), { recursive: true });
    const r = await runInSandbox(base(), 'pwd; cat', { stdin: 'piped', cwd: 'sub' });
    expect(r.stdout).toBe(`${MOUNT}/sub\npiped`);
    const long = await runInSandbox(base(), 'head -c 100000 /dev/zero | tr "\\0" x', {
      maxOutputBytes: 1000,
    });
    expect(long.stdout).toHaveLength(1000);
    expect(long.stdoutTruncated).toBe(true);
  });

  it('runs sandboxes side by side, each on its own workspace', async () => {
    const dirs = Array.from({ length: 6 }, (_, i) => join(root, `parallel-${i}`));
    for (const dir of dirs) mkdirSync(dir);
    const results = await Promise.all(
      dirs.map((dir, i) =>
        runInSandbox({ workspace: dir, mountDir: MOUNT }, `echo ${i} > n.txt; sleep 0.2; cat n.txt`),
      ),
    );
    expect(results.map((r) => r.stdout)).toEqual(dirs.map((_, i) => `${i}\n`));
  });

  it('tells an infrastructure failure from a failing command', async () => {
    const failing = await runInSandbox(base(), 'echo oops >&2; exit 3');
    expect(failing).toMatchObject({ exitCode: 3, stderr: 'oops\n' });
    await expect(runInSandbox({ ...base(), workspace: join(root, 'missing') }, 'true')).rejects.toThrow(
      SandboxError,
    );
    await expect(runInSandbox({ ...base(), mountDir: '/usr/ws' }, 'true')).rejects.toThrow(TypeError);
  });
});

describe('containment', () => {
  it('has no network: neither the internet nor the host loopback services', async () => {
    const hostServer = net.createServer((socket) => {
      socket.on('error', () => undefined);
      socket.end('host service\n');
    });
    await new Promise<void>((resolve) => hostServer.listen(0, '127.0.0.1', resolve));
    const hostPort = (hostServer.address() as net.AddressInfo).port;
    try {
      expect(await hostCanConnect(hostPort)).toBe(true);
      const probe = (host: string, port: number) =>
        `python3 -c "import socket; socket.create_connection(('${host}', ${port}), timeout=3); print('CONNECTED')"`;
      for (const [host, port] of [
        ['1.1.1.1', 53],
        ['127.0.0.1', 5432],
        ['127.0.0.1', hostPort],
      ] as const) {
        const r = await runInSandbox(base(), probe(host, port));
        expect(r.exitCode, `${host}:${port}`).not.toBe(0);
        expect(r.stdout).not.toContain('CONNECTED');
        expect(r.stderr).toMatch(/Network is unreachable|Connection refused/);
      }
      const curl = await runInSandbox(base(), `curl -sS -m 3 http://127.0.0.1:${hostPort}/`);
      expect(curl.exitCode).not.toBe(0);
    } finally {
      hostServer.close();
    }
  });

  it('cannot write outside the workspace, and the host stays untouched', async () => {
    const name = `escape-${randomUUID()}`;
    const targets = ['/usr', '/etc', '/root', '/root/.openclaw', '/', outside, '/work', '/var/tmp'];
    for (const dir of targets) {
      const r = await runInSandbox(base(), `echo pwned > ${dir}/${name}`);
      expect(r.exitCode, dir).not.toBe(0);
    }
    // /tmp is writable but private: nothing reaches the host's /tmp.
    const tmp = await runInSandbox(base(), `echo pwned > /tmp/${name} && cat /tmp/${name}`);
    expect(tmp.stdout).toBe('pwned\n');
    for (const dir of [...targets, tmpdir()]) expect(existsSync(join(dir, name)), dir).toBe(false);
  });

  it('cannot read host files outside the workspace', async () => {
    const r = await runInSandbox(
      base(),
      `cat ${secretFile}; ls ${outside}; ls /work; cat /root/.bashrc; cat /etc/shadow; ls /home /var /opt; cat /proc/1/environ`,
    );
    expect(r.stdout).not.toContain(SECRET);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/No such file or directory|Permission denied/);
  });

  it('shows a read-only bind and nothing else of the host; the bind cannot be written', async () => {
    const tools = join(root, 'tools');
    mkdirSync(join(tools, 'bin'), { recursive: true });
    writeFileSync(join(tools, 'bin', 'hello'), '#!/bin/sh\necho hello from the tools folder\n', {
      mode: 0o755,
    });
    const r = await runInSandbox(
      { ...base(), readOnlyBinds: [{ source: tools, target: '/opt/tools' }] },
      `/opt/tools/bin/hello; touch /opt/tools/x 2>&1 || echo touch-failed; ls /opt; cat ${secretFile} 2>&1 || true`,
    );
    expect(r.stdout).toContain('hello from the tools folder');
    expect(r.stdout).toContain('touch-failed');
    expect(r.stdout.split('\n')).toContain('tools');
    expect(r.stdout).not.toContain(SECRET);
    expect(existsSync(join(tools, 'x'))).toBe(false);
    await expect(
      runInSandbox(
        { ...base(), readOnlyBinds: [{ source: join(root, 'missing'), target: '/opt/x' }] },
        'true',
      ),
    ).rejects.toThrow(SandboxError);
  });

  it('a symlink in the workspace pointing outside does not reach host data', async () => {
    symlinkSync(secretFile, join(workspace, 'secret-link'));
    symlinkSync(outside, join(workspace, 'outside-link'));
    symlinkSync('/etc/shadow', join(workspace, 'shadow-link'));
    const r = await runInSandbox(
      base(),
      'cat secret-link; ls outside-link/; cat outside-link/secret.txt; cat shadow-link; echo x > outside-link/new',
    );
    expect(r.stdout).not.toContain(SECRET);
    expect(r.stdout).toBe('');
    expect(existsSync(join(outside, 'new'))).toBe(false);
    expect(readFileSync(secretFile, 'utf8')).toBe(SECRET);
  });

  it('contains a fork bomb: the host keeps working and the run ends in bounded time', async () => {
    const marker = `stepwise-bomb-${randomUUID()}`;
    const running = runInSandbox(
      { ...base(), limits: { processes: 64, wallMs: 8_000 } },
      `bomb() { bomb | bomb & }; bomb; sleep 3 # ${marker}`,
    );
    await sleep(1_000);
    const host = spawnSync('/bin/sh', ['-c', 'echo alive'], { encoding: 'utf8', timeout: 5_000 });
    expect(host.stdout).toBe('alive\n');
    const r = await running;
    expect(r.limitHit === 'processes' || r.timedOut).toBe(true);
    expect(r.limitHit).toBe('processes');
    expect(r.durationMs).toBeLessThan(12_000);
    expect(leftovers(marker)).toEqual([]);
  });

  it('stops a memory hog', async () => {
    const r = await runInSandbox(
      { ...base(), limits: { memoryMb: 256 } },
      'python3 -c "chunks = []\nwhile True: chunks.append(bytearray(16 * 1024 * 1024))"',
    );
    expect(r.exitCode).not.toBe(0);
    expect(r.limitHit).toBe('memory');
  });

  it('stops a CPU spinner at the CPU limit', async () => {
    const r = await runInSandbox({ ...base(), limits: { cpuSeconds: 1 } }, 'python3 -c "while True: pass"');
    expect(r).toMatchObject({ exitCode: null, signal: 'SIGXCPU', limitHit: 'cpu', timedOut: false });
    expect(r.durationMs).toBeLessThan(10_000);
  });

  it('stops a big file write at the file-size limit', async () => {
    const limits = { fileSizeMb: 1 };
    const shell = await runInSandbox({ ...base(), limits }, 'head -c 10M /dev/zero > big.bin');
    expect(shell.limitHit).toBe('file_size');
    const python = await runInSandbox(
      { ...base(), limits },
      `python3 -c "open('big.py.bin', 'wb').write(b'0' * 10_000_000)"`,
    );
    expect(python.limitHit).toBe('file_size');
    for (const file of ['big.bin', 'big.py.bin']) {
      expect(statSync(join(workspace, file)).size).toBeLessThanOrEqual(1024 * 1024);
    }
  });

  it('cannot create a user namespace, as root too (unshare -U, unshare -Ur, clone, clone3)', async () => {
    // A new user namespace would give the command uid 0 and every capability inside it. clone and
    // clone3 get CLONE_NEWUSER | SIGCHLD; should one succeed, its child leaves at once.
    const probe = [
      'import ctypes, json, os, platform, subprocess, threading',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'NEWUSER, SIGCHLD = 0x10000000, 17',
      'clone_nr = {"x86_64": 56, "aarch64": 220}[platform.machine()]',
      'def forked(rc):',
      '    if rc == 0: os._exit(0)',
      '    if rc > 0: os.waitpid(rc, 0)',
      '    return ctypes.get_errno() if rc < 0 else "created"',
      'args = (ctypes.c_uint64 * 11)(NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0)',
      'got = {',
      '    "clone": forked(libc.syscall(clone_nr, NEWUSER | SIGCHLD, 0, 0, 0, 0)),',
      '    "clone3": forked(libc.syscall(435, ctypes.byref(args), 88)),',
      '    "unshare": ctypes.get_errno() if libc.unshare(NEWUSER) < 0 else "created",',
      '}',
      't = threading.Thread(target=lambda: got.update(thread="ran")); t.start(); t.join()',
      'got["subprocess"] = subprocess.run(["true"]).returncode',
      'print(json.dumps(got, sort_keys=True))',
    ].join('\n');
    const r = await runInSandbox(
      base(),
      `unshare -Ur id -u && echo "unshare -Ur worked"; unshare -U true && echo "unshare -U worked"; python3 -c '${probe}'`,
    );
    expect(r.stdout).not.toContain('worked');
    expect(r.stderr).toMatch(
      /unshare failed: Operation not permitted[\s\S]*unshare failed: Operation not permitted/,
    );
    // EPERM for unshare and clone; ENOSYS for clone3, so that glibc's threads and spawns fall back to
    // clone (they still work).
    expect(JSON.parse(r.stdout)).toEqual({ clone: 1, clone3: 38, subprocess: 0, thread: 'ran', unshare: 1 });
  });

  it('cannot use io_uring or the kernel keyring (io_uring_setup, keyctl, add_key, request_key)', async () => {
    // io_uring is a large kernel surface whose operations seccomp never sees; the keyring is shared
    // with every process of the uid. ENOSYS for io_uring (programs fall back to plain syscalls), EPERM
    // for the keyring, as Docker's default profile.
    const probe = [
      'import ctypes, json, platform',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'keyctl, add_key, request_key = {"x86_64": (250, 248, 249), "aarch64": (219, 217, 218)}[platform.machine()]',
      'params = ctypes.create_string_buffer(120)',
      'def call(nr, *args):',
      '    rc = libc.syscall(nr, *args)',
      '    return ctypes.get_errno() if rc < 0 else "allowed"',
      'got = {',
      '    "io_uring_setup": call(425, 4, params),',
      '    "io_uring_enter": call(426, -1, 0, 0, 0, None, 0),',
      '    "io_uring_register": call(427, -1, 0, None, 0),',
      '    "keyctl": call(keyctl, 0, -3, 1),',
      '    "add_key": call(add_key, b"user", b"stepwise", b"x", 1, -3),',
      '    "request_key": call(request_key, b"user", b"stepwise", None, -3),',
      '}',
      'print(json.dumps(got, sort_keys=True))',
    ].join('\n');
    const r = await runInSandbox(base(), `python3 -c '${probe}'`);
    expect(JSON.parse(r.stdout)).toEqual({
      add_key: 1,
      io_uring_enter: 38,
      io_uring_register: 38,
      io_uring_setup: 38,
      keyctl: 1,
      request_key: 1,
    });
  });

  it('stops a run that writes past the disk quota, and says the quota was hit', async () => {
    const MIB = 1024 * 1024;
    const quotaMb = 16;
    const dir = join(root, 'quota');
    mkdirSync(dir);
    // 1 MiB files, each far below the per-file limit, about 60 MiB/s: 200 MiB if nothing stopped it.
    const r = await runInSandbox(
      { workspace: dir, mountDir: MOUNT, limits: { diskMb: quotaMb } },
      'for i in $(seq 200); do head -c 1M /dev/zero > fill-$i.bin; sleep 0.01; done; echo finished',
    );
    expect(r).toMatchObject({ limitHit: 'disk', exitCode: null, signal: 'SIGKILL', timedOut: false });
    expect(r.stdout).not.toContain('finished');
    expect(r.stderr).toMatch(/disk quota exceeded: .* over the 16 MiB quota/);
    // The quota plus about one 100 ms check's worth of writes, with room for a busy machine.
    const held = readdirSync(dir).reduce((sum, name) => sum + statSync(join(dir, name)).size, 0);
    expect(held).toBeGreaterThanOrEqual((quotaMb - 1) * MIB);
    expect(held).toBeLessThanOrEqual((quotaMb + 24) * MIB);

    // /tmp counts, and so do deleted files still held open (O_TMPFILE: nameless from the start, so a
    // kill can never land between a create and its unlink and leave a name behind).
    const tmp = await runInSandbox(
      { workspace: dir, mountDir: MOUNT, limits: { diskMb: 64 } },
      'rm -f fill-*.bin; for i in $(seq 200); do head -c 1M /dev/zero > /tmp/f$i; sleep 0.01; done',
    );
    expect(tmp.limitHit).toBe('disk');
    const held2 = await runInSandbox(
      { workspace: dir, mountDir: MOUNT, limits: { diskMb: 16 } },
      `python3 -c "
import os, time
files = []
for i in range(200):
    fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o600); os.write(fd, b'x' * 1048576); files.append(fd); time.sleep(0.01)"`,
    );
    expect(held2.limitHit).toBe('disk');
    expect(readdirSync(dir)).toEqual([]);
  });

  it('lets a workspace that starts past the quota be used and cleaned, not grown', async () => {
    const dir = join(root, 'over-quota');
    mkdirSync(dir);
    writeFileSync(join(dir, 'big.bin'), Buffer.alloc(20 * 1024 * 1024, 1));
    const options = { workspace: dir, mountDir: MOUNT, limits: { diskMb: 16 } };
    const read = await runInSandbox(options, 'ls; sleep 0.5');
    expect(read).toMatchObject({ exitCode: 0, limitHit: null, stdout: 'big.bin\n' });
    const grow = await runInSandbox(options, 'head -c 2M /dev/zero > more.bin; sleep 5');
    expect(grow.limitHit).toBe('disk');
    expect(grow.durationMs).toBeLessThan(4_000);
    const clean = await runInSandbox(
      options,
      'rm big.bin more.bin; head -c 8M /dev/zero > ok.bin; sleep 0.5',
    );
    expect(clean).toMatchObject({ exitCode: 0, limitHit: null });
  });

  it('at the timeout, first asks every process to stop with SIGTERM', async () => {
    const r = await runInSandbox(
      base(),
      `(trap 'echo child got TERM; exit 0' TERM; sleep 30 & wait) & trap 'echo got TERM; exit 7' TERM; sleep 30 & wait`,
      { timeoutMs: 500 },
    );
    expect(r).toMatchObject({ timedOut: true, exitCode: 7, signal: null });
    expect(r.stdout).toContain('got TERM');
    expect(r.durationMs).toBeLessThan(2_000);
  });

  it('kills a process that ignores SIGTERM at the timeout, and leaves nothing behind', async () => {
    const marker = `stepwise-stubborn-${randomUUID()}`;
    // A daemon in its own session, a child that ignores SIGTERM (named by exec -a so pgrep can find
    // it), and a shell that traps SIGTERM.
    const r = await runInSandbox(
      base(),
      [
        `(setsid bash -c 'exec -a ${marker}-daemon sleep 300' &)`,
        `(trap '' TERM; exec -a ${marker}-deaf sleep 301) &`,
        `trap '' TERM; echo ready; while true; do sleep 0.1; done # ${marker}`,
      ].join('\n'),
      { timeoutMs: 1_000 },
    );
    expect(r).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGKILL', stdout: 'ready\n' });
    expect(r.durationMs).toBeLessThan(8_000);
    expect(leftovers(marker)).toEqual([]);
  });

  it('ends background processes when the command exits', async () => {
    const marker = `stepwise-daemon-${randomUUID()}`;
    const r = await runInSandbox(
      base(),
      `nohup sh -c 'sleep 300 # ${marker}' > /dev/null 2>&1 & echo started`,
    );
    expect(r).toMatchObject({ exitCode: 0, stdout: 'started\n', timedOut: false });
    expect(r.durationMs).toBeLessThan(5_000);
    expect(leftovers(marker)).toEqual([]);
  });
});

describe('gateway bridge', () => {
  let server: http.Server;
  let port: number;
  beforeAll(async () => {
    server = http.createServer((req, res) => res.end(`gateway saw ${req.method} ${req.url}`));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as net.AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('reaches the host endpoint through 127.0.0.1:<port> inside, and nothing else', async () => {
    const r = await runInSandbox(
      { ...base(), gateway: { url: `http://127.0.0.1:${port}/v1`, port: 8100 } },
      [
        'curl -sS http://127.0.0.1:8100/v1/models; echo',
        `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8100/py').read().decode())"`,
        `curl -sS -m 3 http://127.0.0.1:${port}/direct || echo "direct refused"`,
        `python3 -c "import socket; socket.create_connection(('127.0.0.1', 5432), timeout=3)" 2>/dev/null || echo "postgres refused"`,
        `python3 -c "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)" 2>/dev/null || echo "internet unreachable"`,
      ].join('; '),
    );
    expect(r.stdout).toBe(
      'gateway saw GET /v1/models\ngateway saw GET /py\ndirect refused\npostgres refused\ninternet unreachable\n',
    );
  });

  it('uses the gateway URL port inside by default', async () => {
    const r = await runInSandbox(
      { ...base(), gateway: { url: `http://localhost:${port}` } },
      `curl -sS http://127.0.0.1:${port}/same-port`,
    );
    expect(r.stdout).toBe('gateway saw GET /same-port');
  });
});

describe('unsafeNoSandbox', () => {
  it('runs on the host, in the workspace, with the same timeout and a one-time warning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error & { code?: string }) => warnings.push(warning.code ?? '');
    process.on('warning', onWarning);
    try {
      writeFileSync(join(workspace, 'unsafe.txt'), 'on the host\n');
      const options = { ...base(), unsafeNoSandbox: true };
      const r = await runInSandbox(options, 'pwd; cat unsafe.txt');
      // pwd prints the physical path: the same when TMPDIR lies under a symlink.
      expect(r.stdout).toBe(`${realpathSync(workspace)}\non the host\n`);
      const slow = await runInSandbox(options, 'sleep 30', { timeoutMs: 300 });
      expect(slow).toMatchObject({ timedOut: true, signal: 'SIGTERM' });
      await sleep(10);
      expect(warnings.filter((code) => code === 'STEPWISE_UNSAFE_NO_SANDBOX')).toHaveLength(1);
    } finally {
      process.off('warning', onWarning);
    }
  });
});

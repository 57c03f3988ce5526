import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';

/*
 * Trees an untrusted agent builds to break whatever walks its workspace on the host (issue 38,
 * finding 4), as one Python program run inside the sandbox or on the host: built with directory
 * descriptors, so their paths may be far past PATH_MAX.
 */

export const HOSTILE_TREE_PY = `
import os, socket, sys
root, kind = sys.argv[1], sys.argv[2]
def chain(names, at=None):
    fd = os.open(root if at is None else at, os.O_RDONLY | os.O_DIRECTORY)
    for n in names:
        os.mkdir(n, dir_fd=fd)
        nfd = os.open(n, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    return fd
if kind == 'long':
    # 17 nested 250-character directories; output/ leads 15 deep, and its info.json 2 deeper.
    names = ['d%02d' % i + 'x' * 247 for i in range(17)]
    fd = chain(names)
    f = os.open('info.json', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
    os.write(f, b'{"name": "stepwise"}' + b' ' * 65536)
    os.close(f)
    os.close(fd)
    os.symlink('/'.join(names[:15]), os.path.join(root, 'output'))
    fd = chain([], at=None)
    for n in names[:15]:
        nfd = os.open(n, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.symlink(names[15] + '/' + names[16] + '/info.json', 'info.json', dir_fd=fd)
elif kind == 'deep':
    # Deeper than a recursive walker's stack, with a file at the bottom.
    fd = chain(['a'] * 1800)
    f = os.open('info.json', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
    os.write(f, b'x' * 65536)
    os.close(f)
    os.symlink('a/a/a', os.path.join(root, 'output'))
elif kind == 'special':
    # Symlink loops, a FIFO where the verifier reads, a socket, an unreadable folder.
    os.symlink('loop-b', os.path.join(root, 'loop-a'))
    os.symlink('loop-a', os.path.join(root, 'loop-b'))
    os.mkdir(os.path.join(root, 'output'))
    os.mkfifo(os.path.join(root, 'output', 'info.json'))
    os.symlink('.', os.path.join(root, 'output', 'self'))
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(root, 'output', 'sock'))
    os.mkdir(os.path.join(root, 'locked'))
    open(os.path.join(root, 'locked', 'f'), 'w').write('x')
    os.chmod(os.path.join(root, 'locked'), 0)
print('built', kind)
`;

/** Builds a hostile tree of `kind` under `root` on the host. */
export function buildHostileTree(root: string, kind: 'long' | 'deep' | 'special'): void {
  execFileSync('python3', ['-c', HOSTILE_TREE_PY, root, kind]);
}

/** Unmounts whatever is mounted at or below `dir` (kept workspace volumes), deepest first. */
export function unmountUnder(dir: string): void {
  const root = resolve(dir);
  const points = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4] ?? '')
    .filter((p) => p === root || p.startsWith(`${root}/`))
    .sort((a, b) => b.length - a.length);
  for (const point of points) execFileSync('umount', ['--lazy', point]);
}

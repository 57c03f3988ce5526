import { execFileSync } from 'node:child_process';
import { linkSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkSandbox, runInSandbox } from '../packages/gym/src/sandbox/index.js';
import { GymTask, loadTasks, workspaceFor } from '../packages/gym/src/tasks/index.js';
import { listOutputFiles, verify } from '../packages/gym/src/verify/index.js';
import { CLAWGYM_SAMPLE } from './support/clawgym-sample.js';

/*
 * Workspace poisoning (issue 38, finding 1): whatever the agent leaves in its workspace, a verifier
 * scores it as it would score an honest workspace, or 0, and never fails as infrastructure. Every
 * case runs the real verifier in the real bubblewrap sandbox. The honest answer for the tasks here is
 * a file `answer.txt` holding `right`; every poisoned workspace below holds no such answer, so each
 * must score exactly what the untouched workspace scores.
 */

const sandboxReady = checkSandbox().ok;
const tmp = mkdtempSync(join(tmpdir(), 'stepwise-poison-'));
// rm -rf: Node's recursive rm recurses per level and overflows its stack on the deep tree below.
afterAll(() => execFileSync('rm', ['-rf', tmp]));
let n = 0;
const fresh = (name: string) => {
  const dir = join(tmp, `${name}-${n++}`);
  mkdirSync(dir, { recursive: true });
  return dir;
};

/** ClawGym's reward.sh, verbatim in shape: check.py's JSON piped into `python3 -c 'import json ...'`. */
const rewardSh = (mount: string) =>
  `#!/usr/bin/env bash\nset -euo pipefail\n\npython3 ${mount}/reward/check.py ${mount} | python3 -c 'import json, sys; raw = sys.stdin.read().strip(); data = json.loads(raw); print(sum(float(v) for v in data.values()) / len(data) if isinstance(data, dict) and data else float(data) if isinstance(data, (int, float)) else 0.0)'\n`;

const CHECK_PY = [
  'import json, os, sys',
  'ws = sys.argv[1]',
  'p = os.path.join(ws, "answer.txt")',
  'ok = False',
  'try:',
  '    with open(p, encoding="utf-8") as f:',
  '        ok = f.read().strip() == "right"',
  'except OSError:',
  '    pass',
  'print(json.dumps({"answer": 1.0 if ok else 0.0}))',
  '',
].join('\n');

function clawStyleTask(mountDir: string, timeoutMs = 20_000): GymTask {
  return GymTask.parse({
    id: 'poison_task',
    prompt: 'write the answer',
    mountDir,
    verifier: {
      kind: 'script',
      files: [
        { path: 'reward/reward.sh', content: rewardSh(mountDir), mode: 0o755 },
        { path: 'reward/check.py', content: CHECK_PY },
      ],
      timeoutMs,
    },
  });
}

const CLAW = '/root/.openclaw/workspace';
/** A workspace that is its sandbox's HOME, so ~/.local (Python's user site) lies inside it. */
const HOME_MOUNT = '/home/agent';

describe.skipIf(!sandboxReady)('workspace poisoning: a verifier is not steered by the workspace', () => {
  let sample: GymTask;
  beforeAll(async () => {
    const tasks = await loadTasks(join(CLAWGYM_SAMPLE, 'task_0000'));
    sample = tasks[0]!;
  });

  it('a json.py in the workspace does not replace the standard library of the real ClawGym reward.sh', async () => {
    const ws = await workspaceFor(sample, fresh('json'));
    const honest = await verify(sample, ws);
    expect(honest).toMatchObject({ score: 0, verifierFailed: false });
    writeFileSync(join(ws, 'json.py'), 'def loads(s, *a, **k):\n    return 1.0\n');
    const poisoned = await verify(sample, ws);
    expect(poisoned).toMatchObject({ score: 0, verifierFailed: false });
    // The honest answer still scores through the same verifier.
    const task = clawStyleTask(CLAW);
    const ok = fresh('json-honest');
    writeFileSync(join(ok, 'answer.txt'), 'right\n');
    writeFileSync(join(ok, 'json.py'), 'def loads(s, *a, **k):\n    return 0.0\n');
    expect(await verify(task, ok)).toMatchObject({ score: 1, verifierFailed: false });
  }, 60_000);

  it('sitecustomize.py, usercustomize.py, a .pth and shell start-up files in a workspace that is HOME change nothing', async () => {
    const task = clawStyleTask(HOME_MOUNT);
    const ws = fresh('site');
    const patch = 'import json\njson.loads = lambda *a, **k: 1.0\n';
    writeFileSync(join(ws, 'sitecustomize.py'), patch);
    writeFileSync(join(ws, 'usercustomize.py'), patch);
    writeFileSync(join(ws, 'patch.pth'), 'import json; json.loads = lambda *a, **k: 1.0\n');
    for (const minor of [8, 9, 10, 11, 12, 13, 14]) {
      const site = join(ws, '.local', 'lib', `python3.${minor}`, 'site-packages');
      mkdirSync(site, { recursive: true });
      writeFileSync(join(site, 'usercustomize.py'), patch);
      writeFileSync(join(site, 'sitecustomize.py'), patch);
      writeFileSync(join(site, 'patch.pth'), 'import json; json.loads = lambda *a, **k: 1.0\n');
    }
    for (const rc of ['.bashrc', '.bash_profile', '.profile', '.bash_login'])
      writeFileSync(join(ws, rc), 'python3() { echo 1.0; }\necho 1.0\nexit 0\n');
    expect(await verify(task, ws)).toMatchObject({ score: 0, verifierFailed: false, reason: null });
    writeFileSync(join(ws, 'answer.txt'), 'right');
    expect(await verify(task, ws)).toMatchObject({ score: 1, verifierFailed: false });
  }, 60_000);

  it("checks that run the agent's code still import it, after the standard library: its unittest.py and json.py replace nothing", async () => {
    const task = GymTask.parse({
      id: 'run_agent_code',
      prompt: 'write solution.py with double(x) and its tests',
      mountDir: CLAW,
      verifier: {
        kind: 'checks',
        checks: [
          { kind: 'command', name: 'tests_pass', command: 'python3 -m unittest discover -s tests' },
          {
            kind: 'command',
            name: 'hidden',
            command: `python3 -c 'from solution import double; assert double(4) == 8'`,
          },
          { kind: 'command', name: 'script', command: 'python3 tools/run.py' },
        ],
      },
    });
    const honest = fresh('agent-code');
    mkdirSync(join(honest, 'tests'));
    mkdirSync(join(honest, 'tools'));
    writeFileSync(join(honest, 'solution.py'), 'def double(x):\n    return 2 * x\n');
    writeFileSync(
      join(honest, 'tests', 'test_solution.py'),
      'import unittest\nfrom solution import double\n\nclass T(unittest.TestCase):\n    def test_double(self):\n        self.assertEqual(double(3), 6)\n',
    );
    // A script imports a sibling from its own folder, as plain Python lets it.
    writeFileSync(join(honest, 'tools', 'helper.py'), 'VALUE = 8\n');
    writeFileSync(join(honest, 'tools', 'run.py'), 'from helper import VALUE\nassert VALUE == 8\n');
    expect(await verify(task, honest)).toMatchObject({ score: 1, verifierFailed: false });

    // A wrong solution, with a unittest.py that reports success and a json.py: the checks still fail.
    const poisoned = fresh('agent-code-poisoned');
    mkdirSync(join(poisoned, 'tests'));
    mkdirSync(join(poisoned, 'tools'));
    writeFileSync(join(poisoned, 'solution.py'), 'def double(x):\n    return x\n');
    writeFileSync(
      join(poisoned, 'tests', 'test_solution.py'),
      readFileSync(join(honest, 'tests', 'test_solution.py')),
    );
    writeFileSync(join(poisoned, 'unittest.py'), 'import sys\nsys.exit(0)\n');
    writeFileSync(join(poisoned, 'tools', 'run.py'), 'import json\nassert json.loads("8") == 8\n');
    writeFileSync(join(poisoned, 'tools', 'json.py'), 'def loads(s):\n    return 7\n');
    expect(await verify(task, poisoned)).toMatchObject({ score: 1 / 3, verifierFailed: false });
  }, 60_000);

  it("the workspace's node_modules is not searched by a verifier's node (require and import); its own reward/node_modules is", async () => {
    const reward = [
      '#!/usr/bin/env bash',
      'set -euo pipefail',
      `cd ${CLAW}`,
      `a=$(node -e 'let s = 0; try { s = require("scorer").score(); } catch {} console.log(s)')`,
      `b=$(node --input-type=module -e 'let s = 0; try { s = (await import("scorer")).score(); } catch {} console.log(s)')`,
      `c=$(node ${CLAW}/reward/own.cjs)`,
      `d=$(node ${CLAW}/reward/own.mjs)`,
      'echo $(( a + b + c + d ))',
      '',
    ].join('\n');
    const task = GymTask.parse({
      id: 'node_task',
      prompt: 'p',
      verifier: {
        kind: 'script',
        files: [
          { path: 'reward/reward.sh', content: reward, mode: 0o755 },
          { path: 'reward/own.cjs', content: 'console.log(require("helper"))\n' },
          { path: 'reward/own.mjs', content: 'import h from "helper";\nconsole.log(h)\n' },
          { path: 'reward/node_modules/helper/index.js', content: 'module.exports = 0;\n' },
        ],
        timeoutMs: 20_000,
      },
    });
    const ws = fresh('node');
    const pkg = join(ws, 'node_modules', 'scorer');
    mkdirSync(pkg, { recursive: true });
    writeFileSync(join(pkg, 'index.js'), 'module.exports = { score: () => 1 };\n');
    writeFileSync(join(pkg, 'index.mjs'), 'export const score = () => 1;\n');
    writeFileSync(
      join(pkg, 'package.json'),
      '{"name":"scorer","exports":{"import":"./index.mjs","require":"./index.js"}}',
    );
    // A helper of the agent's own must not replace the verifier's either.
    mkdirSync(join(ws, 'node_modules', 'helper'), { recursive: true });
    writeFileSync(join(ws, 'node_modules', 'helper', 'index.js'), 'module.exports = 5;\n');
    // The import hook needs room for Node's loader thread (node-guard.ts); require() is guarded always.
    const result = await verify(task, ws, { sandbox: { limits: { memoryMb: 4096 } } });
    expect(result, result.reason ?? '').toMatchObject({ score: 0, verifierFailed: false });
    const tight = GymTask.parse({
      ...task,
      verifier: {
        ...task.verifier,
        files:
          task.verifier.kind === 'script'
            ? task.verifier.files.map((f) =>
                f.path === 'reward/reward.sh'
                  ? { ...f, content: f.content.replace(/^b=.*$/m, 'b=0').replace(/^d=.*$/m, 'd=0') }
                  : f,
              )
            : [],
      },
    });
    expect(await verify(tight, ws)).toMatchObject({ score: 0, verifierFailed: false });
  }, 60_000);

  it('executables named like tools in the workspace, a PATH or BASH_ENV pointing into it: the verifier runs the system python3', async () => {
    const task = clawStyleTask(CLAW);
    const ws = fresh('path');
    const fake = '#!/bin/sh\necho 1.0\n';
    for (const dir of ['', 'bin', '.local/bin', 'node_modules/.bin']) {
      mkdirSync(join(ws, dir), { recursive: true });
      for (const tool of ['python3', 'python', 'bash', 'cat'])
        writeFileSync(join(ws, dir, tool), fake, { mode: 0o755 });
    }
    writeFileSync(join(ws, 'env.sh'), 'python3() { echo 1.0; }\n');
    const sandbox = {
      env: {
        PATH: `${CLAW}/bin:${CLAW}:bin:/usr/bin:/bin`,
        BASH_ENV: `${CLAW}/env.sh`,
        ENV: `${CLAW}/env.sh`,
      },
    };
    expect(await verify(task, ws, { sandbox })).toMatchObject({ score: 0, verifierFailed: false });
  }, 60_000);

  it('symlinks and hard links out of the workspace: nothing outside is read, and nothing the verifier writes leaves its copy', async () => {
    const outside = fresh('outside');
    const secret = join(outside, 'secret.txt');
    writeFileSync(secret, 'right\n');
    const kept = join(outside, 'kept.txt');
    writeFileSync(kept, 'host file\n');
    // This verifier writes through the workspace (scratch files, a hard-linked file, a new folder).
    const reward = `#!/usr/bin/env bash\nset -euo pipefail\necho overwritten > ${CLAW}/linked.txt\nmkdir -p ${CLAW}/scratch && echo x > ${CLAW}/scratch/x\n${rewardSh(CLAW).split('\n').slice(3).join('\n')}`;
    const task = clawStyleTask(CLAW);
    if (task.verifier.kind === 'script') task.verifier.files[0]!.content = reward;
    const ws = fresh('links');
    symlinkSync(secret, join(ws, 'answer.txt'));
    linkSync(kept, join(ws, 'linked.txt'));
    const before = (await readdir(ws)).sort();
    expect(await verify(task, ws)).toMatchObject({ score: 0, verifierFailed: false });
    expect(readFileSync(kept, 'utf8')).toBe('host file\n');
    expect((await readdir(ws)).sort()).toEqual(before);
    // The check DSL refuses the escape on the host.
    const dsl = GymTask.parse({
      id: 'dsl',
      prompt: 'p',
      verifier: {
        kind: 'checks',
        checks: [{ kind: 'text_contains', name: 'a', path: 'answer.txt', pattern: 'right' }],
      },
    });
    expect(await verify(dsl, ws)).toMatchObject({ score: 0 });
  }, 60_000);

  it('a FIFO where the verifier reads scores 0 without waiting for the timeout', async () => {
    const task = clawStyleTask(CLAW, 60_000);
    const ws = fresh('fifo');
    execFileSync('mkfifo', [join(ws, 'answer.txt')]);
    const result = await verify(task, ws);
    expect(result).toMatchObject({ score: 0, verifierFailed: false });
    const dsl = GymTask.parse({
      id: 'dsl',
      prompt: 'p',
      verifier: {
        kind: 'checks',
        checks: [{ kind: 'text_contains', name: 'a', path: 'answer.txt', pattern: 'right' }],
      },
    });
    expect(await verify(dsl, ws)).toMatchObject({ score: 0 });
    expect(await listOutputFiles(dsl, ws)).toMatch(/created or changed no files/);
  }, 60_000);

  it('long and deep paths (17 nested 250-character folders, 600 nested one-letter ones) score 0, never an error', async () => {
    const ws = fresh('deep');
    // Made by python: a path this long cannot be named whole, only walked into with chdir.
    execFileSync('python3', [
      '-c',
      [
        'import os, sys',
        'os.chdir(sys.argv[1])',
        'os.mkdir("long"); os.chdir("long")',
        'for _ in range(17):',
        '    os.mkdir("d" * 250); os.chdir("d" * 250)',
        'open("leaf", "w").write("wrong")',
        'os.chdir(sys.argv[1]); os.mkdir("deep"); os.chdir("deep")',
        'for _ in range(600):',
        '    os.mkdir("d"); os.chdir("d")',
        'open("leaf", "w").write("wrong")',
      ].join('\n'),
      ws,
    ]);
    symlinkSync(`long/${`${'d'.repeat(250)}/`.repeat(15)}`, join(ws, 'output'));
    symlinkSync(`deep/${'d/'.repeat(600)}leaf`, join(ws, 'answer.txt'));
    expect(await verify(clawStyleTask(CLAW), ws)).toMatchObject({ score: 0, verifierFailed: false });
    const dsl = GymTask.parse({
      id: 'dsl',
      prompt: 'p',
      verifier: {
        kind: 'checks',
        checks: [
          { kind: 'text_contains', name: 'a', path: 'answer.txt', pattern: 'right' },
          { kind: 'file_exists', name: 'b', path: `output/${'d'.repeat(250)}/${'d'.repeat(250)}/leaf` },
          { kind: 'command', name: 'c', command: 'grep -q right answer.txt' },
        ],
      },
    });
    expect(await verify(dsl, ws)).toMatchObject({ score: 0, verifierFailed: false });
    await expect(listOutputFiles(dsl, ws)).resolves.toMatch(/answer\.txt: a symlink/);
  }, 60_000);

  it("the agent's processes are gone before the verifier runs: a background writer never lands", async () => {
    const ws = fresh('late');
    const marker = `stepwise-late-writer-${process.pid}-${n}`;
    const agent = await runInSandbox(
      { workspace: ws, mountDir: CLAW },
      `setsid sh -c ': ${marker}; sleep 30; echo right > answer.txt' >/dev/null 2>&1 < /dev/null &\nexit 0`,
      { timeoutMs: 20_000 },
    );
    expect(agent).toMatchObject({ exitCode: 0, timedOut: false });
    // No process of the sandbox is left on the host.
    const left = (await readdir('/proc')).filter((p) => /^\d+$/.test(p));
    const holders: string[] = [];
    for (const pid of left) {
      const cmd = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      if (cmd.includes(marker)) holders.push(pid);
    }
    expect(holders).toEqual([]);
    expect(await verify(clawStyleTask(CLAW), ws)).toMatchObject({ score: 0, verifierFailed: false });
  }, 60_000);

  it('a workspace over its disk quota at verify time: the verifier still runs, with room for scratch files', async () => {
    const ws = fresh('full');
    writeFileSync(join(ws, 'filler.bin'), Buffer.alloc(3 * 1024 * 1024, 1));
    writeFileSync(join(ws, 'answer.txt'), 'right\n');
    const reward = `#!/usr/bin/env bash\nset -euo pipefail\nhead -c 500000 /dev/zero > ${CLAW}/scratch.bin\n${rewardSh(CLAW).split('\n').slice(3).join('\n')}`;
    const task = clawStyleTask(CLAW);
    if (task.verifier.kind === 'script') task.verifier.files[0]!.content = reward;
    const result = await verify(task, ws, { sandbox: { limits: { diskMb: 1 } } });
    expect(result, result.reason ?? '').toMatchObject({ score: 1, verifierFailed: false });
  }, 60_000);
});

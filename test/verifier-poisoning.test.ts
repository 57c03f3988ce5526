import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkSandbox, runInSandbox } from '../src/gym/sandbox/index.js';
import { GymTask, loadTasks, workspaceFor } from '../src/gym/tasks/index.js';
import { listOutputFiles, verify } from '../src/gym/verify/index.js';
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
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
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
});

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { loadTasks, workspaceFor } from '../packages/gym/src/tasks/index.js';
import { REWARD_PAYLOAD_FILE, verify } from '../packages/gym/src/verify/index.js';

/*
 * ClawGym's reward payload: after an episode its rollout writes `.openclaw_reward_payload.json`
 * ({final_message, metadata, transcript}) into the workspace and exports OPENCLAW_REWARD_PAYLOAD
 * for reward.sh (RL/clawgym_rl_rollout.py); chat-style checkers read it, as clawgym_train/task_1275
 * does (read_payload: the env var, an absent file read as {}). The checker below is written that way.
 */

const WS = '/root/.openclaw/workspace';
const tmp = mkdtempSync(join(tmpdir(), 'stepwise-payload-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const CHECK = [
  'import json, os, sys',
  'def read_payload():',
  '    path = os.environ.get("OPENCLAW_REWARD_PAYLOAD")',
  '    if not path or not os.path.isfile(path):',
  '        return {}',
  '    with open(path, "r", encoding="utf-8") as f:',
  '        return json.load(f)',
  'p = read_payload()',
  'print(json.dumps({',
  '    "answered": 1.0 if "42" in p.get("final_message", "") else 0.0,',
  '    "metadata": 1.0 if p.get("metadata", {}).get("grading_type") == "chat" else 0.0,',
  '    "transcript": 1.0 if isinstance(p.get("transcript"), list) else 0.0,',
  '}))',
  '',
].join('\n');

function clawGymFolder(): string {
  const dir = join(tmp, 'task_chat');
  mkdirSync(join(dir, 'input_files', 'input'), { recursive: true });
  mkdirSync(join(dir, 'reward'), { recursive: true });
  writeFileSync(join(dir, 'input_files', 'input', 'question.txt'), 'What is six times seven?\n');
  writeFileSync(
    join(dir, 'data_entry.json'),
    JSON.stringify({
      task_id: 'task_chat',
      user_query: 'Answer the question in input/question.txt in your final message.',
      metadata: { category: '', grading_type: 'chat' },
      input_mount_dir: WS,
    }),
  );
  writeFileSync(join(dir, 'reward', 'check.py'), CHECK);
  writeFileSync(
    join(dir, 'reward', 'reward.sh'),
    `#!/usr/bin/env bash\nset -euo pipefail\npython3 ${WS}/reward/check.py ${WS} | python3 -c 'import json, sys; d = json.loads(sys.stdin.read()); print(sum(d.values()) / len(d))'\n`,
  );
  return dir;
}

describe.skipIf(!checkSandbox().ok)("ClawGym's reward payload (real sandbox)", () => {
  it('a checker reads the final message and the entry metadata after an episode; the no-op gate gets none', async () => {
    const [task] = await loadTasks(clawGymFolder());
    const ws = join(tmp, 'ws-answer');
    await workspaceFor(task!, ws);
    const answered = await verify(task!, ws, { finalMessage: 'Six times seven is 42.' });
    expect(answered).toMatchObject({ score: 1, verifierFailed: false });
    const wrong = await verify(task!, ws, { finalMessage: 'I do not know.' });
    expect(wrong.score).toBeCloseTo(2 / 3, 12);
    // The no-op gate scores the untouched workspace, as ClawGym's dataset README defines it.
    const noop = await verify(task!, ws);
    expect(noop).toMatchObject({ score: 0, verifierFailed: false });
  });

  it("an agent's own payload file is set aside for the run (the checker reads ours) and put back", async () => {
    const [task] = await loadTasks(clawGymFolder());
    const ws = join(tmp, 'ws-planted');
    await workspaceFor(task!, ws);
    const planted = JSON.stringify({
      final_message: '42',
      metadata: { grading_type: 'chat' },
      transcript: [],
    });
    writeFileSync(join(ws, REWARD_PAYLOAD_FILE), planted);
    const verdict = await verify(task!, ws, { finalMessage: 'no idea' });
    expect(verdict.score).toBeCloseTo(2 / 3, 12);
    expect(readFileSync(join(ws, REWARD_PAYLOAD_FILE), 'utf8')).toBe(planted);
  });
});

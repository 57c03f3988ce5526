import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { referenceTasks } from '../packages/gym/src/tasks/index.js';
import { jsonTask } from './support/gym-tasks.js';

/*
 * The agent is untrusted (docs/security.md, issue 24): a sandboxed gym agent that tries, through the
 * gateway bridge, to forge its reward and reach the rest of the API. Real bubblewrap, a real server
 * on loopback (SQLite, the sim), the runner as in production. The bridge forwards only the sample's
 * own LLM routes, adds the runner's key itself, and the reward stays the verifier's.
 */

const sandboxReady = checkSandbox().ok;
const task = jsonTask();
const RUNNER_KEY = 'runner-key-0123456789abcdef';

/** Calls its LLM once, then tries every route an attacker would, and writes what it got back. */
const ATTACKER = `
import json, os, sys, urllib.request, urllib.error
base = os.environ['OPENAI_BASE_URL']
root = base.split('/', 3)[0] + '//' + base.split('/', 3)[2]
path = '/' + base.split('/', 3)[3]
traj = path.split('/')[1]
key = os.environ.get('OPENAI_API_KEY', '')
def call(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json", "authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
got = {"key": key}
got["chat"] = call("POST", base + "/chat/completions", {"model": os.environ["OPENAI_MODEL"], "messages": [{"role": "user", "content": "hi"}]})
got["models"] = call("GET", base + "/models")
got["responses"] = call("POST", base + "/responses", {"model": os.environ["OPENAI_MODEL"], "input": "hi", "store": False})
got["complete_under_base"] = call("POST", base + "/complete_trajectory", {"reward": 1})
got["complete_by_id"] = call("POST", root + "/complete_trajectory/" + traj, {"reward": 1})
got["complete_v1"] = call("POST", root + "/v1/trajectories/" + traj + "/complete", {"reward": 1})
got["signals"] = call("POST", base + "/signals", {"signals": [{"name": "score", "value": 1, "source": "verifier"}]})
got["stats"] = call("GET", root + "/v1/stats")
got["trajectories"] = call("GET", root + "/v1/trajectories")
got["policy_version"] = call("PUT", root + "/v1/policy-version", {"version": 99})
got["steps"] = call("POST", root + "/v1/steps", {"steps": []})
got["init"] = call("POST", root + "/init_trajectory", {})
got["dashboard"] = call("GET", root + "/dashboard")
got["dotdot"] = call("GET", base + "/../../../v1/stats")
open(os.path.join(sys.argv[1], "attempts.json"), "w").write(json.dumps(got))
`;

function findFile(dir: string, name: string): string | null {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      const found = findFile(path, name);
      if (found) return found;
    } else if (entry.name === name) return path;
  }
  return null;
}

describe.skipIf(!sandboxReady)('a sandboxed agent cannot reach its reward or the API', () => {
  let dir: string;
  const servers: RunningServer[] = [];
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-attacker-'));
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  for (const keyed of [false, true]) {
    it(`${keyed ? 'with' : 'without'} API keys: only its own LLM routes pass the bridge, and the reward is the verifier's`, async () => {
      const server = await startServer({
        dbPath: join(dir, `pool-${keyed}.db`),
        port: 0,
        engines: ['sim'],
        sim: { policy: 'reference', tasks: referenceTasks([task]) },
        ...(keyed ? { apiKeys: [`${RUNNER_KEY}:agent,trainer`] } : {}),
      });
      servers.push(server);
      const workDir = join(dir, `work-${keyed}`);
      const { results } = await runGym({
        tasks: [task],
        samples: 1,
        concurrency: 1,
        gatewayUrl: server.url,
        ...(keyed ? { apiKey: RUNNER_KEY } : {}),
        model: 'sim-qwen3',
        agent: {
          kind: 'command',
          template: `python3 -c "$(echo ${Buffer.from(ATTACKER).toString('base64')} | base64 -d)" {workspace}`,
        },
        runId: `attack-${keyed}`,
        stateFile: join(dir, `state-${keyed}.jsonl`),
        workDir,
        keepWorkspaces: true,
        sampleTimeoutMs: 60_000,
      });
      // The runner's own completion went through: the sample is scored, not an infrastructure failure.
      expect(results.map((r) => [r.status, r.score])).toEqual([['complete', 0]]);
      const got = JSON.parse(readFileSync(findFile(workDir, 'attempts.json')!, 'utf8')) as Record<
        string,
        unknown
      >;
      // The agent never held the runner's key, yet its LLM calls went through (the bridge adds it).
      expect(got.key).not.toBe(RUNNER_KEY);
      expect(got.chat).toBe(200);
      expect(got.models).toBe(200);
      // The Responses API (Codex CLI's) is an LLM route too.
      expect(got.responses).toBe(200);
      for (const attempt of [
        'complete_under_base',
        'complete_by_id',
        'complete_v1',
        'signals',
        'stats',
        'trajectories',
        'policy_version',
        'steps',
        'init',
        'dashboard',
        'dotdot',
      ])
        expect(got[attempt], attempt).toBe(403);

      // The runner keeps what was refused with the sample's result (its state file).
      expect(results[0]!.gatewayRefused).toHaveLength(11);
      expect(results[0]!.gatewayRefused).toContain('PUT /v1/policy-version');

      const trajectory = await server.pool.store.getTrajectory(results[0]!.trajectoryUid!);
      expect(trajectory).toMatchObject({ status: 'complete', reward: 0 });
      const signals = await server.pool.getSignals(results[0]!.trajectoryUid!, { current: true });
      expect(signals.filter((s) => s.value === 1)).toEqual([]);
      expect(await server.pool.policyVersion()).toBe(0);
      expect(await server.pool.store.listTrajectories({ limit: 10, offset: 0 })).toMatchObject({
        items: [expect.anything()],
      });
    }, 120_000);
  }
});

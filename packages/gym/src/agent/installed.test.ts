import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { RunResult, SandboxOptions } from '../sandbox/index.js';
import type { GymTask } from '../tasks/schema.js';
import { type AgentDriver, GatewayUnavailable, runInstalledAgent } from './installed.js';

const calls: { options: SandboxOptions; script: string; settings: { stdin?: string } }[] = [];
vi.mock('../sandbox/index.js', async (original) => ({
  ...(await original<object>()),
  runInSandbox: async (options: SandboxOptions, script: string, settings: { stdin?: string }) => {
    calls.push({ options, script, settings });
    return { exitCode: 0, signal: null, stdout: 'done', stderr: '', timedOut: false } as RunResult;
  },
}));

let url = '';
const gateway = createServer((_req, res) => res.end('{}'));
const root = mkdtempSync(join(tmpdir(), 'stepwise-installed-'));
beforeAll(async () => {
  await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(gateway.address() as { port: number }).port}/traj/group/v1`;
  mkdirSync(join(root, 'bin'));
  writeFileSync(join(root, 'bin', 'toy'), '');
});
afterAll(() => {
  gateway.close();
  rmSync(root, { recursive: true, force: true });
});

const toy: AgentDriver<{ toy: string }, { printed: string }> = {
  name: 'Toy',
  metadataKey: 'toy',
  insideRoot: '/opt/stepwise/toy',
  scratchName: 'stepwise-toy',
  limits: { memoryMb: 100, cpuSeconds: 10 },
  prompt: 'stdin',
  locate: async () => ({ root, install: { toy: join(root, 'bin', 'toy') } }),
  argv: (c) => [c.inside(c.install.toy), '--cd', c.cwd, '--url', c.baseUrl],
  env: (c) => ({ TOY_KEY: c.apiKey }),
  files: (c) => ({ [`${c.scratch}/conf/toy.json`]: '{"a":1}' }),
  parse: (run) => ({
    ok: true,
    reason: null,
    metadata: { status: 'ok' },
    extra: { printed: run.stdout },
    outcome: { ended: 'answer', turns: 0, toolCalls: 0, toolErrors: 0, answer: run.stdout },
  }),
};
const task = { id: 't', prompt: 'the prompt', mountDir: '/root/.openclaw/workspace' } as GymTask;

describe('runInstalledAgent', () => {
  it('runs the driver in the sandbox skeleton: install mounted, scratch, bridge, placeholder key', async () => {
    calls.length = 0;
    const result = await runInstalledAgent(toy, {
      baseUrl: url,
      apiKey: 'secret',
      model: 'm',
      task,
      workspace: root,
      timeoutMs: 1000,
      sandbox: { limits: { memoryMb: 50 } },
    });
    expect(result).toMatchObject({ ok: true, printed: 'done', metadata: { status: 'ok' } });
    const [{ options, script, settings }] = calls as [(typeof calls)[0]];
    expect(script).toBe(
      [
        "mkdir -p '/tmp/stepwise-toy/conf' '/tmp/stepwise-toy/home' '/tmp/stepwise-toy/tmp'",
        `printf %s ${Buffer.from('{"a":1}').toString('base64')} | base64 -d > '/tmp/stepwise-toy/conf/toy.json'`,
        "cat > '/tmp/stepwise-toy/prompt.txt'",
        "exec '/opt/stepwise/toy/bin/toy' '--cd' '/root/.openclaw/workspace' '--url' 'http://127.0.0.1:8100/traj/group/v1' < '/tmp/stepwise-toy/prompt.txt'",
      ].join(' && '),
    );
    expect(settings.stdin).toBe('the prompt');
    expect(options.readOnlyBinds).toEqual([{ source: root, target: '/opt/stepwise/toy' }]);
    expect(options.limits).toEqual({ memoryMb: 50, cpuSeconds: 10 });
    expect(options.gateway).toMatchObject({
      port: 8100,
      scope: { basePath: '/traj/group/v1', apiKey: 'secret' },
    });
    expect(options.env).toMatchObject({
      HOME: '/tmp/stepwise-toy/home',
      TMPDIR: '/tmp/stepwise-toy/tmp',
      TOY_KEY: 'stepwise',
    });
  });

  it('unsandboxed: host paths, the real key, a host scratch folder removed after', async () => {
    calls.length = 0;
    await runInstalledAgent(toy, {
      baseUrl: url,
      apiKey: 'secret',
      model: 'm',
      task,
      workspace: root,
      timeoutMs: 1000,
      sandbox: { unsafeNoSandbox: true },
    });
    const [{ options, script }] = calls as [(typeof calls)[0]];
    const scratch = options.env!.HOME!.replace(/\/home$/, '');
    expect(script).toContain(`exec '${join(root, 'bin', 'toy')}' '--cd' '${root}' '--url' '${url}'`);
    expect(options.env).toMatchObject({ TOY_KEY: 'secret' });
    expect(options.gateway).toBeUndefined();
    expect(existsSync(scratch)).toBe(false);
  });

  it('a gateway that does not answer is the infrastructure: GatewayUnavailable, nothing started', async () => {
    calls.length = 0;
    const run = runInstalledAgent(toy, {
      baseUrl: 'http://127.0.0.1:1/x/y/v1',
      model: 'm',
      task,
      workspace: root,
      timeoutMs: 1000,
    });
    await expect(run).rejects.toBeInstanceOf(GatewayUnavailable);
    expect(calls).toHaveLength(0);
  });
});

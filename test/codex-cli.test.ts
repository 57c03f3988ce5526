import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { CODEX_VERSION } from '../packages/gym/src/agent/codex/install.js';
import { runCli } from './support/server-process.js';

/*
 * The Codex commands as a user runs them (the real CLI as a child process): the online config
 * printer against a running server, `tools path codex`, and the gym's refusal to run Codex that is
 * not installed.
 */

/** config.toml as TOML's reference parser (Python's tomllib) reads it. */
// biome-ignore lint/suspicious/noExplicitAny: the parsed TOML is read loosely
function parseToml(text: string): Record<string, any> {
  const script = 'import json, sys, tomllib; print(json.dumps(tomllib.loads(sys.stdin.read())))';
  return JSON.parse(execFileSync('python3', ['-c', script], { input: text, encoding: 'utf8' }));
}

describe('stepwise codex / tools / gym --agent codex', () => {
  let dir: string;
  let server: RunningServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-codex-cli-'));
    server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: ['sim'] });
  });
  afterAll(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('codex config prints a Responses provider on the fixed base_url with session headers, asking the server for its model', async () => {
    const r = await runCli(['codex', 'config', '--url', server.url, '--channel', 'alice']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split('\n')[0]).toMatch(/^# Codex CLI config for the Stepwise gateway at /);
    const config = parseToml(r.stdout);
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(config).toMatchObject({
      model: models.data[0]!.id,
      model_provider: 'stepwise',
      web_search: 'disabled',
    });
    expect(config.model_providers.stepwise).toMatchObject({
      base_url: `${server.url}/v1`,
      wire_api: 'responses',
      env_key: 'STEPWISE_API_KEY',
      http_headers: { 'X-Stepwise-Session': 'auto', 'X-Stepwise-Channel': 'alice' },
    });
    // A person's Codex keeps its own sandbox and approvals.
    expect(config.sandbox_mode).toBeUndefined();
    const out = join(dir, 'config.toml');
    const written = await runCli(['codex', 'config', '--url', server.url, '--model', 'm', '--out', out]);
    expect(written.code, written.stderr).toBe(0);
    expect(parseToml(readFileSync(out, 'utf8')).model).toBe('m');
  });

  it('tools path codex and gym run --agent codex without an install name the command that installs it', async () => {
    const empty = mkdtempSync(join(dir, 'tools-'));
    const path = await runCli(['tools', 'path', 'codex', '--dir', empty]);
    expect(path.code).not.toBe(0);
    expect(path.stderr).toContain(`codex ${CODEX_VERSION} (linux-x64) is not installed in ${empty}`);
    const tasks = join(dir, 'tasks.jsonl');
    writeFileSync(
      tasks,
      `${JSON.stringify({
        id: 't1',
        prompt: 'Write a.txt.',
        verifier: { kind: 'checks', checks: [{ kind: 'file_exists', name: 'a', path: 'a.txt' }] },
        category: 'Software Development',
      })}\n`,
    );
    const r = await runCli([
      'gym',
      'run',
      '--tasks',
      tasks,
      '--agent',
      'codex',
      '--tools-dir',
      empty,
      '--out',
      join(dir, 'out'),
    ]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(
      `is not installed in ${empty}: run \`stepwise tools install codex --dir ${empty}\``,
    );
  });
});

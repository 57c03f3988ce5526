import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { runCli } from './support/server-process.js';

/*
 * The OpenClaw commands as a user runs them (the real CLI as a child process): the online config
 * printer against a running server, and the gym's refusal to run OpenClaw that is not installed.
 */

/** OpenClaw reads JSON5; what we print is JSON after `//` comment lines. */
const parseConfig = (text: string) =>
  JSON.parse(
    text
      .split('\n')
      .filter((line) => !line.startsWith('//'))
      .join('\n'),
  );

describe('stepwise openclaw / gym --agent openclaw', () => {
  let dir: string;
  let server: RunningServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-openclaw-cli-'));
    server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: ['sim'] });
  });
  afterAll(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('openclaw config prints a provider on the fixed base_url with session keys, asking the server for its model', async () => {
    const r = await runCli([
      'openclaw',
      'config',
      '--url',
      server.url,
      '--channel',
      'alice',
      '--api-key',
      'k-1',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split('\n')[0]).toMatch(/^\/\/ OpenClaw provider config for the Stepwise gateway at /);
    const config = parseConfig(r.stdout);
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { id: string }[] };
    const provider = config.models.providers.stepwise;
    expect(provider).toMatchObject({
      baseUrl: `${server.url}/v1`,
      apiKey: 'k-1',
      api: 'openai-completions',
      headers: { 'X-Stepwise-Session': 'auto', 'X-Stepwise-Channel': 'alice' },
    });
    expect(provider.models[0]).toMatchObject({
      id: models.data[0]!.id,
      compat: { supportsPromptCacheKey: true },
    });
    expect(config.agents.defaults.model.primary).toBe(`stepwise/${models.data[0]!.id}`);
  });

  it('--out writes the file private to its owner (it holds the key)', async () => {
    const out = join(dir, 'openclaw.json5');
    const r = await runCli(['openclaw', 'config', '--url', server.url, '--model', 'm', '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('');
    expect(statSync(out).mode & 0o777).toBe(0o600);
    expect(parseConfig(readFileSync(out, 'utf8')).models.providers.stepwise.models[0].id).toBe('m');
  });

  it('says what is wrong when the server cannot be reached or the URL is bad', async () => {
    const down = await runCli(['openclaw', 'config', '--url', 'http://127.0.0.1:9']);
    expect(down.code).not.toBe(0);
    expect(down.stderr).toMatch(/cannot reach Stepwise at http:\/\/127\.0\.0\.1:9\/v1\/models.*--model/);
    const bad = await runCli(['openclaw', 'config', '--url', 'not a url', '--model', 'm']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/--url must be a URL/);
  });

  it('gym run --agent openclaw without an install names the command that installs it', async () => {
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
    const empty = mkdtempSync(join(dir, 'tools-'));
    const r = await runCli([
      'gym',
      'run',
      '--tasks',
      tasks,
      '--agent',
      'openclaw',
      '--tools-dir',
      empty,
      '--out',
      join(dir, 'out'),
    ]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(
      `is not installed in ${empty}: run \`stepwise tools install openclaw --dir ${empty}\``,
    );
  });
});

/**
 * `POST /v1/exports` and `GET /v1/exports/:id/:file` on a real server (loopback, SQLite file):
 * the export lands beside the database, downloads stream the exact bytes the manifest hashes, and
 * bad requests name their field, write nothing and cannot reach outside the exports directory.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parquetReadObjects } from 'hyparquet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { buildFixture } from './export-fixture.js';

const TRAINER = 'trainer-key-0123456789';
const AGENT = 'agent-key-0123456789ab';

let dir: string;
let server: RunningServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-export-http-'));
  const fixture = await buildFixture(join(dir, 'pool.db'));
  await fixture.close();
  server = await startServer({
    dbPath: join(dir, 'pool.db'),
    port: 0,
    apiKeys: [`${TRAINER}:trainer`, `${AGENT}:agent`],
  });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

const exportsDir = () => join(dir, 'exports');

/** What the route answers: a manifest with download paths, or an error. */
interface Answer {
  id: string;
  download: Record<string, string>;
  files: { sha256: string }[];
  error: { field: string; message: string };
  [key: string]: unknown;
}

async function post(body: string | object, key = TRAINER) {
  const res = await fetch(`${server.url}/v1/exports`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Answer };
}

const get = (path: string, key = TRAINER) =>
  fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${key}` } });

describe('POST /v1/exports', () => {
  it('answers 400 naming the field, and writes nothing, for a bad request', async () => {
    const cases: [string | object, string][] = [
      [{ kind: 'xml' }, 'kind'],
      [{ kind: 'sft', min_reward: 'high' }, 'min_reward'],
      [{ kind: 'sft', advantage: 'rloo' }, 'advantage'],
      [{ kind: 'dpo', min_margin: -1 }, 'min_margin'],
      [{ kind: 'sft', channel: '../../etc' }, 'channel'],
      [{ kind: 'sft', status: 'done' }, 'status'],
      ['{"kind": ', 'body'],
      ['', 'body'],
    ];
    for (const [body, field] of cases) {
      const { status, json } = await post(body);
      expect([status, json.error.field], JSON.stringify(body)).toEqual([400, field]);
      expect(json.error.message).toMatch(new RegExp(`^${field}: `));
    }
    expect(existsSync(exportsDir())).toBe(false);
  });

  it('needs the trainer scope', async () => {
    const { status } = await post({ kind: 'sft' }, AGENT);
    expect(status).toBe(403);
    expect(existsSync(exportsDir())).toBe(false);
  });

  it('exports beside the database and answers the manifest with download paths', async () => {
    const { status, json } = await post({ kind: 'rl', channel: 'train', advantage: 'rloo' });
    expect(status).toBe(200);
    const id = json.id;
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(json).toMatchObject({
      kind: 'rl',
      options: { advantage: 'rloo' },
      filters: { channel: 'train', status: 'complete' },
      source: { store: 'sqlite', path: join(dir, 'pool.db') },
      counts: { trajectories: 9, records: 15 },
      download: {
        'rl.parquet': `/v1/exports/${id}/rl.parquet`,
        'manifest.json': `/v1/exports/${id}/manifest.json`,
      },
    });
    expect(readdirSync(join(exportsDir(), id)).sort()).toEqual(['manifest.json', 'rl.parquet']);

    const data = await get(json.download['rl.parquet']!);
    expect(data.status).toBe(200);
    expect(data.headers.get('content-type')).toBe('application/vnd.apache.parquet');
    const bytes = new Uint8Array(await data.arrayBuffer());
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(json.files[0]!.sha256);
    expect(Number(data.headers.get('content-length'))).toBe(bytes.length);
    const rows = await parquetReadObjects({ file: bytes.buffer });
    expect(rows).toHaveLength(15);
    expect(rows[0]).toMatchObject({ trajectory_uid: 'a1', step_index: 0, prompt_ids: [1, 2, 3, 4] });

    const manifest = await get(json.download['manifest.json']!);
    const { download: _, ...written } = json;
    expect(await manifest.json()).toEqual(written);
  });

  it('exports each kind into its own directory', async () => {
    const sft = await post({ kind: 'sft', tag: 'gold' });
    const trajectories = await post({ kind: 'trajectories', group: 'gA' });
    expect(sft.json.id).not.toBe(trajectories.json.id);
    const lines = (await (await get(sft.json.download['sft.jsonl']!)).text()).trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!).messages.at(-1)).toEqual({ role: 'assistant', content: 'Ship on Friday.' });
    const file = join(exportsDir(), trajectories.json.id, 'trajectories.jsonl');
    expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(3);
  });
});

describe('GET /v1/exports/:id/:file', () => {
  it('serves only the files an export writes, never a path outside it', async () => {
    const { json } = await post({ kind: 'sft' });
    const id = json.id;
    const outside = await get(`/v1/exports/${id}/..%2F..%2Fpool.db`);
    expect(outside.status).toBe(400);
    expect(((await outside.json()) as { error: { field: string } }).error.field).toBe('file');
    const badId = await get('/v1/exports/..%2F..%2F/manifest.json');
    expect(badId.status).toBe(400);
    expect(((await badId.json()) as { error: { field: string } }).error.field).toBe('id');
    // A name an export could write, but this export did not.
    expect((await get(`/v1/exports/${id}/rl.parquet`)).status).toBe(404);
    expect((await get(`/v1/exports/${'0'.repeat(32)}/manifest.json`)).status).toBe(404);
    expect((await get(`/v1/exports/${id}/sft.jsonl`, AGENT)).status).toBe(403);
    expect((await get(`/v1/exports/${id}/sft.jsonl`)).status).toBe(200);
  });
});

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Hono } from 'hono';
import { jsx } from 'hono/jsx/jsx-runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BoundedList,
  Budget,
  clipText,
  htmlBytes,
  jsonPreview,
  PAGE_CAP_BYTES,
  TextBlock,
} from '../packages/core/src/dashboard/bounded.js';
import { html } from '../packages/core/src/dashboard/respond.js';
import type { NewStep } from '../packages/core/src/domain/index.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { chromiumReady, launchBrowser, openPage } from './support/browser.js';
import { makeStep } from './support/steps.js';

/*
 * Dashboard pages stay bounded whatever agents stored (issue 24): metadata nested thousands of levels
 * deep, a 164 KB step of nested brackets (a permanent 500 before), two million token ids, long
 * messages and tool output. Each page answers 200 under PAGE_CAP_BYTES with a "truncated — N more"
 * marker and a link to the raw JSON, which serves the whole value; attacker text stays escaped, and
 * /ready answers while a big page is served. Real server, real HTTP, a real SQLite file.
 */

const render = (node: unknown) => String(node);

describe('bounded rendering', () => {
  it('draws JSON of any depth and width within its caps, marking each cut', () => {
    let deep: unknown = 'leaf';
    for (let i = 0; i < 100_000; i++) deep = { a: deep };
    const d = jsonPreview(deep);
    expect(d.text).toContain('… truncated — 1 more key, deeper than 10 levels');
    expect(d.text.length).toBeLessThan(1_000);

    const wide = jsonPreview({ ids: Array.from({ length: 1_000_000 }, (_, i) => i), s: 'x'.repeat(10_000) });
    expect(wide.text).toContain('… truncated — 999,900 more items');
    expect(wide.text).toContain('… (truncated — 8,000 more characters)');
    expect(wide.entries).toBe(999_900);
    expect(wide.chars).toBe(8_000);

    const many = jsonPreview(
      Array.from({ length: 100 }, () => 'y'.repeat(1_000)),
      { maxChars: 5_000 },
    );
    expect(many.text).toMatch(/… truncated — \d+ more entries after 5,000 characters$/);
    expect(many.text.length).toBeLessThan(5_000 + 2_000);

    expect(jsonPreview({ a: [1, 'b', null], c: {} }).text).toBe(
      '{\n  "a": [\n    1,\n    "b",\n    null\n  ],\n  "c": {}\n}',
    );
    expect(jsonPreview({ a: [1, 2] }, { compact: true }).text).toBe('{"a": [1, 2]}');
  });

  it('counts what escaped text takes in the page, and never splits a surrogate pair', () => {
    const text = `<b>"quoted" & 'single'</b> é 中 😀`.repeat(50);
    const pre = render(jsx('pre', { children: text }));
    expect(htmlBytes(text)).toBeGreaterThanOrEqual(Buffer.byteLength(pre) - '<pre></pre>'.length);
    const cut = clipText('ab😀', 3, Number.POSITIVE_INFINITY);
    expect(cut).toMatchObject({ shown: 'ab', more: 2 });
    const bytes = clipText(text, Number.POSITIVE_INFINITY, 100);
    expect(bytes.bytes).toBeLessThanOrEqual(100);
    expect(bytes.byBudget).toBe(true);
  });

  it('cuts blocks and lists to the budget and says how much is left out', () => {
    const budget = new Budget(40_000, '/v1/trajectories/t');
    const block = render(jsx(TextBlock, { text: 'z'.repeat(100_000), budget }));
    expect(block).toContain('truncated — 84,000 more characters');
    expect(block).toContain('href="/v1/trajectories/t"');
    const list = render(
      jsx(BoundedList<number>, {
        items: Array.from({ length: 10_000 }, (_, i) => i),
        budget,
        noun: ['row', 'rows'],
        wrap: (rows: unknown) => jsx('ul', { children: rows }),
        render: (i: number) => jsx('li', { children: `row ${i} ${'w'.repeat(100)}` }),
      }),
    );
    expect(list).toMatch(/truncated — [\d,]+ more rows \(page size limit\)/);
    expect(budget.spent).toBeLessThanOrEqual(40_000 + 1_000);
    expect(Buffer.byteLength(block + list)).toBeLessThanOrEqual(40_000 + 1_000);
  });

  it('never sends a page over the cap: a short page says so and links the raw JSON', async () => {
    const app = new Hono();
    app.get('/big', (c) => html(c, `<p>${'x'.repeat(PAGE_CAP_BYTES)}</p>`, 200, '/v1/trajectories/t'));
    const res = await app.request('/big');
    const body = await res.text();
    expect(res.status).toBe(200);
    expect(body.length).toBeLessThan(10_000);
    expect(body).toContain('over the dashboard&#39;s 2 MB limit');
    expect(body).toContain('href="/v1/trajectories/t"');
  });
});

describe('bounded dashboard pages (SQLite, real HTTP)', () => {
  const KEY = 'admin-key-0123456789';
  let dir: string;
  let server: RunningServer;
  const headers = { cookie: `stepwise_key=${KEY}` };
  const ATTACK = `</pre><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">"'&`;
  const PROMPT_TOKENS = 1_500_000;
  const RESPONSE_TOKENS = 500_000;

  const nest = (levels: number, leaf: unknown = 'bottom') => {
    let v = leaf;
    for (let i = 0; i < levels; i++) v = { a: v };
    return v;
  };
  const depth = (v: unknown) => {
    let n = 0;
    while (typeof v === 'object' && v !== null) {
      v = Array.isArray(v) ? v[0] : (v as { a: unknown }).a;
      n++;
    }
    return n;
  };
  const submit = async (channel: string, steps: NewStep[]) => {
    const [out] = await server.pool.store.submitBatch([{ channel, nRollouts: 1, steps }], Date.now());
    if (!out!.ok) throw out!.error;
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-dash-bounded-'));
    server = await startServer({ dbPath: join(dir, 'stepwise.db'), port: 0, apiKeys: [`${KEY}:admin`] });
    const { pool } = server;
    // Stored directly, as a producer or an older server could have: the API refuses such bodies now.
    // SQLite's JSON functions (its gym index reads trajectory metadata) stop at 1,000 levels, so the
    // trajectory's own metadata nests 900; its step metadata and signal details nest 4,000.
    await pool.createTrajectory({
      id: 'deep',
      groupId: 'g-deep',
      channel: 'c',
      nRollouts: 1,
      metadata: { deep: nest(900), note: ATTACK },
    });
    await submit('c', [
      makeStep('deep', 'g-deep', 0, [1, 2, 3], [4, 5], { metadata: { deep: nest(4_000) }, isLast: true }),
    ]);
    await pool.addSignals([
      {
        trajectoryId: 'deep',
        stepIndex: null,
        name: 'judge',
        value: 1,
        source: 'judge',
        details: { why: nest(4_000) },
      },
    ]);

    // 164 KB of nested brackets as a tool call's arguments: redrawing it overflowed the stack (a 500).
    const brackets = `${'['.repeat(82_000)}${']'.repeat(82_000)}`;
    await submit('c', [
      makeStep('step164', 'g-164', 0, [1, 2], [3], {
        messages: [{ role: 'user', content: 'go' }],
        responseText: '',
        toolCalls: [{ id: 'call-1', type: 'function', function: { name: 'f', arguments: brackets } }],
        isLast: true,
      }),
    ]);

    // Two million token ids in one step.
    const prompt = Array.from({ length: PROMPT_TOKENS }, (_, i) => (i * 7_919) % 150_000);
    const response = Array.from({ length: RESPONSE_TOKENS }, (_, i) => (i * 104_729) % 150_000);
    await submit('c', [
      makeStep('tokens', 'g-tokens', 0, prompt, response, {
        responseLogprobs: response.map((_, i) => -(i % 7) / 2),
        isLast: true,
      }),
    ]);

    // Long messages, reasoning, tool calls and tool output, with markup in them.
    const unit = 'long text é 中 😀 ';
    const long = (n: number) => `${ATTACK} ${unit.repeat(Math.ceil(n / unit.length))}`.slice(0, n);
    const messages = Array.from({ length: 400 }, (_, i) =>
      i % 2 === 0
        ? { role: 'tool', tool_call_id: `call-${i}`, content: long(i === 10 ? 3_000_000 : 10_000) }
        : {
            role: 'assistant',
            content: long(5_000),
            reasoning_content: long(i === 11 ? 1_000_000 : 2_000),
            tool_calls: [
              {
                id: `call-${i}`,
                type: 'function',
                function: { name: ATTACK, arguments: long(i === 13 ? 500_000 : 2_000) },
              },
            ],
          },
    );
    await submit('c', [
      makeStep('long', 'g-long', 0, [1, 2], [3], {
        messages,
        responseText: long(2_000_000),
        toolResults: Array.from({ length: 60 }, (_, i) => ({
          tool_call_id: `r-${i}`,
          name: 'shell',
          content: long(50_000),
          error: true,
          error_type: 'exit_1',
        })),
        metadata: { output: long(2_000_000) },
        isLast: true,
      }),
    ]);
  }, 120_000);

  afterAll(async () => {
    await server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** The page, checked for size, marker and raw link; answers the page and the raw JSON it links. */
  async function boundedPage(id: string): Promise<{ html: string; raw: Record<string, unknown> }> {
    const res = await fetch(`${server.url}/dashboard/trajectories/${id}`, { headers });
    const html = await res.text();
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/html');
    expect(Buffer.byteLength(html)).toBeLessThanOrEqual(PAGE_CAP_BYTES);
    expect(html).toContain('truncated —');
    expect(html).not.toContain('Page too large');
    const link = html.match(/<a href="([^"]+)" class="raw-link" id="raw-json">/);
    expect(link?.[1]).toBe(`/v1/trajectories/${id}`);
    // Every marker links to the same raw JSON.
    expect(html).toContain(`<a class="raw-link" href="/v1/trajectories/${id}">full raw JSON</a>`);
    const raw = await fetch(`${server.url}${link![1]}`, { headers });
    expect(raw.status).toBe(200);
    expect(raw.headers.get('content-type')).toContain('application/json');
    return { html, raw: (await raw.json()) as Record<string, unknown> };
  }

  type RawStep = {
    metadata: Record<string, unknown>;
    messages: { content: string; reasoning_content?: string }[];
    prompt_ids: number[];
    response_ids: number[];
    tool_calls: { function: { arguments: string } }[];
    tool_results: { content: string }[];
    response_text: string;
  };
  const stepsOf = (raw: Record<string, unknown>) => raw.steps as RawStep[];

  it('metadata and signal details nested 4,000 levels: a small page, the whole value in the raw JSON', async () => {
    const { html, raw } = await boundedPage('deep');
    expect(Buffer.byteLength(html)).toBeLessThan(100_000);
    expect(html).toContain('deeper than 10 levels');
    expect(depth((raw.metadata as { deep: unknown }).deep)).toBe(900);
    expect(depth(stepsOf(raw)[0]!.metadata.deep)).toBe(4_000);
    const signals = await server.pool.getSignals('deep');
    expect(depth(signals[0]!.details.why)).toBe(4_000);
    expect(html).not.toContain('<script>window.__pwned');
    expect(html).toContain('&lt;/pre&gt;&lt;script&gt;window.__pwned = 1&lt;/script&gt;');
  });

  it('a 164 KB step of nested brackets answers 200 (it was a permanent 500)', async () => {
    const { html, raw } = await boundedPage('step164');
    expect(html).toContain('deeper than 10 levels');
    expect(stepsOf(raw)[0]!.tool_calls[0]!.function.arguments.length).toBe(164_000);
  });

  it('a step of two million token ids: decoded and drawn in part, counted in full', async () => {
    const { html, raw } = await boundedPage('tokens');
    expect(html).toMatch(/more tokens not decoded/);
    expect(html).toContain(`showing the first 1,500 of ${(500_000).toLocaleString('en-US')} response tokens`);
    expect(html).toContain(
      `${(1_500_000).toLocaleString('en-US')} + ${(500_000).toLocaleString('en-US')} tokens`,
    );
    const [step] = stepsOf(raw);
    expect(step!.prompt_ids.length).toBe(PROMPT_TOKENS);
    expect(step!.response_ids.length).toBe(RESPONSE_TOKENS);
  });

  it('long messages and tool output: every message listed or counted, texts cut, markup escaped', async () => {
    const { html, raw } = await boundedPage('long');
    expect(html).toMatch(/truncated — [\d,]+ more characters/);
    // The conversation lists its 461 messages (400, the answer, the answer's 60 tool results) or counts
    // those it leaves out.
    const shown = html.split('<li class="msg role-').length - 1;
    const counted = Number(html.match(/truncated — ([\d,]+) more messages/)?.[1]?.replace(/,/g, '') ?? 0);
    expect(shown).toBeGreaterThan(0);
    expect(shown + counted).toBe(461);
    expect(html).not.toContain('<script>window.__pwned');
    expect(html).not.toContain('<img src=x');
    const [step] = stepsOf(raw);
    expect(step!.messages[10]!.content.length).toBe(3_000_000);
    expect(step!.response_text.length).toBe(2_000_000);
    expect(step!.tool_results.map((r) => r.content.length)).toEqual(Array(60).fill(50_000));
  });

  it('/ready answers while the biggest page is being served', async () => {
    const page = fetch(`${server.url}/dashboard/trajectories/tokens`, { headers });
    const ready = await fetch(`${server.url}/ready`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ ok: true });
    expect((await page).status).toBe(200);
  });

  it.skipIf(!chromiumReady)(
    'in a browser: the long page loads cleanly and no stored markup runs',
    async () => {
      const browser = await launchBrowser();
      try {
        const { page, problems } = await openPage(browser);
        await page.context().addCookies([{ name: 'stepwise_key', value: KEY, url: server.url }]);
        await page.goto(`${server.url}/dashboard/trajectories/long`);
        expect(await page.locator('.truncated').count()).toBeGreaterThan(10);
        expect(await page.evaluate('typeof window.__pwned')).toBe('undefined');
        expect(await page.locator('main script, main img').count()).toBe(0);
        expect(problems).toEqual([]);
      } finally {
        await browser.close();
      }
    },
  );
});

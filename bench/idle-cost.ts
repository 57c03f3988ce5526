/**
 * What a few steps of a gateway call cost when they run back to back, and when they run after the
 * process has idled as long as an engine takes to answer: the same code, cold. Explains why the
 * gateway (and a bare proxy) add more latency to calls whose engine takes longer (bench/gateway.ts
 * `--sim-ttft-ms`). Prints medians; writes nothing.
 *
 *   node --import tsx bench/idle-cost.ts [--gap-ms 6] [--calls 300]
 *
 * Each sample: optionally sleep `gap` ms (setTimeout: the event loop idles in epoll), then time one
 * step. Steps: JSON.parse of the realistic 1,621-token chat request of bench/gateway.ts; node:http's
 * `http.request()` + `end(body)` on a keep-alive agent (until the call returns, not the answer);
 * undici's `request()` likewise (the gateway's upstream client).
 */
import http from 'node:http';
import { Agent, request } from 'undici';
import { benchRequestBody } from './gateway.js';
import { log } from './support.js';

const args = process.argv.slice(2);
const option = (name: string, fallback: number) => {
  const at = args.indexOf(name);
  const value = at >= 0 ? Number(args[at + 1]) : fallback;
  if (!(Number.isFinite(value) && value >= 0)) throw new Error(`${name}: must be a number >= 0`);
  return value;
};
if (args.includes('--help')) {
  process.stdout.write('usage: node --import tsx bench/idle-cost.ts [--gap-ms 6] [--calls 300]\n');
  process.exit(0);
}
const GAP_MS = option('--gap-ms', 6);
const CALLS = option('--calls', 300);

const median = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const body = benchRequestBody('realistic', false);
const server = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => res.end('{}'));
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const { port } = server.address() as { port: number };
const nodeAgent = new http.Agent({ keepAlive: true });
const undiciAgent = new Agent({ connections: 8, keepAliveTimeout: 30_000 });
const headers = { 'content-type': 'application/json' };

/** Times `step` (µs); `after` (untimed) lets a call finish before the next sample. */
type Step = () => Promise<void> | undefined;
const steps: Record<string, () => { timed: () => void; after: Step }> = {
  'JSON.parse (realistic request, 6.6 kB)': () => ({
    timed: () => void JSON.parse(body),
    after: () => undefined,
  }),
  'node:http request() + end()': () => {
    let done: Promise<void> = Promise.resolve();
    return {
      timed: () => {
        const req = http.request({
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: '/v1/chat/completions',
          headers: { ...headers, 'content-length': Buffer.byteLength(body) },
          agent: nodeAgent,
        });
        done = new Promise((resolve, reject) => {
          req.on('response', (res) => res.resume().on('end', resolve));
          req.on('error', reject);
        });
        req.end(body);
      },
      after: () => done,
    };
  },
  'undici request()': () => {
    let done: Promise<void> = Promise.resolve();
    return {
      timed: () => {
        done = request(`http://127.0.0.1:${port}/v1/chat/completions`, {
          method: 'POST',
          headers,
          body,
          dispatcher: undiciAgent,
        }).then((r) => r.body.dump());
      },
      after: () => done,
    };
  },
};

async function sample(make: () => { timed: () => void; after: Step }, gapMs: number): Promise<number> {
  const times: number[] = [];
  const step = make();
  for (let i = 0; i < CALLS; i++) {
    if (gapMs > 0) await sleep(gapMs);
    const t0 = performance.now();
    step.timed();
    times.push((performance.now() - t0) * 1000);
    await step.after();
  }
  return median(times);
}

log(`idle-cost: ${CALLS} samples per cell, gap ${GAP_MS} ms`);
const lines = [`| step | back to back µs | after ${GAP_MS} ms idle µs | ratio |`, '|---|---:|---:|---:|'];
for (const [name, make] of Object.entries(steps)) {
  await sample(make, 0); // warm-up: JIT and connections
  const hot = await sample(make, 0);
  const cold = await sample(make, GAP_MS);
  lines.push(`| ${name} | ${hot.toFixed(1)} | ${cold.toFixed(1)} | ${(cold / hot).toFixed(1)}× |`);
}
process.stdout.write(`${lines.join('\n')}\n`);
server.close();
nodeAgent.destroy();
await undiciAgent.close();

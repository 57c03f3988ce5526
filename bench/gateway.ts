/**
 * Gateway benchmark: the latency the gateway adds to each LLM call, its throughput against a bare
 * HTTP pass-through proxy (every answer sent after its step commits), the server's memory with many
 * open trajectories, and its event loop under the largest requests (stalls.ts). Prints a markdown
 * report; records the run's figures in bench/results/gateway.jsonl and, with the default settings,
 * its report in bench/results/gateway.md.
 *
 *   npm run bench:gateway               full run (~4-6 minutes)
 *   npm run bench:gateway -- --quick    shorter phases, 1 rep, fewer trajectories, prints only
 *   ... -- --store-thread main / --sync NORMAL   the gateway with other settings (figures only)
 *   ... -- --sim-ttft-ms 6              the sim answers no sooner than 6 ms after each request,
 *                                       idle once its answer is computed (figures only)
 *
 * BENCH_CPU_PROF=DIR writes a .cpuprofile of each gateway process into DIR.
 *
 * Four processes: this one (the agents: an undici keep-alive client), the sim (`startSimServer`,
 * echo policy, instant latency), a Stepwise server (`startServer` with `engines: ['vllm=<sim>']`,
 * SQLite in a temp dir) and a bare node:http proxy to the same sim. The servers run in child
 * processes (`fork`), so the client does not share their event loop.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { startSimServer } from '../packages/core/src/engines/sim/serve.js';
import { startServer } from '../packages/core/src/server/server.js';
import { benchStalls, type StallSection, stallReport } from './stalls.js';
import {
  codeVersion,
  exitOnHelp,
  exitWithParent,
  fix,
  int,
  log,
  machineInfo,
  mib,
  nextMessage,
  percentile,
  recordRun,
  round,
  verdict,
} from './support.js';

const THIS_FILE = fileURLToPath(import.meta.url);
const _REPO_ROOT = resolve(dirname(THIS_FILE), '..');
const HOST = '127.0.0.1';
const MODEL = 'sim-qwen3'; // the sim's served model: the gateway forwards the name unchanged

const TARGETS = { addedP50Ms: 1, addedP99Ms: 5, throughputRatio: 0.7 };

// ---- helpers ------------------------------------------------------------------------------------

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

const signed = (n: number, d = 2) => `${n >= 0 ? '+' : ''}${n.toFixed(d)}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---- the requests -------------------------------------------------------------------------------

/** The last user message (the echo policy answers with it): 21 words. */
const ECHO_MESSAGE =
  'Please summarise the failing test in two sentences and suggest the smallest change to the parser that would make it pass.';

const SYSTEM_PROMPT = [
  'You are a careful software engineering agent working inside a sandboxed copy of a TypeScript repository.',
  'You can read files, list directories, write files and run the test suite through the tools you are given.',
  'Work in small steps: read the code that matters before changing it, make the smallest change that fixes the problem,',
  'and run the tests after every change. Never guess the content of a file you have not read. When a tool fails,',
  'read its error message, explain in one sentence what went wrong, and try again with corrected arguments.',
  'Keep the public API stable unless the task says otherwise; do not rename exported functions or change their',
  'signatures. Prefer clear code over clever code, keep functions short, and add a test for every bug you fix.',
  'Write commit-quality code: consistent formatting, no commented-out code, no debugging output left behind.',
  'When you are done, answer with a short summary of what you changed and why, naming the files you touched.',
  'If the task cannot be completed, say so plainly and explain what is missing. Do not invent test results.',
  'The repository uses strict TypeScript, ESM modules, vitest for tests and biome for formatting and linting.',
  'Paths are relative to the repository root. Files larger than 200 kB are truncated when read; read them in parts.',
  'You have at most 30 tool calls for this task, so plan before acting and avoid reading the same file twice.',
  'Security rules: never print environment variables, never call the network, never write outside the repository.',
].join(' ');

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a text file of the repository and return its content.',
      parameters: {
        type: 'object',
        properties: {
          path: { type: 'string', description: 'path relative to the repository root' },
          start_line: { type: 'integer', description: 'first line to return (1-based)' },
          end_line: { type: 'integer', description: 'last line to return (inclusive)' },
        },
        required: ['path'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'write_file',
      description: 'Replace the whole content of a file (creating it if needed).',
      parameters: {
        type: 'object',
        properties: {
          path: { type: 'string', description: 'path relative to the repository root' },
          content: { type: 'string', description: 'the new content of the file' },
        },
        required: ['path', 'content'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'run_tests',
      description: 'Run the test suite (or the tests matching a filter) and return the report.',
      parameters: {
        type: 'object',
        properties: { filter: { type: 'string', description: 'a test file or name pattern' } },
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'list_dir',
      description: 'List the entries of a directory of the repository.',
      parameters: {
        type: 'object',
        properties: { path: { type: 'string', description: 'directory relative to the repository root' } },
        required: ['path'],
      },
    },
  },
];

/** A plausible source file (~400 tokens), as a read_file tool result. */
function sourceFile(): string {
  const lines: string[] = [
    "import { ValidationError } from './errors.js';",
    '',
    'export interface Token {',
    "  kind: 'number' | 'ident' | 'op' | 'lparen' | 'rparen';",
    '  text: string;',
    '  at: number;',
    '}',
    '',
  ];
  const kinds = { number: 'number', operator: 'op' } as const;
  for (const [name, kind] of Object.entries(kinds)) {
    lines.push(
      `/** Reads a ${name} starting at \`at\`; returns the token and the position after it. */`,
      `export function read${name[0]!.toUpperCase()}${name.slice(1)}(source: string, at: number): [Token, number] {`,
      '  let end = at;',
      `  while (end < source.length && is${name[0]!.toUpperCase()}${name.slice(1)}Char(source[end]!, end - at)) end++;`,
      `  if (end === at) throw new ValidationError(\`expected a ${name} at \${at}\`, 'source');`,
      `  return [{ kind: '${kind}', text: source.slice(at, end), at }, end];`,
      '}',
      '',
    );
  }
  lines.push(
    '/** Splits an arithmetic expression into tokens, skipping whitespace. */',
    'export function tokenize(source: string): Token[] {',
    '  const tokens: Token[] = [];',
    '  let at = 0;',
    '  while (at < source.length) {',
    '    const c = source[at]!;',
    "    if (c === ' ' || c === '\\t') { at++; continue; }",
    '    const [token, next] = /[0-9]/.test(c) ? readNumber(source, at) : readOperator(source, at);',
    '    tokens.push(token);',
    '    at = next;',
    '  }',
    '  return tokens;',
    '}',
  );
  return lines.join('\n');
}

const TEST_REPORT = [
  ' RUN  v4.1.12 /repo',
  '',
  ' ✓ test/tokenize.test.ts (14 tests) 12ms',
  ' ❯ test/parser.test.ts (22 tests | 1 failed) 18ms',
  '   × parses a negative number after an operator 4ms',
  '     → expected [ { kind: "op", text: "-" }, { kind: "number", text: "3" } ] to deeply equal [ { kind: "number", text: "-3" } ]',
  '',
  ' FAIL  test/parser.test.ts > parses a negative number after an operator',
  'AssertionError: expected [ …(2) ] to deeply equal [ …(1) ]',
  '  - Expected',
  '  + Received',
  '    [',
  '  -   { "at": 4, "kind": "number", "text": "-3" },',
  '  +   { "at": 4, "kind": "op", "text": "-" },',
  '  +   { "at": 5, "kind": "number", "text": "3" },',
  '    ]',
  ' ❯ test/parser.test.ts:88:31',
  '',
  ' Test Files  1 failed | 1 passed (2)',
  '      Tests  1 failed | 35 passed (36)',
  '   Duration  412ms',
].join('\n');

type PromptKind = 'short' | 'realistic';

/** The conversation of each prompt; the last user message is always ECHO_MESSAGE. */
function messages(kind: PromptKind): object[] {
  if (kind === 'short') return [{ role: 'user', content: ECHO_MESSAGE }];
  return [
    { role: 'system', content: SYSTEM_PROMPT },
    {
      role: 'user',
      content:
        'The expression parser in src/parser.ts mis-reads negative numbers that follow an operator, so "2 * -3" evaluates to an error instead of -6. Find the cause, fix it without changing the public API, and make sure the whole test suite passes afterwards.',
    },
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          id: 'call_read_1',
          type: 'function',
          function: { name: 'read_file', arguments: JSON.stringify({ path: 'src/parser.ts' }) },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'call_read_1', content: sourceFile() },
    {
      role: 'assistant',
      content: 'The tokenizer treats every minus sign as an operator. Let me run the parser tests first.',
      tool_calls: [
        {
          id: 'call_test_2',
          type: 'function',
          function: { name: 'run_tests', arguments: JSON.stringify({ filter: 'test/parser.test.ts' }) },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'call_test_2', content: TEST_REPORT },
    {
      role: 'assistant',
      content:
        'One test fails: a minus sign right after an operator should start a negative number, but tokenize always reads it with readOperator. The fix belongs in tokenize: look at the previous token before choosing the reader.',
    },
    { role: 'user', content: ECHO_MESSAGE },
  ];
}

/**
 * The request body, serialized once. It already asks for what the gateway asks an exact-id engine for
 * (`return_token_ids`, `logprobs`, the usage chunk when streaming), so the sim does the same work and
 * sends the same bytes whether it is called directly, through the bare proxy or through the gateway.
 */
function requestBody(kind: PromptKind, stream: boolean): string {
  return JSON.stringify({
    model: MODEL,
    messages: messages(kind),
    ...(kind === 'realistic' ? { tools: TOOLS } : {}),
    max_tokens: 256,
    temperature: 0,
    logprobs: true,
    return_token_ids: true,
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
  });
}

// ---- child processes ----------------------------------------------------------------------------

interface ChildStats {
  rss: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  cpuUs: number;
  openSessions: number | null;
  lostSteps: number | null;
}

type ChildMessage = { type: 'ready'; url: string } | ({ type: 'stats' } & ChildStats);

/** Answers `stats` (optionally after a full GC) and `close` from the parent. */
function serveParent(
  extra: () => Pick<ChildStats, 'openSessions' | 'lostSteps'>,
  close: () => Promise<void>,
) {
  process.on('message', (m: { type: string; gc?: boolean }) => {
    if (m.type === 'stats') {
      const gc = (globalThis as { gc?: () => void }).gc;
      if (m.gc && gc) {
        gc();
        gc();
      }
      const mem = process.memoryUsage();
      const cpu = process.cpuUsage();
      const reply: ChildMessage = {
        type: 'stats',
        rss: mem.rss,
        heapUsed: mem.heapUsed,
        external: mem.external,
        arrayBuffers: mem.arrayBuffers,
        cpuUs: cpu.user + cpu.system,
        ...extra(),
      };
      process.send?.(reply);
    } else if (m.type === 'close') {
      void close().then(() => process.exit(0));
    }
  });
}

async function simChild(ttftMs: number): Promise<void> {
  const sim = await startSimServer({ host: HOST, port: 0, policy: 'echo', ttftMs });
  serveParent(
    () => ({ openSessions: null, lostSteps: null }),
    () => sim.close(),
  );
  process.send?.({ type: 'ready', url: sim.url } satisfies ChildMessage);
}

/** Settings of the gateway under test; the defaults are `stepwise serve`'s. */
interface GatewaySettings {
  storeThread: 'main' | 'worker';
  synchronous: 'FULL' | 'NORMAL';
}
const DEFAULT_SETTINGS: GatewaySettings = { storeThread: 'worker', synchronous: 'FULL' };

async function gatewayChild(simUrl: string, dbPath: string, settings: GatewaySettings): Promise<void> {
  const server = await startServer({
    dbPath,
    host: HOST,
    port: 0,
    engines: [`vllm=${simUrl}`],
    storeThread: settings.storeThread,
    synchronous: settings.synchronous,
  });
  serveParent(
    () => ({ openSessions: server.gateway.openSessions, lostSteps: server.gateway.lostSteps }),
    () => server.close(),
  );
  process.send?.({ type: 'ready', url: server.url } satisfies ChildMessage);
}

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

function endToEndHeaders(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  const out: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) if (!HOP_BY_HOP.has(name)) out[name] = value;
  return out;
}

/** The baseline hop: pipes each request to the sim and its answer back; parses nothing but headers. */
async function proxyChild(simUrl: string): Promise<void> {
  const upstream = new URL(simUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  const server = http.createServer((req, res) => {
    const forward = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: endToEndHeaders(req.headers),
        agent,
      },
      (reply) => {
        res.writeHead(reply.statusCode ?? 502, endToEndHeaders(reply.headers));
        reply.pipe(res);
      },
    );
    forward.on('error', (error) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(String(error));
    });
    req.pipe(forward);
  });
  await new Promise<void>((r) => server.listen(0, HOST, r));
  const { port } = server.address() as { port: number };
  serveParent(
    () => ({ openSessions: null, lostSteps: null }),
    async () => {
      server.closeAllConnections();
      agent.destroy();
    },
  );
  process.send?.({ type: 'ready', url: `http://${HOST}:${port}` } satisfies ChildMessage);
}

interface Child {
  process: ChildProcess;
  url: string;
  stats(gc?: boolean): Promise<ChildStats>;
  close(): Promise<void>;
}

async function startChild(args: string[], exposeGc = false): Promise<Child> {
  const execArgv = [...process.execArgv];
  if (exposeGc) execArgv.push('--expose-gc');
  const profileDir = process.env.BENCH_CPU_PROF;
  if (profileDir && args[0] === '--gateway-child') {
    mkdirSync(profileDir, { recursive: true });
    execArgv.push('--cpu-prof', `--cpu-prof-dir=${resolve(profileDir)}`);
  }
  const child = fork(THIS_FILE, args, {
    execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const { url } = await nextMessage<ChildMessage, 'ready'>(child, 'ready');
  return {
    process: child,
    url,
    async stats(gc = false) {
      const reply = nextMessage<ChildMessage, 'stats'>(child, 'stats');
      child.send({ type: 'stats', gc });
      const { type: _type, ...stats } = await reply;
      return stats;
    },
    async close() {
      if (child.exitCode !== null) return;
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      child.send({ type: 'close' });
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

// ---- the client ---------------------------------------------------------------------------------

/** One keep-alive pool per origin, shared by all agents (every target gets the same client). */
const dispatcher = new Agent({
  connections: 256,
  keepAliveTimeout: 60_000,
  keepAliveMaxTimeout: 600_000,
});
const JSON_HEADERS = { 'content-type': 'application/json' };

/** Posts a body and reads the answer to its last byte; returns the answer's text. */
async function post(url: string, body: string): Promise<string> {
  const reply = await request(url, { method: 'POST', headers: JSON_HEADERS, body, dispatcher });
  const text = await reply.body.text();
  if (reply.statusCode !== 200)
    throw new Error(`POST ${url} answered ${reply.statusCode}: ${text.slice(0, 300)}`);
  return text;
}

/** One timed call: time from sending the request to the answer's last byte, in ms. */
async function timedCall(url: string, body: string): Promise<number> {
  const t0 = performance.now();
  const reply = await request(url, { method: 'POST', headers: JSON_HEADERS, body, dispatcher });
  // Consume to the end without building a string; the status check happens after the timing.
  await reply.body.arrayBuffer();
  const ms = performance.now() - t0;
  if (reply.statusCode !== 200) throw new Error(`POST ${url} answered ${reply.statusCode}`);
  return ms;
}

/** Checks one answer: the echo policy must have answered with the last user message. */
function checkAnswer(text: string, stream: boolean, where: string): void {
  let content = '';
  if (stream) {
    if (!text.includes('data: [DONE]')) throw new Error(`${where}: the stream did not end with [DONE]`);
    for (const line of text.split('\n')) {
      if (!line.startsWith('data: {')) continue;
      const chunk = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[] };
      content += chunk.choices?.[0]?.delta?.content ?? '';
    }
  } else {
    content =
      (JSON.parse(text) as { choices: { message: { content: string } }[] }).choices[0]?.message.content ?? '';
  }
  if (content !== ECHO_MESSAGE) throw new Error(`${where}: unexpected answer ${JSON.stringify(content)}`);
}

async function initTrajectory(gatewayUrl: string): Promise<string> {
  const text = await post(`${gatewayUrl}/init_trajectory`, '{}');
  return (JSON.parse(text) as { base_url: string }).base_url;
}

// ---- 1 + 2. latency and throughput --------------------------------------------------------------

type Target = 'direct' | 'proxy' | 'gateway';

interface Phase {
  latencies: number[];
  seconds: number;
  callsPerSec: number;
  errors: number;
  /** CPU of the sim, the hop (proxy or gateway) and this client, in µs per call. */
  simCpuUs: number;
  hopCpuUs: number | null;
  clientCpuUs: number;
}

interface Config {
  prompt: PromptKind;
  stream: boolean;
  agents: number;
}

const configKey = (c: Config) => `${c.prompt}/${c.stream ? 'stream' : 'whole'}/${c.agents}`;

interface Servers {
  sim: Child;
  proxy: Child;
  gateway: Child;
}

const WARMUP_CALLS_ONE_AGENT = 5;

/** How long a phase runs: until `seconds` have passed or `maxCalls` calls are done, whichever is first. */
interface Limit {
  seconds: number;
  maxCalls: number;
}

/** `agents` concurrent agents, each calling in a loop until the limit, one call at a time. */
async function phase(servers: Servers, target: Target, config: Config, limit: Limit): Promise<Phase> {
  const body = requestBody(config.prompt, config.stream);
  const urls: string[] = [];
  for (let a = 0; a < config.agents; a++) {
    if (target === 'gateway') urls.push(`${await initTrajectory(servers.gateway.url)}/chat/completions`);
    else urls.push(`${target === 'direct' ? servers.sim.url : servers.proxy.url}/v1/chat/completions`);
  }
  // Warm-up (not counted): check the answer once, then a few calls per agent.
  checkAnswer(await post(urls[0]!, body), config.stream, `${target} ${configKey(config)}`);
  const warmup = config.agents === 1 ? WARMUP_CALLS_ONE_AGENT : 1;
  await Promise.all(
    urls.map(async (url) => {
      for (let i = 0; i < warmup; i++) await timedCall(url, body);
    }),
  );
  const hop = target === 'direct' ? null : servers[target];
  const [sim0, hop0] = await Promise.all([servers.sim.stats(), hop?.stats()]);
  const cpu0 = process.cpuUsage();
  const latencies: number[] = [];
  let errors = 0;
  let lastEnd = 0;
  const t0 = performance.now();
  const deadline = t0 + limit.seconds * 1000;
  let started = 0;
  await Promise.all(
    urls.map(async (url) => {
      while (performance.now() < deadline && started++ < limit.maxCalls) {
        try {
          latencies.push(await timedCall(url, body));
        } catch (error) {
          errors++;
          if (errors === 1) log(`${target} error: ${(error as Error).message}`);
        }
        lastEnd = performance.now();
      }
    }),
  );
  const wall = (lastEnd - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const [sim1, hop1] = await Promise.all([servers.sim.stats(), hop?.stats()]);
  const calls = latencies.length;
  return {
    latencies,
    seconds: wall,
    callsPerSec: calls / wall,
    errors,
    simCpuUs: (sim1.cpuUs - sim0.cpuUs) / calls,
    hopCpuUs: hop0 && hop1 ? (hop1.cpuUs - hop0.cpuUs) / calls : null,
    clientCpuUs: (cpu.user + cpu.system) / calls,
  };
}

/** Blocks of one phase as one: latencies pooled, rates and CPU over all their calls. */
function mergePhases(parts: Phase[]): Phase {
  if (parts.length === 1) return parts[0]!;
  const calls = parts.reduce((n, p) => n + p.latencies.length, 0);
  const seconds = parts.reduce((n, p) => n + p.seconds, 0);
  const perCall = (f: (p: Phase) => number) =>
    parts.reduce((n, p) => n + f(p) * p.latencies.length, 0) / calls;
  return {
    latencies: parts.flatMap((p) => p.latencies),
    seconds,
    callsPerSec: calls / seconds,
    errors: parts.reduce((n, p) => n + p.errors, 0),
    simCpuUs: perCall((p) => p.simCpuUs),
    hopCpuUs: parts[0]!.hopCpuUs === null ? null : perCall((p) => p.hopCpuUs ?? 0),
    clientCpuUs: perCall((p) => p.clientCpuUs),
  };
}

interface LatencySection {
  reps: number;
  limits: Record<number, Limit>;
  blocks: number;
  configs: Config[];
  /** configKey → target → one Phase per rep */
  runs: Record<string, Record<Target, Phase[]>>;
  promptTokens: Record<PromptKind, number>;
  completionTokens: number;
  /** The sim's time to first token (0: it answers as soon as it has computed the answer). */
  simTtftMs: number;
  lostSteps: number;
}

async function usageOf(simUrl: string, prompt: PromptKind): Promise<{ prompt: number; completion: number }> {
  const text = await post(`${simUrl}/v1/chat/completions`, requestBody(prompt, false));
  const usage = (JSON.parse(text) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
  return { prompt: usage.prompt_tokens, completion: usage.completion_tokens };
}

async function benchCalls(
  sim: Child,
  quick: boolean,
  settings: GatewaySettings,
  simTtftMs: number,
): Promise<LatencySection> {
  const settingsArg = JSON.stringify(settings);
  const oneAgentBlocks = quick ? 2 : 12;
  const reps = quick ? 1 : 3;
  const limits: Record<number, Limit> = quick
    ? { 1: { seconds: 1, maxCalls: 200 }, 64: { seconds: 1, maxCalls: Number.POSITIVE_INFINITY } }
    : { 1: { seconds: 2.5, maxCalls: 600 }, 64: { seconds: 2.5, maxCalls: Number.POSITIVE_INFINITY } };
  const configs: Config[] = [];
  for (const prompt of ['short', 'realistic'] as const)
    for (const stream of [false, true])
      for (const agents of [1, 64]) configs.push({ prompt, stream, agents });
  const short = await usageOf(sim.url, 'short');
  const realistic = await usageOf(sim.url, 'realistic');
  const runs: LatencySection['runs'] = {};
  const proxy = await startChild(['--proxy-child', sim.url]);
  let lostSteps = 0;
  try {
    for (let rep = 0; rep < reps; rep++) {
      const dir = mkdtempSync(join(os.tmpdir(), 'stepwise-bench-gateway-'));
      const gateway = await startChild(['--gateway-child', sim.url, join(dir, 'gateway.db'), settingsArg]);
      const servers = { sim, proxy, gateway };
      try {
        // Warm every path (JIT, connections) before the first measured phase.
        for (const target of ['direct', 'proxy', 'gateway'] as const)
          for (const stream of [false, true])
            await phase(
              servers,
              target,
              { prompt: 'short', stream, agents: 64 },
              { seconds: quick ? 0.3 : 0.6, maxCalls: Number.POSITIVE_INFINITY },
            );
        // Alternate the order of the targets between reps, so a drift of the machine favours none.
        const order: Target[] =
          rep % 2 === 0 ? ['direct', 'proxy', 'gateway'] : ['gateway', 'proxy', 'direct'];
        for (const config of configs) {
          const key = configKey(config);
          runs[key] ??= { direct: [], proxy: [], gateway: [] };
          // With one agent, each target's calls are split into blocks taken in turn (ABCABC...), so
          // the machine's drift during the config spreads evenly over the targets.
          const limit = limits[config.agents]!;
          const blocks = config.agents === 1 ? oneAgentBlocks : 1;
          const parts: Record<Target, Phase[]> = { direct: [], proxy: [], gateway: [] };
          for (let b = 0; b < blocks; b++) {
            for (const target of order) {
              parts[target].push(
                await phase(servers, target, config, {
                  seconds: limit.seconds / blocks,
                  maxCalls: limit.maxCalls / blocks,
                }),
              );
            }
          }
          for (const target of order) {
            const run = mergePhases(parts[target]);
            runs[key][target].push(run);
            log(
              `rep ${rep + 1} ${key} ${target}: p50 ${fix(median(run.latencies), 3)} ms, p99 ${fix(percentile(run.latencies, 99), 3)} ms, ${int(run.callsPerSec)} calls/s (${run.latencies.length} calls)`,
            );
          }
        }
        lostSteps += (await gateway.stats()).lostSteps ?? 0;
      } finally {
        await gateway.close();
        rmSync(dir, { recursive: true, force: true });
      }
    }
  } finally {
    await proxy.close();
  }
  return {
    reps,
    limits,
    blocks: oneAgentBlocks,
    configs,
    runs,
    promptTokens: { short: short.prompt, realistic: realistic.prompt },
    completionTokens: realistic.completion,
    simTtftMs,
    lostSteps,
  };
}

// ---- 3. memory with many open trajectories ------------------------------------------------------

interface MemoryRun {
  prompt: PromptKind;
  trajectories: number;
  idle: ChildStats;
  afterInit: ChildStats;
  afterCalls: ChildStats;
  afterCallsGc: ChildStats;
  initPerSec: number;
  callsPerSec: number;
}

/** A fresh gateway opens `trajectories` trajectories, then makes one non-streaming call on each. */
async function memoryRun(
  sim: Child,
  prompt: PromptKind,
  trajectories: number,
  settings: GatewaySettings,
): Promise<MemoryRun> {
  const agents = 64;
  const dir = mkdtempSync(join(os.tmpdir(), 'stepwise-bench-gateway-mem-'));
  const gateway = await startChild(
    ['--gateway-child', sim.url, join(dir, 'gateway.db'), JSON.stringify(settings)],
    true,
  );
  try {
    await sleep(500);
    const idle = await gateway.stats(true);
    const urls: string[] = [];
    let claimed = 0;
    let t0 = performance.now();
    await Promise.all(
      Array.from({ length: agents }, async () => {
        while (claimed++ < trajectories) urls.push(`${await initTrajectory(gateway.url)}/chat/completions`);
      }),
    );
    const initPerSec = trajectories / ((performance.now() - t0) / 1000);
    const afterInit = await gateway.stats();
    log(
      `memory (${prompt}): ${int(trajectories)} trajectories opened (${int(initPerSec)}/s), RSS ${mib(afterInit.rss)}`,
    );
    const body = requestBody(prompt, false);
    let next = 0;
    t0 = performance.now();
    await Promise.all(
      Array.from({ length: agents }, async () => {
        for (let k = next++; k < urls.length; k = next++) await timedCall(urls[k]!, body);
      }),
    );
    const callsPerSec = trajectories / ((performance.now() - t0) / 1000);
    await sleep(1_000); // the last steps are written behind the answers
    const afterCalls = await gateway.stats();
    const afterCallsGc = await gateway.stats(true);
    log(`memory (${prompt}): one call on each (${int(callsPerSec)}/s), RSS ${mib(afterCalls.rss)}`);
    if (afterCalls.openSessions !== trajectories) {
      log(`memory: the gateway holds ${afterCalls.openSessions} sessions, expected ${trajectories}`);
    }
    return { prompt, trajectories, idle, afterInit, afterCalls, afterCallsGc, initPerSec, callsPerSec };
  } finally {
    await gateway.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function benchMemory(sim: Child, quick: boolean, settings: GatewaySettings): Promise<MemoryRun[]> {
  // The headline count with the short prompt; fewer with the realistic one (the sim needs ~10 ms of
  // CPU per realistic call here), to see how the per-trajectory cost grows with the prompt.
  return [
    await memoryRun(sim, 'short', quick ? 1_000 : 10_000, settings),
    await memoryRun(sim, 'realistic', quick ? 300 : 1_000, settings),
  ];
}

// ---- report -------------------------------------------------------------------------------------

interface Summary {
  p50: number;
  p99: number;
  callsPerSec: number;
  calls: number;
  errors: number;
  simCpuUs: number;
  hopCpuUs: number | null;
  clientCpuUs: number;
}

/** Median over reps of each per-rep figure. */
function summarize(phases: Phase[]): Summary {
  const m = (f: (p: Phase) => number) => median(phases.map(f));
  return {
    p50: m((p) => median(p.latencies)),
    p99: m((p) => percentile(p.latencies, 99)),
    callsPerSec: m((p) => p.callsPerSec),
    calls: m((p) => p.latencies.length),
    errors: phases.reduce((n, p) => n + p.errors, 0),
    simCpuUs: m((p) => p.simCpuUs),
    hopCpuUs: phases[0]?.hopCpuUs === null ? null : m((p) => p.hopCpuUs ?? Number.NaN),
    clientCpuUs: m((p) => p.clientCpuUs),
  };
}

/** Median over reps of (hop − direct) within the same rep, for a per-rep statistic. */
function added(a: Phase[], direct: Phase[], stat: (latencies: number[]) => number): number {
  return median(a.map((p, i) => stat(p.latencies) - stat(direct[i]!.latencies)));
}

const promptLabel = (s: LatencySection, p: PromptKind) =>
  p === 'short' ? `short (${s.promptTokens.short} tok)` : `realistic (${int(s.promptTokens.realistic)} tok)`;

function latencyReport(s: LatencySection): string[] {
  const p50 = (l: number[]) => median(l);
  const p99 = (l: number[]) => percentile(l, 99);
  const lines = [
    '### 1. Added latency per call',
    '',
    `The same pre-serialized chat request sent by N concurrent agents (each awaiting its answer before the next call) to three targets: the sim directly, a bare node:http proxy in front of it, and the Stepwise gateway (\`startServer\` with \`engines: ['vllm=<sim>']\`, default settings: SQLite \`--sync full\` (a commit acknowledged once the WAL is flushed, off the event loop), every call captured as a step and written behind the answer). Each gateway agent has its own fresh trajectory (\`POST /init_trajectory\`, not timed) and calls its base_url \`…/chat/completions\`. The sim: echo policy (answers the last user message, ${s.completionTokens} completion tokens), ${s.simTtftMs > 0 ? `a ${s.simTtftMs} ms time to first token (idle, after computing the answer) and no decode delay` : 'instant latency (no ttft, no decode delay)'}. Requests already carry \`return_token_ids\`, \`logprobs\` (and the usage chunk when streaming), which the gateway would add, so the sim does the same work on every path (the gateway then forwards the agent's text as it came; an agent that sets none of them gets them appended to its text, one string concatenation). Latency = request sent to the answer's last byte (streams included), undici keep-alive client. Prompts: **short** = one 21-word user message; **realistic** = system prompt, 4 tools, a task, two tool calls with their results (a 30-line source file, a test report) and two assistant turns, then the same 21-word user message. Each phase runs ${s.limits[64]!.seconds} s with 64 agents, and ${s.limits[1]!.maxCalls} calls or ${s.limits[1]!.seconds} s (whichever comes first) with 1 agent (taken in ${s.blocks} blocks per target, the targets in turn), each after an uncounted warm-up (${WARMUP_CALLS_ONE_AGENT} calls with 1 agent, 1 call per agent with 64); ${s.reps === 1 ? '1 rep' : `median of ${s.reps} reps (target order alternated between reps; a fresh gateway and database each rep)`}.`,
    '',
    `**Added = the per-rep difference of the statistic (gateway p50 − direct p50, gateway p99 − direct p99), median over reps** — a difference of medians, not a median of paired differences (calls to different targets run in different phases). Targets: added p50 ≤ ${TARGETS.addedP50Ms} ms and added p99 ≤ ${TARGETS.addedP99Ms} ms, judged with 1 agent; with 64 agents on ${os.cpus().length} cores the latency is mostly queueing for the CPU that client, sim and gateway share, so those verdicts are in parentheses.`,
    '',
    '| prompt | stream | agents | direct p50 / p99 ms | bare proxy p50 / p99 ms | gateway p50 / p99 ms | proxy added p50 / p99 ms | **gateway added p50** | **gateway added p99** | gateway − proxy p50 / p99 ms | added p50 per rep | calls (gateway) | target p50 ≤ 1 ms / p99 ≤ 5 ms |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|',
  ];
  for (const c of s.configs) {
    const r = s.runs[configKey(c)]!;
    const [d, px, gw] = [summarize(r.direct), summarize(r.proxy), summarize(r.gateway)];
    const a50 = added(r.gateway, r.direct, p50);
    const a99 = added(r.gateway, r.direct, p99);
    const v = `${verdict(a50 <= TARGETS.addedP50Ms)} / ${verdict(a99 <= TARGETS.addedP99Ms)}`;
    lines.push(
      `| ${promptLabel(s, c.prompt)} | ${c.stream ? 'yes' : 'no'} | ${c.agents} | ${fix(d.p50, 3)} / ${fix(d.p99, 3)} | ${fix(px.p50, 3)} / ${fix(px.p99, 3)} | ${fix(gw.p50, 3)} / ${fix(gw.p99, 3)} | ${signed(added(r.proxy, r.direct, p50), 3)} / ${signed(added(r.proxy, r.direct, p99), 3)} | **${signed(a50, 3)}** | **${signed(a99, 3)}** | ${signed(added(r.gateway, r.proxy, p50), 3)} / ${signed(added(r.gateway, r.proxy, p99), 3)} | ${r.gateway.map((g, i) => signed(p50(g.latencies) - p50(r.direct[i]!.latencies))).join(' / ')} | ${int(gw.calls)} | ${c.agents === 1 ? v : `(${v})`} |`,
    );
  }
  const errors = Object.values(s.runs).reduce(
    (n, r) => n + summarize(r.direct).errors + summarize(r.proxy).errors + summarize(r.gateway).errors,
    0,
  );
  const simCpu = (p: PromptKind) =>
    median(s.runs[configKey({ prompt: p, stream: false, agents: 64 })]!.direct.map((x) => x.simCpuUs));
  lines.push(
    '',
    `Errors: ${errors}. Steps whose write failed in the gateway (\`lostSteps\`): ${s.lostSteps}. The sim itself needs about ${int(simCpu('short'))} µs of CPU per short call and ${int(simCpu('realistic'))} µs per realistic call (it renders the chat template and tokenizes the whole prompt every call), so the 64-agent realistic rows are bound by the sim, hold few calls per agent, and their differences are mostly run-to-run noise; the gateway's own cost shows best in the short-prompt rows and in the CPU columns of section 2.`,
  );
  return lines;
}

function throughputReport(s: LatencySection): string[] {
  const lines = [
    '### 2. Throughput with 64 agents',
    '',
    `Completed calls per second in the 64-agent phases of section 1 (calls / time from the start to the last answer). The bare proxy is a node:http server that pipes each request to the sim over a keep-alive agent and pipes the answer back, parsing nothing but headers (the cheapest possible extra hop). CPU is per call, in µs, from \`process.cpuUsage()\` of each process over the phase (sim, the hop — proxy or gateway — and the client). Target: gateway ≥ ${TARGETS.throughputRatio}× the bare proxy.`,
    '',
    '| prompt | stream | direct calls/s | bare proxy calls/s | gateway calls/s | **gateway / bare proxy** | CPU µs/call: sim | proxy | gateway | gateway − proxy | client (direct / proxy / gateway) | target ≥ 0.7× |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|',
  ];
  for (const c of s.configs) {
    if (c.agents !== 64) continue;
    const r = s.runs[configKey(c)]!;
    const [d, px, gw] = [summarize(r.direct), summarize(r.proxy), summarize(r.gateway)];
    const ratio = median(r.gateway.map((p, i) => p.callsPerSec / r.proxy[i]!.callsPerSec));
    lines.push(
      `| ${promptLabel(s, c.prompt)} | ${c.stream ? 'yes' : 'no'} | ${int(d.callsPerSec)} | ${int(px.callsPerSec)} | ${int(gw.callsPerSec)} | **${fix(ratio)}×** | ${int(d.simCpuUs)} | ${int(px.hopCpuUs ?? Number.NaN)} | ${int(gw.hopCpuUs ?? Number.NaN)} | ${int((gw.hopCpuUs ?? Number.NaN) - (px.hopCpuUs ?? Number.NaN))} | ${int(d.clientCpuUs)} / ${int(px.clientCpuUs)} / ${int(gw.clientCpuUs)} | ${verdict(ratio >= TARGETS.throughputRatio)} |`,
    );
  }
  lines.push(
    '',
    "The ratio is the median over reps of gateway calls/s ÷ proxy calls/s in the same rep. Client, sim and hop share the machine's cores, so a hop that uses more CPU per call also slows the sim and the client: the ratio measures the whole system, the CPU columns say where the time goes.",
  );
  return lines;
}

function memoryReport(runs: MemoryRun[], promptTokens: Record<PromptKind, number>): string[] {
  const head = runs[0]!;
  const perTrajectory = (m: MemoryRun, b: number, a: number) =>
    `${fix((a - b) / m.trajectories / 1024, 1)} KiB`;
  const lines = [
    `### 3. Gateway memory with ${int(head.trajectories)} open trajectories`,
    '',
    `A fresh gateway (own process, fresh database) opens N trajectories (\`POST /init_trajectory\`, 64 concurrent), then makes one non-streaming call on each (64 concurrent), so each trajectory holds one captured step and stays open: a session in the gateway, an affinity entry in the engine router, the last step's tokens and messages in the store's tail cache, its pages in SQLite's page cache (up to 64 MiB). \`process.memoryUsage()\` of the gateway process over IPC; "after GC" forces two full collections first (\`--expose-gc\`). The headline run uses the short prompt (${promptTokens.short} prompt tokens); a smaller run with the realistic prompt (${int(promptTokens.realistic)} tokens) shows how the cost per trajectory grows with the prompt.`,
    '',
    '| run | point | RSS | V8 heap used | external (of which ArrayBuffers) |',
    '|---|---|---:|---:|---:|',
  ];
  for (const m of runs) {
    const run = `${int(m.trajectories)} × ${m.prompt} prompt`;
    const row = (point: string, x: ChildStats, bold = false) =>
      `| ${run} | ${point} | ${bold ? `**${mib(x.rss)}**` : mib(x.rss)} | ${mib(x.heapUsed)} | ${mib(x.external)} (${mib(x.arrayBuffers)}) |`;
    lines.push(
      row('started, idle (after GC)', m.idle),
      row(`after ${int(m.trajectories)} init_trajectory (${int(m.initPerSec)}/s)`, m.afterInit),
      row(`after one call on each (${int(m.callsPerSec)} calls/s)`, m.afterCalls, true),
      row('after one call on each, after GC', m.afterCallsGc),
    );
  }
  lines.push('');
  for (const m of runs) {
    lines.push(
      `- ${int(m.trajectories)} × ${m.prompt} prompt: open sessions at the end ${m.afterCalls.openSessions === null ? 'n/a' : int(m.afterCalls.openSessions)}; growth per open trajectory from idle: RSS ${perTrajectory(m, m.idle.rss, m.afterCalls.rss)} (${perTrajectory(m, m.idle.rss, m.afterCallsGc.rss)} after GC), V8 heap ${perTrajectory(m, m.idle.heapUsed, m.afterCallsGc.heapUsed)} and ArrayBuffers ${perTrajectory(m, m.idle.arrayBuffers, m.afterCallsGc.arrayBuffers)} after GC.`,
    );
  }
  return lines;
}

/** The headline figures of a run, one line of bench/results/gateway.jsonl. */
function runFigures(s: LatencySection, memory: MemoryRun[], stalls: StallSection): Record<string, unknown> {
  const p50 = (l: number[]) => median(l);
  const p99 = (l: number[]) => percentile(l, 99);
  const name = (c: Config) => `${c.prompt}${c.stream ? '_stream' : ''}`;
  const each = (agents: number, f: (r: Record<Target, Phase[]>) => number) =>
    Object.fromEntries(
      s.configs.filter((c) => c.agents === agents).map((c) => [name(c), f(s.runs[configKey(c)]!)]),
    );
  const hopCpu = (phases: Phase[]) => summarize(phases).hopCpuUs ?? Number.NaN;
  return {
    added_p50_ms_1agent: each(1, (r) => round(added(r.gateway, r.direct, p50), 3)),
    added_p99_ms_1agent: each(1, (r) => round(added(r.gateway, r.direct, p99), 3)),
    proxy_added_p50_ms_1agent: each(1, (r) => round(added(r.proxy, r.direct, p50), 3)),
    gateway_minus_proxy_p50_ms_1agent: each(1, (r) => round(added(r.gateway, r.proxy, p50), 3)),
    gateway_minus_proxy_p99_ms_1agent: each(1, (r) => round(added(r.gateway, r.proxy, p99), 3)),
    throughput_vs_bare_proxy_64: each(64, (r) =>
      round(median(r.gateway.map((p, i) => p.callsPerSec / r.proxy[i]!.callsPerSec))),
    ),
    gateway_minus_proxy_cpu_us: each(64, (r) => round(hopCpu(r.gateway) - hopCpu(r.proxy), 0)),
    sim_cpu_us: each(64, (r) => round(summarize(r.direct).simCpuUs, 0)),
    rss_kib_per_open_trajectory: Object.fromEntries(
      memory.map((m) => [m.prompt, round((m.afterCalls.rss - m.idle.rss) / m.trajectories / 1024, 1)]),
    ),
    event_loop_stall_ms: {
      idle: round(stalls.idleMs, 1),
      ...Object.fromEntries(stalls.stalls.map((x) => [x.key, round(x.stallMs, 1)])),
    },
  };
}

// ---- main ---------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args[0]?.endsWith('-child')) exitWithParent();
  else exitOnHelp(import.meta.url, args);
  if (args[0] === '--sim-child') return simChild(Number(args[1] ?? 0));
  if (args[0] === '--gateway-child') return gatewayChild(args[1]!, args[2]!, JSON.parse(args[3]!));
  if (args[0] === '--proxy-child') return proxyChild(args[1]!);
  const quick = args.includes('--quick');
  const option = (name: string) => {
    const at = args.indexOf(name);
    return at >= 0 ? args[at + 1] : undefined;
  };
  const settings: GatewaySettings = {
    storeThread: option('--store-thread') === 'main' ? 'main' : 'worker',
    synchronous: option('--sync') === 'NORMAL' ? 'NORMAL' : 'FULL',
  };
  const simTtftMs = Number(option('--sim-ttft-ms') ?? 0);
  if (!(Number.isFinite(simTtftMs) && simTtftMs >= 0))
    throw new Error('--sim-ttft-ms: must be a number >= 0');
  const gatewayDefaults =
    settings.storeThread === DEFAULT_SETTINGS.storeThread &&
    settings.synchronous === DEFAULT_SETTINGS.synchronous;
  // Only a run with the defaults all round becomes bench/results/gateway.md.
  const defaults = gatewayDefaults && simTtftMs === 0;
  const command =
    process.env.npm_lifecycle_event === 'bench:gateway'
      ? `npm run bench:gateway${args.length ? ` -- ${args.join(' ')}` : ''}  (node --import tsx bench/gateway.ts)`
      : `node --import tsx bench/gateway.ts${args.length ? ` ${args.join(' ')}` : ''}`;
  const started = performance.now();
  const loadAtStart = os.loadavg();
  const codeAtStart = codeVersion();

  const sim = await startChild(['--sim-child', String(simTtftMs)]);
  let calls: LatencySection;
  let memory: MemoryRun[];
  let stalls: StallSection;
  try {
    calls = await benchCalls(sim, quick, settings, simTtftMs);
    memory = await benchMemory(sim, quick, settings);
    stalls = await benchStalls(quick);
  } finally {
    await sim.close();
    await dispatcher.close();
  }
  const minutes = (performance.now() - started) / 60_000;

  const lines = [
    '## Gateway benchmark (`bench/gateway.ts`)',
    '',
    ...machineInfo(command, loadAtStart, codeAtStart, {
      stack: 'undici client',
      noise: 'client, sim and gateway',
    }),
    `- Gateway settings: store on the ${settings.storeThread === 'main' ? 'event-loop thread' : 'worker thread'}, synchronous=${settings.synchronous}${gatewayDefaults ? " (`stepwise serve`'s defaults)" : ' (not the defaults)'}`,
    `- Wall time of the whole benchmark: ${fix(minutes, 1)} min${quick ? ' (`--quick`: short phases, 1 rep, fewer trajectories)' : ''}`,
    '',
    `Targets: added latency per call p50 ≤ ${TARGETS.addedP50Ms} ms and p99 ≤ ${TARGETS.addedP99Ms} ms; throughput ≥ ${TARGETS.throughputRatio}× a bare pass-through proxy.`,
    '',
    ...latencyReport(calls),
    '',
    ...throughputReport(calls),
    '',
    ...memoryReport(memory, calls.promptTokens),
    '',
    ...stallReport(stalls),
    '',
  ];
  const report = lines.join('\n');
  process.stdout.write(`${report}\n`);
  if (quick) return;
  const row = {
    code: codeAtStart,
    bench: 'gateway', // the file also holds rows of bench/stalls.ts probes
    store_thread: settings.storeThread,
    synchronous: settings.synchronous,
    sim_ttft_ms: simTtftMs,
    ...runFigures(calls, memory, stalls),
  };
  log(`wrote ${recordRun('gateway', row, defaults ? report : undefined).join(', ')}`);
}

/** The bodies this benchmark sends (for inspection: `node --import tsx -e` importing this module). */
export { messages as benchMessages, requestBody as benchRequestBody };

if (resolve(process.argv[1] ?? '') === THIS_FILE) {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}

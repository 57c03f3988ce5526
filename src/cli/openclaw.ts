import { writeFileSync } from 'node:fs';
import { renderOpenClawConfig } from '@stepwise/gym/agent/openclaw/config.js';
import { type Command, InvalidArgumentError } from 'commander';

/*
 * `stepwise openclaw config`: the provider block that makes a person's everyday OpenClaw a source of
 * training data ("deployment = training"). It points OpenClaw at a running Stepwise on the fixed
 * base_url, turns on session keys (OpenClaw then sends its session id as `prompt_cache_key`), and
 * adds the headers that tell the gateway to map each OpenClaw session to its own trajectory.
 * docs/openclaw.md walks through it.
 */

export interface OnlineConfigOptions {
  /** Origin of the running Stepwise, as OpenClaw reaches it. */
  url: string;
  apiKey: string;
  model: string;
  channel: string;
  contextWindow: number;
  maxTokens: number;
}

export function onlineConfig(o: OnlineConfigOptions): string {
  const origin = o.url.replace(/\/+$/, '').replace(/\/v1$/, '');
  return renderOpenClawConfig(
    {
      baseUrl: `${origin}/v1`,
      apiKey: o.apiKey,
      model: o.model,
      contextWindow: o.contextWindow,
      maxTokens: o.maxTokens,
      sessionKeys: true,
      headers: { 'X-Stepwise-Session': 'auto', 'X-Stepwise-Channel': o.channel },
    },
    [
      `OpenClaw provider config for the Stepwise gateway at ${origin} (written by \`stepwise openclaw config\`).`,
      'Every LLM call of every OpenClaw session becomes a step; each session is one trajectory in channel',
      `'${o.channel}', closed after the gateway's session idle time. Run OpenClaw with --config FILE, or merge`,
      '`models`, `agents` and `update` into ~/.openclaw/openclaw.json. See docs/openclaw.md.',
    ].join('\n'),
  );
}

/** The first model the gateway lists, for when --model is not given. */
export async function servedModel(origin: string, apiKey: string): Promise<string> {
  const url = `${origin.replace(/\/+$/, '').replace(/\/v1$/, '')}/v1/models`;
  let res: Response;
  try {
    res = await fetch(url, {
      headers: { authorization: `Bearer ${apiKey}` },
      signal: AbortSignal.timeout(10_000),
    });
  } catch (error) {
    throw new Error(
      `cannot reach Stepwise at ${url} (${(error as Error).message}); pass --model to skip the check`,
    );
  }
  const body = (await res.json().catch(() => null)) as { data?: { id?: string }[] } | null;
  const id = body?.data?.[0]?.id;
  if (!res.ok || typeof id !== 'string')
    throw new Error(`${url} answered ${res.status} without a model; pass --model`);
  return id;
}

function positive(name: string) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive integer`);
    return n;
  };
}

export function registerOpenClawCommand(program: Command): void {
  const openclaw = program
    .command('openclaw')
    .description('use OpenClaw with Stepwise (see docs/openclaw.md)');
  openclaw
    .command('config')
    .description(
      'print an OpenClaw config whose model provider is a running Stepwise: every call of every session becomes a step (online mode)',
    )
    .option('--url <origin>', 'the Stepwise server as OpenClaw reaches it', 'http://127.0.0.1:8100')
    .option(
      '--api-key <key>',
      'key OpenClaw sends, with the agent scope when the server has keys (default: $STEPWISE_API_KEY, else "stepwise")',
    )
    .option('--model <name>', 'model name OpenClaw asks for (default: the first one the server lists)')
    .option('--channel <name>', 'channel the sessions land in', 'online')
    .option('--context-window <tokens>', "the model's context window", positive('--context-window'), 65_536)
    .option('--max-tokens <tokens>', 'output-token cap per call', positive('--max-tokens'), 4_096)
    .option('--out <file>', 'write the config here instead of stdout (mode 0600: it holds the key)')
    .action(
      async (opts: {
        url: string;
        apiKey?: string;
        model?: string;
        channel: string;
        contextWindow: number;
        maxTokens: number;
        out?: string;
      }) => {
        try {
          new URL(opts.url);
        } catch {
          throw new InvalidArgumentError(`--url must be a URL, got ${JSON.stringify(opts.url)}`);
        }
        const apiKey = opts.apiKey ?? process.env.STEPWISE_API_KEY ?? 'stepwise';
        const model = opts.model ?? (await servedModel(opts.url, apiKey));
        const text = onlineConfig({ ...opts, apiKey, model });
        if (opts.out) {
          writeFileSync(opts.out, text, { mode: 0o600 });
          process.stderr.write(`wrote ${opts.out}\n`);
        } else process.stdout.write(text);
      },
    );
}

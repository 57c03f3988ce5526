import { writeFileSync } from 'node:fs';
import { CODEX_KEY_ENV, renderCodexConfig } from '@stepwise/gym/agent/codex/config.js';
import { type Command, InvalidArgumentError } from 'commander';
import { servedModel } from './openclaw.js';

/*
 * `stepwise codex config`: a config.toml that makes a person's everyday Codex CLI a source of
 * training data. Its model provider is a running Stepwise on the fixed base_url, with the headers
 * that map each Codex session (its thread id, sent as `prompt_cache_key`) to its own trajectory.
 * The key is not in the file: Codex reads it from STEPWISE_API_KEY. docs/codex.md walks through it.
 */

export interface CodexOnlineConfigOptions {
  /** Origin of the running Stepwise, as Codex reaches it. */
  url: string;
  model: string;
  channel: string;
}

export function codexOnlineConfig(o: CodexOnlineConfigOptions): string {
  const origin = o.url.replace(/\/+$/, '').replace(/\/v1$/, '');
  return renderCodexConfig(
    {
      baseUrl: `${origin}/v1`,
      model: o.model,
      headers: { 'X-Stepwise-Session': 'auto', 'X-Stepwise-Channel': o.channel },
    },
    [
      `Codex CLI config for the Stepwise gateway at ${origin} (written by \`stepwise codex config\`).`,
      'Every model call of every Codex session becomes a step; each session is one trajectory in channel',
      `'${o.channel}', closed after the gateway's session idle time. Put it in $CODEX_HOME/config.toml`,
      `(~/.codex/config.toml) and export ${CODEX_KEY_ENV} (a key with the agent scope, any text without keys).`,
      'See docs/codex.md.',
    ].join('\n'),
  );
}

export function registerCodexCommand(program: Command): void {
  const codex = program.command('codex').description('use Codex CLI with Stepwise (see docs/codex.md)');
  codex
    .command('config')
    .description(
      'print a Codex config.toml whose model provider is a running Stepwise: every call of every session becomes a step (online mode)',
    )
    .option('--url <origin>', 'the Stepwise server as Codex reaches it', 'http://127.0.0.1:8100')
    .option('--model <name>', 'model name Codex asks for (default: the first one the server lists)')
    .option('--channel <name>', 'channel the sessions land in', 'online')
    .option('--out <file>', 'write the config here instead of stdout')
    .action(async (opts: { url: string; model?: string; channel: string; out?: string }) => {
      try {
        new URL(opts.url);
      } catch {
        throw new InvalidArgumentError(`--url must be a URL, got ${JSON.stringify(opts.url)}`);
      }
      const model = opts.model ?? (await servedModel(opts.url, process.env[CODEX_KEY_ENV] ?? 'stepwise'));
      const text = codexOnlineConfig({ ...opts, model });
      if (opts.out) {
        writeFileSync(opts.out, text);
        process.stderr.write(`wrote ${opts.out}\n`);
      } else process.stdout.write(text);
    });
}

import { CLAUDE_CODE_VERSION, installClaudeCode } from '@stepwise/gym/agent/claude-code/install.js';
import { CODEX_VERSION, installCodex } from '@stepwise/gym/agent/codex/install.js';
import { INSTALLED_AGENTS } from '@stepwise/gym/agent/installs.js';
import { installOpenClaw, NODE_VERSION, OPENCLAW_VERSION } from '@stepwise/gym/agent/openclaw/install.js';
import { defaultToolsDir } from '@stepwise/gym/install-kit/index.js';
import { findRootfs, installRootfs, readRootfsLock, rootfsId } from '@stepwise/gym/sandbox/rootfs.js';
import type { Command } from 'commander';

/*
 * `stepwise tools install|path <tool>`: the external programs Stepwise runs as black boxes,
 * installed into a project-local tools folder (packages/gym/src/agent/openclaw/install.ts for OpenClaw,
 * packages/gym/src/agent/codex/install.ts for Codex, packages/gym/src/agent/claude-code/install.ts for Claude Code).
 */

interface ToolInstaller<T extends { dir: string } = { dir: string }> {
  pinned: string;
  find(dir: string): T | null;
  install(options: {
    dir: string;
    force: boolean;
    onProgress: (message: string) => void;
    signal: AbortSignal;
  }): Promise<T & { reused: boolean }>;
  /** The lines printed after an install: what it is, then its parts. */
  describe(result: T, how: string): string[];
}

const installer = <T extends { dir: string }>(t: ToolInstaller<T>) => t as unknown as ToolInstaller;

const TOOLS: Record<string, ToolInstaller> = {
  openclaw: installer({
    pinned: `openclaw ${OPENCLAW_VERSION} on Node ${NODE_VERSION}`,
    find: INSTALLED_AGENTS.openclaw.find,
    install: installOpenClaw,
    describe: (r, how) => [
      `openclaw ${r.version} (Node ${r.nodeVersion}) ${how}: ${r.dir}`,
      `  node:  ${r.node}`,
      `  entry: ${r.entry}`,
    ],
  }),
  // OpenAI's Codex CLI, one static binary (packages/gym/src/agent/codex/install.ts); `gym run --agent codex`.
  codex: installer({
    pinned: `codex ${CODEX_VERSION} (linux-x64)`,
    find: INSTALLED_AGENTS.codex.find,
    install: installCodex,
    describe: (r, how) => [
      `codex ${r.version} ${how}: ${r.dir}`,
      `  codex: ${r.codex}`,
      `  path:  ${r.pathDir}`,
    ],
  }),
  // Anthropic's Claude Code, one native binary (packages/gym/src/agent/claude-code/install.ts); `gym run --agent claude-code`.
  'claude-code': installer({
    pinned: `claude-code ${CLAUDE_CODE_VERSION} (linux-x64)`,
    find: INSTALLED_AGENTS['claude-code'].find,
    install: installClaudeCode,
    describe: (r, how) => [`claude-code ${r.version} ${how}: ${r.dir}`, `  claude: ${r.claude}`],
  }),
  // The hermetic sandbox root (packages/gym/src/sandbox/rootfs.ts); the gym uses it with --rootfs.
  rootfs: installer({
    get pinned() {
      const packages = readRootfsLock();
      return `sandbox rootfs ${rootfsId(packages).slice(0, 16)} (${packages.length} Debian 12 packages)`;
    },
    find: findRootfs,
    install: installRootfs,
    describe: (r, how) => [
      `sandbox rootfs ${r.id.slice(0, 16)} (${r.packages} Debian packages) ${how}: ${r.dir}`,
      `  id:   sha256 ${r.id}`,
      `  root: ${r.root}`,
    ],
  }),
};

function toolNamed(name: string): ToolInstaller {
  const tool = Object.hasOwn(TOOLS, name) ? TOOLS[name] : undefined;
  if (!tool) throw new Error(`unknown tool "${name}"; known tools: ${Object.keys(TOOLS).join(', ')}`);
  return tool;
}

const DIR_HELP = 'tools folder (default: $STEPWISE_TOOLS_DIR, else ./.stepwise/tools)';

export function registerToolsCommand(program: Command): void {
  const tools = program
    .command('tools')
    .description(
      'install and locate the external tools Stepwise runs: black-box agents, and the hermetic sandbox root',
    );

  tools
    .command('install')
    .description(
      `install a tool into the tools folder, checksum-verified, or reuse a good install (${Object.values(
        TOOLS,
      )
        .map((t) => t.pinned)
        .join('; ')})`,
    )
    .argument('<tool>', `the tool: ${Object.keys(TOOLS).join(', ')}`)
    .option('--dir <dir>', DIR_HELP)
    .option('--force', 'reinstall even if a good install is there', false)
    .option('--json', 'print the result as one JSON object on stdout', false)
    .action(async (name: string, opts: { dir?: string; force: boolean; json: boolean }) => {
      const tool = toolNamed(name);
      const dir = opts.dir ?? defaultToolsDir();
      const started = Date.now();
      const abort = new AbortController();
      const stop = () => abort.abort(new Error('interrupted; nothing was installed'));
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        const result = await tool.install({
          dir,
          force: opts.force,
          signal: abort.signal,
          onProgress: (message) => process.stderr.write(`${name}: ${message}\n`),
        });
        const seconds = Number(((Date.now() - started) / 1000).toFixed(1));
        if (opts.json) {
          console.log(JSON.stringify({ tool: name, ...result, seconds }));
          return;
        }
        const how = result.reused ? 'already installed, reused' : `installed in ${seconds} s`;
        for (const line of tool.describe(result, how)) console.log(line);
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      }
    });

  tools
    .command('path')
    .description('print the install folder of an installed tool (exit 1 if it is not installed)')
    .argument('<tool>', `the tool: ${Object.keys(TOOLS).join(', ')}`)
    .option('--dir <dir>', DIR_HELP)
    .option('--json', 'print the install (folder, node, entry, versions) as JSON', false)
    .action((name: string, opts: { dir?: string; json: boolean }) => {
      const tool = toolNamed(name);
      const dir = opts.dir ?? defaultToolsDir();
      const found = tool.find(dir);
      if (!found)
        throw new Error(
          `${tool.pinned} is not installed in ${dir}; run \`stepwise tools install ${name}${opts.dir ? ` --dir ${opts.dir}` : ''}\``,
        );
      console.log(opts.json ? JSON.stringify({ tool: name, ...found }) : found.dir);
    });
}

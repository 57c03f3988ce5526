import { StepwiseError } from '@stepwise/core';
import { defaultToolsDir } from '../install-kit/index.js';
import { CLAUDE_CODE_VERSION, type ClaudeCodeInstall, findClaudeCode } from './claude-code/install.js';
import { CODEX_VERSION, type CodexInstall, findCodex } from './codex/install.js';
import { findOpenClaw, OPENCLAW_VERSION, type OpenClawInstall } from './openclaw/install.js';

/*
 * The installed agents, one row a kind: the name people know it by, the pinned version and where an
 * install is found. `gym run` (agentSpec), a rollout worker (a job names a kind and a version) and
 * `stepwise tools` all find an install through this table, with one error.
 */

export interface InstallOf {
  openclaw: OpenClawInstall;
  codex: CodexInstall;
  'claude-code': ClaudeCodeInstall;
}
export type InstalledKind = keyof InstallOf;

interface InstalledAgentRow<Install> {
  /** The name in messages. */
  title: string;
  /** The version this build pins (an install of another is not found). */
  version: string;
  find(dir: string): Install | null;
}

export const INSTALLED_AGENTS: { [Kind in InstalledKind]: InstalledAgentRow<InstallOf[Kind]> } = {
  openclaw: { title: 'OpenClaw', version: OPENCLAW_VERSION, find: findOpenClaw },
  codex: { title: 'Codex', version: CODEX_VERSION, find: findCodex },
  'claude-code': { title: 'Claude Code', version: CLAUDE_CODE_VERSION, find: findClaudeCode },
};

export const isInstalledKind = (kind: string): kind is InstalledKind => Object.hasOwn(INSTALLED_AGENTS, kind);

/** An installed agent a run asks for is not in the tools folder, or is not the version asked for. */
export class AgentNotInstalled extends StepwiseError {
  override readonly name = 'AgentNotInstalled';
  constructor(
    message: string,
    readonly kind: InstalledKind,
    readonly dir: string,
  ) {
    super(message, 400, 'agent_not_installed');
  }
}

/**
 * The install of `kind` in the tools folder `dir` (default: the project's), or AgentNotInstalled
 * naming the command that installs it. `version`: the version a job was made with; another one
 * installed here is refused, so a worker never runs a job on an agent it was not made for.
 */
export function requireInstall<Kind extends InstalledKind>(
  kind: Kind,
  options: { dir?: string; version?: string } = {},
): InstallOf[Kind] {
  const row = INSTALLED_AGENTS[kind] as InstalledAgentRow<InstallOf[Kind]>;
  const dir = options.dir ?? defaultToolsDir();
  const install = row.find(dir);
  if (!install) {
    const command = `stepwise tools install ${kind}${options.dir ? ` --dir ${options.dir}` : ''}`;
    throw new AgentNotInstalled(
      `${row.title} ${options.version ?? row.version} is not installed in ${dir}: run \`${command}\` first`,
      kind,
      dir,
    );
  }
  const found = (install as { version: string }).version;
  if (options.version !== undefined && found !== options.version)
    throw new AgentNotInstalled(
      `the job wants ${row.title} ${options.version}; ${dir} has ${row.title} ${found}`,
      kind,
      dir,
    );
  return install;
}

import { resolve } from 'node:path';

// Where pinned tools (agents, the sandbox root) are installed.

/** $STEPWISE_TOOLS_DIR, else `<cwd>/.stepwise/tools` (.stepwise/ is git-ignored). */
export function defaultToolsDir(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.STEPWISE_TOOLS_DIR?.trim();
  return fromEnv ? resolve(fromEnv) : resolve('.stepwise', 'tools');
}

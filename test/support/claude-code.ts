import { findClaudeCode } from '../../packages/gym/src/agent/claude-code/install.js';
import { defaultToolsDir } from '../../packages/gym/src/install-kit/index.js';

/**
 * The Claude Code install the tests use: `stepwise tools install claude-code` into $STEPWISE_TOOLS_DIR
 * (CI does, .ci/run). Without one the tests skip, saying why, unless STEPWISE_TEST_ROOTFS=1 (set by
 * CI), which makes a missing install a failure.
 */
export const claudeCodeToolsDir = defaultToolsDir();
export const claudeCodeInstall = findClaudeCode(claudeCodeToolsDir);
export const claudeCodeRequired = process.env.STEPWISE_TEST_ROOTFS === '1';
export const claudeCodeSkip = !claudeCodeInstall && !claudeCodeRequired;
if (claudeCodeSkip)
  console.warn(
    `claude-code: skipped: Claude Code is not installed in ${claudeCodeToolsDir}; run \`stepwise tools install claude-code\``,
  );

/** The install, or a failure naming what is missing (only reached when it is required). */
export function requireClaudeCode() {
  if (!claudeCodeInstall)
    throw new Error(`STEPWISE_TEST_ROOTFS=1 but Claude Code is not installed in ${claudeCodeToolsDir}`);
  return claudeCodeInstall;
}

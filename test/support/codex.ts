import { type CodexInstall, findCodex } from '../../packages/gym/src/agent/codex/install.js';
import { TEST_TOOLS_DIR } from './openclaw.js';

/**
 * The pinned Codex CLI in the test tools folder, or why the Codex tests skip. Under
 * STEPWISE_TEST_ROOTFS=1 (CI, whose .ci/run installs it) a missing install fails them instead.
 */
export function testCodex(): { install: CodexInstall | null; skip: string | null } {
  const install = findCodex(TEST_TOOLS_DIR);
  if (install) return { install, skip: null };
  const why = `Codex CLI is not installed in ${TEST_TOOLS_DIR} (stepwise tools install codex --dir ${TEST_TOOLS_DIR})`;
  if (process.env.STEPWISE_TEST_ROOTFS === '1') throw new Error(`STEPWISE_TEST_ROOTFS=1 but ${why}`);
  return { install: null, skip: why };
}

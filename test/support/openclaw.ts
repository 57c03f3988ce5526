import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installOpenClaw, type OpenClawInstall } from '../../packages/gym/src/agent/openclaw/install.js';

/**
 * The tools folder the OpenClaw tests share: $STEPWISE_TOOLS_DIR (CI points it at a cache that
 * outlives the checkout), else one under the system temp dir, so test files and reruns on this
 * machine install Node 24 + OpenClaw once.
 */
export const TEST_TOOLS_DIR = process.env.STEPWISE_TOOLS_DIR ?? join(tmpdir(), 'stepwise-test-tools');

/** Installs (or reuses) the pinned OpenClaw for a test file. */
export function testOpenClaw(): Promise<OpenClawInstall> {
  return installOpenClaw({ dir: TEST_TOOLS_DIR });
}

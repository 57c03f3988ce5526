import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CODEX_VERSION } from '../packages/gym/src/agent/codex/install.js';
import { AgentNotInstalled, INSTALLED_AGENTS, requireInstall } from '../packages/gym/src/agent/installs.js';
import { agentWire } from '../packages/gym/src/distributed/jobs.js';
import { testCodex } from './support/codex.js';
import { TEST_TOOLS_DIR } from './support/openclaw.js';

/*
 * The installed agents' one table (packages/gym/src/agent/installs.ts): `gym run`, a rollout worker
 * and `stepwise tools` find an install through it, with one error that names the install command.
 */

const empty = mkdtempSync(join(tmpdir(), 'stepwise-no-tools-'));
afterAll(() => rmSync(empty, { recursive: true, force: true }));

describe('the installed agents', () => {
  it('has one row a kind, each with its pinned version', () => {
    expect(Object.keys(INSTALLED_AGENTS).sort()).toEqual(['claude-code', 'codex', 'openclaw']);
    expect(INSTALLED_AGENTS.codex.version).toBe(CODEX_VERSION);
  });

  it('refuses an agent that is not installed, naming the folder and the command that installs it', () => {
    for (const kind of ['openclaw', 'codex', 'claude-code'] as const) {
      let error: unknown;
      try {
        requireInstall(kind, { dir: empty });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(AgentNotInstalled);
      expect(error).toMatchObject({ kind, dir: empty, status: 400, code: 'agent_not_installed' });
      expect((error as Error).message).toContain(
        `${INSTALLED_AGENTS[kind].title} ${INSTALLED_AGENTS[kind].version} is not installed in ${empty}: run \`stepwise tools install ${kind} --dir ${empty}\` first`,
      );
    }
  });

  const codex = testCodex();
  it.skipIf(codex.skip !== null)(
    "finds an install of the job's version, refuses another version, and sends a job the kind and version",
    () => {
      const install = requireInstall('codex', { dir: TEST_TOOLS_DIR, version: CODEX_VERSION });
      expect(install.version).toBe(CODEX_VERSION);
      expect(() => requireInstall('codex', { dir: TEST_TOOLS_DIR, version: '0.0.1' })).toThrow(
        `the job wants Codex 0.0.1; ${TEST_TOOLS_DIR} has Codex ${CODEX_VERSION}`,
      );
      expect(agentWire({ kind: 'codex', install })).toEqual({ kind: 'codex', version: CODEX_VERSION });
    },
  );
});

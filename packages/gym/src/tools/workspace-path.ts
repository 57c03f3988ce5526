import { posix } from 'node:path';
import { normalizeMountDir, sandboxHome } from '../sandbox/environment.js';
import { walkWorkspacePath } from '../sandbox/workspace-path.js';
import { ToolFailure } from './failure.js';

/** A path an agent gave, mapped into the host workspace. */
export interface WorkspacePath {
  /** Where it is on the host, with every existing symlink resolved. */
  host: string;
  /** Where the agent sees it (inside the sandbox). */
  sandbox: string;
  /** Every component exists. */
  exists: boolean;
}

/**
 * Maps `input` (relative to the workspace, absolute, or `~/...`) to the host workspace the way the
 * sandbox's kernel would resolve it (sandbox/workspace-path.ts). Wherever the walk ends, it must end
 * inside mountDir; a path that leaves it (`..`, another absolute path, a symlink pointing out) is
 * refused with `path_outside_workspace`.
 */
export async function resolveWorkspacePath(
  input: string,
  context: { workspace: string; mountDir: string },
): Promise<WorkspacePath> {
  const mountDir = normalizeMountDir(context.mountDir);
  let path = input.trim();
  if (path === '' || path.includes('\0')) throw new ToolFailure('bad_arguments', 'Error: invalid path');
  if (path === '~' || path.startsWith('~/')) path = sandboxHome(mountDir) + path.slice(1);
  const walk = await walkWorkspacePath(context.workspace, path, { kind: 'sandbox', mountDir });
  switch (walk.kind) {
    case 'inside':
      return { host: walk.host, sandbox: posix.join(mountDir, ...walk.parts), exists: walk.exists };
    case 'missing_parent':
      throw new ToolFailure('not_found', `Error: ${input}: No such file or directory`);
    case 'loop':
      throw new ToolFailure('bad_arguments', `Error: ${input}: too many levels of symbolic links`);
    case 'outside':
      throw new ToolFailure(
        'path_outside_workspace',
        `Error: access denied: ${input} is outside the workspace (${mountDir}); only paths inside it can be used`,
      );
  }
}

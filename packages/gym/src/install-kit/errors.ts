import { basename } from 'node:path';
import { StepwiseError } from '@stepwise/core';

// How an install of a pinned tool (an agent, the sandbox root) fails.

/** Something an install needed failed: a command (with its stderr tail), a download, a check. */
export class ToolInstallError extends StepwiseError {
  override readonly name: string = 'ToolInstallError';
  constructor(
    message: string,
    readonly command?: string,
    readonly stderrTail?: string,
    code = 'tool_install_failed',
  ) {
    super(message, 500, code);
  }
}

/** A downloaded file's hash is not the pinned one. */
export class IntegrityError extends ToolInstallError {
  override readonly name = 'IntegrityError';
  constructor(
    readonly file: string,
    readonly expected: string,
    readonly actual: string,
  ) {
    super(
      `integrity check failed for ${basename(file)}: expected ${expected}, got ${actual}`,
      undefined,
      undefined,
      'integrity_mismatch',
    );
  }
}

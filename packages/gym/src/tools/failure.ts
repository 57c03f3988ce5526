import { StepwiseError } from '@stepwise/core';

/** The errorType of a failed tool call. */
export type ToolErrorType =
  | 'unknown_tool'
  | 'bad_arguments'
  | 'path_outside_workspace'
  | 'not_found'
  | 'is_directory'
  | 'no_match'
  | 'ambiguous_match'
  | 'exit_nonzero'
  | 'timeout'
  | 'limit_exceeded'
  | 'sandbox_failed';

/** A tool call that failed in a way the agent should be told about; `message` is what it reads. */
export class ToolFailure extends StepwiseError {
  override readonly name = 'ToolFailure';
  constructor(
    readonly errorType: ToolErrorType,
    message: string,
  ) {
    super(message, 422, errorType);
  }
}

import type { z } from 'zod';

/** The one error family every layer throws; the HTTP layer maps `status` onto the response. */
export class StepwiseError extends Error {
  override readonly name: string = 'StepwiseError';
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
    readonly field?: string,
    readonly isRetryable = false,
  ) {
    super(message);
  }

  toJSON(): { error: { code: string; message: string; field?: string } } {
    return {
      error: { code: this.code, message: this.message, ...(this.field ? { field: this.field } : {}) },
    };
  }
}

export class ValidationError extends StepwiseError {
  override readonly name = 'ValidationError';
  constructor(message: string, field?: string) {
    super(message, 400, 'invalid_request', field);
  }
}

export class NotFoundError extends StepwiseError {
  override readonly name = 'NotFoundError';
  constructor(message: string) {
    super(message, 404, 'not_found');
  }
}

export class ConflictError extends StepwiseError {
  override readonly name = 'ConflictError';
  constructor(message: string, field?: string) {
    super(message, 409, 'conflict', field);
  }
}

/** Too much is in flight: try again later (the answer says when, in `Retry-After`). */
export class BusyError extends StepwiseError {
  override readonly name = 'BusyError';
  constructor(
    message: string,
    code: string,
    readonly retryAfterS = 1,
  ) {
    super(message, 429, code, undefined, true);
  }
}

export class AuthError extends StepwiseError {
  override readonly name = 'AuthError';
  constructor(message: string, status: 401 | 403) {
    super(message, status, status === 401 ? 'unauthorized' : 'forbidden');
  }
}

/** Turns a zod failure into a ValidationError naming the first offending field and its rule. */
export function fromZodError(error: z.ZodError, prefix = ''): ValidationError {
  const issue = error.issues[0];
  if (!issue) return new ValidationError('invalid input');
  const path = [prefix, ...issue.path.map(String)].filter((p) => p !== '').join('.');
  const where = path === '' ? 'body' : path;
  return new ValidationError(`${where}: ${issue.message}`, where);
}

/** Parses with a schema; throws a ValidationError that names the field on failure. */
export function parseOrThrow<T>(schema: z.ZodType<T>, value: unknown, prefix = ''): T {
  const result = schema.safeParse(value);
  if (!result.success) throw fromZodError(result.error, prefix);
  return result.data;
}

export interface SerializedError {
  name: string;
  message: string;
  status?: number;
  code?: string;
  field?: string;
  isRetryable?: boolean;
}

/** Errors cross the thread boundary as plain data; domain errors keep their class on the other side. */
export function serializeError(error: unknown): SerializedError {
  if (error instanceof StepwiseError) {
    return {
      name: error.name,
      message: error.message,
      status: error.status,
      code: error.code,
      field: error.field,
      isRetryable: error.isRetryable,
    };
  }
  const e = error instanceof Error ? error : new Error(String(error));
  return { name: e.name, message: e.message };
}

export function deserializeError(e: SerializedError): Error {
  switch (e.name) {
    case 'ValidationError':
      return new ValidationError(e.message, e.field);
    case 'NotFoundError':
      return new NotFoundError(e.message);
    case 'ConflictError':
      return new ConflictError(e.message, e.field);
    case 'AuthError':
      return new AuthError(e.message, e.status === 403 ? 403 : 401);
    case 'BusyError':
      return new BusyError(e.message, e.code ?? 'busy');
  }
  if (e.status !== undefined && e.code !== undefined) {
    return new StepwiseError(e.message, e.status, e.code, e.field, e.isRetryable ?? false);
  }
  const error = new Error(e.message);
  error.name = e.name;
  return error;
}

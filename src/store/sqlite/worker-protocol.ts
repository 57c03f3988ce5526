import {
  AuthError,
  ConflictError,
  NotFoundError,
  StepwiseError,
  ValidationError,
} from '../../domain/index.js';
import type { Store } from '../store.js';

export type StoreMethod = Exclude<keyof Store, 'kind' | 'subscribe'>;

export interface WorkerRequest {
  id: number;
  method: StoreMethod;
  args: unknown[];
}

export interface SerializedError {
  name: string;
  message: string;
  status?: number;
  code?: string;
  field?: string;
  isRetryable?: boolean;
}

export type WorkerReply =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; error: SerializedError };

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
  }
  if (e.status !== undefined && e.code !== undefined) {
    return new StepwiseError(e.message, e.status, e.code, e.field, e.isRetryable ?? false);
  }
  const error = new Error(e.message);
  error.name = e.name;
  return error;
}

import type { SerializedError } from '../domain/errors.js';
import type { PoolOps } from './core.js';

export type PoolMethod = Exclude<keyof PoolOps, 'kind' | 'subscribe'>;

export interface WorkerRequest {
  id: number;
  method: PoolMethod;
  args: unknown[];
}

export type WorkerReply =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; error: SerializedError };

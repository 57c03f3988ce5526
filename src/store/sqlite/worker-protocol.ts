import type { SerializedError } from '../../domain/errors.js';
import type { Store } from '../store.js';

export type StoreMethod = Exclude<keyof Store, 'kind' | 'subscribe'>;

export interface WorkerRequest {
  id: number;
  method: StoreMethod;
  args: unknown[];
}

export type WorkerReply =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; error: SerializedError };

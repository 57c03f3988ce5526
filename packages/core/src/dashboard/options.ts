import type { ApiKey, AuthVariables } from '../http/auth.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ServedModel } from '../text/step-model.js';

/** What every dashboard page is mounted with: the app's variables and the services it reads. */
export type DashboardEnv = { Variables: AuthVariables };

export interface DashboardOptions {
  pool: DataPool;
  apiKeys: readonly ApiKey[];
  /** The models the server's engines serve by folder: each step's ids decode with its own (the rest: Qwen3). */
  models?: readonly ServedModel[];
  /** The secret the forms' CSRF tokens are made with (default: random per start). */
  csrfSecret?: Buffer;
}

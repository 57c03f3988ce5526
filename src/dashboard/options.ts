import type { ApiKey, AuthVariables } from '../http/auth.js';
import type { DataPool } from '../pool/data-pool.js';

/** What every dashboard page is mounted with: the app's variables and the services it reads. */
export type DashboardEnv = { Variables: AuthVariables };

export interface DashboardOptions {
  pool: DataPool;
  apiKeys: readonly ApiKey[];
  /** The secret the forms' CSRF tokens are made with (default: random per start). */
  csrfSecret?: Buffer;
}

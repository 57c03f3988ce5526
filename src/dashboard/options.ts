import type { ApiKey, AuthVariables } from '../gateway/auth.js';
import type { Gateway } from '../gateway/gateway.js';
import type { DataPool } from '../pool/data-pool.js';

/** What every dashboard page is mounted with: the app's variables and the services it reads. */
export type DashboardEnv = { Variables: AuthVariables };

export interface DashboardOptions {
  pool: DataPool;
  gateway?: Gateway;
  apiKeys: readonly ApiKey[];
}

import type { Hono } from 'hono';
import type { Logger } from 'pino';
import { mountDashboard } from '../dashboard/index.js';
import { mountExportRoutes } from '../export/routes.js';
import { mountGatewayRoutes } from '../gateway/agent-routes.js';
import type { Gateway } from '../gateway/gateway.js';
import { type ApiEnv, createApiApp } from '../http/app.js';
import type { ApiKey } from '../http/auth.js';
import { mountBatchRoutes } from '../http/batches.js';
import { mountChannelRoutes } from '../http/channels.js';
import { mountEventRoutes } from '../http/events.js';
import { mountEvidenceRoutes } from '../http/evidence.js';
import { mountGroupRoutes } from '../http/groups.js';
import { mountLabelRoutes } from '../http/labels.js';
import { mountMismatchRoutes } from '../http/mismatch.js';
import { mountPolicyVersionRoutes } from '../http/policy-version.js';
import { mountPromptRoutes } from '../http/prompts.js';
import { mountSignalRoutes } from '../http/signals.js';
import { mountStatsRoutes } from '../http/stats.js';
import { mountStepList, mountStepSubmission } from '../http/steps.js';
import { mountTrajectoryOwnerRoutes, mountTrajectoryReads } from '../http/trajectories.js';
import type { DataPool } from '../pool/data-pool.js';
import { mountRewardRoutes } from '../rewards/routes.js';
import type { RewardService } from '../rewards/service.js';

export interface AppOptions {
  pool: DataPool;
  apiKeys?: readonly ApiKey[];
  logger?: Logger;
  /** The LLM gateway; its routes share this app (and port) when given. */
  gateway?: Gateway;
  /** Origin written into base_urls (default: the origin each request came to). */
  publicUrl?: string;
  /** `gateway`: agent routes only (trajectories, steps, LLM calls); trainer and admin routes stay off. */
  role?: 'all' | 'gateway';
  /** Reward functions and jobs: `/compute_reward` and `/v1/rewards/*` answer when given. */
  rewards?: RewardService;
}

/**
 * The HTTP API of one server: every resource's routes on one app, in this order (a route registered
 * first answers a path two patterns match). The LLM calls are registered from their route table
 * (gateway/llm-routes.ts) last; on a socket, the same table's listener serves them ahead of the app,
 * from node:http (gateway/direct.ts).
 */
export function createApp(options: AppOptions): Hono<ApiEnv> {
  const { pool, gateway } = options;
  const app = createApiApp(options);

  // ---- producers (runner or trainer scope) ----
  mountStepSubmission(app, pool);
  mountTrajectoryOwnerRoutes(app, pool, gateway);

  const gatewayRoutes = { publicUrl: options.publicUrl, rewards: options.rewards };
  if (options.role === 'gateway') {
    if (gateway) mountGatewayRoutes(app, gateway, gatewayRoutes);
    return app;
  }

  // ---- trainers ----
  mountBatchRoutes(app, pool);
  mountMismatchRoutes(app, pool);
  mountPolicyVersionRoutes(app, pool, gateway);
  mountExportRoutes(app, pool);

  // ---- observation (trainer or admin) ----
  mountStatsRoutes(app, pool, gateway);
  mountEventRoutes(app, pool);
  mountStepList(app, pool);
  mountTrajectoryReads(app, pool);

  // ---- signals (reward workers, judges, verifiers) and reward functions ----
  mountSignalRoutes(app, pool);
  if (options.rewards) mountRewardRoutes(app, options.rewards);

  // ---- curation and configuration (admin) ----
  mountGroupRoutes(app, pool);
  mountLabelRoutes(app, pool);
  mountChannelRoutes(app, pool);
  mountPromptRoutes(app, pool);
  mountEvidenceRoutes(app, pool);

  mountDashboard(app, { pool, apiKeys: options.apiKeys ?? [], models: gateway?.servedModels() ?? [] });
  if (gateway) mountGatewayRoutes(app, gateway, gatewayRoutes);

  return app;
}

import type { CallMiddleware, CallServices } from '../gateway/call-context.js';
import { actGuidePrefix } from '../gateway/middleware/actguide-prefix.js';
import { echoedCalls } from '../gateway/middleware/echoed-calls.js';
import { episodePolicy } from '../gateway/middleware/episode-policy.js';
import { policyGate } from '../gateway/middleware/policy-gate.js';
import { rawToolCalls } from '../gateway/middleware/raw-tool-calls.js';
import { templateRoles } from '../gateway/middleware/template-roles.js';
import { tokenContinuity } from '../gateway/middleware/token-continuity.js';
import { toolResults } from '../gateway/middleware/tool-results.js';

/*
 * The gateway's call pipeline, outermost first (docs/gateway.md#call-pipeline): the episode's limits
 * and forced sampling are applied, the request is rewritten into what the engine sees, then the call takes its tool results and its place in the
 * policy gate, around the core (route, forward, capture, commit before the answer).
 */

export interface CallPipelineOptions {
  /** Token continuity (continuity.ts); default off. */
  tokenContinuity?: boolean;
}

export function callMiddleware(options: CallPipelineOptions): (services: CallServices) => CallMiddleware[] {
  return (services) => [
    episodePolicy(services.episodes),
    templateRoles,
    actGuidePrefix,
    echoedCalls,
    rawToolCalls(services.tokenizing),
    ...(options.tokenContinuity
      ? [
          tokenContinuity({
            tokenizing: services.tokenizing,
            counters: services.continuity,
            forwarding: services.forwarding,
          }),
        ]
      : []),
    toolResults(services.recorder),
    policyGate(services.gate),
  ];
}

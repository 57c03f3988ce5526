import { StepwiseClient } from '@stepwise/core';
import { getGlobalDispatcher } from 'undici';

/**
 * The gym's client of a Stepwise server's own API (the agents' LLM calls go to their base_url
 * instead). It shares the process's connection pool and waits as long as fetch would (5 min): a busy
 * server is not a dead one.
 */
export function serverClient(gatewayUrl: string, apiKey: string | undefined): StepwiseClient {
  return new StepwiseClient({
    baseUrl: gatewayUrl,
    apiKey,
    dispatcher: getGlobalDispatcher(),
    timeoutMs: 300_000,
  });
}

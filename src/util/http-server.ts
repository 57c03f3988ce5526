import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';

export interface Listening {
  url: string;
  port: number;
  /**
   * Stops accepting, runs `drain` (which should answer whatever is waiting), closes each connection
   * as soon as it is idle, and cuts those still busy after `graceMs`. Safe to call more than once.
   */
  close(drain?: () => Promise<void>, graceMs?: number): Promise<void>;
}

/** Serves a fetch handler on host:port (0: any free port); rejects if it cannot listen. */
export async function listen(
  fetch: (request: Request) => Response | Promise<Response>,
  host: string,
  port: number,
): Promise<Listening> {
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch, hostname: host, port }, () => resolve(s));
    s.once('error', reject);
  });
  const bound = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | null = null;
  return {
    url: `http://${shownHost}:${bound}`,
    port: bound,
    close(drain, graceMs = 2_000) {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        await drain?.();
        // Answered connections linger as keep-alive: close each as soon as it is idle.
        const http = server as unknown as { closeIdleConnections(): void; closeAllConnections(): void };
        http.closeIdleConnections();
        const idle = setInterval(() => http.closeIdleConnections(), 25);
        const grace = setTimeout(() => http.closeAllConnections(), graceMs);
        await stopped;
        clearInterval(idle);
        clearTimeout(grace);
      })();
      return closing;
    },
  };
}

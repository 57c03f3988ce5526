import { createHash } from 'node:crypto';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A small HTTP load balancer for multi-process tests, configured as docs/deploy.md recommends for a
 * real one: calls under a trajectory's base_url (`/<trajectory>/<group>/v1/...`) and its owner's
 * routes (`/v1/trajectories/<trajectory>/...`) go to the gateway
 * its id hashes to among the live ones (so a trajectory's calls meet its session cache); every other
 * request goes round-robin. A gateway that refuses a connection is taken out and the request goes to
 * the next one; one that drops a request it was sent is taken out too, but that request is answered
 * 502 rather than sent again (it may have been applied), as nginx does for non-idempotent requests.
 */
export interface Balancer {
  url: string;
  /** Requests each target answered. */
  served: number[];
  /** Targets taken out after a failed connection. */
  down: Set<number>;
  close(): Promise<void>;
}

const RESERVED = new Set([
  'v1',
  'init_trajectory',
  'submit_steps',
  'complete_trajectory',
  'generate',
  'ready',
  'dashboard',
]);

function affinity(path: string): string | null {
  const parts = path.split('/');
  // The owner's routes by id (`/v1/trajectories/<id>/...`) meet the same session as its base_url.
  const first = (parts[1] === 'v1' && parts[2] === 'trajectories' ? parts[3] : parts[1]) ?? '';
  return first.length >= 16 && !RESERVED.has(first) ? first : null;
}

export async function startBalancer(targets: string[]): Promise<Balancer> {
  const served = targets.map(() => 0);
  const down = new Set<number>();
  let next = 0;
  const live = () => targets.map((_, i) => i).filter((i) => !down.has(i));

  const pick = (key: string | null, tried: Set<number>): number | null => {
    const candidates = live().filter((i) => !tried.has(i));
    if (candidates.length === 0) return null;
    if (key === null) return candidates[next++ % candidates.length]!;
    // Rendezvous hashing: a trajectory moves only when its gateway goes away.
    let best = candidates[0]!;
    let bestScore = '';
    for (const i of candidates) {
      const score = createHash('sha1').update(`${key}|${targets[i]}`).digest('hex');
      if (score > bestScore) {
        best = i;
        bestScore = score;
      }
    }
    return best;
  };

  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const key = (req.headers['x-stepwise-trajectory'] as string | undefined) ?? affinity(req.url ?? '/');
    const tried = new Set<number>();
    for (;;) {
      const target = pick(key, tried);
      if (target === null) {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'no gateway is up', type: 'bad_gateway' } }));
        return;
      }
      tried.add(target);
      const upstream = new URL(req.url ?? '/', targets[target]);
      const answered = await new Promise<boolean>((resolve) => {
        const out = httpRequest(
          upstream,
          { method: req.method, headers: { ...req.headers, host: upstream.host } },
          (answer: IncomingMessage) => {
            served[target]!++;
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
            answer.on('error', () => res.destroy());
            res.on('close', () => answer.destroy());
            resolve(true);
          },
        );
        out.on('error', (error: NodeJS.ErrnoException) => {
          down.add(target);
          // Refused: nothing reached this gateway, the next one may take the request.
          if (error.code === 'ECONNREFUSED') return resolve(false);
          if (!res.headersSent) {
            res.writeHead(502, { 'content-type': 'application/json' });
            res.end(
              JSON.stringify({
                error: { message: `gateway went away: ${error.message}`, type: 'bad_gateway' },
              }),
            );
          } else res.destroy();
          resolve(true);
        });
        out.end(body);
      });
      if (answered) return;
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    served,
    down,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

import { chmod } from 'node:fs/promises';
import net from 'node:net';

/** The host end of the gateway bridge: a listener whose every connection is piped to one TCP target. */
export interface Bridge {
  close(): Promise<void>;
}

export interface BridgeTarget {
  host: string;
  port: number;
}

/** host:port of a gateway URL (http or https), with the scheme's default port. */
export function gatewayTarget(url: string): BridgeTarget {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`sandbox gateway.url is not a URL: ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new TypeError(`sandbox gateway.url must be http(s), got ${parsed.protocol}`);
  }
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = parsed.port === '' ? (parsed.protocol === 'https:' ? 443 : 80) : Number(parsed.port);
  return { host, port };
}

/**
 * Listens on `listen` (a unix socket path, or a TCP port on 127.0.0.1) and forwards each connection to
 * `target`. A unix socket is made connectable by anyone who can reach it: it lives in a private
 * directory, and only the sandbox it is bind-mounted into can see it.
 */
export async function startBridge(listen: string | number, target: BridgeTarget): Promise<Bridge> {
  const sockets = new Set<net.Socket>();
  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  const server = net.createServer((client) => {
    track(client);
    const upstream = net.connect(target);
    track(upstream);
    const destroy = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', destroy);
    upstream.on('error', destroy);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (typeof listen === 'string') server.listen(listen, resolve);
    else server.listen({ host: '127.0.0.1', port: listen, exclusive: true }, resolve);
  });
  if (typeof listen === 'string') await chmod(listen, 0o666);
  return {
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

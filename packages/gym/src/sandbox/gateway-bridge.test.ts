import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { KEEP_ALIVE_MS } from '@stepwise/core/util/http-server.js';
import { afterEach, describe, expect, it } from 'vitest';
import { type Bridge, startBridge } from './gateway-bridge.js';

/*
 * The scoped bridge holds an agent's idle connection as long as the gateway does: a sandboxed agent
 * whose tool ran past node's 5 s default lost its next LLM call to the bridge closing the connection
 * as it was reused (OpenClaw retried it as a provider failure; the gateway never saw it).
 */

let target: http.Server | undefined;
let bridge: Bridge | undefined;
afterEach(async () => {
  await bridge?.close();
  await new Promise<void>((resolve) => (target ? target.close(() => resolve()) : resolve()));
  target = bridge = undefined;
});

function request(
  port: number,
  agent: http.Agent,
  path: string,
): Promise<http.IncomingMessage & { body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve(Object.assign(res, { body })));
    });
    req.on('error', reject);
    req.end('{}');
  });
}

describe('the scoped gateway bridge', () => {
  it("keeps an agent's idle connection as long as the gateway's listener does, and reuses it", async () => {
    let connections = 0;
    target = http.createServer((req, res) => {
      req.resume();
      res.end(`seen ${req.url} with ${req.headers.authorization}`);
    });
    target.on('connection', () => connections++);
    await new Promise<void>((resolve) => target!.listen(0, '127.0.0.1', resolve));
    const targetPort = (target.address() as AddressInfo).port;
    // Port 0 is not a choice the bridge takes: find a free one first.
    const probe = http.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    bridge = await startBridge(
      port,
      { host: '127.0.0.1', port: targetPort },
      { basePath: '/t/g/v1', apiKey: 'k' },
    );
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = await request(port, agent, '/t/g/v1/chat/completions');
      expect(first.body).toBe('seen /t/g/v1/chat/completions with Bearer k');
      // The hint an HTTP client reads to decide how long it may reuse the connection.
      expect(first.headers['keep-alive']).toBe(`timeout=${KEEP_ALIVE_MS / 1000}`);
      const second = await request(port, agent, '/t/g/v1/chat/completions');
      expect(second.body).toBe('seen /t/g/v1/chat/completions with Bearer k');
      expect(second.socket).toBe(first.socket);
      // A route outside the trajectory's LLM routes is refused and recorded.
      const refused = await request(port, agent, '/t/g/v1/steps');
      expect(refused.statusCode).toBe(403);
      expect(bridge.refused).toEqual(['POST /t/g/v1/steps']);
      expect(connections).toBe(1);
    } finally {
      agent.destroy();
    }
  });
});

import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { expect } from 'vitest';

/** One request the receiver got. */
export interface Received {
  path: string;
  id: string;
  body: { data: { payload: { pk: string }; version: number; type: string } };
  verified: boolean;
}

/**
 * A webhook receiver that verifies every signature with the standardwebhooks package, whose answer
 * (and delay) per path can be changed, and that can go down and come back on its port.
 */
export class Receiver {
  received: Received[] = [];
  secrets = new Map<string, string[]>();
  answers = new Map<string, number>();
  /** How long the answer to a path waits (ms): a slow receiver keeps deliveries in flight. */
  delays = new Map<string, number>();
  failedSignatures = 0;
  port = 0;
  private server: http.Server | undefined;

  async up(): Promise<void> {
    this.server = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => {
        body += c;
      });
      req.on('end', () => {
        const path = req.url ?? '/';
        const secrets = this.secrets.get(path) ?? [];
        const verified =
          secrets.length > 0 &&
          secrets.every((secret) => {
            try {
              new Webhook(secret).verify(body, req.headers as Record<string, string>);
              return true;
            } catch {
              return false;
            }
          });
        if (!verified) this.failedSignatures++;
        expect(req.headers.authorization).toBeUndefined();
        this.received.push({ path, id: String(req.headers['webhook-id']), body: JSON.parse(body), verified });
        const answer = () => {
          res.writeHead(this.answers.get(path) ?? 200, { 'content-type': 'text/plain' });
          res.end('x'.repeat(2000));
        };
        const delay = this.delays.get(path) ?? 0;
        if (delay > 0) setTimeout(answer, delay);
        else answer();
      });
    });
    await new Promise<void>((resolve) => this.server?.listen(this.port, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
  }

  async down(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
  }

  url(path: string) {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  on(path: string) {
    return this.received.filter((r) => r.path === path);
  }
}

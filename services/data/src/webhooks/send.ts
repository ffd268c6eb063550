import * as http from 'node:http';
import * as https from 'node:https';
import type { LookupFunction } from 'node:net';
import type { AddressPolicy } from './address.js';

export interface Attempt {
  /** The receiver's HTTP status, or null when it did not answer. */
  status: number | null;
  latencyMs: number;
  /** At most 1 KB of the answer. */
  response: string | null;
  error: string | null;
}

const RESPONSE_KEPT = 1024;

/**
 * POSTs one delivery. The connection goes only to an address the policy allows, checked at connect
 * time (a name that resolved to a public address at PUT and to a private one now is refused);
 * redirects are not followed; nothing of onto's own credentials travels; the whole attempt is
 * bounded by `timeoutMs`.
 */
export function send(
  policy: AddressPolicy,
  url: string,
  headers: Record<string, string>,
  body: string,
  timeoutMs: number,
): Promise<Attempt> {
  const started = performance.now();
  const target = new URL(url);
  const lookup: LookupFunction = (hostname, options, callback) => {
    policy.resolve(hostname).then(
      (addresses) => {
        const wanted = options.family === 6 ? 6 : options.family === 4 ? 4 : 0;
        const usable = addresses.filter((a) => wanted === 0 || a.family === wanted);
        if (options.all) callback(null, usable);
        else {
          const first = usable[0];
          if (!first)
            callback(Object.assign(new Error(`${hostname}: no usable address`), { code: 'ENOTFOUND' }), '', 0);
          else callback(null, first.address, first.family);
        }
      },
      (error: Error) => callback(Object.assign(error, { code: 'EREFUSED' }), '', 0),
    );
  };
  return new Promise<Attempt>((resolve) => {
    let settled = false;
    const done = (status: number | null, response: string | null, error: string | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ status, latencyMs: Math.round(performance.now() - started), response, error });
    };
    const request = (target.protocol === 'https:' ? https : http).request(
      target,
      {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        lookup,
        agent: false,
      },
      (res) => {
        let kept = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (kept.length < RESPONSE_KEPT) kept += chunk.slice(0, RESPONSE_KEPT - kept.length);
        });
        res.on('end', () => done(res.statusCode ?? null, kept, null));
        res.on('error', (err) => done(res.statusCode ?? null, kept, err.message));
      },
    );
    const timer = setTimeout(() => {
      request.destroy(new Error(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    request.on('error', (err) => done(null, null, err.message));
    request.end(body);
  });
}

import { createServer, type Server } from 'node:http';
import { Webhook } from 'standardwebhooks';

/**
 * The chaos run's clients without Kafka (issue 31): an SSE subscriber that reconnects to either
 * data instance with Last-Event-ID whenever its stream ends, and a webhook receiver that verifies
 * every signature. Each keeps, per object, the versions it got in arrival order.
 */

interface Change {
  pk: string;
  version: number;
  /** object.announced: the checker's recount re-states a version already sent (ADR 27), not a change. */
  announced: boolean;
}

/** The object change a CloudEvent (SSE data, or a webhook body) carries. */
function changeOf(cloudEvent: {
  type?: string;
  data?: { version?: number; payload?: { pk?: string } };
}): Change | undefined {
  const pk = cloudEvent.data?.payload?.pk;
  const version = cloudEvent.data?.version;
  if (!cloudEvent.type?.startsWith('object.') || typeof pk !== 'string' || typeof version !== 'number') return;
  return { pk, version, announced: cloudEvent.type === 'object.announced' };
}

export class SseWatch {
  /** pk → the versions received, in arrival order. */
  readonly versions = new Map<string, number[]>();
  readonly counts = { connections: 0, reconnects: 0, gone: 0, refused: 0, announced: 0 };
  /** object.announced events whose version this subscriber had not received before it: news, not a re-statement. */
  readonly unannounced: string[] = [];
  private last: string | undefined;
  private readonly stop = new AbortController();
  private done: Promise<void> | undefined;
  private connected: (() => void) | undefined;

  constructor(
    private readonly urls: () => string[],
    private readonly path: string,
    private readonly token: () => string,
    /** How long a stream is read before it is dropped and resumed on the next instance. */
    private readonly switchMs = () => 3000 + Math.floor(Math.random() * 5000),
  ) {}

  /** Resolves once the first stream is open (its start is "now"). */
  start(): Promise<void> {
    const open = new Promise<void>((resolve) => {
      this.connected = resolve;
    });
    this.done = this.run();
    return open;
  }

  async close(): Promise<void> {
    this.stop.abort();
    await this.done;
  }

  private async run(): Promise<void> {
    for (let n = 0; !this.stop.signal.aborted; n++) {
      const url = this.urls()[n % this.urls().length] as string;
      try {
        const headers: Record<string, string> = { authorization: `Bearer ${this.token()}` };
        if (this.last) headers['last-event-id'] = this.last;
        // Each stream is dropped after a few seconds and resumed on the other instance, so that
        // resuming elsewhere is exercised whether or not a fault kills a data instance.
        const signal = AbortSignal.any([this.stop.signal, AbortSignal.timeout(this.switchMs())]);
        const res = await fetch(url + this.path, { headers, signal });
        if (res.status === 410) this.counts.gone++;
        if (res.status !== 200 || !res.body) {
          if (res.status !== 503 && res.status !== 410) this.counts.refused++;
          await res.body?.cancel();
          throw new Error(`${res.status}`);
        }
        this.counts.connections++;
        this.connected?.();
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          for (let at = buffer.indexOf('\n\n'); at >= 0; at = buffer.indexOf('\n\n')) {
            this.frame(buffer.slice(0, at));
            buffer = buffer.slice(at + 2);
          }
        }
      } catch {
        // the instance was killed, the stream ended or the instance is starting: the other one next
      }
      if (this.stop.signal.aborted) return;
      this.counts.reconnects++;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  private frame(frame: string): void {
    let id: string | undefined;
    let event = '';
    let data = '';
    for (const line of frame.split('\n')) {
      if (line.startsWith('id: ')) id = line.slice(4);
      else if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    if (event === 'overflow' || event === 'closed') {
      const lastEventId = (JSON.parse(data) as { lastEventId?: string }).lastEventId;
      if (lastEventId) this.last = lastEventId;
      return;
    }
    if (id === undefined) return;
    this.last = id;
    const change = changeOf(JSON.parse(data));
    if (!change) return;
    if (change.announced) {
      this.counts.announced++;
      if (!this.versions.get(change.pk)?.includes(change.version))
        this.unannounced.push(`${change.pk}: announced v${change.version} before its change`);
      return;
    }
    list(this.versions, change.pk).push(change.version);
  }
}

export class WebhookReceiver {
  /** pk → the versions of first deliveries (by webhook-id), in arrival order. */
  readonly versions = new Map<string, number[]>();
  readonly counts = { requests: 0, redelivered: 0, badSignatures: 0 };
  secret = '';
  private readonly ids = new Set<string>();
  private server: Server | undefined;

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => {
        body += chunk;
      });
      req.on('end', () => {
        this.counts.requests++;
        try {
          new Webhook(this.secret).verify(body, req.headers as Record<string, string>);
        } catch {
          this.counts.badSignatures++;
          res.writeHead(401).end();
          return;
        }
        const id = String(req.headers['webhook-id']);
        if (this.ids.has(id)) this.counts.redelivered++;
        else {
          this.ids.add(id);
          const change = changeOf(JSON.parse(body));
          if (change && !change.announced) list(this.versions, change.pk).push(change.version);
        }
        res.writeHead(204).end();
      });
    });
    const server = this.server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as { port: number }).port}/chaos`;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (server) await new Promise((resolve) => server.close(resolve));
  }
}

function list(map: Map<string, number[]>, key: string): number[] {
  const l = map.get(key) ?? [];
  map.set(key, l);
  return l;
}

/**
 * What a client of `versions` is missing or got wrong: each acknowledged (pk, version) must have
 * arrived; per object, versions must arrive in increasing order, each once.
 */
export function liveViolations(
  versions: Map<string, number[]>,
  acknowledged: Map<string, number[]>,
): { missing: string[]; disorder: string[] } {
  const missing: string[] = [];
  const disorder: string[] = [];
  for (const [pk, acked] of acknowledged) {
    const got = new Set(versions.get(pk) ?? []);
    for (const v of acked) if (!got.has(v)) missing.push(`${pk}@v${v}`);
  }
  for (const [pk, got] of versions) {
    for (let i = 1; i < got.length; i++) {
      if ((got[i] as number) <= (got[i - 1] as number)) {
        disorder.push(`${pk}: v${got[i]} after v${got[i - 1]}`);
        break;
      }
    }
  }
  return { missing, disorder };
}

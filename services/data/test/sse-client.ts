import * as http from 'node:http';

export interface SseEvent {
  id?: string;
  event: string;
  data: string;
}

/**
 * A Server-Sent Events client as a browser's EventSource reads a stream (without reconnecting):
 * events as they arrive, comment lines counted, the end of the stream awaited.
 */
export class SseClient {
  readonly events: SseEvent[] = [];
  comments = 0;
  status = 0;
  body = '';
  ended: Promise<void>;
  endedAt: number | undefined;
  private request: http.ClientRequest;
  private onEvent: ((e: SseEvent) => void) | undefined;

  constructor(url: string, headers: Record<string, string>, onEvent?: (e: SseEvent) => void) {
    this.onEvent = onEvent;
    let resolveEnd: () => void;
    this.ended = new Promise((r) => {
      resolveEnd = r;
    });
    const end = () => {
      this.endedAt ??= Date.now();
      resolveEnd();
    };
    let buffer = '';
    this.request = http.get(url, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      this.status = res.statusCode ?? 0;
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (this.status !== 200) {
          this.body += chunk;
          return;
        }
        buffer += chunk;
        let at = buffer.indexOf('\n\n');
        while (at >= 0) {
          this.frame(buffer.slice(0, at));
          buffer = buffer.slice(at + 2);
          at = buffer.indexOf('\n\n');
        }
      });
      res.on('end', end);
      res.on('close', end);
      res.on('error', end);
    });
    this.request.on('error', end);
  }

  private frame(text: string): void {
    const event: SseEvent = { event: 'message', data: '' };
    let any = false;
    for (const line of text.split('\n')) {
      if (line.startsWith(':')) {
        this.comments++;
        continue;
      }
      const colon = line.indexOf(':');
      const field = line.slice(0, colon);
      const value = line.slice(colon + 1).replace(/^ /, '');
      any = true;
      if (field === 'id') event.id = value;
      else if (field === 'event') event.event = value;
      else if (field === 'data') event.data += value;
    }
    if (!any) return;
    this.events.push(event);
    this.onEvent?.(event);
  }

  /** Waits until the response head arrived. */
  async opened(ms = 10_000): Promise<number> {
    const until = Date.now() + ms;
    while (this.status === 0 && this.endedAt === undefined) {
      if (Date.now() > until) throw new Error('the stream did not open');
      await new Promise((r) => setTimeout(r, 20));
    }
    return this.status;
  }

  close(): void {
    this.request.destroy();
  }
}

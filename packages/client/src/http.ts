/**
 * The transport: fetch (Node 20's, or one given), bearer tokens exchanged from an API token and
 * refreshed, retries with backoff on 429 and 503 honouring Retry-After, and problems as errors.
 * Only what the language has: no DOM or Node types, so that the client builds anywhere.
 */

/** As much of a fetch response as the client reads. */
export interface FetchResponse {
  status: number;
  headers: { get(name: string): string | null };
  text(): Promise<string>;
}
export type Fetch = (
  url: string,
  init: { method: string; headers: Record<string, string>; body?: string },
) => Promise<FetchResponse>;

declare function setTimeout(callback: () => void, ms: number): unknown;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** One fault of a request, located by its JSON path (`/properties/amount`) or header. */
export interface FieldError {
  path: string;
  message: string;
}

/** An application/problem+json answer, as an error: its status, type, detail and each field's path. */
export class OntoProblem extends Error {
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string | undefined;
  readonly errors: FieldError[];
  /** The whole problem body, extensions included (`currentVersion` of a 412, …). */
  readonly body: Record<string, unknown>;
  constructor(status: number, body: Record<string, unknown>) {
    const errors = Array.isArray(body.errors) ? (body.errors as FieldError[]) : [];
    const detail = typeof body.detail === 'string' ? body.detail : undefined;
    const fields = errors.map((e) => `${e.path} ${e.message}`).join('; ');
    super(`${status} ${String(body.title ?? 'error')}${detail ? `: ${detail}` : ''}${fields ? ` (${fields})` : ''}`);
    this.name = 'OntoProblem';
    this.status = status;
    this.type = String(body.type ?? 'about:blank');
    this.title = String(body.title ?? '');
    this.detail = detail;
    this.errors = errors;
    this.body = body;
  }
  /** The faults at a JSON path (`/properties/amount`), or under it. */
  at(path: string): FieldError[] {
    return this.errors.filter((e) => e.path === path || e.path.startsWith(`${path}/`));
  }
}
/** 400: the request is malformed (a field's path says where). */
export class BadRequestError extends OntoProblem {}
/** 404: the world, type or object does not exist. */
export class NotFoundError extends OntoProblem {}
/** 409: a conflict (an Idempotency-Key in flight, a version taken). */
export class ConflictError extends OntoProblem {}
/** 412: If-Match named a version that is no longer current. */
export class PreconditionFailedError extends OntoProblem {}
/** 422: the content breaks a rule of the world's schema (each field's path says which). */
export class UnprocessableError extends OntoProblem {}
/** 401 or 403. */
export class UnauthorizedError extends OntoProblem {}
/** 429 or 503 after every retry. */
export class UnavailableError extends OntoProblem {}

const CLASSES: Record<number, typeof OntoProblem> = {
  400: BadRequestError,
  401: UnauthorizedError,
  403: UnauthorizedError,
  404: NotFoundError,
  409: ConflictError,
  412: PreconditionFailedError,
  422: UnprocessableError,
  429: UnavailableError,
  503: UnavailableError,
};

export function problemOf(status: number, body: unknown): OntoProblem {
  const record =
    typeof body === 'object' && body !== null && !Array.isArray(body)
      ? (body as Record<string, unknown>)
      : { title: 'error', detail: typeof body === 'string' ? body.slice(0, 500) : undefined };
  return new (CLASSES[status] ?? OntoProblem)(status, record);
}

export type Service = 'control' | 'data' | 'intelligence';

export interface RetryOptions {
  /** Attempts in all, the first included (default 5). */
  attempts: number;
  /** The first wait, doubled each time up to maxDelayMs (default 100). */
  baseDelayMs: number;
  maxDelayMs: number;
}

export interface TransportOptions {
  urls: Record<Service, string>;
  /** An API token (onto_…): exchanged at control for access tokens, again when one expires. */
  apiToken?: string;
  /** An access token to use as is (no refresh). */
  accessToken?: string;
  fetch?: Fetch;
  retry?: Partial<RetryOptions>;
}

export interface Answer<T> {
  status: number;
  body: T;
  headers: { get(name: string): string | null };
}

export interface Call {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  query?: Record<string, string | string[] | number | undefined>;
  body?: unknown;
  headers?: Record<string, string | undefined>;
}

/** Seconds to wait from a Retry-After header (seconds or an HTTP date); undefined when absent. */
export function retryAfterMs(value: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

export class Transport {
  private readonly fetch: Fetch;
  private readonly retry: RetryOptions;
  private access: { token: string; refreshAt: number } | undefined;
  private exchanging: Promise<string> | undefined;

  constructor(private readonly opts: TransportOptions) {
    const global = (globalThis as { fetch?: Fetch }).fetch;
    const fetch = opts.fetch ?? global;
    if (!fetch) throw new Error('no fetch: run on Node 20 or later, or pass options.fetch');
    this.fetch = fetch;
    this.retry = { attempts: 5, baseDelayMs: 100, maxDelayMs: 5_000, ...opts.retry };
    if (opts.accessToken) this.access = { token: opts.accessToken, refreshAt: Number.POSITIVE_INFINITY };
    if (!opts.accessToken && !opts.apiToken) throw new Error('an apiToken or an accessToken is required');
  }

  /** An access token, exchanged from the API token when there is none or it is about to expire. */
  async accessToken(force = false): Promise<string> {
    if (!force && this.access && Date.now() < this.access.refreshAt) return this.access.token;
    if (!this.opts.apiToken) {
      if (this.access) return this.access.token;
      throw new Error('no apiToken to exchange for an access token');
    }
    // One exchange at a time: concurrent calls wait for the same one.
    this.exchanging ??= (async () => {
      try {
        const res = await this.send('control', {
          method: 'POST',
          path: '/v1/auth/token',
          body: { apiToken: this.opts.apiToken },
        });
        const body = res.body as { accessToken: string; expiresIn: number };
        // Refreshed at 80% of its life, so that no request carries one about to lapse.
        this.access = { token: body.accessToken, refreshAt: Date.now() + body.expiresIn * 800 };
        return body.accessToken;
      } finally {
        this.exchanging = undefined;
      }
    })();
    return this.exchanging;
  }

  /** A call with a bearer token; a 401 exchanges a new one once. */
  async call<T>(service: Service, call: Call): Promise<Answer<T>> {
    try {
      return await this.send<T>(service, call, await this.accessToken());
    } catch (error) {
      if (!(error instanceof UnauthorizedError) || error.status !== 401 || !this.opts.apiToken) throw error;
      return this.send<T>(service, call, await this.accessToken(true));
    }
  }

  private url(service: Service, call: Call): string {
    const base = this.opts.urls[service].replace(/\/+$/, '');
    const params: string[] = [];
    for (const [name, value] of Object.entries(call.query ?? {})) {
      for (const v of [value].flat()) {
        if (v !== undefined) params.push(`${encodeURIComponent(name)}=${encodeURIComponent(String(v))}`);
      }
    }
    return `${base}${call.path}${params.length ? `?${params.join('&')}` : ''}`;
  }

  /** Sends, retrying 429 and 503 (and a connection refused) with backoff, Retry-After first. */
  private async send<T>(service: Service, call: Call, token?: string): Promise<Answer<T>> {
    const headers: Record<string, string> = { accept: 'application/json, application/problem+json' };
    for (const [name, value] of Object.entries(call.headers ?? {})) {
      // own-key: header names are the client's own constants (if-match, idempotency-key, …)
      if (value !== undefined) headers[name] = value;
    }
    if (token) headers.authorization = `Bearer ${token}`;
    if (call.body !== undefined) headers['content-type'] = 'application/json';
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);
    for (let attempt = 1; ; attempt++) {
      const backoff = Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (attempt - 1));
      let res: FetchResponse;
      try {
        res = await this.fetch(this.url(service, call), {
          method: call.method,
          headers,
          ...(body === undefined ? {} : { body }),
        });
      } catch (error) {
        if (attempt >= this.retry.attempts) throw error;
        await sleep(backoff * (0.5 + Math.random() / 2));
        continue;
      }
      const text = await res.text();
      let parsed: unknown = null;
      if (text) {
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = text;
        }
      }
      if (res.status < 400) return { status: res.status, body: parsed as T, headers: res.headers };
      if ((res.status === 429 || res.status === 503) && attempt < this.retry.attempts) {
        // The server's Retry-After wins over the backoff (bounded: a minute at most).
        await sleep(Math.min(60_000, retryAfterMs(res.headers.get('retry-after')) ?? backoff));
        continue;
      }
      throw problemOf(res.status, parsed);
    }
  }
}

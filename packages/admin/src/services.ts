import { AdminError, EXIT, type ExitCode } from './errors.js';

export type ServiceName = 'control' | 'data' | 'intelligence';

export interface ServiceOptions {
  controlUrl: string;
  dataUrl: string;
  intelligenceUrl: string;
  /** An access token; else `apiToken` is exchanged for one at control. */
  token?: string | undefined;
  apiToken?: string | undefined;
}

const STATUS_EXIT: Record<number, ExitCode> = {
  400: EXIT.usage,
  401: EXIT.unauthorised,
  403: EXIT.unauthorised,
  404: EXIT.notFound,
  422: EXIT.usage,
};

/** The services' admin endpoints, as the platform administrator. */
export class Services {
  private token: string | undefined;

  constructor(private readonly opts: ServiceOptions) {
    this.token = opts.token;
  }

  private url(service: ServiceName, path: string): string {
    const base = { control: this.opts.controlUrl, data: this.opts.dataUrl, intelligence: this.opts.intelligenceUrl }[
      service
    ];
    return `${base.replace(/\/+$/, '')}${path}`;
  }

  private async accessToken(): Promise<string> {
    if (this.token) return this.token;
    if (!this.opts.apiToken) {
      throw new AdminError(
        'no admin token: set ONTO_ACCESS_TOKEN (or --token), or ONTO_API_TOKEN (or --api-token) to exchange one',
        EXIT.unauthorised,
      );
    }
    const body = await this.send('control', 'POST', '/v1/auth/token', { apiToken: this.opts.apiToken }, false);
    this.token = (body as { accessToken: string }).accessToken;
    return this.token;
  }

  async call(service: ServiceName, method: 'GET' | 'POST', path: string, body?: unknown): Promise<unknown> {
    return this.send(service, method, path, body, true);
  }

  private async send(
    service: ServiceName,
    method: 'GET' | 'POST',
    path: string,
    body: unknown,
    authorised: boolean,
  ): Promise<unknown> {
    const headers: Record<string, string> = {};
    if (authorised) headers.authorization = `Bearer ${await this.accessToken()}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(this.url(service, path), {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(30_000),
      });
    } catch (error) {
      const cause = (error as { cause?: { message?: string } }).cause?.message ?? (error as Error).message;
      throw new AdminError(`${service} did not answer at ${this.url(service, '')}: ${cause}`, EXIT.failure);
    }
    const text = await res.text();
    const parsed = text ? safeJson(text) : null;
    if (res.ok) return parsed;
    const problem = (parsed ?? {}) as { detail?: string; title?: string; errors?: { path: string; message: string }[] };
    const fields = problem.errors?.map((e) => `${e.path}: ${e.message}`).join('; ');
    const why = [problem.detail ?? problem.title ?? text, fields].filter(Boolean).join(' — ');
    throw new AdminError(`${service} answered ${res.status}: ${why}`, STATUS_EXIT[res.status] ?? EXIT.failure);
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * The console's only way to the services: their public APIs, with the access token kept in
 * memory (never in storage) and exchanged again before it expires.
 */

export type Service = 'control' | 'data' | 'intelligence';
export type Role = 'viewer' | 'editor' | 'owner';

/** An API failure as its application/problem+json says it. */
export class Problem extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string | undefined,
    readonly body: unknown,
  ) {
    super(detail ? `${title}: ${detail}` : title);
  }
}

interface Session {
  apiToken: string;
  accessToken: string;
  userId: string;
  admin: boolean;
  roles: Record<string, Role>;
  timer: ReturnType<typeof setTimeout> | undefined;
}

const urls: Record<Service, string> = { control: '', data: '', intelligence: '' };
let session: Session | undefined;
const listeners = new Set<() => void>();

/** Where data and intelligence answer: control tells the console in /console/config.json. */
export async function loadConfig(): Promise<void> {
  const response = await fetch('config.json');
  if (!response.ok) throw new Problem(response.status, 'The console has no configuration', undefined, null);
  const config = (await response.json()) as { dataUrl: string; intelligenceUrl: string };
  urls.data = config.dataUrl.replace(/\/$/, '');
  urls.intelligence = config.intelligenceUrl.replace(/\/$/, '');
}

export function onSessionChange(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export const signedIn = () => session !== undefined;
export const userId = () => session?.userId;

/** The caller's role in a world: administrators own every world. */
export function roleIn(world: string): Role | undefined {
  if (!session) return undefined;
  if (session.admin) return 'owner';
  return Object.hasOwn(session.roles, world) ? session.roles[world] : undefined;
}

const RANK: Record<Role, number> = { viewer: 0, editor: 1, owner: 2 };
/** Whether the caller holds at least `role` in `world`: write buttons show only then. */
export const may = (world: string, role: Role) =>
  (RANK[roleIn(world) ?? 'viewer'] ?? 0) >= RANK[role] && !!roleIn(world);
export const isAdmin = () => session?.admin === true;

function claimsOf(jwt: string): { sub: string; adm?: boolean; roles?: Record<string, Role> } {
  const payload = jwt.split('.')[1] ?? '';
  const base64 = payload.replace(/-/g, '+').replace(/_/g, '/');
  return JSON.parse(atob(base64.padEnd(Math.ceil(base64.length / 4) * 4, '=')));
}

/** Exchanges the API token for an access token, and again at 80% of its life. */
export async function signIn(apiToken: string): Promise<void> {
  const body = (await request('control', 'POST', '/v1/auth/token', { apiToken }, false)) as {
    accessToken: string;
    expiresIn: number;
  };
  const claims = claimsOf(body.accessToken);
  if (session?.timer) clearTimeout(session.timer);
  session = {
    apiToken,
    accessToken: body.accessToken,
    userId: claims.sub,
    admin: claims.adm === true,
    roles: claims.roles ?? {},
    timer: setTimeout(
      () => {
        signIn(apiToken).catch(() => signOut());
      },
      Math.max(5, body.expiresIn * 0.8) * 1000,
    ),
  };
  for (const listener of listeners) listener();
}

export function signOut(): void {
  if (session?.timer) clearTimeout(session.timer);
  session = undefined;
  for (const listener of listeners) listener();
}

/** One call; a non-2xx answer throws its problem (title and detail) as a Problem. */
export async function request(
  service: Service,
  method: string,
  path: string,
  body?: unknown,
  auth = true,
  headers: Record<string, string> = {},
): Promise<unknown> {
  const all: Record<string, string> = { ...headers };
  if (body !== undefined) all['content-type'] = 'application/json';
  if (auth && session) all.authorization = `Bearer ${session.accessToken}`;
  let response: Response;
  try {
    response = await fetch(`${urls[service]}${path}`, {
      method,
      headers: all,
      body: body === undefined ? null : JSON.stringify(body),
    });
  } catch (err) {
    throw new Problem(0, `${service} did not answer`, String(err), null);
  }
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  if (!response.ok) {
    const p = (parsed ?? {}) as { title?: string; detail?: string };
    throw new Problem(response.status, p.title ?? `${response.status} ${response.statusText}`, p.detail, parsed);
  }
  return parsed;
}

/** The access token of the session, for a stream the console reads itself (undefined when signed out). */
export const accessToken = () => session?.accessToken;
/** Where a service answers (its origin, no trailing slash). */
export const serviceUrl = (service: Service) => urls[service];

export const get = <T>(service: Service, path: string) => request(service, 'GET', path) as Promise<T>;
export const send = <T>(
  service: Service,
  method: string,
  path: string,
  body?: unknown,
  headers?: Record<string, string>,
) => request(service, method, path, body, true, headers) as Promise<T>;
export const enc = encodeURIComponent;

/**
 * @onto/client: the typed client of onto's three services. `onto-admin codegen` writes a module
 * with a world's types (object types, links, actions, derived properties) and the signature of
 * the schema it was generated from; `new OntoClient(…).world(generated)` gives typed CRUD with
 * ETags, object-set queries and aggregations, derived values read with the consistency token of
 * the last write (read-your-writes across services), and actions with an Idempotency-Key kept
 * across retries.
 */
import {
  type Answer,
  type Call,
  ConflictError,
  OntoProblem,
  type Service,
  Transport,
  type TransportOptions,
} from './http.js';
import {
  type AggregateBody,
  type AggregateResult,
  type Metric,
  ObjectQuery,
  type QueryBody,
  type QueryPage,
} from './query.js';
import { drift, type SchemaDocument, type SchemaDrift, signatureOf } from './schema.js';

export * from './http.js';
export * from './query.js';
export * from './schema.js';

declare function setTimeout(callback: () => void, ms: number): unknown;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A point of a time series. */
export interface Point<V> {
  time: string;
  value: V;
}

/** One object type as generated code describes it. */
export interface ObjectTypeShape {
  /** Its properties (series excluded). */
  properties: object;
  /** Its time series by name, with their value type. */
  series: object;
  /** Its derived properties by name, with their value type. */
  derived: object;
  /** The link types that start or end at it. */
  links: string;
}

/** A world's types, as `onto-admin codegen` writes them. */
export interface WorldShape {
  objects: Record<string, ObjectTypeShape>;
  links: Record<string, { from: string; to: string }>;
  actions: Record<string, object>;
}

/** What a generated module exports for its world: the id, the schema version and its signature. */
export interface WorldDefinition<W extends WorldShape> {
  id: string;
  schemaVersion: number;
  signature: Record<string, string>;
  /** Only for the types: never read. */
  readonly __shape?: W;
}

export function defineWorld<W extends WorldShape>(definition: Omit<WorldDefinition<W>, '__shape'>): WorldDefinition<W> {
  return definition;
}

/** The world's schema moved incompatibly since the code was generated: regenerate it. */
export class SchemaMovedError extends Error {
  constructor(
    readonly world: string,
    readonly generatedVersion: number,
    readonly currentVersion: number,
    readonly changes: SchemaDrift[],
  ) {
    super(
      `the schema of ${world} moved incompatibly since the client was generated (version ${generatedVersion}, now ${currentVersion}): ${changes
        .slice(0, 10)
        .map(
          (c) =>
            `${c.path} ${c.current === undefined ? 'is gone' : c.generated === undefined ? 'is new and required' : 'changed'}`,
        )
        .join('; ')}; run onto-admin codegen again`,
    );
    this.name = 'SchemaMovedError';
  }
}

/** An object as read or written: its properties, its version, and the ETag that names it. */
export interface Versioned<T extends string, P> {
  type: T;
  pk: string;
  version: number;
  /** `"<version>"`, for If-Match. */
  etag: string;
  properties: P;
  /** On a read: the latest point of each time series. */
  series?: Record<string, Point<unknown>>;
}

export interface WriteOptions {
  /** The version (or ETag) the write is based on; `*`: whatever exists. 412 when stale. */
  ifMatch?: number | string;
  /** `*`: create only. */
  ifNoneMatch?: '*';
}

/** A derived value as intelligence computed it. */
export interface DerivedValue<V> {
  value: V | null;
  sourceVersion: number | null;
  sourceSeq: number | null;
  stale: boolean;
  state: 'valid' | 'invalid';
}

export interface ActionValidation {
  valid: boolean;
  errors: { path: string; message: string }[];
  edits: Record<string, unknown>[];
  schemaVersion: number;
}

export interface ActionRun<P> {
  id: string;
  world: string;
  actionType: string;
  status: 'RUNNING' | 'COMPENSATING' | 'COMPLETED' | 'COMPENSATED' | 'FAILED';
  parameters: P;
  idempotencyKey: string | null;
  refusal: unknown;
  steps: unknown[];
  /** True when the service answered a request it had seen (same Idempotency-Key). */
  replayed: boolean;
}

export type PatchOf<P> = { [K in keyof P]?: P[K] | null };

type Etag = number | string;
const etagOf = (value: Etag) => (typeof value === 'number' ? `"${value}"` : value);

export interface ClientOptions extends Omit<TransportOptions, 'urls'> {
  control: string;
  data: string;
  intelligence: string;
  /** Check the world's schema against the generated signature before the first call (default true). */
  checkSchema?: boolean;
}

export class OntoClient {
  readonly transport: Transport;
  constructor(private readonly options: ClientOptions) {
    this.transport = new Transport({
      ...options,
      urls: { control: options.control, data: options.data, intelligence: options.intelligence },
    });
  }

  /** A world through its generated definition. */
  world<W extends WorldShape>(definition: WorldDefinition<W>): World<W> {
    return new World(this.transport, definition, this.options.checkSchema ?? true);
  }
}

const TERMINAL = new Set(['COMPLETED', 'COMPENSATED', 'FAILED']);

/** What a handle needs of its world: the id, and calls with the schema checked and the token carried. */
export interface WorldCalls {
  readonly id: string;
  call<T>(service: Service, call: Call, write?: boolean): Promise<Answer<T>>;
}

/** One world: its object types, its actions, and the consistency token of its last write. */
export class World<W extends WorldShape> implements WorldCalls {
  /** The highest version each service answered for a write of this client in this world. */
  readonly consistency: Partial<Record<Service, number>> = {};
  private checked: Promise<void> | undefined;
  readonly objects: { [T in keyof W['objects'] & string]: ObjectType<W, T> };
  readonly actions: { [A in keyof W['actions'] & string]: Action<W['actions'][A]> };

  constructor(
    private readonly transport: Transport,
    readonly definition: WorldDefinition<W>,
    private readonly check: boolean,
  ) {
    const objectTypes = new Map<string, unknown>();
    const actions = new Map<string, unknown>();
    // Handles on demand, by name: the generated types say which names exist.
    this.objects = new Proxy({} as this['objects'], {
      get: (_, name) => {
        if (typeof name !== 'string') return undefined;
        if (!objectTypes.has(name)) objectTypes.set(name, new ObjectType(this, name));
        return objectTypes.get(name);
      },
    });
    this.actions = new Proxy({} as this['actions'], {
      get: (_, name) => {
        if (typeof name !== 'string') return undefined;
        if (!actions.has(name)) actions.set(name, new Action(this, name));
        return actions.get(name);
      },
    });
  }

  get id(): string {
    return this.definition.id;
  }

  /** Compares the world's schema now with the one the code was generated from. */
  async checkSchema(): Promise<{ version: number; changes: SchemaDrift[] }> {
    const { body } = await this.transport.call<SchemaDocument>('control', {
      method: 'GET',
      path: `/v1/worlds/${this.id}/schema`,
    });
    return { version: body.version, changes: drift(this.definition.signature, signatureOf(body)) };
  }

  private async ensureSchema(): Promise<void> {
    if (!this.check) return;
    this.checked ??= this.checkSchema().then(({ version, changes }) => {
      if (changes.length > 0) {
        throw new SchemaMovedError(this.id, this.definition.schemaVersion, version, changes);
      }
    });
    try {
      await this.checked;
    } catch (error) {
      this.checked = undefined;
      throw error;
    }
  }

  /** The token a read in `service` waits for: what this client wrote that `service` depends on. */
  tokenFor(service: Service): string | undefined {
    const wanted: Service[] = service === 'data' ? ['control', 'data'] : ['control', 'data', 'intelligence'];
    const parts = wanted.filter((s) => this.consistency[s] !== undefined).map((s) => `${s}=${this.consistency[s]}`);
    return parts.length ? parts.join(', ') : undefined;
  }

  /** Keeps the highest version of each service a write answered. */
  remember(headers: { get(name: string): string | null }): void {
    const token = headers.get('x-consistency-token');
    if (!token) return;
    for (const part of token.split(/[,;]/)) {
      const m = /^\s*(control|data|intelligence)=(\d+)\s*$/.exec(part);
      if (!m?.[1]) continue;
      const service = m[1] as Service;
      const n = Number(m[2]);
      if ((this.consistency[service] ?? -1) < n) this.consistency[service] = n;
    }
  }

  /** A call in this world, with the schema checked first and the consistency token carried. */
  async call<T>(service: Service, call: Call, write = false): Promise<Answer<T>> {
    await this.ensureSchema();
    const token = this.tokenFor(service);
    const answer = await this.transport.call<T>(service, {
      ...call,
      headers: { ...(token && !write ? { 'x-consistency-token': token } : {}), ...call.headers },
    });
    this.remember(answer.headers);
    return answer;
  }
}

type Props<W extends WorldShape, T extends keyof W['objects']> = W['objects'][T]['properties'];
type LinksOf<W extends WorldShape, T extends keyof W['objects']> = W['objects'][T]['links'] & string;
/** The fields of a read-model query: the properties, and each derived property as `derived.<name>`. */
export type ReadModelFields<W extends WorldShape, T extends keyof W['objects']> = Props<W, T> & {
  [K in keyof W['objects'][T]['derived'] & string as `derived.${K}`]: W['objects'][T]['derived'][K];
};

/** One object type of a world: CRUD with ETags, queries, aggregations, derived values, series. */
export class ObjectType<W extends WorldShape, T extends keyof W['objects'] & string> {
  constructor(
    private readonly world: WorldCalls,
    readonly name: T,
  ) {}

  private path(pk?: string): string {
    const base = `/v1/worlds/${this.world.id}/objects/${this.name}`;
    return pk === undefined ? base : `${base}/${encodeURIComponent(pk)}`;
  }

  private versioned(answer: Answer<Omit<Versioned<T, Props<W, T>>, 'etag'>>): Versioned<T, Props<W, T>> {
    return { ...answer.body, etag: answer.headers.get('etag') ?? `"${answer.body.version}"` };
  }

  async get(pk: string, options: { at?: string | number } = {}): Promise<Versioned<T, Props<W, T>>> {
    return this.versioned(
      await this.world.call('data', {
        method: 'GET',
        path: this.path(pk),
        ...(options.at === undefined ? {} : { query: { at: String(options.at) } }),
      }),
    );
  }

  /** Creates or replaces the object; If-Match / If-None-Match make it conditional. */
  async put(pk: string, properties: Props<W, T>, options: WriteOptions = {}): Promise<Versioned<T, Props<W, T>>> {
    return this.versioned(
      await this.world.call(
        'data',
        { method: 'PUT', path: this.path(pk), body: { properties }, headers: preconditions(options) },
        true,
      ),
    );
  }

  /** Changes some properties (null removes one). */
  async patch(
    pk: string,
    properties: PatchOf<Props<W, T>>,
    options: WriteOptions = {},
  ): Promise<Versioned<T, Props<W, T>>> {
    return this.versioned(
      await this.world.call(
        'data',
        { method: 'PATCH', path: this.path(pk), body: { properties }, headers: preconditions(options) },
        true,
      ),
    );
  }

  async delete(pk: string, options: WriteOptions = {}): Promise<void> {
    await this.world.call('data', { method: 'DELETE', path: this.path(pk), headers: preconditions(options) }, true);
  }

  /** Every object of the type (the list's pages, followed), optionally filtered and sorted. */
  async *list(
    options: { filter?: string[]; sort?: string; pageSize?: number; at?: string | number } = {},
  ): AsyncGenerator<Versioned<T, Props<W, T>>> {
    let cursor: string | undefined;
    do {
      const answer = await this.world.call<{ objects: Omit<Versioned<T, Props<W, T>>, 'etag'>[]; next: string | null }>(
        'data',
        {
          method: 'GET',
          path: this.path(),
          query: {
            filter: options.filter,
            sort: options.sort,
            limit: options.pageSize,
            at: options.at === undefined ? undefined : String(options.at),
            cursor,
          },
        },
      );
      for (const o of answer.body.objects) yield { ...o, etag: `"${o.version}"` };
      cursor = answer.body.next ?? undefined;
    } while (cursor);
  }

  /** An object set over data's query endpoint, built step by step. */
  query(): ObjectQuery<T, Props<W, T>, LinksOf<W, T>> {
    return new ObjectQuery(async (body: QueryBody<Props<W, T>, LinksOf<W, T>>) => {
      const answer = await this.world.call<QueryPage<T, Props<W, T>>>('data', {
        method: 'POST',
        path: `${this.path()}/query`,
        body,
      });
      return answer.body;
    });
  }

  /**
   * An object set over intelligence's read model (`…/query` there, docs/adr/0075): the same
   * builder, where derived properties are fields `derived.<name>`; each object carries `derived`.
   */
  readModel(): ObjectQuery<T, ReadModelFields<W, T>, LinksOf<W, T>> {
    return new ObjectQuery(async (body: QueryBody<ReadModelFields<W, T>, LinksOf<W, T>>) => {
      const answer = await this.world.call<QueryPage<T, ReadModelFields<W, T>>>('intelligence', {
        method: 'POST',
        path: `${this.path()}/query`,
        body,
      });
      return answer.body;
    });
  }

  /** Groups and metrics over the read model, derived properties as `derived.<name>` fields. */
  async aggregateReadModel<M extends Metric<ReadModelFields<W, T>>>(
    body: AggregateBody<ReadModelFields<W, T>, LinksOf<W, T>> & { metrics: M[] },
  ): Promise<AggregateResult<M['name']>> {
    const answer = await this.world.call<AggregateResult<M['name']>>('intelligence', {
      method: 'POST',
      path: `${this.path()}/aggregate`,
      body,
    });
    return answer.body;
  }

  /** Groups and metrics over the objects a `where` selects. */
  async aggregate<M extends Metric<Props<W, T>>>(
    body: AggregateBody<Props<W, T>, LinksOf<W, T>> & { metrics: M[] },
  ): Promise<AggregateResult<M['name']>> {
    const answer = await this.world.call<AggregateResult<M['name']>>('data', {
      method: 'POST',
      path: `${this.path()}/aggregate`,
      body,
    });
    return answer.body;
  }

  /**
   * The object's derived values in intelligence, after every write this client made (the
   * consistency token waits for them, bounded: a 503 is retried as its Retry-After says).
   */
  async derived(pk: string): Promise<{
    [D in keyof W['objects'][T]['derived']]: DerivedValue<W['objects'][T]['derived'][D]>;
  }> {
    const answer = await this.world.call<{ derived: Record<string, DerivedValue<unknown>> }>('intelligence', {
      method: 'GET',
      path: `${this.path(pk)}/derived`,
    });
    return answer.body.derived as never;
  }

  /** A time series of one object. */
  series<S extends keyof W['objects'][T]['series'] & string>(pk: string, name: S) {
    const path = `/v1/worlds/${this.world.id}/series/${this.name}/${encodeURIComponent(pk)}/${name}`;
    type V = W['objects'][T]['series'][S];
    return {
      write: async (points: Point<V>[]) =>
        (
          await this.world.call<{ written: number; unchanged: number }>(
            'data',
            { method: 'POST', path, body: { points } },
            true,
          )
        ).body,
      read: async (options: { from?: string; to?: string; bucket?: string; agg?: string; limit?: number } = {}) =>
        (
          await this.world.call<{ points: Point<V>[]; next: string | null }>('data', {
            method: 'GET',
            path,
            query: { ...options },
          })
        ).body,
    };
  }
}

function preconditions(options: WriteOptions): Record<string, string | undefined> {
  return {
    'if-match': options.ifMatch === undefined ? undefined : etagOf(options.ifMatch),
    'if-none-match': options.ifNoneMatch,
  };
}

declare const crypto: { randomUUID(): string };

/** One item's answer in a batch of actions: the action (202), or the problem it met alone. */
export interface ActionBatchResult<P> {
  index: number;
  idempotencyKey: string;
  /** The status the item would have answered alone: 202, or 4xx. */
  status: number;
  replayed: boolean;
  action: Omit<ActionRun<P>, 'replayed'> | null;
  problem: { status: number; detail: string; errors: { path: string; message: string }[] } | null;
}

/** One action type: checked without running (validate), or run with an Idempotency-Key. */
export class Action<P extends object> {
  constructor(
    private readonly world: WorldCalls,
    readonly name: string,
  ) {}

  private path(): string {
    return `/v1/worlds/${this.world.id}/actions/${this.name}`;
  }

  /** Whether the parameters are valid and which edits the action would make; nothing runs. */
  async validate(parameters: P, options: { idempotencyKey?: string } = {}): Promise<ActionValidation> {
    const answer = await this.world.call<ActionValidation>('intelligence', {
      method: 'POST',
      path: this.path(),
      body: { parameters, validateOnly: true },
      headers: { 'idempotency-key': options.idempotencyKey ?? crypto.randomUUID() },
    });
    return answer.body;
  }

  /**
   * Runs up to 20 invocations in one request (`…/actions/{type}/batch`), each under its own
   * idempotency key (given, or made here once), so that sending the batch again after a lost
   * answer replays each item instead of running it twice. Answers one result per item, in order.
   */
  async applyBatch(items: { parameters: P; idempotencyKey?: string }[]): Promise<ActionBatchResult<P>[]> {
    const body = {
      items: items.map((i) => ({ parameters: i.parameters, idempotencyKey: i.idempotencyKey ?? crypto.randomUUID() })),
    };
    const answer = await this.world.call<{ results: ActionBatchResult<P>[] }>(
      'intelligence',
      { method: 'POST', path: `${this.path()}/batch`, body },
      true,
    );
    return answer.body.results;
  }

  /**
   * Runs the action once: the Idempotency-Key (given, or made here) is the same on every retry,
   * so that a retry after a lost answer replays the first run instead of running it again.
   * Answers the action as started (RUNNING), or as it ended with `wait`.
   */
  async apply(
    parameters: P,
    options: { idempotencyKey?: string; wait?: boolean; timeoutMs?: number } = {},
  ): Promise<ActionRun<P>> {
    const key = options.idempotencyKey ?? crypto.randomUUID();
    let answer: Answer<ActionRun<P>> | undefined;
    for (let attempt = 1; !answer; attempt++) {
      try {
        answer = await this.world.call<ActionRun<P>>(
          'intelligence',
          { method: 'POST', path: this.path(), body: { parameters }, headers: { 'idempotency-key': key } },
          true,
        );
      } catch (error) {
        // 409: the same key is in flight (a retry overtook the first request): wait and ask again.
        if (!(error instanceof ConflictError) || attempt >= 10) throw error;
        await sleep(Number(error.body.retryAfter ?? 1) * 200 * attempt);
      }
    }
    let run: ActionRun<P> = { ...answer.body, replayed: answer.headers.get('idempotent-replayed') === 'true' };
    if (!options.wait) return run;
    const deadline = Date.now() + (options.timeoutMs ?? 30_000);
    for (let i = 0; !TERMINAL.has(run.status); i++) {
      if (Date.now() > deadline) throw new Error(`action ${run.id} is still ${run.status}`);
      await sleep(Math.min(1000, 50 * 2 ** i));
      const got = await this.world.call<ActionRun<P>>('intelligence', {
        method: 'GET',
        path: `/v1/worlds/${this.world.id}/actions/${run.id}`,
      });
      run = { ...got.body, replayed: run.replayed };
    }
    return run;
  }
}

export { OntoProblem };

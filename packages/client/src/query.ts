/**
 * Object sets over data's `POST …/objects/{type}/query` and `…/aggregate`: a typed `where`, the
 * builder that composes it, and the pages as an async iterator.
 */

/** The operators on one property, typed by its value. */
export type PropertyFilter<V> =
  | V
  | {
      $eq?: V;
      $ne?: V;
      $gt?: V;
      $gte?: V;
      $lt?: V;
      $lte?: V;
      $in?: V[];
      $isNull?: boolean;
      $startsWith?: V extends string ? string : never;
      $contains?: V extends readonly (infer I)[] ? I : V extends string ? string : never;
      $containsAnyTerm?: V extends string ? string : never;
      $containsAllTerms?: V extends string ? string : never;
    };

/** A filter over objects with properties P and links L (several properties in one object are ANDed). */
export type Where<P, L extends string = string> =
  | { $and: Where<P, L>[] }
  | { $or: Where<P, L>[] }
  | { $not: Where<P, L> }
  | { $link: { type: L; where?: Where<Record<string, unknown>, string> } }
  | { [K in keyof P]?: PropertyFilter<NonNullable<P[K]>> };

export interface OrderBy<P> {
  property: keyof P & string;
  direction?: 'asc' | 'desc';
}

export interface QueryBody<P, L extends string> {
  where?: Where<P, L>;
  orderBy?: OrderBy<P>[];
  select?: (keyof P & string)[];
  pageSize?: number;
  pageToken?: string;
  at?: string;
  pivotTo?: L[];
  allowScan?: boolean;
}

export interface ObjectOf<T extends string, P> {
  type: T;
  pk: string;
  version: number;
  properties: P;
}

export interface QueryPage<T extends string, P> {
  objects: ObjectOf<T, P>[];
  nextPageToken: string | null;
  commit: number;
}

export type GroupBy<P> =
  | { property: keyof P & string; type: 'exact'; maxGroups?: number }
  | { property: keyof P & string; type: 'ranges'; ranges: { from?: number | string; to?: number | string }[] }
  | { property: keyof P & string; type: 'bucket'; interval: 'hour' | 'day' | 'week' | 'month' | 'year' };

export type Metric<P> =
  | { name: string; op: 'count' }
  | { name: string; op: 'sum' | 'avg' | 'min' | 'max' | 'approximateDistinct'; property: keyof P & string };

export interface AggregateBody<P, L extends string> {
  where?: Where<P, L>;
  at?: string;
  groupBy?: GroupBy<P>[];
  metrics: Metric<P>[];
}

export interface AggregateResult<M extends string> {
  groups: { key: Record<string, unknown>; metrics: Record<M, number | string | null> }[];
  commit: number;
}

/** Runs one page of a query: the client's POST, with its consistency token. */
export type RunQuery<T extends string, P, L extends string> = (body: QueryBody<P, L>) => Promise<QueryPage<T, P>>;

/**
 * A query, built step by step, immutable (each step answers a new one): iterate it for objects,
 * `pages()` for pages, `first()` for one.
 */
export class ObjectQuery<T extends string, P, L extends string> implements AsyncIterable<ObjectOf<T, P>> {
  constructor(
    private readonly run: RunQuery<T, P, L>,
    private readonly body: QueryBody<P, L> = {},
  ) {}

  private with(change: Partial<QueryBody<P, L>>): ObjectQuery<T, P, L> {
    return new ObjectQuery(this.run, { ...this.body, ...change });
  }

  /** ANDed with what the query already has. */
  where(where: Where<P, L>): ObjectQuery<T, P, L> {
    return this.with({ where: this.body.where ? { $and: [this.body.where, where] } : where });
  }
  orderBy(property: keyof P & string, direction: 'asc' | 'desc' = 'asc'): ObjectQuery<T, P, L> {
    return this.with({ orderBy: [...(this.body.orderBy ?? []), { property, direction }] });
  }
  select(...properties: (keyof P & string)[]): ObjectQuery<T, P, L> {
    return this.with({ select: properties });
  }
  pageSize(size: number): ObjectQuery<T, P, L> {
    if (!Number.isInteger(size) || size < 1 || size > 1000) throw new RangeError('pageSize is 1 to 1000');
    return this.with({ pageSize: size });
  }
  at(ref: string | number): ObjectQuery<T, P, L> {
    return this.with({ at: String(ref) });
  }
  allowScan(allow = true): ObjectQuery<T, P, L> {
    return this.with({ allowScan: allow });
  }
  /** The body as sent. */
  toJSON(): QueryBody<P, L> {
    return this.body;
  }

  /** Every page, following nextPageToken; the first page pins the commit the others read. */
  async *pages(): AsyncGenerator<QueryPage<T, P>> {
    let body: QueryBody<P, L> = this.body;
    for (;;) {
      const page = await this.run(body);
      yield page;
      if (!page.nextPageToken) return;
      // The token carries the commit the first page pinned, and is bound to the body as first sent:
      // the same body (pageSize and pageToken aside) follows it.
      body = { ...this.body, pageToken: page.nextPageToken };
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ObjectOf<T, P>> {
    for await (const page of this.pages()) yield* page.objects;
  }

  async first(): Promise<ObjectOf<T, P> | undefined> {
    const page = await this.run({ ...this.body, pageSize: 1 });
    return page.objects[0];
  }

  /** Every object, at most `limit` (a guard against a runaway scan). */
  async all(limit = 10_000): Promise<ObjectOf<T, P>[]> {
    const out: ObjectOf<T, P>[] = [];
    for await (const object of this) {
      out.push(object);
      if (out.length >= limit) break;
    }
    return out;
  }
}

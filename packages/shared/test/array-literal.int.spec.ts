import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { arrayLiteral } from '../src/db/array-literal.js';
import { testEndpoints } from '../src/testing/index.js';

describe('arrayLiteral', () => {
  let client: pg.Client;
  beforeAll(async () => {
    client = new pg.Client({ connectionString: testEndpoints().postgresUrl });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
  });

  it('round-trips awkward text through PostgreSQL unchanged', async () => {
    const values = [
      '',
      'NULL',
      'null',
      'a,b',
      '{braces}',
      ' leading and trailing ',
      'quote " inside',
      'back\\slash',
      '\\"both\\"',
      'tab\tnew\nline',
      'ünïcødé ✓ 漢字',
      null,
      'x'.repeat(10_000),
    ];
    const { rows } = await client.query<{ v: (string | null)[] }>('SELECT $1::text[] AS v', [arrayLiteral(values)]);
    expect(rows[0]?.v).toEqual(values);
  });

  it('writes numbers, bigints, uuids and undefined as their types expect', async () => {
    const { rows } = await client.query<{ i: number[]; b: string[]; u: (string | null)[]; f: number[] }>(
      'SELECT $1::int[] AS i, $2::bigint[]::text[] AS b, $3::uuid[]::text[] AS u, $4::float8[] AS f',
      [
        arrayLiteral([0, -1, 2147483647]),
        arrayLiteral([9007199254740993n, '9223372036854775807', -5]),
        arrayLiteral(['0190f3a4-7b2c-7d1e-8f00-123456789abc', undefined]),
        arrayLiteral([1.5, -0.25]),
      ],
    );
    expect(rows[0]).toEqual({
      i: [0, -1, 2147483647],
      b: ['9007199254740993', '9223372036854775807', '-5'],
      u: ['0190f3a4-7b2c-7d1e-8f00-123456789abc', null],
      f: [1.5, -0.25],
    });
  });

  it('is the empty array for no values', async () => {
    const { rows } = await client.query<{ n: number }>('SELECT cardinality($1::text[]) AS n', [arrayLiteral([])]);
    expect(rows[0]?.n).toBe(0);
  });
});

import pg from 'pg';
import type { Queryable } from './queryable.js';

export interface VersionedRow {
  [column: string]: unknown;
}

/**
 * Inserts rows, or updates those already present only where the incoming version is newer, so
 * that a redelivered or reordered event never moves an entity backwards. Rows are matched on
 * `keyColumns`; `versionColumn` decides. Within one call the newest row per key wins. Returns
 * how many rows were written.
 */
export async function upsertIfNewer(
  db: Queryable,
  table: string,
  keyColumns: string[],
  versionColumn: string,
  rows: VersionedRow[],
): Promise<number> {
  if (rows.length === 0) return 0;
  const newest = new Map<string, VersionedRow>();
  // A key column has one type in the table, so its values' text tells keys apart (JSON for
  // objects, so that two of them do not both read "[object Object]").
  const text = (v: unknown) => (typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v));
  // A column the row lacks reads as absent, whatever its name.
  const column = (row: VersionedRow, name: string) => (Object.hasOwn(row, name) ? row[name] : undefined);
  const keyOf = (row: VersionedRow) => {
    let key = text(column(row, keyColumns[0] as string));
    for (let i = 1; i < keyColumns.length; i++) key += `\u0000${text(column(row, keyColumns[i] as string))}`;
    return key;
  };
  for (const row of rows) {
    const key = keyOf(row);
    const prior = newest.get(key);
    if (!prior || Number(column(row, versionColumn)) > Number(column(prior, versionColumn))) newest.set(key, row);
  }
  const columns = Object.keys(rows[0] ?? {});
  const id = pg.escapeIdentifier;
  const t = id(table);
  const list = columns.map(id).join(', ');
  const updates = columns.filter((c) => !keyColumns.includes(c)).map((c) => `${id(c)} = EXCLUDED.${id(c)}`);
  const { rowCount } = await db.query(
    `INSERT INTO ${t} AS current (${list})
     SELECT ${list} FROM json_populate_recordset(NULL::${t}, $1::json)
     ON CONFLICT (${keyColumns.map(id).join(', ')}) DO UPDATE SET ${updates.join(', ')}
     WHERE current.${id(versionColumn)} < EXCLUDED.${id(versionColumn)}`,
    [JSON.stringify([...newest.values()])],
  );
  return rowCount ?? 0;
}

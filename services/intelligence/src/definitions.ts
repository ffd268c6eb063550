/**
 * What derived properties, rules and decision definitions have in common: each is a named,
 * versioned definition of one world, stored one row a name in its own table.
 */
import type { FieldError, Queryable } from '@onto/shared';

/** The bookkeeping every definition carries besides what it says. */
export interface Definition {
  worldId: string;
  name: string;
  version: number;
  state: 'valid' | 'invalid';
  errors: FieldError[];
  schemaVersion: number;
  createdAt: string;
  updatedAt: string;
}

/** The bookkeeping a save writes; the table keeps `createdAt` and `updatedAt` itself. */
export type DefinitionWrite = Omit<Definition, 'createdAt' | 'updatedAt'>;

/**
 * The reads and the delete of a definition table, by world and name; `columns` selects a row
 * that `fromRow` turns into the definition. Saving stays with each kind: its columns differ.
 */
export function definitionTable<Row extends Record<string, unknown>, D>(
  table: string,
  columns: string,
  fromRow: (row: Row) => D,
  /**
   * The table's rows at a definition position ($1 the world, $2 the position), from the history
   * (migration 021's definitions_at): what `?at=` lists (docs/adr/0069).
   */
  asOf: string,
) {
  return {
    /** The definitions at a definition position, ordered by name. */
    async listAt(db: Queryable, worldId: string, position: number): Promise<D[]> {
      const { rows } = await db.query<Row>(`SELECT ${columns} FROM (${asOf}) t ORDER BY name`, [worldId, position]);
      return rows.map(fromRow);
    },

    async getAt(db: Queryable, worldId: string, position: number, name: string): Promise<D | undefined> {
      const { rows } = await db.query<Row>(`SELECT ${columns} FROM (${asOf}) t WHERE name = $3`, [
        worldId,
        position,
        name,
      ]);
      return rows[0] ? fromRow(rows[0]) : undefined;
    },

    async list(db: Queryable, worldId: string): Promise<D[]> {
      const { rows } = await db.query<Row>(`SELECT ${columns} FROM ${table} WHERE world_id = $1 ORDER BY name`, [
        worldId,
      ]);
      return rows.map(fromRow);
    },

    async get(db: Queryable, worldId: string, name: string): Promise<D | undefined> {
      const { rows } = await db.query<Row>(`SELECT ${columns} FROM ${table} WHERE world_id = $1 AND name = $2`, [
        worldId,
        name,
      ]);
      return rows[0] ? fromRow(rows[0]) : undefined;
    },

    async remove(tx: Queryable, worldId: string, name: string): Promise<void> {
      await tx.query(`DELETE FROM ${table} WHERE world_id = $1 AND name = $2`, [worldId, name]);
    },

    /** The definition an upsert `RETURNING ${columns}` gave back. */
    saved(rows: Row[], what: string): D {
      const row = rows[0];
      if (!row) throw new Error(`the ${what} was not saved`);
      return fromRow(row);
    },
  };
}

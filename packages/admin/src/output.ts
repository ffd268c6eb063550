import { SingleBar } from 'cli-progress';
import Table from 'cli-table3';

/** Where a command writes: stdout for results, stderr for messages and the progress bar. */
export interface Io {
  stdout: NodeJS.WritableStream & { isTTY?: boolean };
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
}

export const processIo: Io = { stdout: process.stdout, stderr: process.stderr };

/** Rows as a table for people, or as JSON for scripts. */
export function print(io: Io, json: boolean, value: unknown, rows?: { head: string[]; rows: unknown[][] }): void {
  if (json || !rows) {
    io.stdout.write(`${JSON.stringify(value, null, json ? 0 : 2)}\n`);
    return;
  }
  const table = new Table({ head: rows.head, style: { head: [], border: [] }, wordWrap: true });
  for (const row of rows.rows) table.push(row.map((c) => (c === null || c === undefined ? '' : String(c))));
  io.stdout.write(`${table.toString()}\n`);
}

/** A progress bar on stderr, shown only to a person at a terminal (never with --json). */
export interface Progress {
  start(total: number, what: string): void;
  update(done: number, total?: number): void;
  stop(): void;
}

export function progress(io: Io, json: boolean): Progress {
  if (json || !io.stderr.isTTY) return { start() {}, update() {}, stop() {} };
  let bar: SingleBar | undefined;
  return {
    start(total, what) {
      bar = new SingleBar({
        stream: io.stderr,
        format: `${what} [{bar}] {value}/{total}`,
        hideCursor: true,
        clearOnComplete: true,
      });
      bar.start(total, 0);
    },
    update(done, total) {
      if (total !== undefined) bar?.setTotal(total);
      bar?.update(done);
    },
    stop() {
      bar?.stop();
      bar = undefined;
    },
  };
}

import type pg from 'pg';

export interface Listening {
  /** Settles once the first attempt to listen has ended, listening or not. */
  ready: Promise<void>;
  /** UNLISTENs and returns the connection to its pool; no reconnection after it. */
  stop(): Promise<void>;
}

/**
 * LISTEN on `channel` with a connection of `pool` held for it, and listen again, every `retryMs`
 * until PostgreSQL answers, when that connection is lost (a restart, pg_terminate_backend): a
 * lost listener would otherwise leave its holder on its poll for good, and its pooled connection
 * never returned. Notifications go to `notify`; the holder's poll covers the gaps.
 */
export function listenWithReconnect(
  pool: pg.Pool,
  channel: string,
  notify: (message: pg.Notification) => void,
  opts: { retryMs: number; logger: { warn(obj: object, msg: string): void }; what: string },
): Listening {
  let client: pg.PoolClient | undefined;
  let stopped = false;
  let retry: NodeJS.Timeout | undefined;
  const again = () => {
    if (stopped) return;
    retry = setTimeout(() => void connect(), opts.retryMs);
    retry.unref();
  };
  const connect = async () => {
    let c: pg.PoolClient | undefined;
    try {
      c = await pool.connect();
      const held = c;
      held.on('notification', notify);
      held.on('error', (err) => {
        if (client !== held) return;
        opts.logger.warn({ err }, `${opts.what} listener lost; polling until it is back`);
        client = undefined;
        held.release(err);
        again();
      });
      await held.query(`LISTEN ${channel}`);
      if (stopped) {
        held.release();
        return;
      }
      client = held;
    } catch (err) {
      opts.logger.warn({ err }, `${opts.what} listener unavailable; polling`);
      c?.release(err as Error);
      again();
    }
  };
  const ready = connect();
  return {
    ready,
    async stop() {
      stopped = true;
      if (retry) clearTimeout(retry);
      const held = client;
      client = undefined;
      if (held) {
        await held.query(`UNLISTEN ${channel}`).catch(() => {});
        held.release();
      }
    },
  };
}

-- The transactional outbox: written in the same transaction as the state change it announces,
-- published to Kafka by the relay, kept for a retention period after it was sent.
-- Nothing indexed changes when a row is marked sent, so that update stays on its page (HOT,
-- helped by the fill factor) and writes no index entries.
CREATE TABLE outbox (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id      uuid        NOT NULL UNIQUE,
  topic         text        NOT NULL,
  partition_key text        NOT NULL,
  lane          smallint    NOT NULL,
  body          text        NOT NULL,
  headers       jsonb       NOT NULL DEFAULT '{}'::jsonb,
  created_at    timestamptz NOT NULL DEFAULT now(),
  sent_at       timestamptz,
  attempts      integer     NOT NULL DEFAULT 0,
  last_error    text
) WITH (fillfactor = 80);
-- Rows arrive in time order: a BRIN index finds the ones old enough to prune for almost nothing.
CREATE INDEX outbox_created_at ON outbox USING brin (created_at);

-- What is still to be published, by lane (a hash of the partition key). One relay at a time
-- publishes a lane, which keeps per-key order when several relays run. Kept apart from the
-- history so that claims stay cheap however long the retention.
CREATE TABLE outbox_pending (
  lane smallint NOT NULL,
  id   bigint   NOT NULL,
  PRIMARY KEY (lane, id)
);

-- The inbox: one row per event a consumer group has handled, written in the transaction that
-- applied its effect. The primary key is what makes a redelivery a no-op.
CREATE TABLE inbox (
  consumer     text        NOT NULL,
  event_id     uuid        NOT NULL,
  event_type   text        NOT NULL,
  topic        text        NOT NULL,
  partition    integer     NOT NULL,
  "offset"     bigint      NOT NULL,
  outcome      text        NOT NULL CHECK (outcome IN ('applied', 'dead_lettered')),
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, event_id)
);
CREATE INDEX inbox_processed_at ON inbox (processed_at);

-- Events parked because their cause has not been handled yet (caused_by not in the inbox),
-- and events of the same key queued behind them so that per-key order holds.
CREATE TABLE inbox_deferred (
  consumer        text        NOT NULL,
  event_id        uuid        NOT NULL,
  topic           text        NOT NULL,
  partition       integer     NOT NULL,
  "offset"        bigint      NOT NULL,
  partition_key   text        NOT NULL,
  caused_by       uuid,
  body            text        NOT NULL,
  headers         jsonb       NOT NULL DEFAULT '{}'::jsonb,
  attempts        integer     NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  parked_at       timestamptz NOT NULL DEFAULT now(),
  seq             bigint GENERATED ALWAYS AS IDENTITY,
  PRIMARY KEY (consumer, event_id)
);
CREATE INDEX inbox_deferred_due ON inbox_deferred (consumer, next_attempt_at);
CREATE INDEX inbox_deferred_key ON inbox_deferred (consumer, topic, partition_key, seq);
CREATE INDEX inbox_deferred_cause ON inbox_deferred (consumer, caused_by);

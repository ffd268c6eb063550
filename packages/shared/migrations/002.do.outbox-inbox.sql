-- The transactional outbox: written in the same transaction as the state change it announces,
-- published to Kafka by the relay. `lane` groups rows by partition key: one relay at a time
-- publishes a lane, which keeps per-key order when several relays run.
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
);
CREATE INDEX outbox_pending ON outbox (lane, id) WHERE sent_at IS NULL;
CREATE INDEX outbox_pending_id ON outbox (id) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent_at ON outbox (sent_at) WHERE sent_at IS NOT NULL;

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

-- Tables of the kernel's tests: a state table written with the outbox, and an effect log in
-- which a twice-applied event shows up as two rows.
CREATE TABLE orders (
  id      text PRIMARY KEY,
  amount  integer NOT NULL CHECK (amount > 0),
  version integer NOT NULL
);
CREATE TABLE effects (
  event_id   uuid        NOT NULL,
  key        text        NOT NULL,
  seq        integer     NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE balances (
  key     text PRIMARY KEY,
  total   integer NOT NULL,
  version integer NOT NULL
);

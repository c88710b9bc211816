-- Every Runledger object lives in the `runledger` schema, so nothing collides with the host
-- application's own tables, and the migration history (`runledger._sqlx_migrations`) sits beside
-- them.

CREATE SCHEMA IF NOT EXISTS runledger;

//! The connection a claim loop keeps between claims while it is busy, so that a claim costs one
//! round trip: a connection taken from the pool is first pinged by it, which on a claim of a
//! few jobs is a third of the claim's time.

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

use crate::postgres::Result;

use super::ClaimRequest;
use super::lease::{Claimed, claim_on};

/// A claim loop's connection: kept between claims until [`release`](Self::release)d, closed
/// after a failed claim instead of given back (it may be broken).
#[derive(Default)]
pub(crate) struct ClaimConnection(Option<PoolConnection<Postgres>>);

impl ClaimConnection {
    /// Claims on the kept connection, or on one taken from `pool` now: the plain jobs
    /// ([`claim_jobs`](super::claim_jobs)) or, `gated`, those under a global limit or holding a
    /// resource key ([`claim_limited_jobs`](super::claim_limited_jobs)).
    pub(crate) async fn claim(
        &mut self,
        pool: &PgPool,
        request: &ClaimRequest<'_>,
        gated: bool,
    ) -> Result<Claimed> {
        let conn = match self.0.take() {
            Some(conn) => conn,
            None => pool.acquire().await?,
        };
        let conn = self.0.insert(conn);
        let claimed = claim_on(conn, request, gated).await;
        if claimed.is_err()
            && let Some(mut conn) = self.0.take()
        {
            conn.close_on_drop();
        }
        claimed
    }

    /// Gives the connection back to the pool.
    pub(crate) fn release(&mut self) {
        self.0 = None;
    }
}

//! Fresh UUIDv7 ids, in creation order within the process, many at a time.
//!
//! An id is 48 bits of Unix milliseconds, a 42-bit counter (RFC 9562, section 6.2, method 1:
//! seeded at random in each new millisecond, its top bit clear, then counted up) and 32 random
//! bits. A batch of ids reads all of its random bits from the kernel in one call: taking each
//! id's randomness from the kernel apart (as `Uuid::now_v7` does) cost a system call per id, a
//! quarter of the client's work in a batch enqueue. No generator state lives in user space
//! beyond the last millisecond and counter, so a forked process or a restored snapshot makes
//! ids of its own.

use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

/// Bits of the counter: the 12 of `rand_a` and the top 30 of `rand_b`.
const COUNTER_BITS: u32 = 42;
const COUNTER_MAX: u64 = (1 << COUNTER_BITS) - 1;

/// The millisecond and counter of the last id made.
struct Clock {
    millis: u64,
    counter: u64,
}

static CLOCK: Mutex<Clock> = Mutex::new(Clock {
    millis: 0,
    counter: 0,
});

/// `count` fresh ids, each greater than every id this process made before.
pub(crate) fn fresh_uuids(count: usize) -> Vec<Uuid> {
    if count == 0 {
        return Vec::new();
    }
    // Four random bytes per id, and eight to seed the counter of a new millisecond.
    let mut random = vec![0u8; count * 4 + 8];
    if getrandom::fill(&mut random).is_err() {
        // The kernel refused (it never does on Linux): the uuid crate asks it per id.
        return (0..count).map(|_| Uuid::now_v7()).collect();
    }
    let (seed, random) = random.split_at(8);
    let seed = u64::from_le_bytes(seed.try_into().unwrap_or_default()) & (COUNTER_MAX >> 1);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    let mut clock = CLOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if now > clock.millis {
        clock.millis = now;
        clock.counter = seed;
    } else {
        advance(&mut clock);
    }
    let mut ids = Vec::with_capacity(count);
    for (index, bytes) in random.chunks_exact(4).enumerate() {
        if index > 0 {
            advance(&mut clock);
        }
        let tail = u32::from_le_bytes(bytes.try_into().unwrap_or_default());
        ids.push(compose(clock.millis, clock.counter, tail));
    }
    ids
}

/// One fresh id (see [`fresh_uuids`]).
pub(crate) fn fresh_uuid() -> Uuid {
    fresh_uuids(1).pop().unwrap_or_else(Uuid::now_v7)
}

/// The next counter value, moving to the next millisecond when the counter is spent.
fn advance(clock: &mut Clock) {
    if clock.counter >= COUNTER_MAX {
        clock.millis += 1;
        clock.counter = 0;
    } else {
        clock.counter += 1;
    }
}

/// The UUIDv7 of `millis`, `counter` and the random `tail`.
fn compose(millis: u64, counter: u64, tail: u32) -> Uuid {
    let millis = u128::from(millis & 0xFFFF_FFFF_FFFF);
    let counter = u128::from(counter & COUNTER_MAX);
    Uuid::from_u128(
        (millis << 80)
            | (0x7 << 76)
            | ((counter >> 30) << 64)
            | (0b10 << 62)
            | ((counter & 0x3FFF_FFFF) << 32)
            | u128::from(tail),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_version_7_with_the_rfc_variant() {
        for id in fresh_uuids(100) {
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        }
    }

    #[test]
    fn ids_increase_within_a_batch_and_across_batches() {
        let mut all = fresh_uuids(5_000);
        all.extend(fresh_uuids(1));
        all.extend(fresh_uuids(3_000));
        all.push(fresh_uuid());
        assert!(all.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn ids_carry_the_current_millisecond() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let id = fresh_uuid();
        let after = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let millis = id.as_u128() >> 80;
        assert!(
            millis >= before && millis <= after + 1,
            "{millis} not in {before}..={after}"
        );
    }

    #[test]
    fn a_spent_counter_moves_to_the_next_millisecond() {
        let mut clock = Clock {
            millis: 10,
            counter: COUNTER_MAX,
        };
        let last = compose(clock.millis, clock.counter, u32::MAX);
        advance(&mut clock);
        assert_eq!((clock.millis, clock.counter), (11, 0));
        assert!(compose(clock.millis, clock.counter, 0) > last);
    }

    #[test]
    fn the_counter_orders_ids_of_one_millisecond_whatever_their_random_tail() {
        let first = compose(5, 1 << 30, u32::MAX);
        let second = compose(5, (1 << 30) + 1, 0);
        assert!(first < second);
        let low = compose(5, (1 << 30) - 1, u32::MAX);
        assert!(low < first);
    }
}

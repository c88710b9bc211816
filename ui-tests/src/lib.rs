//! Holds the trybuild suite for Runledger's macros under `tests/`.

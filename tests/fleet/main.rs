//! The fleet's timing-sensitive runs — several real worker processes against a fake provider
//! that enforces exactly the limit — in a test binary of their own: cargo runs test binaries one
//! after another, so these meet an otherwise idle machine instead of the integration suite's
//! 260 tests on 2 cores, whose scheduling delays would reach the provider as bursts. Same
//! throwaway PostgreSQL and helpers as `tests/it`.

#[allow(dead_code)]
#[path = "../it/helpers.rs"]
mod helpers;

mod weights;

//! The public doors: how `events` (the vendors' webhooks, facing the internet) and `web` (the
//! status page) serve HTTP so that no slow, hostile or huge peer exhausts them, blocks their
//! shutdown or costs a neighbour's request.
//!
//! - [`listen`]: the accept loop — a cap on connections, a deadline on each request's head and
//!   on an idle connection, a graceful shutdown that ends within its grace;
//! - [`body`]: a request body read within a memory budget and a deadline, its declared size
//!   checked before a byte is read.

pub mod body;
pub mod listen;

pub use body::{Budget, Held, NotRead};
pub use listen::{serve, Doors};

//! Rowfire's integration tests: one binary, real SQLite files and real PostgreSQL databases.

#[macro_use]
mod support;

mod backtests;
mod chaos;
mod cli;
mod control_plane;
mod guard_fuzz;
mod pace;
mod paging;
mod poller;
mod queue;
mod race;
mod receiver;
mod secrets;
mod sending;
mod source_sessions;
mod sources;
mod sqlite_clocks;
mod webhooks;

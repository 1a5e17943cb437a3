//! Rowfire's integration tests: one binary, real SQLite files and real PostgreSQL databases.

mod backtests;
mod cli;
mod control_plane;
mod guard_fuzz;
mod paging;
mod sources;
mod support;

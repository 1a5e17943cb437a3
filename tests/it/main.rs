//! Rowfire's integration tests: one binary, real SQLite files and real PostgreSQL databases.

// The pollers' and senders' futures nest deeper than the compiler's default query depth allows
// when a fresh build lays them out.
#![recursion_limit = "256"]

#[macro_use]
mod support;

mod adversary;
mod backtests;
mod bounds;
mod browser;
mod chaos;
mod cli;
mod control_plane;
mod first_run;
mod guard_cli;
mod guard_fuzz;
mod guard_fuzz_mysql;
mod guard_pg;
mod http_author;
mod http_guard;
mod http_metrics;
mod http_openapi;
mod http_operator;
mod http_pages;
mod http_patience;
mod init;
mod isolation;
mod leases;
mod logs;
mod mysql_worker;
mod output;
mod pace;
mod paging;
mod pg_pass;
mod poller;
mod queue;
mod race;
mod receiver;
mod reminders;
mod sample_reminders;
mod secrets;
mod seeing;
mod sending;
mod served;
mod source_sessions;
mod sources;
mod sources_mysql;
mod sqlite_clocks;
mod tenant_sources;
mod undeclared;
mod url_safety;
mod webhooks;
mod worker;
mod worker_chaos;
mod worker_leases;
mod workspaces;

//! Rowfire's integration tests: one binary, real SQLite files and real PostgreSQL databases.

#[macro_use]
mod support;

mod adversary;
mod backtests;
mod bounds;
mod chaos;
mod cli;
mod control_plane;
mod first_run;
mod guard_cli;
mod guard_fuzz;
mod guard_fuzz_mysql;
mod guard_pg;
mod http_guard;
mod http_operator;
mod http_pages;
mod init;
mod isolation;
mod leases;
mod logs;
mod mysql_worker;
mod output;
mod pace;
mod paging;
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
mod undeclared;
mod url_safety;
mod webhooks;
mod worker;
mod worker_chaos;
mod worker_leases;
mod workspaces;

//! Rowfire turns rows in a customer's database into actions, exactly once per rule, per key,
//! per cadence period. This crate is the whole service; `main.rs` is a thin command line over it,
//! and [`worker::Worker`] is the one worker every front end runs. ARCHITECTURE.md has the code
//! map, the floors (no module imports one that imports it back: `scripts/import-loops.py`) and
//! the invariants. Where to look first:
//!
//! - the delivery lease: [`send::lease`] (its arithmetic) and [`send::queue`] (claim, settle by
//!   fencing token); trigger leases: [`poll::state`];
//! - egress: [`send::egress`] (which addresses) and [`send::client`] (the one outbound client);
//! - statements not scoped to a workspace: [`store::unscoped`], each with its reason (migrations,
//!   the trigger lease, the delivery claim, the worker table, the idle next-due looks);
//! - the one seam between the domain and the control plane's two engines: [`store`]
//!   ([`store::Engine`], [`store::batch`] for many rows at once, [`store::StoreError`]'s kind).

/// Backtests: what a rule would have done over the last N days.
pub mod backtest;
/// Cadences: (rule, row) → dedup key and dedup bucket. Pure.
pub mod cadence;
/// The one clock type; tests and `--now` fix it.
pub mod clock;
/// Rowfire's own settings, read from the environment in this one module.
pub mod config;
/// The definitions file: parsing and validation with every problem reported at once.
pub mod definitions;
/// The first run: sample database, sample definitions, backtest headlines.
pub mod demo;
/// Drafting a first definitions file from a source's catalogue (`rowfire init`).
pub mod draft;
/// `why RULE KEY`: a key's fires and the fate of its recent rows.
pub mod explanation;
/// The deterministic sample B2B SaaS database.
pub mod fixture;
/// The HTTP server: the API under `/api`, the pages, `/metrics`, and the checks every request
/// passes (Host, Origin, token).
pub mod http;
/// Integrations at run time: enabled or disabled, and the pace every worker shares.
pub mod integrations;
/// The fire ledger: exactly-once claims.
pub mod ledger;
/// Metrics in the Prometheus text format, for `/metrics`.
pub mod metrics;
/// What an operator does to sources and integrations, for the command line and the API alike.
pub mod operator;
/// The outbox: deliveries rendered and written with their fire; the Demo inbox.
pub mod outbox;
/// The poller: lease a trigger, read its window, claim fires; trigger state (watermarks, leases).
pub mod poll;
/// `push`: store definitions as the next version and reconcile trigger and rule state.
pub mod push;
/// Row values that keep their exact form.
pub mod row;
/// Rule state: modes and tombstones.
pub mod rules;
/// Time-anchored sends: sweeping a rule's look-ahead into deliveries due at anchor minus lead.
pub mod schedule;
/// Secrets at rest: envelope encryption under the master key.
pub mod secret;
/// Sending: claim under a lease, build the request, egress check, the one client, judge, settle.
pub mod send;
/// Read-only sources and paged window reads.
pub mod source;
/// The SQL guard: one read-only query, re-rendered inside Rowfire's window.
pub mod sql_guard;
/// The control plane database: its engine, migrations, workspace-scoped (and the few unscoped)
/// transactions, statements written once for both engines, typed states.
pub mod store;
/// Spans for the units of work (poll, claim, send, settle) and their durations.
pub mod telemetry;
/// `{{ name }}` templates, substitution only.
pub mod template;
/// API tokens: created, listed, revoked, and resolved to the one workspace each acts in.
pub mod token;
/// The pages: server-rendered HTML over the same library calls as the API.
pub mod ui;
/// Checking definitions against live sources.
pub mod validation;
/// The worker: pollers and a sender assembled from configuration, run until shutdown.
pub mod worker;

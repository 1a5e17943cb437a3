//! Rowfire turns rows in a customer's database into actions, exactly once per rule, per key,
//! per cadence period. This crate is the whole service; `main.rs` is a thin command line over it.

pub mod backtest;
pub mod cadence;
pub mod clock;
pub mod definitions;
pub mod demo;
pub mod fixture;
pub mod row;
pub mod source;
pub mod sql_guard;

//! The few things sqlx does not offer on a SQLite connection, done through SQLite's C API:
//! a bound on the size of one value, an interrupt from a timer, and Rowfire's clock function.
//!
//! Every `unsafe` block here calls SQLite on a handle sqlx keeps open for as long as the
//! connection lives; the interrupt's handle is forgotten before the statement it bounds ends.

#![allow(
    unsafe_code,
    reason = "SQLite's C API: the value-size limit, the interrupt and the clock function"
)]

use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libsqlite3_sys as ffi;

use crate::row::{text_clock_micros, unix_int_seconds_micros, unix_seconds_micros};
use crate::sql_guard::SQLITE_CLOCK_FN;

/// The largest text or blob one source statement may build (SQLite's `SQLITE_LIMIT_LENGTH`):
/// 32 MiB. Larger values fail with "string or blob too big" instead of taking gigabytes.
pub(super) const MAX_VALUE_BYTES: c_int = 32 << 20;

/// Sets a new source connection up: the value-size bound and the clock function.
pub(super) fn prepare_connection(db: NonNull<ffi::sqlite3>) -> Result<(), String> {
    let db = db.as_ptr();
    let name = std::ffi::CString::new(SQLITE_CLOCK_FN).expect("no NUL in the name");
    // SAFETY: `db` is an open connection handle lent by sqlx for this call; the function name
    // is copied by SQLite; the callback takes no user data.
    let rc = unsafe {
        ffi::sqlite3_limit(db, ffi::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES);
        ffi::sqlite3_create_function_v2(
            db,
            name.as_ptr(),
            1,
            ffi::SQLITE_UTF8 | ffi::SQLITE_DETERMINISTIC | ffi::SQLITE_INNOCUOUS,
            std::ptr::null_mut(),
            Some(clock_us),
            None,
            None,
            None,
        )
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(format!(
            "SQLite refused Rowfire's clock function (code {rc})"
        ))
    }
}

/// `rowfire_clock_us(x)`: integer microseconds since the Unix epoch, or NULL when `x` is NULL,
/// a blob, or text that is not a time. Text is read as Rowfire reads text clocks; integers and
/// reals are Unix seconds.
unsafe extern "C" fn clock_us(
    ctx: *mut ffi::sqlite3_context,
    n_arg: c_int,
    args: *mut *mut ffi::sqlite3_value,
) {
    let read = || -> Option<i64> {
        if n_arg != 1 || args.is_null() {
            return None;
        }
        // SAFETY: SQLite passes `n_arg` (checked: 1) valid values for this call's duration.
        unsafe {
            let value = *args;
            match ffi::sqlite3_value_type(value) {
                ffi::SQLITE_INTEGER => unix_int_seconds_micros(ffi::sqlite3_value_int64(value)),
                ffi::SQLITE_FLOAT => unix_seconds_micros(ffi::sqlite3_value_double(value)),
                ffi::SQLITE_TEXT => {
                    let text = ffi::sqlite3_value_text(value);
                    let len = usize::try_from(ffi::sqlite3_value_bytes(value)).ok()?;
                    if text.is_null() {
                        return None;
                    }
                    let bytes = std::slice::from_raw_parts(text, len);
                    // A clock is short; anything long is not a time.
                    if bytes.len() > 64 {
                        return None;
                    }
                    text_clock_micros(std::str::from_utf8(bytes).ok()?)
                }
                _ => None,
            }
        }
    };
    let micros = std::panic::catch_unwind(read).ok().flatten();
    // SAFETY: `ctx` is this call's context.
    unsafe {
        match micros {
            Some(us) => ffi::sqlite3_result_int64(ctx, us),
            None => ffi::sqlite3_result_null(ctx),
        }
    }
}

struct Handle(NonNull<ffi::sqlite3>);

// SAFETY: the handle is only used for `sqlite3_interrupt`, which SQLite allows from any thread
// while the connection is open; it is forgotten (under the mutex) before the alarm ends.
unsafe impl Send for Handle {}

/// Interrupts a connection's running statement when its time is up, unless dropped first.
pub(super) struct Alarm {
    handle: Arc<Mutex<Option<Handle>>>,
    timer: tokio::task::JoinHandle<()>,
}

impl Alarm {
    /// Arms an interrupt of `db` after `timeout`.
    pub(super) fn set(db: NonNull<ffi::sqlite3>, timeout: Duration) -> Alarm {
        let handle = Arc::new(Mutex::new(Some(Handle(db))));
        let shared = handle.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let guard = shared.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(Handle(db)) = guard.as_ref() {
                // SAFETY: the connection is open while the alarm holds its handle.
                unsafe { ffi::sqlite3_interrupt(db.as_ptr()) };
            }
        });
        Alarm { handle, timer }
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        // Waits for an interrupt in progress, then forgets the handle.
        self.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.timer.abort();
    }
}

/// A connection's handle kept to arm [`Alarm`]s on it while a statement steps across pages
/// (the stepping task owns the connection, so it is open whenever an alarm is armed).
pub(super) struct Interrupter(NonNull<ffi::sqlite3>);

// SAFETY: the handle is only passed to `Alarm::set`, whose timer calls `sqlite3_interrupt`,
// which SQLite allows from any thread while the connection is open; the task that owns the
// connection holds this and drops every alarm before the connection.
unsafe impl Send for Interrupter {}

impl Interrupter {
    /// Keeps `db`'s handle; the caller keeps the connection open while it is used.
    pub(super) fn new(db: NonNull<ffi::sqlite3>) -> Interrupter {
        Interrupter(db)
    }

    /// Arms an interrupt of the connection after `timeout`.
    pub(super) fn arm(&self, timeout: Duration) -> Alarm {
        Alarm::set(self.0, timeout)
    }
}

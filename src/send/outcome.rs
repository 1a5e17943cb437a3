//! Judging one attempt: what an HTTP answer (or its absence) means for a delivery. Pure: the
//! sender records the attempt and settles the delivery with the verdict.

use jiff::{SignedDuration, Timestamp};

use super::queue::ErrorClass;

/// Delay before each attempt: immediately, then after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h,
/// 20 h and 24 h. After the last one a delivery is dead.
pub const RETRY_SCHEDULE: [SignedDuration; 10] = [
    SignedDuration::ZERO,
    SignedDuration::from_secs(5),
    SignedDuration::from_mins(5),
    SignedDuration::from_mins(30),
    SignedDuration::from_hours(2),
    SignedDuration::from_hours(5),
    SignedDuration::from_hours(10),
    SignedDuration::from_hours(14),
    SignedDuration::from_hours(20),
    SignedDuration::from_hours(24),
];

/// The longest wait a `Retry-After` header can impose.
pub const RETRY_AFTER_CAP: SignedDuration = SignedDuration::from_hours(24);

/// What one attempt got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// An HTTP answer.
    Response {
        /// The status code.
        status: u16,
        /// The `Retry-After` header, if any.
        retry_after: Option<String>,
        /// The body (possibly truncated).
        body: String,
    },
    /// No answer in time.
    Timeout,
    /// The connection failed.
    Network(String),
    /// The egress check refused the address.
    Refused(String),
    /// The request cannot be made as rendered (a header name or value that HTTP forbids).
    Invalid(String),
}

/// What becomes of the delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered.
    Sent,
    /// Try again at `at`.
    Retry {
        /// When.
        at: Timestamp,
        /// Why this attempt failed.
        reason: String,
    },
    /// Will never succeed as it is: failed at once.
    Failed {
        /// Why.
        reason: String,
    },
    /// Every retry was used.
    Dead {
        /// The last attempt's failure.
        reason: String,
    },
    /// The destination is gone (410): the integration is disabled and its deliveries wait.
    DisableIntegration {
        /// Why.
        reason: String,
    },
}

/// Judges attempt number `attempt` (1-based) at `now`. `ok_false_fails` is the action's "a 2xx
/// with `\"ok\": false` is a failure" flag; `jitter` in [0, 1) spreads retries by ±10%.
pub fn judge(
    result: &AttemptResult,
    attempt: u32,
    now: Timestamp,
    ok_false_fails: bool,
    jitter: f64,
) -> Verdict {
    let (retryable, reason, retry_after) = match result {
        AttemptResult::Response { status, body, .. } if (200..300).contains(status) => {
            if ok_false_fails
                && let Ok(json) = serde_json::from_str::<serde_json::Value>(body)
                && json.get("ok") == Some(&serde_json::Value::Bool(false))
            {
                let why = json
                    .get("error")
                    .and_then(|e| e.as_str())
                    .unwrap_or("no error given");
                return Verdict::Failed {
                    reason: format!("{status} with \"ok\": false ({why})"),
                };
            }
            return Verdict::Sent;
        }
        AttemptResult::Response { status: 410, .. } => {
            return Verdict::DisableIntegration { reason: "410 Gone: the destination no longer exists; the integration is disabled until re-enabled".into() };
        }
        AttemptResult::Response {
            status,
            retry_after,
            body,
        } => {
            let retryable = matches!(status, 408 | 425 | 429) || (500..600).contains(status);
            (
                retryable,
                format!("{status}: {}", first_line(body)),
                retry_after
                    .as_deref()
                    .and_then(|h| parse_retry_after(h, now)),
            )
        }
        AttemptResult::Timeout => (true, "timed out".to_string(), None),
        AttemptResult::Network(e) => (true, format!("network error: {e}"), None),
        AttemptResult::Refused(e) => {
            return Verdict::Failed {
                reason: format!("refused by the egress check: {e}"),
            };
        }
        AttemptResult::Invalid(e) => {
            return Verdict::Failed {
                reason: format!("the request cannot be sent as rendered: {e}"),
            };
        }
    };
    if !retryable {
        return Verdict::Failed { reason };
    }
    let Some(base) = RETRY_SCHEDULE.get(attempt as usize) else {
        return Verdict::Dead {
            reason: format!("after {attempt} attempts: {reason}"),
        };
    };
    // The schedule spreads retries by ±10%; a destination's Retry-After (capped) can lengthen the
    // wait but never shorten it, so "Retry-After: 0" cannot spend every attempt in seconds.
    let spread = 1.0 + (jitter.clamp(0.0, 1.0) - 0.5) * 0.2;
    let mut wait = SignedDuration::from_secs_f64(base.as_secs_f64() * spread);
    if let Some(asked) = retry_after {
        wait = wait.max(asked.clamp(SignedDuration::ZERO, RETRY_AFTER_CAP));
    }
    Verdict::Retry {
        at: crate::store::later(now, wait),
        reason,
    }
}

fn first_line(body: &str) -> String {
    body.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect()
}

/// How long a 429 pauses its whole integration: the destination's `Retry-After` (capped), or
/// five seconds without one. Not the delivery's own backoff, which grows with its attempts.
pub fn integration_pause(result: &AttemptResult, now: Timestamp) -> SignedDuration {
    let asked = match result {
        AttemptResult::Response {
            retry_after: Some(h),
            ..
        } => parse_retry_after(h, now),
        _ => None,
    };
    asked.map_or(SignedDuration::from_secs(5), |a| {
        a.clamp(SignedDuration::ZERO, RETRY_AFTER_CAP)
    })
}

/// Reads `Retry-After` as seconds or as an HTTP date.
fn parse_retry_after(header: &str, now: Timestamp) -> Option<SignedDuration> {
    let h = header.trim();
    if let Ok(secs) = h.parse::<i64>() {
        return (secs >= 0).then(|| SignedDuration::from_secs(secs));
    }
    let at = jiff::fmt::rfc2822::parse(h).ok()?.timestamp();
    Some(now.duration_until(at).max(SignedDuration::ZERO))
}

/// The attempt as recorded: status, class of error, and the start of the answer.
pub fn record(
    result: &AttemptResult,
    verdict: &Verdict,
    started_at: Timestamp,
    latency: std::time::Duration,
) -> super::queue::Attempt {
    let keep = |s: &str| {
        s.chars()
            .take(super::client::RESPONSE_KEEP)
            .collect::<String>()
    };
    let (status_code, error_class, response) = match result {
        AttemptResult::Response { status, body, .. } => {
            let class = match verdict {
                Verdict::Sent => None,
                _ if (200..300).contains(status) => Some(ErrorClass::Rejected),
                _ => Some(ErrorClass::HttpStatus),
            };
            (Some(*status), class, Some(keep(body)))
        }
        AttemptResult::Timeout => (None, Some(ErrorClass::Timeout), None),
        AttemptResult::Network(e) => (None, Some(ErrorClass::Network), Some(keep(e))),
        AttemptResult::Refused(e) => (None, Some(ErrorClass::Refused), Some(keep(e))),
        AttemptResult::Invalid(e) => (None, Some(ErrorClass::Invalid), Some(keep(e))),
    };
    super::queue::Attempt {
        started_at,
        latency_ms: latency.as_millis() as i64,
        status_code,
        error_class,
        response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Timestamp {
        "2026-11-29T12:00:00Z".parse().unwrap()
    }

    fn answer(status: u16) -> AttemptResult {
        AttemptResult::Response {
            status,
            retry_after: None,
            body: String::new(),
        }
    }

    fn wait(v: &Verdict) -> SignedDuration {
        match v {
            Verdict::Retry { at, .. } => t0().duration_until(*at),
            other => panic!("not a retry: {other:?}"),
        }
    }

    #[test]
    fn a_2xx_is_sent_unless_the_action_says_ok_false_fails() {
        assert_eq!(judge(&answer(204), 1, t0(), false, 0.5), Verdict::Sent);
        let slack = AttemptResult::Response {
            status: 200,
            retry_after: None,
            body: r#"{"ok":false,"error":"channel_not_found"}"#.into(),
        };
        assert_eq!(judge(&slack, 1, t0(), false, 0.5), Verdict::Sent);
        assert!(
            matches!(judge(&slack, 1, t0(), true, 0.5), Verdict::Failed { reason } if reason.contains("channel_not_found"))
        );
    }

    #[test]
    fn retryable_failures_follow_the_schedule_and_the_last_one_is_dead() {
        for r in [
            answer(503),
            answer(500),
            answer(408),
            answer(425),
            answer(429),
            AttemptResult::Timeout,
            AttemptResult::Network("reset".into()),
        ] {
            assert_eq!(
                wait(&judge(&r, 1, t0(), false, 0.5)),
                SignedDuration::from_secs(5),
                "{r:?}"
            );
            assert_eq!(
                wait(&judge(&r, 2, t0(), false, 0.5)),
                SignedDuration::from_mins(5),
                "{r:?}"
            );
            assert_eq!(
                wait(&judge(&r, 9, t0(), false, 0.5)),
                SignedDuration::from_hours(24),
                "{r:?}"
            );
            assert!(
                matches!(judge(&r, 10, t0(), false, 0.5), Verdict::Dead { .. }),
                "{r:?}"
            );
        }
    }

    #[test]
    fn jitter_spreads_a_retry_by_at_most_ten_percent() {
        let low = wait(&judge(&answer(503), 3, t0(), false, 0.0));
        let high = wait(&judge(&answer(503), 3, t0(), false, 0.999));
        assert_eq!(low, SignedDuration::from_mins(27));
        assert!(high > SignedDuration::from_mins(32) && high <= SignedDuration::from_mins(33));
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let asked = |v: &str| AttemptResult::Response {
            status: 429,
            retry_after: Some(v.into()),
            body: String::new(),
        };
        assert_eq!(
            wait(&judge(&asked("2"), 1, t0(), false, 0.5)),
            SignedDuration::from_secs(5),
            "never sooner than the schedule"
        );
        assert_eq!(
            wait(&judge(&asked("120"), 1, t0(), false, 0.5)),
            SignedDuration::from_secs(120)
        );
        assert_eq!(
            wait(&judge(
                &asked("Sun, 29 Nov 2026 12:10:00 GMT"),
                1,
                t0(),
                false,
                0.5
            )),
            SignedDuration::from_mins(10)
        );
        assert_eq!(
            wait(&judge(&asked("9999999"), 1, t0(), false, 0.5)),
            RETRY_AFTER_CAP
        );
        assert_eq!(
            wait(&judge(&asked("soon"), 1, t0(), false, 0.5)),
            SignedDuration::from_secs(5)
        );
    }

    #[test]
    fn other_4xx_and_refused_addresses_fail_at_once_and_410_disables() {
        for s in [400, 401, 403, 404, 422] {
            assert!(
                matches!(
                    judge(&answer(s), 1, t0(), false, 0.5),
                    Verdict::Failed { .. }
                ),
                "{s}"
            );
        }
        assert!(matches!(
            judge(
                &AttemptResult::Refused("127.0.0.1 is loopback".into()),
                1,
                t0(),
                false,
                0.5
            ),
            Verdict::Failed { .. }
        ));
        assert!(matches!(
            judge(&answer(410), 1, t0(), false, 0.5),
            Verdict::DisableIntegration { .. }
        ));
    }
}

//! The backtest chart: fires per day as an inline SVG bar chart, with its numbers beside it in a
//! table (the same numbers as `rowfire backtest`).

use maud::{Markup, html};

use crate::backtest::Report;

/// The chart and its table for a backtest report: `#backtest-chart` carries `data-total` (the
/// report's fires) and `data-days`; each bar carries `data-date` and `data-fires`.
pub fn backtest(report: &Report) -> Markup {
    let days = report.per_day.len().max(1);
    let max = report
        .per_day
        .iter()
        .map(|d| d.fires)
        .max()
        .unwrap_or(0)
        .max(1);
    let (width, height, gap) = (720.0_f64, 160.0_f64, 1.0_f64);
    let bar = width / days as f64;
    html! {
        figure.chart {
            svg id="backtest-chart" role="img" viewBox=(format!("0 0 {width} {}", height + 20.0))
                preserveAspectRatio="none"
                data-total=(report.fires) data-days=(report.per_day.len())
                aria-label=(format!("{} fires over {} days; busiest day {}", report.fires, report.per_day.len(),
                    report.busiest_day.as_ref().map_or("none".to_string(), |d| format!("{} ({})", d.date, d.fires)))) {
                @for (i, d) in report.per_day.iter().enumerate() {
                    @let h = height * d.fires as f64 / max as f64;
                    rect.bar x=(format!("{:.2}", i as f64 * bar)) y=(format!("{:.2}", height - h))
                        width=(format!("{:.2}", (bar - gap).max(0.5))) height=(format!("{h:.2}"))
                        data-date=(d.date) data-fires=(d.fires) {
                        title { (d.date) ": " (d.fires) " fire(s)" }
                    }
                }
                line x1="0" y1=(height) x2=(width) y2=(height) stroke="currentColor" stroke-width="1" {}
                text x="0" y=(height + 16.0) font-size="12" { (report.per_day.first().map_or("", |d| d.date.as_str())) }
                text x=(width) y=(height + 16.0) font-size="12" text-anchor="end" { (report.per_day.last().map_or("", |d| d.date.as_str())) }
            }
            figcaption id="backtest-headline" {
                strong { (report.fires) } " fire(s) from " (report.rows_matched) " matching row(s) over "
                (report.days) " day(s) (" (report.time_zone) ")"
                @if let Some(b) = &report.busiest_day { "; busiest " (b.date) " with " (b.fires) }
                @if let Some(z) = &report.longest_zero_run { "; longest quiet stretch " (z.days) " day(s), " (z.from) " to " (z.to) }
                @if report.null_key_rows > 0 { "; " (report.null_key_rows) " row(s) with a NULL key did not fire" }
                @if report.null_clock_rows > 0 { "; " (report.null_clock_rows) " row(s) with a NULL clock did not fire" }
                @if report.expired_sends > 0 { "; " (report.expired_sends) " send(s) would expire unsent: their lead is not shorter than the look-ahead plus grace (raise anchor.look_ahead to at least the longest lead plus the sweep interval)" }
                "."
            }
        }
        details {
            summary { "Fires per day, as numbers" }
            table id="backtest-numbers" {
                thead { tr { th scope="col" { "Day" } th scope="col" { "Fires" } } }
                tbody {
                    @for d in &report.per_day {
                        tr data-date=(d.date) { td { (d.date) } td data-fires=(d.fires) { (d.fires) } }
                    }
                }
                tfoot { tr { th scope="row" { "Total" } td data-total=(report.fires) { (report.fires) } } }
            }
        }
        p.muted { (report.caveat) }
    }
}

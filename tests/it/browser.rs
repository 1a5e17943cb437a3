//! A browser drives Get started on a fresh `rowfire demo`: headless Chromium through WebDriver
//! (Debian's `chromium` and `chromium-driver`). It creates a weekly rule on declined charges,
//! sees a backtest chart whose total equals the CLI's backtest, turns the rule on, adds activity
//! with `fixture simulate`, and sees the new message arrive in the Demo inbox and in Activity
//! without reloading. Every page is saved as a screenshot under `target/screenshots/`.
//!
//! Without `/usr/bin/chromedriver` the test is skipped, except under CI, where it fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A child process killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[expect(
    clippy::disallowed_methods,
    reason = "the suite's own setting, not Rowfire's"
)]
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// Waits (a process starting, not work under test) until something answers on `port`.
async fn answering(port: u16, what: &str) {
    for _ in 0..600 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not start listening on 127.0.0.1:{port}");
}

/// `rowfire ARGS` with `env`, its standard output.
fn rowfire(args: &[&str], env: &[(&str, String)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rowfire"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env_remove("ROWFIRE_WORKSPACE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rowfire {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn screenshot(c: &Client, dir: &Path, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Waits up to `seconds` for `find` to hold, checking every 200 ms in the page as it stands.
async fn until<F, Fut>(seconds: u64, what: &str, mut find: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..seconds * 5 {
        if find().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what} within {seconds} s");
}

async fn xcount(c: &Client, xpath: &str) -> usize {
    c.find_all(Locator::XPath(xpath))
        .await
        .map_or(0, |v| v.len())
}

async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.map_or(0, |v| v.len())
}

#[tokio::test]
async fn get_started_creates_a_weekly_rule_whose_chart_matches_the_cli_and_its_first_message_arrives_live()
 {
    if !Path::new(CHROMEDRIVER).exists() {
        assert!(
            !under_ci(),
            "{CHROMEDRIVER} is missing; .ci/run installs chromium and chromium-driver"
        );
        eprintln!("skipped: {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)");
        return;
    }
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().join("demo");
    let (web, driver_port) = (free_port(), free_port());
    let log = std::fs::File::create(dir.path().join("demo.log")).unwrap();
    let _demo = Killed(
        Command::new(env!("CARGO_BIN_EXE_rowfire"))
            .args(["demo", "--dir"])
            .arg(&demo_dir)
            .args(["--listen", &format!("127.0.0.1:{web}")])
            .env_remove("ROWFIRE_DATABASE_URL")
            .env_remove("ROWFIRE_WORKSPACE")
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _driver = Killed(
        Command::new(CHROMEDRIVER)
            .arg(format!("--port={driver_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    answering(driver_port, "chromedriver").await;
    answering(web, "rowfire demo").await;

    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"]
        }),
    );
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{driver_port}"))
        .await
        .expect("a WebDriver session on headless Chromium");
    let base = format!("http://127.0.0.1:{web}");

    // Every page, as a first-time user sees it.
    for (name, path) in [
        ("home", "/"),
        ("triggers", "/triggers"),
        ("trigger", "/triggers/declined_charge"),
        ("rules", "/rules"),
        ("rule", "/rules/billing_ticket"),
        ("integrations", "/integrations"),
        ("login", "/login"),
    ] {
        c.goto(&format!("{base}{path}")).await.unwrap();
        screenshot(&c, &shots, name).await;
    }

    // The trigger editor checks as you type: an invalid query shows the guard's reason next to
    // the editor within a second, and nothing is saved.
    let version_before =
        reqwest_get_json(&format!("{base}/api/definitions")).await["version"].clone();
    c.goto(&format!("{base}/triggers/declined_charge"))
        .await
        .unwrap();
    // The second is the page's own measure, from the last keystroke to the verdict shown
    // (`data-ms`), so a slow WebDriver typing the keys does not count against it.
    let sql = c.find(Locator::Id("sql")).await.unwrap();
    sql.clear().await.unwrap();
    sql.send_keys("DELETE FROM payments WHERE 1 = 1")
        .await
        .unwrap();
    let refused = "//*[@id='guard-verdict'][@data-state='refused']";
    until(10, "the guard's reason next to the editor", || async {
        xcount(&c, refused).await > 0
    })
    .await;
    let waited: u64 = c
        .find(Locator::Id("guard-verdict"))
        .await
        .unwrap()
        .attr("data-ms")
        .await
        .unwrap()
        .expect("the page records when the verdict was shown")
        .parse()
        .unwrap();
    assert!(
        waited < 1000,
        "the verdict came {waited} ms after the last keystroke"
    );
    let reason = c
        .find(Locator::Id("guard-verdict"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        reason.to_lowercase().contains("delete")
            || reason.contains("read-only")
            || reason.contains("SELECT"),
        "{reason}"
    );
    screenshot(&c, &shots, "trigger-editor-refused").await;
    let version_after =
        reqwest_get_json(&format!("{base}/api/definitions")).await["version"].clone();
    assert_eq!(version_before, version_after, "typing saved nothing");

    // Get started: declined charges, once a week, a message, a backtest, turned on.
    c.goto(&format!("{base}/start")).await.unwrap();
    let trigger = c.find(Locator::Id("start-trigger")).await.unwrap();
    trigger.select_by_value("declined_charge").await.unwrap();
    c.find(Locator::Css("input[name=cadence][value=week]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let name = c.find(Locator::Id("start-name")).await.unwrap();
    name.clear().await.unwrap();
    name.send_keys("weekly_declines").await.unwrap();
    c.find(Locator::Id("start-backtest"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(30, "the backtest chart is drawn", || async {
        count(&c, "#backtest-chart").await > 0
    })
    .await;
    let chart = c.find(Locator::Id("backtest-chart")).await.unwrap();
    let total: u64 = chart
        .attr("data-total")
        .await
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    let days = c
        .find(Locator::Id("start-days"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .unwrap();
    screenshot(&c, &shots, "start").await;
    c.find(Locator::Id("start-turn-on"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(30, "the rule is turned on", || async {
        match c.find(Locator::Id("start-result")).await {
            Ok(e) => e.attr("data-rule").await.ok().flatten().is_some(),
            Err(_) => false,
        }
    })
    .await;
    screenshot(&c, &shots, "start-turned-on").await;

    // The CLI's backtest of the rule now in force, over the same days, says the same.
    let control = [(
        "ROWFIRE_DATABASE_URL",
        format!("sqlite://{}", demo_dir.join("rowfire.db").display()),
    )];
    let pulled = dir.path().join("pulled.yaml");
    std::fs::write(&pulled, rowfire(&["pull"], &control)).unwrap();
    let sample = format!("sqlite://{}", demo_dir.join("sample.db").display());
    let report = rowfire(
        &[
            "backtest",
            "weekly_declines",
            "-f",
            pulled.to_str().unwrap(),
            "--days",
            &days,
            "--json",
        ],
        &[("SAMPLE_DATABASE_URL", sample.clone())],
    );
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        report["fires"].as_u64(),
        Some(total),
        "the chart's total is the CLI's"
    );

    // Activity in one window, the Demo inbox in another, both loaded before anything new.
    c.goto(&format!("{base}/activity")).await.unwrap();
    let activity = c.window().await.unwrap();
    let inbox = c.new_window(true).await.unwrap().handle;
    c.switch_to_window(inbox.clone()).await.unwrap();
    c.goto(&format!("{base}/inbox")).await.unwrap();
    let in_inbox = "//li[contains(@class,'message')][.//code[text()='weekly_declines']]";
    let in_activity =
        "//ol[@id='deliveries-feed']/li[@data-delivery-id][contains(., 'for weekly_declines')]";
    assert_eq!(
        xcount(&c, in_inbox).await,
        0,
        "the new rule has sent nothing yet"
    );
    c.switch_to_window(activity.clone()).await.unwrap();
    assert_eq!(xcount(&c, in_activity).await, 0);

    rowfire(&["fixture", "simulate", "--into", &sample], &[]);
    // Poll now rather than wait for the next minute (the worker may hold the lease: then it
    // polls soon by itself).
    let _ = reqwest_post(&format!("{base}/api/triggers/declined_charge/run")).await;

    c.switch_to_window(inbox).await.unwrap();
    until(
        90,
        "a new message in the Demo inbox, without reloading",
        || async { xcount(&c, in_inbox).await > 0 },
    )
    .await;
    screenshot(&c, &shots, "inbox").await;
    c.switch_to_window(activity).await.unwrap();
    until(
        30,
        "new deliveries in Activity, without reloading",
        || async { xcount(&c, in_activity).await > 0 },
    )
    .await;
    screenshot(&c, &shots, "activity").await;
    c.close().await.unwrap();
}

/// `GET url` as JSON, from the test (not the browser).
async fn reqwest_get_json(url: &str) -> serde_json::Value {
    let _ = rustls::crypto::ring::default_provider().install_default();
    #[expect(
        clippy::disallowed_methods,
        reason = "a test's client for the server under test, on 127.0.0.1"
    )]
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let text = client.get(url).send().await.unwrap().text().await.unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `POST url` with an empty JSON body, from the test (not the browser).
async fn reqwest_post(url: &str) -> Option<u16> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    #[expect(
        clippy::disallowed_methods,
        reason = "a test's client for the server under test, on 127.0.0.1"
    )]
    let client = reqwest::Client::builder().no_proxy().build().ok()?;
    let r = client
        .post(url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .ok()?;
    Some(r.status().as_u16())
}

//! `rowfire init`: reads a source's catalogue and writes a draft definitions file
//! (`rowfire::draft`), refusing to replace an existing file unless told to.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use rowfire::definitions::{self, DEFAULT_SOURCE};
use rowfire::source::Source;

use super::integrations::secret_value;

/// Whether a URL's user part holds a password (`scheme://user:password@…`).
fn has_password(url: &str) -> bool {
    url.split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|authority| authority.rsplit_once('@'))
        .is_some_and(|(userinfo, _)| {
            userinfo
                .split_once(':')
                .is_some_and(|(_, pw)| !pw.is_empty())
        })
}

pub(crate) async fn init(
    source: Option<String>,
    source_env: Option<String>,
    dsn_env: Option<String>,
    out: &Path,
    force: bool,
) -> Result<ExitCode> {
    let dsn = match (&source, &source_env) {
        (Some(url), _) if has_password(url) => bail!(
            "--source holds a password, which must not be typed on a command line; put the URL in an environment variable and pass --source-env VAR"
        ),
        (Some(url), _) => url.clone(),
        (None, Some(var)) => secret_value(Some(var))?,
        (None, None) => bail!("name the source: --source URL or --source-env VAR"),
    };
    let dsn_env = dsn_env
        .or(source_env)
        .unwrap_or_else(|| "DATABASE_URL".to_string());
    if out.exists() && !force {
        bail!(
            "{} exists; choose another --out, or pass --force to replace it",
            out.display()
        );
    }
    let defaults = definitions::parse("version: 2\n")
        .map_err(|_| anyhow::anyhow!("the default source settings do not parse"))?;
    let def = defaults
        .source(DEFAULT_SOURCE)
        .context("the default source settings")?
        .clone();
    let source = Source::connect(&def, &dsn).await?;
    let catalogue = source.catalogue().await?;
    let draft = rowfire::draft::draft(&catalogue, source.dialect(), &dsn_env);
    let mut file = if force {
        std::fs::File::create(out)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out)
    }
    .with_context(|| format!("cannot write {}", out.display()))?;
    file.write_all(draft.yaml.as_bytes())
        .with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "wrote {} with {} trigger(s), each with one shadow rule, from {} ({})",
        out.display(),
        draft.triggers.len(),
        source.shown(),
        source.dialect()
    );
    for (trigger, table) in &draft.triggers {
        println!("  trigger {trigger}: table {table}, rule {trigger}_draft");
    }
    for (table, why) in &draft.skipped {
        println!("skipped {table}: {why}");
    }
    println!(
        "next: export {dsn_env}=<the source's URL>, then rowfire validate {} and rowfire backtest RULE -f {} --days 30",
        out.display(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::has_password;

    #[test]
    fn a_password_in_a_url_is_noticed() {
        assert!(has_password("mysql://app:s3cret@db/app"));
        assert!(has_password("postgres://app:p%40ss@db:5432/app"));
        assert!(!has_password("mysql://root@127.0.0.1:3306/app"));
        assert!(!has_password("sqlite://demo/sample.db"));
        assert!(!has_password("postgres://app:@db/app"));
    }
}
